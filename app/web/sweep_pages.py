"""The sweep pages: ``/sweeps`` (the form and the list) and ``/sweeps/{id}`` (trials, curves, charts)."""

from __future__ import annotations

from typing import Any

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from tinygpt.presets import list_presets

from ..deps import SessionDep, SettingsDep, SweepId
from ..errors import AppError, invalid_from
from ..models import (
    DISTRIBUTIONS,
    EARLY_TERMINATE,
    SWEEP_METHODS,
    SWEEP_METRICS,
    TRAINING_OPTIONS,
    SweepCreate,
)
from ..services import datasets as ds_svc
from ..services import sweeps as svc
from ..services.devices import machine_devices
from ..templating import app_url, render

router = APIRouter(include_in_schema=False)

PARAMETER_ROWS = 4  # options to vary in the form (a YAML config may vary more)
BASE_FIELDS = ("preset", "dataset", "device", "steps", "eval_every", "batch_size", "seed")
SWEEP_FORM_DEFAULTS: dict[str, Any] = {
    "method": "random", "metric": "val_loss", "early_terminate": "hyperband", "min_iter": 2, "run_cap": 8,
    "parallel": 2, "seeds": 1, "name": "", "yaml": "", "preset": "tiny", "dataset": "holmes", "device": "auto",
    "steps": 300, "eval_every": 25, "batch_size": 16, "seed": 1337,
    "p0_name": "lr", "p0_kind": "range", "p0_min": "0.0001", "p0_max": "0.01", "p0_distribution": "log_uniform_values",
    "p1_name": "dropout", "p1_kind": "values", "p1_values": "0.0, 0.1, 0.2",
}


def scalar(text: str) -> Any:
    """A value typed in the form as YAML reads it: 0.1, 8, modern, true."""
    try:
        return svc.load_yaml(text)
    except yaml.YAMLError:
        return text


def form_parameters(form: dict[str, str]) -> dict[str, dict]:
    parameters: dict[str, dict] = {}
    for i in range(PARAMETER_ROWS):
        name = form.get(f"p{i}_name", "").strip()
        if not name:
            continue
        if form.get(f"p{i}_kind") == "values":
            parameters[name] = {"values": [scalar(v.strip()) for v in form.get(f"p{i}_values", "").split(",")
                                           if v.strip()]}
        else:
            parameters[name] = {"min": scalar(form.get(f"p{i}_min", "")), "max": scalar(form.get(f"p{i}_max", "")),
                                "distribution": form.get(f"p{i}_distribution") or None}
    return parameters


def parse_sweep_form(form: dict[str, str]) -> SweepCreate:
    """The form's fields (or its YAML, which wins when given) as the body of POST /api/sweeps."""
    if form.get("yaml", "").strip():
        return svc.parse_sweep_text(form["yaml"])
    config: dict[str, Any] = {
        "method": form.get("method"), "metric": {"name": form.get("metric") or "val_loss"},
        "parameters": form_parameters(form), "parallel": scalar(form.get("parallel") or "2"),
        "seeds": scalar(form.get("seeds") or "1"),
        "base": {k: scalar(form[k]) if k not in ("preset", "dataset", "device") else form[k]
                 for k in BASE_FIELDS if form.get(k)},
    }
    if form.get("run_cap"):
        config["run_cap"] = scalar(form["run_cap"])
    if form.get("early_terminate"):
        config["early_terminate"] = {"type": form["early_terminate"], "min_iter": scalar(form.get("min_iter") or "1")}
    if form.get("name", "").strip():
        config["name"] = form["name"].strip()
    try:
        return SweepCreate.model_validate(config)
    except ValidationError as exc:
        raise invalid_from(exc) from None


def sweep_form_context(session: SessionDep, settings: SettingsDep, values: dict, error: str | None) -> dict:
    options = [o for o in TRAINING_OPTIONS.values() if o.kind in (int, float) or o.choices]
    return {"values": values, "error": error, "rows": range(PARAMETER_ROWS), "options": options,
            "methods": SWEEP_METHODS, "metrics": SWEEP_METRICS, "early_terminate": EARLY_TERMINATE,
            "distributions": [name for name, d in DISTRIBUTIONS.items() if d.required == ("min", "max")],
            "presets": list_presets(), "datasets": ds_svc.list_datasets(session, settings=settings),
            "devices": list(machine_devices())}


@router.get("/sweeps", response_class=HTMLResponse)
def sweeps_page(request: Request, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    return render(request, "sweeps.html", nav="sweeps", sweeps=svc.list_sweeps(session),
                  **sweep_form_context(session, settings, SWEEP_FORM_DEFAULTS, None))


@router.post("/sweeps", response_class=HTMLResponse)
async def create_sweep_from_form(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    raw = await request.form()
    form = {k: v for k, v in raw.items() if isinstance(v, str)}
    upload = raw.get("file")
    if upload is not None and not isinstance(upload, str) and upload.filename:
        form["yaml"] = (await upload.read(settings.max_request_kb * 1024)).decode("utf-8", errors="replace")
    values = {**SWEEP_FORM_DEFAULTS, **form}
    try:
        body = parse_sweep_form(form)
        sweep = await run_in_threadpool(lambda: svc.create_sweep(session, body=body, settings=settings))
    except AppError as exc:
        where = f"{exc.field}: " if exc.field else ""
        return render(request, "_sweep_form.html", exc.status_code,
                      **sweep_form_context(session, settings, values, f"{where}{exc.message}"))
    return Response(status_code=200, headers={"HX-Redirect": app_url(request, f"/sweeps/{sweep.id}")})


@router.get("/sweeps/{sweep_id}", response_class=HTMLResponse)
def sweep_page(sweep_id: SweepId, request: Request, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    detail = svc.sweep_detail(session, sweep_id=sweep_id, settings=settings)
    return render(request, "sweep.html", nav="sweeps", sweep=detail, sweep_json=detail.model_dump(mode="json"),
                  **trial_context(detail))


@router.get("/partials/sweeps/{sweep_id}", response_class=HTMLResponse)
def sweep_partial(sweep_id: SweepId, request: Request, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    """The progress and the trials table, swapped in as trials move."""
    detail = svc.sweep_detail(session, sweep_id=sweep_id, settings=settings)
    return render(request, "_sweep_trials.html", sweep=detail, partial=True, **trial_context(detail))


def trial_context(detail: Any) -> dict:
    ranked = sorted((t for t in detail.trials if t.best_val_loss is not None), key=lambda t: t.best_val_loss)
    params = list(detail.trials[0].params) if detail.trials else []
    running = {t.trial for t in detail.trials if t.status in ("queued", "running")}
    done = len({t.trial for t in detail.trials} - running)  # trials every run of which has ended (one a seed)
    return {"params": params, "top_ids": ",".join(str(t.run_id) for t in ranked[:5]), "done": done,
            "over_seeds": detail.config.get("seeds", 1) > 1}
