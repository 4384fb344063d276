"""The login page: trade the API token for a session cookie (HttpOnly, SameSite=Strict) that expires
after ``TINYGPT_SESSION_DAYS``; ``/logout`` ends the session (``app/services/sessions.py``).

Only used when ``TINYGPT_API_TOKEN`` is set; see :mod:`app.security`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..deps import SessionDep, SettingsDep
from ..security import SESSION_COOKIE, client_address, has_credentials, safe_next, token_matches
from ..services.sessions import end_session, start_session
from ..templating import app_url, render

router = APIRouter(include_in_schema=False)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, settings: SettingsDep, next: str = "/") -> Response:
    if settings.api_token is None or has_credentials(request, settings.api_token):
        return RedirectResponse(app_url(request, safe_next(next)), status_code=303)
    return render(request, "login.html", next=safe_next(next))


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, settings: SettingsDep, session: SessionDep,
          token: Annotated[str, Form(max_length=1000)] = "",
          next: Annotated[str, Form(max_length=2000)] = "/") -> Response:
    expected = settings.api_token
    if expected is None:
        return RedirectResponse(app_url(request, safe_next(next)), status_code=303)
    failures = request.app.state.failed_auth  # app/failed_auth.py: guessing is refused past a few wrong tokens
    address = client_address(request)
    failures.check(address)
    if not token_matches(token, expected):
        wait = failures.failed(address)
        return render(request, "login.html", 401, next=safe_next(next),
                      error="wrong token" + (f"; try again in {wait} s" if wait else ""))
    failures.succeeded(address)
    secret = start_session(session, token=expected, days=settings.session_days)
    response = RedirectResponse(app_url(request, safe_next(next)), status_code=303)
    response.set_cookie(SESSION_COOKIE, secret, max_age=int(settings.session_days * 86_400), httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/")
    return response


@router.post("/logout")
def logout(request: Request, session: SessionDep) -> Response:
    end_session(session, secret=request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse(app_url(request, "/login"), status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
