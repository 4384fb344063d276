"""A real HTTP receiver for webhook tests and benchmarks: records every POST (headers and JSON body),
can answer 503 to the next N requests (a receiver that is having trouble) and take ``delay`` seconds
over each (a slow one)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, delay: float = 0.0, host: str = "127.0.0.1", port: int = 0) -> None:
        self.posts: list[dict] = []
        self.fail_next = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                time.sleep(delay)
                with receiver.lock:
                    failing = receiver.fail_next > 0
                    receiver.fail_next -= failing
                    if not failing:
                        receiver.posts.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                               "raw": body.decode(), "body": json.loads(body)})
                self.send_response(503 if failing else 200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self, *, run_id: int | None = None, kind: str | None = None) -> list[dict]:
        with self.lock:
            return [p["body"] for p in self.posts if (run_id is None or (p["body"]["run"] or {}).get("id") == run_id)
                    and (kind is None or p["body"]["kind"] == kind)]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
