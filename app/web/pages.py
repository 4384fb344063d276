"""HTML pages (Jinja2 + htmx) over the same services as the API."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.datastructures import UploadFile as StarletteUpload

from tinygpt.options import GROUPS, Option, unknown_name_message
from tinygpt.presets import ARCHS, PRESETS, list_presets, model_config
from tinygpt.recipes import RECIPES, device_kind, guide, with_recipe
from tinygpt.records import unreached_line
from tinygpt.run_config import MODEL_OVERRIDES, TrainConfig

from ..deps import RunId, SessionDep, SettingsDep
from ..errors import AppError, Invalid, NotFound
from ..models import (
    FINISHED,
    TRAINING_OPTIONS,
    Alert,
    BenchmarkCreate,
    RunCreate,
    RunKind,
    RunPublic,
    RunSort,
    RunStatus,
)
from ..redaction import shown_config
from ..security import may_query_model
from ..services import benchmarks as bench_svc
from ..services import compare, foreign_runs, foreign_upload, groups, lifecycle, model_export
from ..services import datasets as ds_svc
from ..services import metric_history as history
from ..services import runs as svc
from ..services.devices import machine_devices
from ..services.events import last_run_event_id
from ..services.metric_history import metric_columns
from ..settings import Settings
from ..templating import app_url, render

router = APIRouter(include_in_schema=False)

#: The new-run form starts from the API's defaults (the declaration's), with the tiny preset's schedule.
FORM_DEFAULTS: dict[str, Any] = {
    **{name: field.get_default(call_default_factory=True) for name, field in RunCreate.model_fields.items()},
    "preset": "tiny", **PRESETS["tiny"].training,
}


def recipe_form_values(kind: str) -> dict[str, dict[str, Any]]:
    """What choosing each recipe sets in the form for a ``kind`` device (cpu, cuda): every option some recipe sets
    on some device, at that recipe's value there, else at the form's default (so that choosing ``series`` again
    undoes ``fast``)."""
    names = {name for recipe in RECIPES.values() for v in (recipe, *recipe.variants.values()) for name in v.options}
    return {r: {n: with_recipe({"recipe": r, "device": kind}).get(n, FORM_DEFAULTS[n]) for n in sorted(names)}
            for r in RECIPES}


def recipe_choices(devices: list[dict]) -> dict[str, dict]:
    """The form's recipes on each device it offers (``auto`` and every available one): the device's kind, what each
    recipe sets there and what it is for there with its time to 3.76 on the closest recorded hardware
    (:func:`tinygpt.recipes.guide`). The page's script only looks these up when the device or recipe changes."""
    usable = [d for d in devices if d["available"] and d["description"]]
    auto = device_kind("auto")
    chosen = {"auto": next((d for d in usable if d["description"]["type"] == auto), usable[0]),
              **{d["device"]: d for d in usable}}
    by_device = {}
    for name, d in chosen.items():
        about = d["description"]
        kind, bf16 = about["type"], about.get("bf16", about.get("auto_precision") == "bf16")
        by_device[name] = {"kind": kind, "values": recipe_form_values(kind),
                           "guides": {r: guide(r, kind, about.get("name", ""), bool(bf16)) for r in RECIPES}}
    return by_device


CHECKBOXES = tuple(name for name, field in RunCreate.model_fields.items() if field.annotation is bool)
NULLABLE = tuple(name for name, spec in TRAINING_OPTIONS.items() if spec.none is not None) + ("name", "time_limit")


def form_groups(settings: Settings) -> list[dict]:
    """The form's fieldsets, one per group of the declaration: each option's input, advanced ones apart."""
    max_steps = settings.max_steps
    groups = []
    for group in GROUPS:
        fields = [form_field(spec, max_steps) for spec in TRAINING_OPTIONS.values() if spec.group == group]
        groups.append({"name": group, "basic": [f for f in fields if not f["advanced"]],
                       "advanced": [f for f in fields if f["advanced"]]})
    return groups


