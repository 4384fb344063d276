"""``GET /api/export``: the metrics of many runs in one long table, streamed (thin over app.services.export)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from ..deps import SessionDep, SettingsDep
from ..services import export as svc

router = APIRouter(prefix="/api", tags=["export"])


@router.get("/export", response_class=StreamingResponse, responses={200: {"content": {
    "text/csv": {"schema": {"type": "string"}}, "application/x-ndjson": {"schema": {"type": "string"}}}}})
def export_metrics(
    session: SessionDep, settings: SettingsDep,
    ids: Annotated[list[str], Query(max_length=100, description="run ids: `ids=1,2,3` or `ids=1&ids=2`")],
    format: Annotated[str, Query(pattern="^(csv|jsonl)$", description="csv or jsonl (one JSON object a line)")] = "csv",
) -> StreamingResponse:
    """Every metrics row of the runs, one row per (run, step), with the run's name, device, precision and time
    to target, and the row's validation loss in bits per byte (`val_bpb`):
    `pd.read_csv("http://127.0.0.1:8000/api/export?ids=1,2")`. Streamed as it is read."""
    runs = svc.export_runs(session, ids=svc.parse_run_ids(ids))
    rows = svc.export_rows(settings, runs)
    body, kind = (svc.as_csv(rows), "text/csv") if format == "csv" else (svc.as_jsonl(rows), "application/x-ndjson")
    name = f"runs-{'-'.join(str(r['run_id']) for r, _ in runs[:5])}{'-etc' if len(runs) > 5 else ''}.{format}"
    return StreamingResponse(body, media_type=kind, headers={"Content-Disposition": f'attachment; filename="{name}"'})
