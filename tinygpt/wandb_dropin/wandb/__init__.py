"""A drop-in ``wandb`` that reports to a TinyGPT Dashboard: the part of W&B's API training scripts call
(nanoGPT's ``wandb_log=True``, nanochat, most notebooks), with the standard library only, so it runs in any
script's environment. Put first on the script's path, with environment changes only::

    PYTHONPATH=$(tinygpt wandb-path) WANDB_BASE_URL=http://dashboard:8000 WANDB_API_KEY=$TOKEN python train.py

``init(project, name, config, tags, notes, id)``, ``log(dict, step=, commit=)``, ``config`` (items, attributes,
``update``), ``summary``, ``finish(exit_code=)``, ``run``; ``watch``, ``define_metric``, ``login`` do nothing here.
Values that are not numbers (images, tables) are not kept: each such key is named once on stderr. Calls never
block the script: a thread sends what was logged every half second (and a heartbeat every few seconds); while
the dashboard is unreachable, what was logged waits in memory and goes when it answers. A cancel on the
dashboard interrupts the script as Ctrl-C does (``KeyboardInterrupt``), and the run ends cancelled.
``WANDB_MODE=disabled`` (or ``offline``) makes every call a no-op. Protocol: app/api/wandb.py.
"""

from __future__ import annotations

import _thread
import atexit
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from typing import Any

__version__ = "0.0.0+tinygpt"  # not W&B's: scripts that print it see whose it is
SEND_EVERY_SEC = 0.5
HEARTBEAT_SEC = 5.0
ROWS_PER_CALL = 1000  # the dashboard's bound on one call
FINISH_WAIT_SEC = 30.0
TIMEOUT_SEC = 10.0

run: Run | None = None


def warn(message: str) -> None:
    print(f"wandb (TinyGPT Dashboard drop-in): {message}", file=sys.stderr, flush=True)


def flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys; values JSON cannot hold as a scalar as their text.

    >>> flat({"model": {"n_layer": 6}, "lr": 1e-3, "betas": (0.9, 0.95)})
    {'model.n_layer': 6, 'lr': 0.001, 'betas': '(0.9, 0.95)'}
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value if value is None or isinstance(value, str | int | float | bool) else str(value)
    return out


def number(value: Any) -> float | None:
    """A logged value as a number (ints, floats, bools, numpy and 0-d torch scalars); None: not a number.

    >>> number(3), number(True), number("3"), number([1])
    (3.0, 1.0, None, None)
    """
    if isinstance(value, bool | int | float):
        return float(value)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        try:
            return float(item())
        except (TypeError, ValueError):
            return None
    return None


class Config(dict):
    """``wandb.config``: items and attributes; each change is sent with the next call.

    >>> c = Config(None, {"lr": 0.1}); c.batch_size = 8; c.update({"model": {"n_layer": 2}}); dict(c)
    {'lr': 0.1, 'batch_size': 8, 'model.n_layer': 2}
    """

    def __init__(self, owner: Run | None, values: Mapping[str, Any] | None = None) -> None:
        super().__init__(flat(values or {}))
        object.__setattr__(self, "_owner", owner)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.update({name: value})

    def __setitem__(self, name: str, value: Any) -> None:
        self.update({name: value})

    def update(self, values: Mapping[str, Any] | None = None, allow_val_change: bool = True, **more: Any) -> None:
        changed = flat({**(values or {}), **more})
        super().update(changed)
        if self._owner is not None:
            self._owner.sender.change("config", changed)

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


class Summary(Config):
    """``wandb.summary`` / ``run.summary``: a run's final figures, kept as its ``summary.<key>`` tags."""

    def update(self, values: Mapping[str, Any] | None = None, allow_val_change: bool = True, **more: Any) -> None:
        changed = flat({**(values or {}), **more})
        dict.update(self, changed)
        if self._owner is not None:
            self._owner.sender.change("summary", changed)