def form_field(spec: Option, max_steps: int) -> dict:
    """How one option shows in the form: a select for choices, a checkbox for on/off, else a number or text."""
    kind = "select" if spec.choices else "checkbox" if spec.kind is bool else "text" if spec.kind is str else "number"
    maximum = min(spec.maximum, max_steps) if spec.name == "steps" and spec.maximum is not None else spec.maximum
    return {"name": spec.name, "label": spec.name.replace("_", " ").capitalize(), "kind": kind, "help": spec.help,
            "choices": spec.choices or (), "none": spec.none, "unit": spec.unit, "advanced": spec.advanced,
            "min": spec.minimum, "max": maximum, "step": 1 if spec.kind is int else "any",
            "maxlength": spec.max_length}


def median_rates(session: SessionDep, run_ids: list[int]) -> dict[int, float]:
    """The median tokens/s of each run (the runs are in the session already: no query for a finished one)."""
    rates = {run_id: history.run_rate(session, svc.get_run(session, run_id=run_id)) for run_id in run_ids}
    return {run_id: rate for run_id, rate in rates.items() if rate is not None}


RUNS_PER_PAGE = 50
STALLED = "stalled"  # the status filter's extra choice: running runs that are stalled


def runs_context(session: SessionDep, filters: RunFilters) -> dict:
    status_enum = RunStatus(filters.status) if filters.status in RunStatus.__members__ else None
    offset = (filters.page - 1) * RUNS_PER_PAGE
    page = svc.list_runs(session, status=status_enum, device=filters.device or None, tag=filters.tag or None,
                         worker=filters.worker or None, text=filters.q or None, stalled=filters.status == STALLED,
                         sort=filters.sort,
                         offset=offset, limit=RUNS_PER_PAGE)
    return {
        "runs": page.items,
        "total": page.total,
        "first": offset + 1,
        "last": offset + len(page.items),
        "newer": filters.page - 1 if filters.page > 1 else None,
        "older": filters.page + 1 if offset + len(page.items) < page.total else None,
        "rates": median_rates(session, [r.id for r in page.items]),
        "filters": filters,
        "statuses": [*(s.value for s in RunStatus), STALLED],
    }


class RunFilters(BaseModel):
    """The run list's filters and page (query parameters of ``/`` and ``/partials/runs``)."""

    status: str | None = None
    device: str | None = Field(default=None, max_length=50)
    tag: str | None = Field(default=None, max_length=50)
    worker: str | None = Field(default=None, max_length=200)
    q: str | None = Field(default=None, max_length=200, description="text in a run's name or notes")
    sort: RunSort = RunSort.newest
    page: int = Field(default=1, ge=1, le=10**9)


FiltersDep = Annotated[RunFilters, Query()]


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request, session: SessionDep, filters: FiltersDep) -> HTMLResponse:
    return render(request, "runs.html", nav="runs", **runs_context(session, filters))


@router.get("/partials/runs", response_class=HTMLResponse)
def runs_partial(request: Request, session: SessionDep, filters: FiltersDep) -> HTMLResponse:
    return render(request, "_runs_table.html", **runs_context(session, filters))


def form_context(session: SessionDep, settings: SettingsDep, values: dict, errors: dict) -> dict:
    devices = list(machine_devices())
    return {
        "nav": "new", "values": values, "errors": errors, "presets": list_presets(),
        "recipes": recipe_choices(devices),
        "datasets": ds_svc.list_datasets(session, settings=settings), "devices": devices,
        "gpu_available": any(d["device"].startswith("cuda") and d["available"] for d in devices),
        "max_upload_mb": settings.max_upload_mb, "speed_estimates": bench_svc.speed_estimates(session),
        "groups": form_groups(settings), "alerts": list(Alert), "run_webhooks": settings.run_webhooks,
        "pools": settings.pools, "default_pool": settings.default_pool, "slurm_time_limit": settings.slurm_time_limit,
    }


