"""Text from a run's best checkpoint, streamed token by token; its nearest tokens.

Generation runs in a worker thread (never on the event loop), one at a time per app
process; loaded models are kept in a small cache keyed by checkpoint path and mtime. Loading is
the costly part that a request can ask for again and again (readers too, with
``TINYGPT_PUBLIC_SAMPLING``): one load at a time, at most ``TINYGPT_MODEL_LOADS_PER_MINUTE`` a minute
(429 past it), each through the library's bounded checks (``tinygpt.checkpoint.checked_parts``).

The library's torch modules are imported on the first load, not with the app: the dashboard starts and
answers without torch until someone asks a model for text (tests/test_layers.py).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from tinygpt.tokenizer import Tokenizer

from ..errors import Invalid, TooManyRequests
from ..models import InputModel

if TYPE_CHECKING:
    from tinygpt.model import GPT

CACHE_SIZE = 2  # models kept loaded
LOAD_WINDOW_SEC = 60.0


class SampleRequest(InputModel):
    prompt: str = Field(default="Holmes", max_length=10_000)
    max_tokens: int = Field(default=200, ge=1)
    temperature: float = Field(default=0.8, ge=0, le=5)
    top_k: int | None = Field(default=None, ge=1, le=65536)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)


class ModelCache:
    """The app's loaded models (``app.state.models``): the last ``CACHE_SIZE`` by checkpoint path and mtime,
    loaded one at a time, at most ``per_minute`` loads in any sliding minute (a hit costs nothing)."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.models: OrderedDict[tuple[str, float], tuple[GPT, Tokenizer]] = OrderedDict()
        self.loads: deque[float] = deque()  # when the last loads started
        self.lock = threading.Lock()
        self.loading = threading.Lock()

    def get(self, path: Path) -> tuple[GPT, Tokenizer]:
        """The checkpoint's model: from the cache, or loaded (429 past the minute's budget; 422 for a file that
        is not a bounded, loadable checkpoint)."""
        key = (str(path), path.stat().st_mtime)
        if (hit := self.cached(key)) is not None:
            return hit
        with self.loading:
            if (hit := self.cached(key)) is not None:  # loaded by the request we waited for
                return hit
            self.take_budget()
            model, tokenizer = load_checked(path)
        with self.lock:
            self.models[key] = (model, tokenizer)
            while len(self.models) > CACHE_SIZE:
                self.models.popitem(last=False)
        return model, tokenizer

    def cached(self, key: tuple[str, float]) -> tuple[GPT, Tokenizer] | None:
        with self.lock:
            if key in self.models:
                self.models.move_to_end(key)
                return self.models[key]
        return None

    def take_budget(self) -> None:
        now = time.monotonic()
        while self.loads and now - self.loads[0] >= LOAD_WINDOW_SEC:
            self.loads.popleft()
        if len(self.loads) >= self.per_minute:
            wait = math.ceil(LOAD_WINDOW_SEC - (now - self.loads[0]))
            raise TooManyRequests(f"too many models loaded in the last minute (limit {self.per_minute}); "
                                  f"try again in {wait} s")
        self.loads.append(now)


def load_checked(path: Path) -> tuple[GPT, Tokenizer]:
    """The checkpoint's model on the CPU; a damaged or forged file is a 422 naming it by its file name (where
    the server keeps it is its own business), not a 500."""
    from tinygpt.checkpoint import CheckpointError, load_model  # torch: on the first load (module docstring)

    try:
        model, tokenizer, _ = load_model(path, "cpu")
    except CheckpointError as exc:
        raise Invalid(f"the run's checkpoint cannot be loaded: {str(exc).replace(str(path), path.name)}",
                      field="run_id") from None
    return model, tokenizer


def neighbours(model: GPT, tokenizer: Tokenizer, word: str, k: int) -> list[dict]:
    """The ``k`` tokens whose embeddings are nearest ``word``'s (a 422 naming ``word`` when it is not one token)."""
    from tinygpt.sample import nearest_tokens  # torch: loaded with the model already

    try:
        pairs = nearest_tokens(model, tokenizer, word, k)
    except ValueError as exc:
        raise Invalid(str(exc), field="word") from None
    return [{"token": t, "similarity": s} for t, s in pairs]


_generation = threading.Semaphore(1)


async def stream_sample(model: GPT, tokenizer: Tokenizer, req: SampleRequest) -> AsyncIterator[str]:
    """Yield text pieces as the model produces them (generation runs in a thread)."""
    from tinygpt.sample import stream_text  # torch: loaded with the model already

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | BaseException | None] = asyncio.Queue()
    stop = threading.Event()

    def produce() -> None:
        try:
            with _generation:
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
