"""The run's Inside page (``/runs/{id}/inside``): one GET form whose address is the view (run, checkpoint,
passage or prompt, the other model, the head enlarged), so a copied link opens the same view. The numbers are the
API's (``app/services/inside_view.py``), rendered here; ``static/js/inside.js`` draws the heatmaps and charts."""

from __future__ import annotations

import math
from typing import Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from tinygpt.records import HEAD_SCORES

from ..db import session_scope
from ..deps import ModelsDep, RunId, SettingsDep
from ..errors import AppError, NotFound, invalid_from
from ..security import may_query_model
from ..services import inside_view as inside
from ..services import runs as svc
from ..services.head_scores import scores_over_training
from ..settings import Settings
from ..templating import render

router = APIRouter(include_in_schema=False)


class InsideView(BaseModel):
    """What the page looks at, from its address (empty fields are the form's blanks)."""

    model_config = ConfigDict(extra="forbid")
    checkpoint: str = Field(default="best", max_length=20)
    source: str = Field(default="text", pattern="^(text|passage)$")
    text: str = Field(default="", max_length=inside.MAX_TEXT_CHARS)
    passage: int | None = Field(default=None, ge=0, le=10_000_000)
    other: int | None = Field(default=None, ge=1, le=2**63 - 1)
    other_checkpoint: str = Field(default="best", max_length=20)
    layer: int | None = Field(default=None, ge=0, le=1000)
    head: int | None = Field(default=None, ge=0, le=1000)
    score: Literal[HEAD_SCORES] = "induction"  # the score the chart over training draws

    @property
    def asked(self) -> bool:
        return bool(self.text) if self.source == "text" else self.passage is not None

    def api_query(self) -> str:
        """This view's numbers as ``GET /api/runs/{id}/inside`` asks for them (the page's JSON download)."""
        source = {"text": self.text} if self.source == "text" else {"passage": self.passage}
        head = {"layer": self.layer, "head": self.head} if self.layer is not None else {}
        return urlencode({"checkpoint": self.checkpoint, **source, **head})


def view_of(request: Request) -> InsideView:
    """The address's view; a bad value is a 422 naming it (the page shows it beside the form)."""
    params = {k: v for k, v in request.query_params.items() if v != ""}
    try:
        return InsideView.model_validate(params)
    except ValidationError as exc:
        raise invalid_from(exc, default="text") from None


def heat(loss: float, vocab_size: int) -> float:
    """A token's loss as a colour's strength: 1 at ln V nats (as bad as a uniform guess) and above."""
    return round(min(1.0, loss / math.log(vocab_size)), 3)


def inside_result(run_id: int, view: InsideView, settings: Settings, models: inside.ModelCache) -> dict:
    """The numbers the page shows for ``view``: the API's, with each token's colour strength."""
    from tinygpt.inside import probe_half  # torch: loaded with the model already
    model, tokenizer = inside.model_of(run_id=run_id, checkpoint=view.checkpoint, settings=settings, models=models)
    ids = inside.passage_of(run_id=run_id, model=model, tokenizer=tokenizer, settings=settings,
                            text=view.text if view.source == "text" else None,
                            passage=view.passage if view.source == "passage" else None)
    result = inside.inside_of(model, tokenizer, ids, layer=view.layer, head=view.head)
    result["heat"] = [0.0, *(heat(v, tokenizer.vocab_size) for v in result["token_loss"])]
    result["uniform_loss"] = math.log(tokenizer.vocab_size)
    result["entropy_scale"] = math.log(2 * probe_half(model.config.context))  # an even look at the whole probe
    if view.other is not None:
        other = inside.model_of(run_id=view.other, checkpoint=view.other_checkpoint, settings=settings, models=models)
        diff = inside.loss_difference((model, tokenizer), other, ids)
        diff["shade"] = [0.0, *(max(-1.0, min(1.0, d / 2)) for d in diff["difference"])]  # +-2 nats: full colour
        result["diff"] = diff
    return result


@router.get("/runs/{run_id}/inside", response_class=HTMLResponse)
async def inside_page(run_id: RunId, request: Request, settings: SettingsDep, models: ModelsDep) -> Response:
    with session_scope(settings) as session:
        run = svc.public_run(session, svc.get_run(session, run_id=run_id))
        recorded = scores_over_training(session, run_id=run_id)
    context = {"nav": "runs", "run": run, "recorded": recorded, "can_query_model": may_query_model(request),
               "choices": None, "result": None, "error": None, "view": InsideView()}
    try:
        context["view"] = view = view_of(request)
        if context["can_query_model"]:
            context["choices"] = await run_in_threadpool(
                lambda: inside.choices_of(run_id=run_id, settings=settings, models=models))
            if view.asked:
                context["result"] = await run_in_threadpool(inside_result, run_id, view, settings, models)
    except NotFound as exc:
        if context["choices"] is None:  # no checkpoint yet: the page says so
            context["no_checkpoint"] = exc.message
        else:
            context["error"] = exc
    except AppError as exc:
        context["error"] = exc
    status = context["error"].status_code if context["error"] else 200
    return render(request, "inside.html", status_code=status, **context)