@router.get("/new", response_class=HTMLResponse)
def new_run_page(request: Request, session: SessionDep, settings: SettingsDep,
                 from_: Annotated[int | None, Query(alias="from")] = None,
                 recipe: Annotated[str | None, Query(max_length=50)] = None) -> HTMLResponse:
    values = dict(FORM_DEFAULTS)
    if recipe is not None:  # e.g. /new?recipe=fast: the form filled with a recipe's options
        if recipe not in RECIPES:
            raise Invalid(unknown_name_message(recipe, RECIPES, "recipe"), field="recipe")
        values.update(with_recipe({"recipe": recipe, "device": values["device"]}))
    if from_ is not None:  # "run again": the form prefilled from an earlier run
        run = svc.get_run(session, run_id=from_)
        values.update(shown_config(run.config), device=run.requested_device, name=f"{run.name} (again)", tags=run.tags,
                      pool=run.pool, time_limit=run.time_limit)
    return render(request, "new.html", **form_context(session, settings, values, {}))


def parse_form(form: dict[str, Any]) -> dict[str, Any]:
    """Form strings to the JSON body of POST /api/runs (empty optional fields dropped)."""
    body: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
    for key in CHECKBOXES:
        body[key] = key in form
    for key in NULLABLE:  # empty: unset (the preset's, PyTorch's default, ...)
        if not body.get(key):
            body.pop(key, None)
    body["tags"] = [t.strip() for t in body.get("tags", "").split(",") if t.strip()]
    if body.pop("cpu_and_gpu", None):
        body["device"] = ["cpu", "cuda"]
    if seeds := body.pop("seeds", "").strip():  # "3": a count; "1, 2, 3": a list; else the model names it
        parts = [p.strip() for p in seeds.split(",")]
        body["seeds"] = (int(seeds) if "," not in seeds else [int(p) for p in parts]) \
            if all(p.lstrip("-").isdigit() for p in parts) else seeds
    if "notify_urls" in body:  # the Notifications fieldset: alerts ticked, one URL a line
        body["notify"] = {"events": form.get("notify_events", []),
                          "urls": [u.strip() for u in body.pop("notify_urls").splitlines() if u.strip()]}
    return body


