"""Live reporting to a dashboard: ``tinygpt train --report-to URL`` and ``tinygpt sync RUN_DIR``.

The training thread only appends: each thing to report (the run's start, every metrics row, samples,
log lines, a new best checkpoint, the end) becomes one numbered JSON line of the run folder's journal,
``report/journal.jsonl``. A sender thread posts the lines the dashboard has not acknowledged, in batches
(:data:`BATCH_ITEMS` at most: memory is bounded whatever the backlog), and keeps where it is in
``report/state.json``. The dashboard applies each number once (``runs.report_seq``), so a batch sent
twice (its answer lost) changes nothing, and an outage only delays: the lines wait on disk, and
``tinygpt sync`` sends what is left after the run. Every answer says whether someone asked the run to
stop (cancel on the dashboard): the trainer then stops at the next step boundary.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from .dashboard_client import (
    DashboardClient,
    DashboardError,
    DashboardRejected,
    DashboardUnreachable,
    TokenRefused,
)
from .records import Callbacks, Sample, StepMetrics
from .run_config import TrainConfig

BATCH_ITEMS = 500  # lines per request: ~100 KB, well under the dashboard's request cap
POLL_SEC = 1.0  # an idle sender asks the dashboard this often (heartbeat; a cancel is seen within it)
SEND_EVERY_SEC = 0.5  # at most this many sends a second while training: rows logged meanwhile share a request
MAX_BACKOFF_SEC = 15.0
CHECKPOINT_MODES = ("end", "best", "none")


class Journal:
    """``RUN_DIR/report/``: ``journal.jsonl`` (what to send, in order) and ``state.json`` (where it goes,
    the dashboard's run id, how far it has acknowledged)."""

    def __init__(self, run_dir: Path) -> None:
        self.folder = run_dir / "report"
        self.path = self.folder / "journal.jsonl"
        self.state_path = self.folder / "state.json"
        self.lock = threading.Lock()
        self.state: dict = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.last_seq = self._last_seq()

    @classmethod
    def start(cls, run_dir: Path, *, url: str, meta: dict, resume: bool, run_id: int | None = None) -> Journal:
        """A new journal for a new run (a resumed run continues its own, and its dashboard run). ``run_id``: the
        dashboard's run it reports to, made there (a run its Slurm executor submitted) instead of a new one."""
        journal = cls(run_dir)
        # a dashboard run given by id takes one numbering whether training resumes or starts again (a requeued job)
        continues = journal.state.get("run_id") == run_id if run_id is not None else resume
        if continues and journal.state.get("report_id"):
            if journal.state["url"] != url:  # another dashboard: the whole run goes there, as a new run of it
                journal.state.update(url=url, run_id=None, sent_seq=0, sent_offset=0)
                journal.save_state()
            return journal
        journal.folder.mkdir(parents=True, exist_ok=True)
        journal.path.write_text("")
        journal.last_seq = 0
        journal.state = {"report_id": uuid.uuid4().hex, "url": url, "run_id": run_id, "sent_seq": 0, "sent_offset": 0,
                         "meta": meta}
        journal.save_state()
        return journal

    def exists(self) -> bool:
        return self.path.exists() and bool(self.state.get("report_id"))

    def _last_seq(self) -> int:
        if not self.path.exists():
            return 0
        last = 0
        with open(self.path, "rb") as f:
            for line in f:
                if line.endswith(b"\n"):
                    last = json.loads(line)["seq"]
        return last

    def append(self, kind: str, data: dict) -> int:
        """One line, written whole and flushed (a reader never sees half of it). Called by the trainer."""
        with self.lock:
            self.last_seq += 1
            line = json.dumps({"seq": self.last_seq, "kind": kind, "data": data, "at": time.time()}) + "\n"
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
            return self.last_seq

    def read(self, offset: int, limit: int) -> list[tuple[dict, int]]:
        """Up to ``limit`` whole lines from byte ``offset``: (item, the offset after it)."""
        items: list[tuple[dict, int]] = []
        with open(self.path, "rb") as f:
            f.seek(offset)
            while len(items) < limit:
                line = f.readline()
                if not line.endswith(b"\n"):
                    break
                offset += len(line)
                items.append((json.loads(line), offset))
        return items

    def offset_after(self, seq: int) -> int:
        """The byte offset just past item ``seq`` (0 for seq 0): where to resume from what the dashboard holds."""
        offset = 0
        with open(self.path, "rb") as f:
            for line in f:
                if json.loads(line)["seq"] > seq:
                    break
                offset += len(line)
        return offset

    def pending(self) -> int:
        return self.last_seq - int(self.state.get("sent_seq", 0))

    def acknowledge(self, seq: int, offset: int | None = None) -> None:
        self.state["sent_seq"] = seq
        self.state["sent_offset"] = self.offset_after(seq) if offset is None else offset
        self.save_state()

    def save_state(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        os.replace(tmp, self.state_path)


class Sender:
    """Sends the journal to the dashboard: in a thread while training (:meth:`start`), or to the end
    in the foreground (:meth:`send_all`, ``tinygpt sync``)."""

    def __init__(self, journal: Journal, client: DashboardClient, *, warn: bool = True) -> None:
        self.journal = journal
        self.client = client
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.cancel_requested = threading.Event()
        self.unreachable_since: float | None = None
        self.gave_up: str | None = None  # the dashboard refused the run: reporting stops, training does not
        self.warn = warn
        self.thread: threading.Thread | None = None

    # -- one exchange ---------------------------------------------------------------------
    def ensure_run(self) -> int:
        """The dashboard's run for this journal: created once (the report id makes a retry harmless)."""
        state = self.journal.state
        if state.get("run_id") is None:
            run = self.client.create_reported_run({"report_id": state["report_id"], **state["meta"]})
            state["run_id"], state["sent_seq"], state["sent_offset"] = run["id"], 0, 0
            self.journal.save_state()
        return state["run_id"]

    def send_once(self) -> int:
        """One batch (or a heartbeat when nothing waits); how many items the dashboard took."""
        run_id = self.ensure_run()
        state = self.journal.state
        batch = self.journal.read(state["sent_offset"], BATCH_ITEMS)
        checkpoint_at = next((i for i, (item, _) in enumerate(batch) if item["kind"] == "checkpoint"), None)
        if checkpoint_at == 0:  # a checkpoint goes alone, as a file upload that carries its number
            answer = self.upload(run_id, batch[0][0])
            batch = batch[:1]
        else:
            batch = batch[:checkpoint_at]
            answer = self.client.send_items(run_id, [{k: item[k] for k in ("seq", "kind", "data")}
                                                     for item, _ in batch])
        applied = int(answer["applied_seq"])
        last_sent = batch[-1] if batch else None
        if last_sent is not None and applied == last_sent[0]["seq"]:
            self.journal.acknowledge(applied, last_sent[1])
        elif applied != state["sent_seq"]:  # the dashboard holds more, or less, than we thought: follow it
            self.journal.acknowledge(applied)
        if answer.get("cancel_requested"):
            self.cancel_requested.set()
        return len(batch)

    def upload(self, run_id: int, item: dict) -> dict:
        path = self.journal.folder.parent / item["data"]["file"]
        if not path.exists():  # nothing to upload (removed since): acknowledge it with an empty batch
            return self.client.send_items(run_id, [{"seq": item["seq"], "kind": "log",
                                                    "data": {"message": f"{path.name} was not found to upload"}}])
        return self.client.upload_checkpoint(run_id, path, seq=item["seq"])

    # -- in a thread, while training -----------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(target=self.serve, name="tinygpt-report", daemon=True)
        self.thread.start()

    def serve(self) -> None:
        backoff = POLL_SEC
        while not self.stop.is_set() and self.gave_up is None:
            started = time.monotonic()
            try:
                sent = self.send_once()
                self.reconnected()
                backoff = POLL_SEC
                if sent >= BATCH_ITEMS:
                    continue  # a backlog: the next batch at once
            except DashboardUnreachable as exc:
                self.unreachable(str(exc))
                backoff = min(MAX_BACKOFF_SEC, backoff * 2)
            except DashboardError as exc:
                self.give_up(str(exc))
                return
            # gather what the trainer logs for a moment (one request for many rows), then wait for more
            self.stop.wait(max(0.0, SEND_EVERY_SEC - (time.monotonic() - started)))
            self.wake.wait(backoff if self.unreachable_since else POLL_SEC)
            self.wake.clear()

    def unreachable(self, why: str) -> None:
        if self.unreachable_since is None and self.warn:
            print(f"tinygpt: warning: {why}; training goes on, and what it reports waits in "
                  f"{self.journal.folder} until the dashboard answers", file=sys.stderr, flush=True)
        self.unreachable_since = self.unreachable_since or time.monotonic()

    def reconnected(self) -> None:
        if self.unreachable_since is not None and self.warn:
            print(f"tinygpt: the dashboard at {self.client.url} answers again; sending what waited",
                  file=sys.stderr, flush=True)
        self.unreachable_since = None

    def give_up(self, why: str) -> None:
        self.gave_up = why
        if self.warn:
            print(f"tinygpt: warning: the dashboard refused the report ({why}); training goes on without it",
                  file=sys.stderr, flush=True)

    def drain(self, timeout: float) -> bool:
        """Stop the thread once everything is sent, or after ``timeout`` s; True when nothing is left."""
        if self.unreachable_since is not None:  # it was down a moment ago: a short last try, not a long wait
            timeout = min(timeout, 3.0)
        deadline = time.monotonic() + timeout
        while self.journal.pending() and time.monotonic() < deadline and self.gave_up is None:
            self.wake.set()
            time.sleep(0.05)
        self.stop.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(timeout=max(1.0, deadline - time.monotonic()))
        return not self.journal.pending()

    # -- in the foreground: tinygpt sync --------------------------------------------------------
    def send_all(self, on_progress: object = None) -> int:
        """Send everything that waits; how many items were sent. Raises when the dashboard cannot take it."""
        sent = 0
        while self.journal.pending():
            sent += self.send_once()
            if callable(on_progress):
                on_progress(sent)
        return sent


def run_meta(config: TrainConfig, *, name: str | None, tags: list[str], out_dir: Path,
             notify_urls: list[str] | None = None, notify_events: list[str] | None = None) -> dict:
    """What the dashboard's run is created with: its name, tags, host and the run options, and its
    notifications (``--notify-url``, ``--notify``: the dashboard checks them, as it does a form's)."""
    options = {k: v for k, v in config.to_dict().items() if k not in ("corpus", "device")}
    corpus = Path(config.corpus)
    notify: dict = {"urls": notify_urls} if notify_urls else {}
    if notify_events is not None:
        notify["events"] = [e.strip() for e in notify_events if e.strip()]
    extra = {"notify": notify} if notify else {}
    return {"name": name or out_dir.resolve().name, "tags": tags, "host": socket.gethostname(),
            "device": config.device, "config": {**options, "dataset": corpus.stem or "corpus", **extra}}


class Reporter(Callbacks):
    """The trainer's side: appends to the journal (cheap file appends) and asks the sender to send."""

    def __init__(self, journal: Journal, sender: Sender, *, checkpoints: str = "end") -> None:
        if checkpoints not in CHECKPOINT_MODES:
            raise ValueError(f"--report-checkpoints must be one of {', '.join(CHECKPOINT_MODES)}, got {checkpoints!r}")
        self.journal = journal
        self.sender = sender
        self.checkpoints = checkpoints
        self.last_eval: StepMetrics | None = None

    def add(self, kind: str, data: dict) -> None:
        self.journal.append(kind, data)
        self.sender.wake.set()

    def on_start(self, info: dict) -> None:
        keys = ("device", "device_info", "precision", "params", "start_step", "resumed", "target_val_loss",
                "val_bytes_per_token")
        self.add("start", {k: info[k] for k in keys})

    def on_step(self, metrics: StepMetrics) -> None:
        self.add("metric", asdict(metrics))

    def on_eval(self, metrics: StepMetrics) -> None:
        self.last_eval = metrics  # (the dashboard judges overfitting from the rows: app/services/run_records.py)

    def on_head_scores(self, step: int, scores: dict[str, list[list[float]]]) -> None:
        self.add("head_scores", {"step": step, "scores": scores})

    def on_sample(self, sample: Sample) -> None:
        self.add("sample", asdict(sample))

    def on_checkpoint(self, path: Path, kind: str) -> None:
        if kind != "best" or self.last_eval is None:
            return
        where = "uploading it" if self.checkpoints == "best" else f"kept in {path.parent} until the end"
        self.add("log", {"message": f"new best at step {self.last_eval.step} (val {self.last_eval.val_loss:.4f}): "
                                    f"best.pt written, {where}"})
        if self.checkpoints == "best":
            self.add("checkpoint", {"file": path.name})

    def should_stop(self) -> bool:
        return self.sender.cancel_requested.is_set()

    def finish(self, status: str, *, error: str | None = None, stop_reason: str | None = None,
               alert: str | None = None, wait_sec: float = 30.0) -> bool:
        """The run's end (after its last checkpoint): sent, waiting up to ``wait_sec``; True when all went."""
        if self.checkpoints == "end" and (self.journal.folder.parent / "best.pt").exists():  # a resumed run's too
            self.add("checkpoint", {"file": "best.pt"})
        self.add("status", {"status": status, "error": error, "stop_reason": stop_reason, "alert": alert})
        return self.sender.drain(wait_sec)


def open_report(url: str, token: str | None, *, out_dir: Path, meta: dict, resume: bool,
                checkpoints: str, run_id: int | None = None) -> Reporter:
    """Check the address and the token (one-line errors, before any training), then start sending.
    An unreachable dashboard is a warning: the run is created on it when it answers. ``run_id``: report to
    that run of the dashboard (made there) rather than a new one; checked by a first exchange."""
    client = DashboardClient(url, token)
    journal = Journal.start(out_dir, url=client.url, meta=meta, resume=resume, run_id=run_id)
    sender = Sender(journal, client)
    try:
        sender.ensure_run()
        if run_id is not None:
            sender.send_once()  # a heartbeat: a wrong run or token is refused here, before training
    except DashboardUnreachable as exc:
        sender.unreachable(str(exc))
    except DashboardRejected as exc:
        raise DashboardError(f"the dashboard at {client.url} refused the run: {exc}") from None
    reporter = Reporter(journal, sender, checkpoints=checkpoints)
    sender.start()
    return reporter


def sync_run(run_dir: Path, *, url: str | None, token: str | None, on_progress: object = None) -> tuple[int, int]:
    """Send what a run folder's journal still holds (``tinygpt sync``): (the dashboard's run id, items sent).
    Another ``url`` than the journal's sends the whole run there, as a new run of that dashboard.

    The token goes only to a ``url`` the user gave (``--url`` or ``TINYGPT_REPORT_TO``): a run folder is
    data, and one copied from elsewhere could name any address. Without one, the journal's dashboard is
    asked without the token, and one that wants it is a one-line error saying to give its URL."""
    journal = Journal(run_dir)
    if not journal.exists():
        raise DashboardError(f"{run_dir} has no report journal (it was not trained with --report-to); "
                             f"bring it in with `tinygpt import {run_dir}`")
    client = DashboardClient(url or journal.state["url"], token if url else None)
    if client.url != journal.state["url"]:
        journal.state.update(url=client.url, run_id=None, sent_seq=0, sent_offset=0)
        journal.save_state()
    sender = Sender(journal, client, warn=False)
    try:
        sent = sender.send_all(on_progress)
    except TokenRefused:
        if url or not token:
            raise
        raise DashboardError(f"the dashboard at {client.url} wants the API token, which is sent only to an address "
                             f"you give: tinygpt sync {run_dir} --url {client.url}") from None
    return sender.ensure_run(), sent
