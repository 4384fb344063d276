"""Text from a run's best checkpoint, streamed token by token.

Generation runs in a worker thread (never on the event loop), one at a time per app
process; loaded models are kept in a small cache keyed by checkpoint path and mtime.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import Field
from sqlmodel import SQLModel

from tinygpt.checkpoint import load_model
from tinygpt.model import GPT
from tinygpt.sample import nearest_tokens, stream_text
from tinygpt.tokenizer import Tokenizer

_models: OrderedDict[tuple[str, float], tuple[GPT, Tokenizer]] = OrderedDict()
_lock = threading.Lock()
_CACHE_SIZE = 2


class SampleRequest(SQLModel):
    prompt: str = Field(default="Holmes", max_length=10_000)
    max_tokens: int = Field(default=200, ge=1)
    temperature: float = Field(default=0.8, ge=0, le=5)
    top_k: int | None = Field(default=None, ge=1, le=65536)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)


def cached_model(path: Path) -> tuple[GPT, Tokenizer]:
    key = (str(path), path.stat().st_mtime)
    with _lock:
        if key in _models:
            _models.move_to_end(key)
            return _models[key]
    model, tokenizer, _ = load_model(path, "cpu")
    with _lock:
        _models[key] = (model, tokenizer)
        while len(_models) > _CACHE_SIZE:
            _models.popitem(last=False)
    return model, tokenizer


_generation = threading.Semaphore(1)


async def stream_sample(path: Path, req: SampleRequest) -> AsyncIterator[str]:
    """Yield text pieces as the model produces them (generation runs in a thread)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
    stop = threading.Event()

    def produce() -> None:
        try:
            with _generation:
                model, tokenizer = cached_model(path)
                for piece in stream_text(model, tokenizer, req.prompt, req.max_tokens, temperature=req.temperature,
                                         top_k=req.top_k, top_p=req.top_p, seed=req.seed):
                    if stop.is_set():
                        break
                    loop.call_soon_threadsafe(queue.put_nowait, piece)
        except BaseException as exc:  # handed to the stream, which reports it
            loop.call_soon_threadsafe(queue.put_nowait, exc)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def neighbours(path: Path, word: str, k: int) -> list[tuple[str, float]]:
    model, tokenizer = cached_model(path)
    return nearest_tokens(model, tokenizer, word, k)