@router.post("/new", response_class=HTMLResponse)
async def create_from_form(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    submitted = await request.form()
    form = {**dict(submitted), "notify_events": submitted.getlist("notify_events")}
    body = parse_form(form)
    values = {**FORM_DEFAULTS, **body, "device": form.get("device", "auto")}
    try:
        create = RunCreate.model_validate(body)
        # the writes may wait for SQLite's write lock: in a worker thread, never on the event loop
        runs = await run_in_threadpool(lambda: lifecycle.create_runs(session, body=create, settings=settings))
    except ValidationError as exc:
        errors = {str(e["loc"][0]) if e["loc"] else "_": e["msg"].removeprefix("Value error, ") for e in exc.errors()}
        return render(request, "_new_form.html", 422, **form_context(session, settings, values, errors))
    except AppError as exc:
        errors = {exc.field.split(".")[0] if exc.field else "_": exc.message}  # notify.urls.0: the notify field
        return render(request, "_new_form.html", exc.status_code, **form_context(session, settings, values, errors))
    target = f"/runs/{runs[0].id}" if len(runs) == 1 else f"/compare?ids={','.join(str(r.id) for r in runs)}"
    return Response(status_code=200, headers={"HX-Redirect": app_url(request, target)})


def form_number(form: FormData, field: str, kind: type[int] | type[float]) -> int | float | None:
    """An optional number field of a form: empty for none, else the number (422 naming it otherwise)."""
    value = form.get(field)
    if value in (None, ""):
        return None
    try:
        return kind(str(value))
    except ValueError:
        raise Invalid(f"{field} must be {'a whole' if kind is int else 'a'} number, got {value!r}", field=field) from None


@router.post("/partials/datasets", response_class=HTMLResponse)
async def upload_from_form(request: Request, session: SessionDep, settings: SettingsDep, file: UploadFile) -> HTMLResponse:
    form = await request.form()
    try:
        ds = await ds_svc.upload_dataset(session, name=str(form.get("name", "")), source=file, settings=settings,
                                         target_val_loss=form_number(form, "target_val_loss", float))
    except AppError as exc:
        return render(request, "_error.html", exc.status_code, status=exc.status_code, message=exc.message)
    return render(request, "_uploaded.html", ds=ds)


@router.get("/import", response_class=HTMLResponse)
def import_page(request: Request, settings: SettingsDep) -> HTMLResponse:
    return render(request, "import.html", nav="import", max_upload_mb=f"{settings.max_upload_mb:g}")


@router.post("/partials/import", response_class=HTMLResponse)
async def import_from_form(request: Request, session: SessionDep, settings: SettingsDep) -> HTMLResponse:
    form = await request.form(max_files=foreign_upload.MAX_FILES)
    files = [(f.filename or "upload", f) for f in form.getlist("files") if isinstance(f, StarletteUpload) and f.filename]
    try:
        run = await foreign_upload.import_files(
            session, files=files, settings=settings, name=str(form.get("name", "")).strip() or None,
            config=str(form.get("config", "")), device=str(form.get("device", "")).strip() or None,
            tokens_per_step=form_number(form, "tokens_per_step", int),
            target_val_loss=form_number(form, "target_val_loss", float))
    except AppError as exc:
        return render(request, "_error.html", exc.status_code, status=exc.status_code, message=exc.message)
    return render(request, "_imported.html", run=run)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: RunId, request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    run = svc.get_run(session, run_id=run_id)
    if run.kind == RunKind.benchmark:
        return RedirectResponse(app_url(request, f"/benchmarks/{run_id}"), status_code=303)
    public = svc.public_run(session, run)
    # alerts up to the page's rendering are history: the stream replays them, the page notifies only newer ones
    shown_up_to = last_run_event_id(session, run_id=run_id)
    mapped_names, own_series = foreign_runs.series_names(session, run_id=run_id)
    return render(request, "run.html", nav="runs", run=public, mapped_names=mapped_names, own_series=own_series,
                  run_json={**public.model_dump(mode="json"), "rendered_event_id": shown_up_to},
                  samples=svc.run_samples(session, run_id=run_id), config_rows=config_rows(public),
                  group_run_ids=[r.id for r in groups.group_runs(session, group_id=run.group_id)
                                 ][-compare.MAX_GROUPED_RUNS:] if run.group_id else [],
                  can_query_model=may_query_model(request), export_refusal=model_export.refusal(run.config),
                  default_time_limit=settings.slurm_time_limit,
                  target_waiting=unreached_line(run.target_val_loss, finished=run.status in FINISHED)
                  if run.target_val_loss else None)


@router.get("/partials/runs/{run_id}/slurm", response_class=HTMLResponse)
def slurm_job_partial(run_id: RunId, request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """A Slurm run's job line and script (the run page polls it while the run waits or runs)."""
    run = RunPublic.of(svc.get_run(session, run_id=run_id))
    if run.slurm_job is None:
        raise NotFound(f"run {run_id} is not a Slurm run")
    return render(request, "_slurm_job.html", run=run, default_time_limit=settings.slurm_time_limit)


@router.post("/partials/runs/{run_id}/repeat", response_class=HTMLResponse)
def repeat_from_page(run_id: RunId, request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    """"Run 2 more seeds": queued in the run's group, then the group's comparison (its seeds' spread)."""
    runs = lifecycle.repeat_run(session, run_id=run_id, count=2, settings=settings)
    group = groups.group_runs(session, group_id=runs[0].group_id)[-compare.MAX_GROUPED_RUNS:]
    target = f"/compare?ids={','.join(str(r.id) for r in group)}&group_by=group"
    return Response(status_code=200, headers={"HX-Redirect": app_url(request, target)})


def option_text(key: str, value: object, run: RunPublic) -> str:
    """A run option as a person reads it: what None and booleans mean, and what ``auto`` resolved to."""
    preset = PRESETS.get(str(run.config.get("preset")))
    threads = (run.device_info or {}).get("threads")
    if isinstance(value, bool):
        return "on" if value else "off"
    if key == "arch" and not value and preset is not None:
        return f"preset default ({preset.default_arch})"
    if key == "threads" and not value:
        return f"PyTorch default ({threads} threads)" if threads else "PyTorch default"
    if key == "precision" and value == "auto" and run.precision:
        return f"auto → {run.precision}"
    if key == "notify" and isinstance(value, dict):
        return notify_text(value)
    if value is None and key in RESOLVED_BY:
        resolved = getattr(TrainConfig(**{k: v for k, v in run.config.items() if k in TRAINING_OPTIONS}),
                           RESOLVED_BY[key])()
        return f"unset → {resolved}"
    if value is None and key in MODEL_OVERRIDES and preset is not None:
        return model_default_text(key, preset.name, run.config.get("arch") or preset.default_arch)
    return "–" if value is None or value == "" else str(value)


def model_default_text(key: str, preset: str, arch: str) -> str:
    """A model option left to the preset, as the run used it and where it came from.

    >>> model_default_text("d_model", "tiny", "modern"), model_default_text("norm", "tiny", "modern")
    ('64 (tiny)', 'rmsnorm (modern)')
    >>> model_default_text("attn_dropout", "holmes", "series")
    "0.1 (dropout's)"
    """
    config = model_config(preset, arch)
    if key == "attn_dropout":
        return f"{config.attention_dropout} (dropout's)"
    value = getattr(config, key)
    shown = ("on" if value else "off") if isinstance(value, bool) else value
    return f"{shown} ({arch if key in ARCHS[arch] else preset})"


#: Options whose unset value the library resolves from the others (warmup: min(200, steps / 10), ...): the
#: ``TrainConfig`` method that does, so the run page shows what the run used.
RESOLVED_BY = {"warmup": "warmup_steps", "eval_batches": "eval_batch_count", "log_every": "log_interval",
               "sample_every": "sample_interval"}


def unused_note(key: str, options: dict[str, Any], run: RunPublic) -> str:
    """`` (not used: optimizer adamw)`` for an option declared to apply only with another's value, when the
    run's options lack it; else ''."""
    spec = TRAINING_OPTIONS.get(key)
    if spec is None or spec.applies(options):
        return ""
    other = spec.applies_with[0]
    return f" (not used: {other} {option_text(other, options[other], run)})"


def notify_text(notify: dict) -> str:
    """e.g. "every alert; also to https://hooks.example/x" or "failed, stalled"."""
    events = notify.get("events", list(Alert))
    text = "every alert" if set(events) >= set(Alert) else ", ".join(events) or "no alert"
    return f"{text}; also to {', '.join(notify['urls'])}" if notify.get("urls") else text


def config_rows(run: RunPublic) -> list[tuple[str, str]]:
    """The run page's Config table: each option (those that did not take effect say why, e.g. ``0.02 (not
    used: optimizer adamw)``), then the device asked for and the one it ran on."""
    options = {**{name: spec.default for name, spec in TRAINING_OPTIONS.items()}, **run.config}
    rows = [(key, option_text(key, value, run) + unused_note(key, options, run)) for key, value in run.config.items()]
    device = run.requested_device
    if run.device and run.device != device:
        device = f"{device} → {run.device}"
    return [*rows, ("device", device)]


COMPARE_POINTS = 2000  # rows a compared run's curve is thinned to (about two a pixel column)


@router.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request, session: SessionDep, ids: Annotated[list[str] | None, Query()] = None,
                 group_by: Annotated[str | None, Query(max_length=100)] = None) -> HTMLResponse:
    raw = ",".join(ids or [])
    run_ids, result, error = [], None, None
    try:
        run_ids = [int(x) for x in raw.replace(" ", "").split(",") if x]
    except ValueError:
        error = "run ids must be numbers separated by commas"
    if run_ids and not error:
        try:
            result = compare.compare_runs(session, ids=run_ids, group_by=group_by or None)
            grouped = result["grouped"]
            # the chart draws the groups' curves when every group has one, else each run's own
            result["draw"] = "groups" if grouped and all(g["curve"]["step"] for g in grouped["groups"]) else "runs"
            for summary in result["runs"] if result["draw"] == "runs" else []:  # thinned, every evaluation kept
                history = metric_columns(session, run_id=summary["id"], max_points=COMPARE_POINTS)["columns"]
                summary["history"] = {k: history[k] for k in ("step", "train_loss", "val_loss", "tokens_seen",
                                                              "elapsed_sec")}
                per_token = summary["flops_per_token"]  # the FLOPs axis: training FLOPs so far
                summary["history"]["flops"] = [t * per_token if per_token and t is not None else None
                                               for t in history["tokens_seen"]]
        except AppError as exc:
            error = exc.message
    return render(request, "compare.html", nav="compare", result=result, error=error, ids_text=",".join(map(str, run_ids)),
                  group_by=group_by, group_options=["device", "group", "tag", *TRAINING_OPTIONS], group_figures=compare.GROUP_FIGURES)


@router.get("/benchmarks", response_class=HTMLResponse)
def benchmarks_page(request: Request, session: SessionDep) -> HTMLResponse:
    return render(request, "benchmarks.html", nav="benchmarks", benchmarks=bench_svc.list_benchmarks(session),
                  **benchmark_form_context(BENCHMARK_FORM_DEFAULTS, {}))


def benchmark_form_context(values: dict, errors: dict) -> dict:
    return {"values": values, "errors": errors, "presets": list_presets(), "devices": list(machine_devices())}


BENCHMARK_FORM_DEFAULTS: dict[str, Any] = {
    "preset": "holmes", "device": "auto", "batch_sizes": "8, 16, 32", "precisions": "", "threads": "", "steps": 5,
    "warmup": 2, "name": "",
}


def parse_benchmark_form(form: dict[str, Any]) -> dict[str, Any]:
    """Form strings to the JSON body of POST /api/benchmarks; a list that is not numbers stays a string (422)."""
    body: dict[str, Any] = {k: v.strip() for k, v in form.items() if isinstance(v, str) and v.strip()}
    for key in ("batch_sizes", "threads"):
        if key in body:
            parts = [p.strip() for p in body[key].split(",") if p.strip()]
            body[key] = [int(p) for p in parts] if all(p.lstrip("-").isdigit() for p in parts) else body[key]
    if "precisions" in body:
        body["precisions"] = [p.strip() for p in body["precisions"].split(",") if p.strip()]
    return body


@router.post("/benchmarks", response_class=HTMLResponse)
async def create_benchmark_from_form(request: Request, session: SessionDep, settings: SettingsDep) -> Response:
    form = dict(await request.form())
    values = {**BENCHMARK_FORM_DEFAULTS, **{k: v for k, v in form.items() if isinstance(v, str)}}
    try:
        body = BenchmarkCreate.model_validate(parse_benchmark_form(form))
        run = await run_in_threadpool(lambda: bench_svc.create_benchmark(session, body=body, settings=settings))
    except ValidationError as exc:
        errors = {str(e["loc"][0]) if e["loc"] else "_": e["msg"].removeprefix("Value error, ") for e in exc.errors()}
        return render(request, "_benchmark_form.html", 422, **benchmark_form_context(values, errors))
    except AppError as exc:
        errors = {exc.field or "_": exc.message}
        return render(request, "_benchmark_form.html", exc.status_code, **benchmark_form_context(values, errors))
    return Response(status_code=200, headers={"HX-Redirect": app_url(request, f"/benchmarks/{run.id}")})


@router.get("/benchmarks/{run_id}", response_class=HTMLResponse)
def benchmark_page(run_id: RunId, request: Request, session: SessionDep) -> HTMLResponse:
    bench = bench_svc.get_benchmark(session, run_id=run_id)
    return render(request, "benchmark.html", nav="benchmarks", bench=bench, bench_json=bench.model_dump(mode="json"))


@router.get("/partials/benchmarks/{run_id}/cells", response_class=HTMLResponse)
def benchmark_cells_partial(run_id: RunId, request: Request, session: SessionDep) -> HTMLResponse:
    return render(request, "_benchmark_cells.html", bench=bench_svc.get_benchmark(session, run_id=run_id))
