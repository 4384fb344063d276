"""The numbers of a run's Inside view (``GET /api/runs/{id}/inside``): one forward pass of the run's model over a
passage, through ``tinygpt.inside`` (the library computes; this shapes the answer). Bounded as sampling is: the
passage at most the model's context, the model loaded through the app's model cache (its checks and load
limits). Every head's attention comes as bytes (each probability x 255, rounded: the heatmaps' resolution) so
that the holmes model's 6 x 6 heads over 256 tokens is 2.4 MB, not a JSON array of 2.4 million numbers; one
head asked for by ``layer`` and ``head`` comes in full precision."""

from __future__ import annotations

import base64
import re
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlmodel import Session

from ..db import session_scope
from ..errors import Invalid, NotFound
from ..settings import Settings
from .datasets import dataset_path
from .runs import checkpoint_file, get_run
from .sampling import ModelCache

MAX_TEXT_CHARS = 20_000
_forward = threading.Semaphore(1)  # one forward pass at a time, as generation is


def piece_text(tokenizer, token: int) -> str:  # noqa: ANN001
    """A token's text (a piece of a multi-byte character shows as the replacement character)."""
    return tokenizer.token_bytes(token).decode("utf-8", errors="replace")


def pieces(tokenizer, ids: list[int]) -> list[dict]:  # noqa: ANN001 (tinygpt's Tokenizer: torch loaded lazily)
    """Each token's text and whether it starts a word (a piece after another without a leading space or
    punctuation continues the word the tokenizer split)."""
    out = []
    for i, token in enumerate(ids):
        text = piece_text(tokenizer, token)
        starts = i == 0 or not text[:1].isalnum() or not out[-1]["text"][-1:].isalnum()
        out.append({"id": token, "text": text, "word_start": starts})
    return out


def passage_ids(tokenizer, context: int, *, text: str | None, passage: int | None,  # noqa: ANN001
                validation: Callable[[], Any] | None) -> list[int]:
    """The tokens looked at: ``text`` encoded, or the ``passage``-th window of the run's validation split
    (``validation`` reads it: only then)."""
    from tinygpt.data import passage as window

    if (text is None) == (passage is None):
        raise Invalid("give either text or passage (a window of the run's validation split)", field="text")
    if passage is not None:
        if validation is None:
            raise Invalid("this run's corpus is not on this machine: type a passage instead", field="passage")
        try:
            return window(validation(), context, passage).tolist()
        except ValueError as exc:
            raise Invalid(str(exc), field="passage") from None
    ids = tokenizer.encode(text)
    if not 2 <= len(ids) <= context:
        raise Invalid(f"text is {len(ids)} tokens; a passage is 2 to {context} (the model's context)", field="text")
    return ids


def inside_of(model, tokenizer, ids: list[int], *, layer: int | None = None, head: int | None = None) -> dict:  # noqa: ANN001
    """The Inside view's numbers for the passage ``ids`` (see the module docstring)."""
    import torch

    from tinygpt.inside import bits, look_inside

    n_layers, n_heads = model.config.n_layers, model.config.n_heads
    if (layer is None) != (head is None):
        raise Invalid("layer and head come together (one head's full attention)", field="layer" if layer is None else "head")
    if layer is not None and not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise Invalid(f"the model has layers 0-{n_layers - 1} and heads 0-{n_heads - 1}",
                      field="layer" if not 0 <= layer < n_layers else "head")
    with _forward:
        seen = look_inside(model, torch.tensor(ids))
        scores = probe_scores(model, tokenizer.vocab_size)
    quantised = (seen.attention * 255).round().to(torch.uint8)  # (L, H, T, T)
    n_bytes = len(tokenizer.decode_bytes(ids[1:]))
    return {
        "tokens": pieces(tokenizer, ids),
        "layers": n_layers, "heads": n_heads,
        "token_loss": rounded(seen.token_loss),
        "mean_loss": seen.mean_loss, "mean_loss_bits": bits(seen.mean_loss),
        "bits_per_byte": bits(float(seen.token_loss.sum())) / max(n_bytes, 1),
        "top": [[{"text": piece_text(tokenizer, t), "id": t, "prob": p} for t, p in zip(ti, tp, strict=True)]
                for ti, tp in zip(seen.top_ids.tolist(), rounded(seen.top_probs), strict=True)],
        "lens": {"top": [[piece_text(tokenizer, t) for t in row] for row in seen.lens_top.tolist()],
                 "next_prob": rounded(seen.lens_next_prob),
                 "rows": ["embeddings", *(f"after block {i}" for i in range(n_layers))]},
        "attention_u8": base64.b64encode(quantised.numpy().tobytes()).decode(),
        "attention_shape": list(quantised.shape),
        "attention": None if layer is None else rounded(seen.attention[layer, head]),
        "head_scores": {name: rounded(values) for name, values in scores.items()},
    }