class Sender:
    """Sends a run to the dashboard in a thread: its start, then what was logged, then its end."""

    def __init__(self, base_url: str, token: str | None, start: dict) -> None:
        self.base_url, self.token, self.start_body = base_url.rstrip("/"), token, start
        self.lock = threading.Lock()
        self.rows: list[dict] = []
        self.changes: dict[str, dict] = {"config": {}, "summary": {}}
        self.run_id: int | None = None
        self.cancelled = False
        self.gave_up: str | None = None
        self.unreachable = False
        self.stop = threading.Event()
        self.idle = threading.Event()
        self.thread = threading.Thread(target=self.serve, name="wandb-tinygpt", daemon=True)
        self.thread.start()

    def change(self, kind: str, values: dict) -> None:
        with self.lock:
            self.changes[kind].update(values)

    def add_row(self, row: dict) -> None:
        with self.lock:
            self.rows.append(row)
            self.idle.clear()

    def post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(f"{self.base_url}{path}", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json", **(
                                             {"Authorization": f"Bearer {self.token}"} if self.token else {})})
        with urllib.request.urlopen(request, timeout=TIMEOUT_SEC) as response:  # noqa: S310 (the user's URL)
            return json.loads(response.read())

    def send_once(self) -> None:
        if self.run_id is None:
            self.run_id = self.post("/api/wandb/runs", self.start_body)["id"]
            warn(f"reporting to {self.base_url}/runs/{self.run_id}")
        with self.lock:
            rows, self.rows = self.rows[:ROWS_PER_CALL], self.rows[ROWS_PER_CALL:]
            changes, self.changes = self.changes, {"config": {}, "summary": {}}
        try:
            answer = self.post(f"/api/wandb/runs/{self.run_id}/log", {"rows": rows, **changes})
        except BaseException:
            with self.lock:  # not sent: first again next time
                self.rows[:0] = rows
                for kind, values in changes.items():
                    self.changes[kind] = {**values, **self.changes[kind]}
            raise
        if answer.get("cancel_requested") and not self.cancelled:
            self.cancelled = True
            warn(f"run {self.run_id} was cancelled on the dashboard: stopping the script (KeyboardInterrupt)")
            _thread.interrupt_main()

    def pending(self) -> bool:
        with self.lock:
            return bool(self.rows) or any(self.changes.values()) or self.run_id is None

    def serve(self) -> None:
        last = 0.0
        while self.gave_up is None:
            if self.pending() or time.monotonic() - last >= HEARTBEAT_SEC:
                try:
                    self.send_once()
                    last = time.monotonic()
                    if self.unreachable:
                        warn(f"the dashboard at {self.base_url} answers again; sending what waited")
                    self.unreachable = False
                except urllib.error.HTTPError as exc:
                    self.refused(exc)
                except (urllib.error.URLError, OSError) as exc:
                    if not self.unreachable:
                        warn(f"cannot reach the dashboard at {self.base_url} ({exc}); the script goes on, and "
                             "what it logs waits until the dashboard answers")
                    self.unreachable = True
            if not self.pending():
                self.idle.set()
            if self.stop.is_set() and (not self.pending() or self.unreachable):
                return
            self.stop.wait(SEND_EVERY_SEC)

    def refused(self, exc: urllib.error.HTTPError) -> None:
        detail = exc.read().decode(errors="replace")[:500]
        self.gave_up = f"HTTP {exc.code}: {detail}"
        warn(f"the dashboard refused the run ({self.gave_up}); the script goes on without reporting")

    def finish(self, exit_code: int) -> None:
        """Send what waits (for up to FINISH_WAIT_SEC), then the end."""
        self.stop.set()
        self.thread.join(FINISH_WAIT_SEC)
        if self.run_id is None or self.gave_up is not None:
            return
        try:
            self.post(f"/api/wandb/runs/{self.run_id}/finish", {"exit_code": exit_code, "end_time": time.time()})
        except (urllib.error.URLError, OSError) as exc:
            warn(f"could not tell the dashboard the run ended ({exc}); it ends crashed there once it hears nothing")


class Run:
    """``wandb.init``'s run: ``log``, ``finish``, ``config``, ``summary``, ``id``, ``name``, ``project``, ``step``."""

    def __init__(self, *, base_url: str, token: str | None, project: str, name: str | None, config: Mapping | None,
                 tags: list[str], notes: str | None, run_id: str) -> None:
        self.id, self.name, self.project, self.tags, self.notes = run_id, name, project, tags, notes
        self.step = 0  # W&B's _step: the next commit's step
        self.pending: dict[str, float] = {}
        self.skipped: set[str] = set()
        self.finished = False
        self.config = Config(None, config)
        self.summary = Summary(None)
        self.sender = Sender(base_url, token, {
            "client_id": run_id, "project": project, "name": name, "tags": tags, "notes": notes,
            "host": socket.gethostname(), "program": os.path.basename(sys.argv[0]) if sys.argv else None,
            "start_time": time.time(), "config": dict(self.config)})
        object.__setattr__(self.config, "_owner", self)
        object.__setattr__(self.summary, "_owner", self)

    @property
    def url(self) -> str | None:
        return f"{self.sender.base_url}/runs/{self.sender.run_id}" if self.sender.run_id else None

    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        if self.finished:
            raise RuntimeError("wandb.log after wandb.finish: call wandb.init again")
        if step is not None and step < self.step:
            warn(f"step {step} is before the current step {self.step}: this log call is not kept (as W&B does)")
            return
        if step is not None and step > self.step:
            self.commit()
            self.step = step
        for key, value in flat(data).items():
            if (as_number := number(value)) is not None:
                self.pending[key] = as_number
            elif key not in self.skipped:
                self.skipped.add(key)
                warn(f"{key!r} is not a number ({type(value).__name__}): not kept here")
        if commit is not False and (commit or step is None):
            self.commit()

    def commit(self) -> None:
        if self.pending:
            self.sender.add_row({"step": self.step, "time": time.time(), "values": self.pending})
            self.pending = {}
            self.step += 1

    def finish(self, exit_code: int | None = None, quiet: bool | None = None) -> None:
        global run
        if self.finished:
            return
        self.commit()
        self.finished = True
        self.sender.finish(0 if exit_code is None else exit_code)
        if run is self:
            run = None

    def watch(self, *args: Any, **kwargs: Any) -> None:
        """Gradients and parameters are not kept here."""

    def define_metric(self, *args: Any, **kwargs: Any) -> None:
        """Every metric is drawn against the step here."""

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type | None, *_: object) -> None:
        self.finish(exit_code=0 if kind is None else 1)


