"""A small TLS-terminating reverse proxy for the tests, as nginx would stand in front of the dashboard:

    python -m tests.reverse_proxy --port 8443 --prefix /tinygpt --upstream http://127.0.0.1:8000 \\
        --certfile cert.pem --keyfile key.pem

serves ``https://127.0.0.1:8443/tinygpt/...`` from ``http://127.0.0.1:8000/...`` (the prefix stripped,
``X-Forwarded-Proto/-For/-Host`` added, the upstream's own ``Host``, as nginx's ``proxy_pass`` does),
streaming responses as they come (event streams are not buffered). Anything outside the prefix is a 404.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


def make_proxy(prefix: str, upstream: str) -> Starlette:
    client = httpx.AsyncClient(base_url=upstream, timeout=httpx.Timeout(None, connect=10))

    async def forward(request: Request) -> Response:
        path = request.url.path
        if not (path == prefix or path.startswith(prefix + "/")):
            return PlainTextResponse("not under the proxy's prefix", status_code=404)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers.update({"x-forwarded-proto": "https", "x-forwarded-host": request.headers.get("host", ""),
                        "x-forwarded-for": request.client.host if request.client else ""})
        target = (path[len(prefix):] or "/") + (f"?{request.url.query}" if request.url.query else "")
        upstream_request = client.build_request(request.method, target, headers=headers, content=await request.body())
        response = await client.send(upstream_request, stream=True)
        out_headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in HOP_BY_HOP]
        return StreamingResponse(response.aiter_raw(), status_code=response.status_code, headers=dict(out_headers),
                                 background=BackgroundTask(response.aclose))

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A throw-away certificate for 127.0.0.1 (openssl, from Debian's base system)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--certfile", required=True)
    ap.add_argument("--keyfile", required=True)
    args = ap.parse_args()
    uvicorn.run(make_proxy(args.prefix.rstrip("/"), args.upstream), host="127.0.0.1", port=args.port,
                ssl_certfile=args.certfile, ssl_keyfile=args.keyfile, log_level="warning")


if __name__ == "__main__":
    main()
