"""Where the command line sends the API token: only to the dashboard the user gave (``tinygpt sync`` never
to an address a run folder names; ``tinygpt sweep --url`` never across a redirect). Real HTTP servers on
loopback record what reaches them."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.errors import AppError
from app.settings import Settings
from app.sweep_submit import submit_remote
from tinygpt.dashboard_client import DashboardUnreachable
from tinygpt.report import Journal, run_meta, sync_run
from tinygpt.run_config import TrainConfig

from .webhook_receiver import Receiver

TOKEN = "client-test-token-0123456789"


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.stop()


class Redirector:
    """Answers every request with a 307 to ``target``, and records the requests' headers."""

    def __init__(self, target: str) -> None:
        self.headers: list[dict] = []
        redirector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                redirector.headers.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(307)
                self.send_header("Location", f"{target}/api/sweeps")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def journal_for(tmp_path, url: str) -> Journal:
    meta = run_meta(TrainConfig(preset="tiny", steps=5), name="n", tags=[], out_dir=tmp_path)
    journal = Journal.start(tmp_path, url=url, meta=meta, resume=False)
    journal.append("log", {"message": "hello"})
    return journal


def test_sync_sends_the_token_only_to_an_address_the_user_gave(tmp_path, receiver):
    journal_for(tmp_path, receiver.url)  # a run folder that names some address (copied from elsewhere, say)
    with pytest.raises(DashboardUnreachable):  # the receiver is no dashboard: its empty answer is unreadable
        sync_run(tmp_path, url=None, token=TOKEN)
    assert len(receiver.posts) == 1 and "authorization" not in receiver.posts[0]["headers"]
    with pytest.raises(DashboardUnreachable):
        sync_run(tmp_path, url=receiver.url, token=TOKEN)  # typed: the token goes there
    assert receiver.posts[1]["headers"]["authorization"] == f"Bearer {TOKEN}"


def test_sweep_submission_follows_no_redirect(receiver):
    redirector = Redirector(receiver.url)
    try:
        sweep = "method: grid\nparameters:\n  lr: {values: [0.01]}\nbase: {preset: tiny, steps: 5}\n"
        with pytest.raises(AppError) as refused:
            submit_remote(sweep, redirector.url, Settings(api_token=TOKEN))
        assert str(refused.value) == (f"{redirector.url} answered a redirect (307) to {receiver.url}/api/sweeps: give "
                                      "the dashboard's own address (redirects are not followed, so the token never "
                                      "goes elsewhere)")
        assert redirector.headers[0]["authorization"] == f"Bearer {TOKEN}"
        assert receiver.posts == []  # nothing, token or not, went where the redirect pointed
    finally:
        redirector.stop()


def test_run_meta_carries_the_runs_notifications(tmp_path):
    config = TrainConfig(preset="tiny", steps=5)
    meta = run_meta(config, name="n", tags=[], out_dir=tmp_path, notify_urls=["https://hooks.example.com/x"],
                    notify_events=["failed", " stalled", ""])
    assert meta["config"]["notify"] == {"urls": ["https://hooks.example.com/x"], "events": ["failed", "stalled"]}
    assert "notify" not in run_meta(config, name="n", tags=[], out_dir=tmp_path)["config"]


def test_a_dashboard_refuses_a_reported_runs_inside_webhook(make_app, tmp_path):
    client = make_app()
    meta = run_meta(TrainConfig(preset="tiny", steps=5), name="n", tags=[], out_dir=tmp_path,
                    notify_urls=["http://10.0.0.7/hook"])
    response = client.post("/api/runs/reported", json={"report_id": "0123abcd", **meta})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "config", "notify", "urls", "0"]