class Settings(dict):
    """``wandb.Settings(...)``: accepted, not used here."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(kwargs)


class _Disabled(Run):
    """``WANDB_MODE=disabled``/``offline``: every call does nothing."""

    def __init__(self, config: Mapping | None) -> None:  # noqa: D107 (no sender)
        self.id, self.name, self.project, self.tags, self.notes, self.step = "disabled", None, "", [], None, 0
        self.config, self.summary, self.finished, self.pending, self.skipped = Config(None, config), Summary(None), \
            False, {}, set()

    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        pass

    def finish(self, exit_code: int | None = None, quiet: bool | None = None) -> None:
        self.finished = True


def init(project: str | None = None, name: str | None = None, config: Mapping | None = None,
         tags: list[str] | tuple[str, ...] | None = None, notes: str | None = None, id: str | None = None,  # noqa: A002
         mode: str | None = None, reinit: bool | None = None, **ignored: Any) -> Run:
    """Start a run (``WANDB_BASE_URL``: the dashboard; ``WANDB_API_KEY``: its token). A run already started is
    returned again unless ``reinit`` (as W&B does). ``entity``, ``group``, ``job_type``, ``dir``, ``resume``,
    ``settings`` and the rest are accepted and not used."""
    global run
    if run is not None and not reinit:
        return run
    if run is not None:
        run.finish()
    mode = mode or os.environ.get("WANDB_MODE", "online")
    if mode in ("disabled", "offline", "dryrun"):
        run = _Disabled(config)
    else:
        base_url = os.environ.get("WANDB_BASE_URL")
        if not base_url:
            raise RuntimeError("WANDB_BASE_URL is not set: the TinyGPT Dashboard drop-in needs the dashboard's "
                               "address (WANDB_BASE_URL=http://dashboard:8000), or WANDB_MODE=disabled")
        env_tags = [t for t in os.environ.get("WANDB_TAGS", "").split(",") if t]
        run = Run(base_url=base_url, token=os.environ.get("WANDB_API_KEY") or None,
                  project=project or os.environ.get("WANDB_PROJECT") or "uncategorized",
                  name=name or os.environ.get("WANDB_NAME"), config=config, tags=list(tags or env_tags),
                  notes=notes or os.environ.get("WANDB_NOTES"),
                  run_id=id or os.environ.get("WANDB_RUN_ID") or uuid.uuid4().hex)
        atexit.register(_finish_at_exit, run)
    globals()["config"], globals()["summary"] = run.config, run.summary
    return run


def _finish_at_exit(of: Run) -> None:
    of.finish(exit_code=1 if _failed[0] else 0)


_failed = [False]
_excepthook = sys.excepthook


def _note_failure(kind: type[BaseException], value: BaseException, tb: object) -> None:
    _failed[0] = True  # the script ends on an exception: its run ends failed (or cancelled, if it was asked)
    _excepthook(kind, value, tb)  # type: ignore[arg-type]


sys.excepthook = _note_failure
config: Config = Config(None)
summary: Summary = Summary(None)


def log(data: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
    if run is None:
        raise RuntimeError("wandb.log before wandb.init")
    run.log(data, step=step, commit=commit)


def finish(exit_code: int | None = None, quiet: bool | None = None) -> None:
    if run is not None:
        run.finish(exit_code=exit_code)


def watch(*args: Any, **kwargs: Any) -> None:
    """Gradients and parameters are not kept here."""


def define_metric(*args: Any, **kwargs: Any) -> None:
    """Every metric is drawn against the step here."""


def login(*args: Any, **kwargs: Any) -> bool:
    """No W&B account is needed: the dashboard's token is ``WANDB_API_KEY``."""
    return True


def __getattr__(name: str) -> Any:
    raise AttributeError(f"wandb.{name} is not part of the TinyGPT Dashboard drop-in (it keeps numbers, config and "
                         "summary; see `tinygpt wandb-path --help`)")


def __dir__() -> list[str]:
    return sorted(globals())