def rounded(values, decimals: int = 6) -> list:  # noqa: ANN001 (a tensor)
    """A tensor as nested lists of numbers to ``decimals`` (converted at once: a loop over elements is slow)."""
    return values.double().round(decimals=decimals).tolist()


_scores: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its head scores on the probe


def probe_scores(model, vocab_size: int) -> dict:  # noqa: ANN001
    """The heads' scores on the fixed probe: they do not depend on the passage, so each model's are kept as long
    as the model is (the model cache's)."""
    from tinygpt.inside import head_scores

    if model not in _scores:
        _scores[model] = head_scores(model, vocab_size=vocab_size)
    return _scores[model]


# -- which model: the run's kept checkpoints -------------------------------------------------------------
CHECKPOINT_NAME = re.compile(r"best|last|step-(\d{1,10})")


def kept_checkpoints(session: Session, *, run_id: int, settings: Settings) -> list[dict]:
    """The checkpoints the Inside view can look at: the best, each ``step-N.pt`` kept (option ``keep_every``)
    and, while the run trains, ``last.pt``; ``name`` and ``step`` (the best's: its evaluation's)."""
    run = get_run(session, run_id=run_id)
    out = [{"name": "best", "step": run.best_step}] if run.checkpoint_path else []
    folder = Path(run.out_dir) if run.out_dir else None
    if folder is not None and folder.resolve().is_relative_to(settings.runs_dir.resolve()) and folder.is_dir():
        kept = sorted((int(m.group(1)), f.stem) for f in folder.glob("step-*.pt")
                      if (m := CHECKPOINT_NAME.fullmatch(f.stem)) and m.group(1))
        out += [{"name": name, "step": step} for step, name in kept]
        if (folder / "last.pt").is_file():
            out.append({"name": "last", "step": None})
    return out


def checkpoint_named(session: Session, *, run_id: int, name: str, settings: Settings) -> Path:
    """The file of one of :func:`kept_checkpoints` (404 when the run keeps none of that name)."""
    if CHECKPOINT_NAME.fullmatch(name) is None:
        raise Invalid("checkpoint is best, last or step-N (a kept one: GET .../inside/checkpoints)", field="checkpoint")
    if name == "best":
        return checkpoint_file(session, run_id=run_id, settings=settings)
    run = get_run(session, run_id=run_id)
    path = (Path(run.out_dir) / f"{name}.pt").resolve() if run.out_dir else None
    if path is None or not path.is_relative_to(settings.runs_dir.resolve()) or not path.is_file():
        raise NotFound(f"run {run_id} keeps no checkpoint {name}")
    return path


# -- the passage: the run's validation split ----------------------------------------------------------------
def validation_reader(session: Session, *, run_id: int, settings: Settings, tokenizer, context: int  # noqa: ANN001
                      ) -> Callable[[], Any] | None:
    """A function reading the run's validation split as its training split it (None: its corpus is not here:
    a run of another machine or trainer)."""
    from tinygpt.data import validation_tokens

    run = get_run(session, run_id=run_id)
    dataset = (run.config or {}).get("dataset")
    if run.origin != "dashboard" or not dataset:
        return None
    try:
        path = dataset_path(session, name=dataset, settings=settings)
    except NotFound:
        return None
    if not path.is_file():
        return None
    return lambda: kept_split(path, tokenizer, context, settings.cache_dir, read=validation_tokens)


_splits: dict[tuple, Any] = {}  # (corpus, its mtime, tokenizer, context) -> its validation split: the newest few
SPLITS_KEPT = 4


