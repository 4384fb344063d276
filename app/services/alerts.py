"""Alerts: what people are told (``Alert``: a run finished, failed, stalled ...).

An alert is an ``alert`` event in the outbox (the run's stream carries it to its page, which may
show a desktop notification) plus one ``WebhookDelivery`` row per receiver, written in the caller's
transaction: an alert is never lost, and never planned twice. The worker's notifier
(``worker/notifier.py``) sends the deliveries.
"""

from __future__ import annotations

from sqlmodel import Session, select

from ..models import Alert, Event, EventType, Run, Sweep, WebhookDelivery
from ..settings import Settings
from .events import record_event


def raise_alert(session: Session, *, kind: Alert, message: str, settings: Settings, run: Run | None = None,
                sweep: Sweep | None = None) -> Event:
    """Record the alert and plan its webhook deliveries (uncommitted: the caller commits)."""
    subject = f"run {run.id} ({run.name})" if run is not None else f"sweep {sweep.id} ({sweep.name})"
    page = f"{settings.site_url}/runs/{run.id}" if run is not None else f"{settings.site_url}/sweeps/{sweep.id}"
    data = {"kind": kind, "message": message, "subject": subject, "url": page,
            "run_id": run.id if run is not None else None, "sweep_id": sweep.id if sweep is not None else None}
    event = record_event(session, run_id=data["run_id"], sweep_id=data["sweep_id"], type=EventType.alert, data=data)
    session.flush()  # the event's id: the deliveries' key
    for url in receivers(kind, run=run, sweep=sweep, settings=settings):
        session.add(WebhookDelivery(event_id=event.id, url=url))
    return event


def receivers(kind: Alert, *, run: Run | None, sweep: Sweep | None, settings: Settings) -> list[str]:
    """The settings' webhooks, and the run's own (``notify.urls``), for the alerts the run asks for."""
    notify = (run.config if run is not None else sweep.config.get("base", {})).get("notify") or {}
    if kind not in notify.get("events", list(Alert)):
        return []
    urls = [str(u) for u in settings.webhook_urls] + [str(u) for u in notify.get("urls", [])]
    return list(dict.fromkeys(urls))  # each once, in order


def ended_message(run: Run, kind: Alert) -> str:
    best = f"; best val {run.best_val_loss:.4f} at step {run.best_step}" if run.best_val_loss is not None else ""
    if kind == Alert.stopped_early:
        return f"{run.stop_reason}"
    if kind in (Alert.failed, Alert.nonfinite_loss, Alert.crashed):
        return f"{run.status} at step {run.last_step}: {run.error}"
    return f"{run.status} at step {run.last_step} of {run.config.get('steps')}{best}"


def has_alert(session: Session, *, run_id: int, kind: Alert) -> bool:
    """Whether the run was told this already (an attempt that resumed must not repeat it)."""
    events = session.exec(select(Event).where(Event.run_id == run_id, Event.type == EventType.alert)).all()
    return any(e.data.get("kind") == kind for e in events)


def webhook_payload(event: Event, run: Run | None) -> dict:
    """The JSON a webhook receives: ``text`` (Slack, Mattermost) and ``content`` (Discord) are one
    readable line with the page's link; ``id`` is the same on a retry (receivers may deduplicate)."""
    d = event.data
    line = f"TinyGPT: {d['subject']}: {d['kind'].replace('_', ' ')}. {d['message']} {d['url']}"
    payload = {"id": event.id, "kind": d["kind"], "message": d["message"], "url": d["url"], "text": line,
               "content": line[:2000], "created_at": event.created_at.isoformat(), "run": None,
               "sweep_id": d.get("sweep_id")}
    if run is not None:
        payload["run"] = {"id": run.id, "name": run.name, "status": run.status, "step": run.last_step,
                          "steps": run.config.get("steps"), "best_val_loss": run.best_val_loss,
                          "best_step": run.best_step, "error": run.error, "stop_reason": run.stop_reason,
                          "sweep_id": run.sweep_id, "trial": run.trial}
    return payload
