"""Webhook deliveries: a thread in every worker sends the alerts' planned deliveries (one row per
alert and receiver, written with the alert: ``app/services/alerts.py``).

Outside the training step: jobs only write rows; this thread, in the worker's process, does the HTTP.
At most once: a delivery is taken with a compare-and-set (``pending`` -> ``sending``) before its POST,
so two workers never send the same one, and one whose notifier died mid-POST is not sent again
(marked ``failed`` once it has been ``sending`` for long). A refused connection, a timeout before
sending, a 429 or a 5xx is retried with backoff (2, 4, 8 ... s, at most ``WEBHOOK_ATTEMPTS`` tries);
other 4xx are final. Nothing here touches a run: an unreachable receiver is a line in the log.

Only public receivers, or those the operator allows, are ever connected to (``app/webhook_policy.py``):
the address checked is the one the connection uses; a refused one is final, its reason in ``last_error``.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import httpx
from sqlalchemy import update
from sqlmodel import Session, col, select

from app.db import session_scope
from app.models import DeliveryState, Event, Run, WebhookDelivery, utcnow
from app.services.alerts import webhook_payload
from app.settings import Settings
from app.webhook_policy import GuardedTransport, ReceiverRefused

log = logging.getLogger(__name__)

WEBHOOK_ATTEMPTS = 6
TIMEOUT_SEC = 10.0
ORPHAN_AFTER = timedelta(minutes=10)  # a delivery "sending" this long lost its notifier
RETRY_STATUSES = {408, 425, 429, 500, 502, 503, 504}


def backoff_sec(attempts: int) -> float:
    return min(300.0, 2.0**attempts)


class Notifier:
    def __init__(self, settings: Settings, stop: threading.Event, poll_sec: float = 0.5) -> None:
        self.settings = settings
        self.stop = stop
        self.poll_sec = poll_sec
        # no redirects: a receiver cannot bounce the payload elsewhere; no auth header, ever; only the
        # addresses the receiver policy allows
        self.policy = settings.receiver_policy
        self.operator_urls = {str(u) for u in settings.webhook_urls}
        self.client = httpx.Client(timeout=TIMEOUT_SEC, follow_redirects=False, trust_env=False,
                                   transport=GuardedTransport(self.policy), headers={"User-Agent": "tinygpt-dashboard"})

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve, name="notifier", daemon=True)
        thread.start()
        return thread

    def serve(self) -> None:
        while not self.stop.wait(self.poll_sec):
            try:
                self.send_due()
            except Exception:  # a database hiccup must not end the notifier: log it, try again
                log.exception("notifier error; retrying")
        self.client.close()

    def send_due(self) -> int:
        """Send every delivery that is due; how many were attempted."""
        with session_scope(self.settings) as s:
            give_up_orphans(s)
            due = s.exec(select(WebhookDelivery.id).where(WebhookDelivery.state == DeliveryState.pending,
                                                         WebhookDelivery.next_at <= utcnow())
                         .order_by(col(WebhookDelivery.id)).limit(20)).all()
        sent = 0
        for delivery_id in due:
            if self.stop.is_set():
                break
            with session_scope(self.settings) as s:
                delivery = take(s, delivery_id)
                if delivery is None:
                    continue  # another worker's notifier took it
                event = s.get(Event, delivery.event_id)
                payload = webhook_payload(event, s.get(Run, event.run_id) if event.run_id else None)
            self.deliver(delivery, payload)
            sent += 1
        return sent

    def deliver(self, delivery: WebhookDelivery, payload: dict) -> None:
        # a run's own URL was checked when it was given; the rules may have changed since (TINYGPT_RUN_WEBHOOKS)
        problem = self.policy.submission_problem(delivery.url, per_run=delivery.url not in self.operator_urls)
        if problem is not None:
            self.record(delivery, error=f"refused: {problem}", retry=False)
            return
        try:
            response = self.client.post(delivery.url, json=payload, headers={"X-TinyGPT-Event": str(payload["id"])})
        except ReceiverRefused as exc:  # its name resolves inside: never connected
            self.record(delivery, error=f"refused: {exc}", retry=False)
            return
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing reached the receiver: try again
            self.record(delivery, error=f"cannot connect: {exc}", retry=True)
            return
        except httpx.HTTPError as exc:  # it may have arrived (a timeout while reading): never twice
            self.record(delivery, error=f"{type(exc).__name__}: {exc}", retry=False)
            return
        if response.is_success:
            self.record(delivery, error=None, retry=False)
        else:
            self.record(delivery, error=f"HTTP {response.status_code}", retry=response.status_code in RETRY_STATUSES)

    def record(self, delivery: WebhookDelivery, *, error: str | None, retry: bool) -> None:
        with session_scope(self.settings) as s:
            row = s.get(WebhookDelivery, delivery.id)
            row.last_error = error
            if error is None:
                row.state, row.sent_at = DeliveryState.sent, utcnow()
            elif retry and row.attempts < WEBHOOK_ATTEMPTS:
                row.state, row.next_at = DeliveryState.pending, utcnow() + timedelta(seconds=backoff_sec(row.attempts))
            else:
                row.state = DeliveryState.failed
            s.add(row)
        if error is not None:
            what = "will retry" if row.state == DeliveryState.pending else "gave up"
            log.warning("webhook %s for event %s: %s (attempt %s; %s)", delivery.url, delivery.event_id, error,
                        row.attempts, what)


def take(session: Session, delivery_id: int) -> WebhookDelivery | None:
    """Compare-and-set ``pending`` -> ``sending``: exactly one notifier gets each delivery (commits)."""
    taken = session.exec(update(WebhookDelivery)  # type: ignore[call-overload]
                         .where(col(WebhookDelivery.id) == delivery_id,
                                col(WebhookDelivery.state) == DeliveryState.pending)
                         .values(state=DeliveryState.sending, attempts=WebhookDelivery.attempts + 1,
                                 next_at=utcnow()))
    session.commit()
    if taken.rowcount != 1:
        return None
    delivery = session.get(WebhookDelivery, delivery_id)
    session.refresh(delivery)
    return delivery


def give_up_orphans(session: Session) -> None:
    """Deliveries whose notifier died while sending: they may have arrived, so they are not sent again."""
    session.exec(update(WebhookDelivery)  # type: ignore[call-overload]
                 .where(col(WebhookDelivery.state) == DeliveryState.sending,
                        col(WebhookDelivery.next_at) < utcnow() - ORPHAN_AFTER)
                 .values(state=DeliveryState.failed, last_error="its notifier stopped while sending"))
