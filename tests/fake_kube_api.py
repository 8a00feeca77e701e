"""A fake Kubernetes API server on loopback for the in-pod checks (jobs/scripts/kube_api.py): records every
request (method, path, body) and answers nodes from a dict, Events and deletions with 201/200. Used by
tests/test_fabric_check.py, tests/test_slow_node.py and the integration runs (the exact node patch recorded)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TOKEN = "token-guard"
# How often a test server's loop looks whether it is to stop. socketserver's default (0.5 s) was half a
# second of every such test's teardown, waiting for ``shutdown()``.
SHUTDOWN_POLL = 0.01


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on loopback answering with ``handler``, for the length of the block; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class FakeKubeApi:
    def __init__(self, nodes: dict[str, dict[str, Any]] | None = None, pods: dict[str, str] | None = None):
        self.nodes = nodes or {}
        # pod name -> its node (GET /api/v1/namespaces/<ns>/pods/<pod> answers spec.nodeName)
        self.pods = {
            name: {"metadata": {"name": name}, "spec": {"nodeName": node}} for name, node in (pods or {}).items()
        }
        self.requests: list[tuple[str, str, Any]] = []
        self.times: list[float] = []  # time.monotonic() of each request
        self.lock = threading.Lock()

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((method, path, body))
            self.times.append(time.monotonic())
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            node = self.nodes.setdefault(parts[3], {"metadata": {"name": parts[3]}, "spec": {}})
            return 200, node
        if parts[:3] == ["api", "v1", "namespaces"] and parts[4:5] == ["pods"] and len(parts) == 6 and method == "GET":
            pod = self.pods.get(parts[5])
            return (200, pod) if pod else (404, {"message": "not found"})
        if method == "POST":
            return 201, body
        return 200, {}

    def of(self, method: str, contains: str = "") -> list[tuple[str, Any]]:
        with self.lock:
            return [(p, b) for m, p, b in self.requests if m == method and contains in p]


@contextmanager
def serve(fake: FakeKubeApi, account: Path) -> Iterator[dict[str, str]]:
    """Run ``fake``; yield the env that points kube_api at it (a service-account folder with its token)."""
    account.mkdir(parents=True, exist_ok=True)
    (account / "token").write_text(TOKEN + "\n")

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                code, out = 401, {"message": "no token"}
            else:
                code, out = fake.handle(self.command, self.path, body)
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Handler) as url:
        yield {"GPUTRAINING_API": url, "GPUTRAINING_SERVICE_ACCOUNT": str(account)}