def kept_split(path: Path, tokenizer, context: int, cache_dir: Path, *, read: Callable) -> Any:  # noqa: ANN001, ANN401
    """The validation split, read once per corpus file and tokenizer (a page asks for it twice: how many
    passages, then the passage) rather than the corpus re-read and re-hashed each time."""
    key = (str(path), path.stat().st_mtime, tokenizer.fingerprint(), context)
    if key not in _splits:
        while len(_splits) >= SPLITS_KEPT:
            _splits.pop(next(iter(_splits)))
        _splits[key] = read(path, tokenizer, context, cache_dir)
    return _splits[key]


def passages_of(validation: Callable[[], Any] | None, context: int) -> int:
    """How many passages the Inside view offers from the validation split (0: none here)."""
    from tinygpt.data import passage_count

    return 0 if validation is None else passage_count(validation(), context)


# -- two models on one passage; the embeddings' map -------------------------------------------------------------
def loss_difference(first: tuple, second: tuple, ids: list[int]) -> dict:
    """Each token's loss under two models (``(model, tokenizer)`` each, the same tokenizer) and the second's
    minus the first's: below 0 where the second predicts better."""
    import torch

    from tinygpt.inside import look_inside

    (model_a, tok_a), (model_b, tok_b) = first, second
    if tok_a.fingerprint() != tok_b.fingerprint():
        raise Invalid("the two models have different tokenizers: their per-token losses do not line up", field="other")
    if len(ids) > model_b.config.context:
        raise Invalid(f"the passage is {len(ids)} tokens; the other model's context is {model_b.config.context}",
                      field="other")
    with _forward:
        a = look_inside(model_a, torch.tensor(ids)).token_loss
        b = look_inside(model_b, torch.tensor(ids)).token_loss
    diff = b - a
    return {"tokens": pieces(tok_a, ids), "loss": rounded(a), "other_loss": rounded(b), "difference": rounded(diff),
            "mean_loss": float(a.mean()), "other_mean_loss": float(b.mean()), "mean_difference": float(diff.mean())}


def embedding_map(model, tokenizer) -> dict:  # noqa: ANN001
    """Every token's embedding on the first two principal components, with each token's text."""
    from tinygpt.inside import embedding_pca

    with _forward:
        xy, shares = embedding_pca(model)
    return {"tokens": [piece_text(tokenizer, i) for i in range(len(xy))],
            "x": rounded(xy[:, 0], 4), "y": rounded(xy[:, 1], 4),
            "variance_share": [round(v, 4) for v in shares]}


# -- what a request looks at --------------------------------------------------------------------------------
def model_of(*, run_id: int, checkpoint: str, settings: Settings, models: ModelCache) -> tuple:
    """(model, tokenizer) of the run's checkpoint ``checkpoint``, through the model cache; the database is
    held only while the file is found (a short session: model loads take a while)."""
    with session_scope(settings) as session:
        path = checkpoint_named(session, run_id=run_id, name=checkpoint, settings=settings)
    return models.get(path)


def passage_of(*, run_id: int, model, tokenizer, text: str | None, passage: int | None,  # noqa: ANN001
               settings: Settings) -> list[int]:
    """The tokens of a request's passage (typed, or the run's own validation split's ``passage``-th)."""
    validation = None
    if passage is not None:
        with session_scope(settings) as session:
            validation = validation_reader(session, run_id=run_id, settings=settings, tokenizer=tokenizer,
                                           context=model.config.context)
    return passage_ids(tokenizer, model.config.context, text=text, passage=passage, validation=validation)


def choices_of(*, run_id: int, settings: Settings, models: ModelCache) -> dict:
    """What the Inside view offers for a run: its kept checkpoints and how many validation passages."""
    with session_scope(settings) as session:
        kept = kept_checkpoints(session, run_id=run_id, settings=settings)
    if not kept:
        raise NotFound(f"run {run_id} has no checkpoint yet")
    model, tokenizer = model_of(run_id=run_id, checkpoint=kept[0]["name"], settings=settings, models=models)
    with session_scope(settings) as session:
        validation = validation_reader(session, run_id=run_id, settings=settings, tokenizer=tokenizer,
                                       context=model.config.context)
    return {"checkpoints": kept, "passages": passages_of(validation, model.config.context),
            "context": model.config.context, "layers": model.config.n_layers, "heads": model.config.n_heads}
