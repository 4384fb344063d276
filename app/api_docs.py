"""The API's documentation pages, served without the internet: Swagger UI (``/docs``) and ReDoc
(``/redoc``) from their vendored copies under ``static/vendor/`` (FastAPI's defaults load them from a
CDN), and the OpenAPI schema (``/openapi.json``) behind the same guard as every other route."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from .templating import app_url

SWAGGER = "/static/vendor/swagger-ui-dist-5.32.0"
REDOC = "/static/vendor/redoc-2.5.2"
NO_FAVICON = "data:,"  # FastAPI's default favicon is fetched from its website

router = APIRouter(include_in_schema=False)


@router.get("/openapi.json")
def openapi_schema(request: Request) -> JSONResponse:
    schema = request.app.openapi()
    if request.scope.get("root_path"):  # "Try it out" must call the API under the proxy's prefix
        schema = {**schema, "servers": [{"url": app_url(request, "")}]}
    return JSONResponse(schema)


@router.get("/docs")
def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=app_url(request, "/openapi.json"), title=f"{request.app.title} · API",
        swagger_js_url=app_url(request, f"{SWAGGER}/swagger-ui-bundle.js"),
        swagger_css_url=app_url(request, f"{SWAGGER}/swagger-ui.css"), swagger_favicon_url=NO_FAVICON,
        swagger_ui_parameters={"validatorUrl": None},  # no badge from validator.swagger.io
    )


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(openapi_url=app_url(request, "/openapi.json"), title=f"{request.app.title} · API",
                          redoc_js_url=app_url(request, f"{REDOC}/redoc.standalone.js"), redoc_favicon_url=NO_FAVICON,
                          with_google_fonts=False)
