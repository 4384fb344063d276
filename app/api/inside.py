"""REST routes of a run's Inside view (``app/services/inside_view.py``; the numbers: ``tinygpt.inside``): one
forward pass of the run's model over a passage, guarded as sampling is (``app.security.MODEL_QUERIES``), and the
heads' scores the run recorded as it trained (a read like its metrics)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from ..deps import ModelsDep, RunId, SessionDep, SettingsDep
from ..services import inside_view as inside
from ..services.head_scores import scores_over_training
from ..settings import Settings

router = APIRouter(prefix="/api/runs", tags=["inside"])

Text = Annotated[str | None, Query(min_length=1, max_length=inside.MAX_TEXT_CHARS,
                                   description="the passage typed (at most the model's context in tokens)")]
Passage = Annotated[int | None, Query(ge=0, le=10_000_000, description="or: this window of the run's "
                                      "validation split (GET .../inside/checkpoints says how many)")]
Checkpoint = Annotated[str, Query(max_length=20, description="best, last (while it trains) or step-N (kept: "
                                  "option keep_every)")]


def looked_at(run_id: int, checkpoint: str, text: str | None, passage: int | None, settings: Settings,
              models: inside.ModelCache) -> tuple:
    model, tokenizer = inside.model_of(run_id=run_id, checkpoint=checkpoint, settings=settings, models=models)
    ids = inside.passage_of(run_id=run_id, model=model, tokenizer=tokenizer, text=text, passage=passage,
                            settings=settings)
    return model, tokenizer, ids


@router.get("/{run_id}/inside")
async def get_inside(
    run_id: RunId, settings: SettingsDep, models: ModelsDep, text: Text = None, passage: Passage = None,
    checkpoint: Checkpoint = "best",
    layer: Annotated[int | None, Query(ge=0, le=1000, description="with head: that head's attention in full")] = None,
    head: Annotated[int | None, Query(ge=0, le=1000)] = None,
) -> dict:
    """Inside the run's model on a passage: its tokens (and where a word is split), each token's loss and the
    model's top 5 guesses, the logit lens, every head's attention (``attention_u8``: base64 of uint8
    probabilities x 255, shape ``attention_shape`` = layers x heads x query x key) and the heads' role scores."""
    model, tokenizer, ids = await run_in_threadpool(looked_at, run_id, checkpoint, text, passage, settings, models)
    return await run_in_threadpool(lambda: inside.inside_of(model, tokenizer, ids, layer=layer, head=head))


@router.get("/{run_id}/inside/checkpoints")
async def get_inside_choices(run_id: RunId, settings: SettingsDep, models: ModelsDep) -> dict:
    """What the Inside view can look at: the run's kept checkpoints (name, step) and how many passages of its
    validation split (0: its corpus is not on this machine), with the model's context, layers and heads."""
    return await run_in_threadpool(lambda: inside.choices_of(run_id=run_id, settings=settings, models=models))


@router.get("/{run_id}/inside/diff")
async def get_loss_difference(
    run_id: RunId, settings: SettingsDep, models: ModelsDep,
    other: Annotated[int, Query(ge=1, le=2**63 - 1, description="the other run (the same run: another checkpoint)")],
    text: Text = None, passage: Passage = None, checkpoint: Checkpoint = "best", other_checkpoint: Checkpoint = "best",
) -> dict:
    """Each token's loss under this run's model and another's (or another checkpoint), and the difference
    (other minus this: below 0 where the other predicts better), with the means."""
    first = await run_in_threadpool(looked_at, run_id, checkpoint, text, passage, settings, models)
    second = await run_in_threadpool(lambda: inside.model_of(run_id=other, checkpoint=other_checkpoint,
                                                              settings=settings, models=models))
    return await run_in_threadpool(lambda: inside.loss_difference(first[:2], second, first[2]))


@router.get("/{run_id}/inside/embeddings")
async def get_embedding_map(run_id: RunId, settings: SettingsDep, models: ModelsDep,
                            checkpoint: Checkpoint = "best") -> dict:
    """Every token's embedding on its first two principal components (``x``, ``y``), each token's text, and the
    share of the variance each component explains."""
    model, tokenizer = await run_in_threadpool(lambda: inside.model_of(run_id=run_id, checkpoint=checkpoint,
                                                                        settings=settings, models=models))
    return await run_in_threadpool(lambda: inside.embedding_map(model, tokenizer))


@router.get("/{run_id}/head-scores")
async def get_head_scores(run_id: RunId, session: SessionDep) -> dict:
    """The heads' role scores recorded at each evaluation: ``steps``, ``layers``, ``heads``, ``scores``
    {score: [evaluation][layer][head]} and the validation loss at those steps."""
    return scores_over_training(session, run_id=run_id)
