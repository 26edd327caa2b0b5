"""A small threaded HTTP server on 127.0.0.1 that records requests and answers by route.

    fake = FakeServer()
    fake.route("POST", r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/(?P<n>\\d+)/comments",
               lambda req: (201, {"id": 1}))
    fake.start()
    ... client with base URL fake.url ...
    fake.requests            # every request seen: method, path, query, headers, body, json
    fake.fail_next(1, 429, headers={"Retry-After": "1"})   # scripted failures, in order
    fake.stop(); fake.start()                              # down, then back up on the same port

A handler gets a ``Request`` (with ``match`` holding the route's named groups) and returns
``(status, body)`` or ``(status, body, headers)``; a dict or list body is sent as JSON.
Unrouted requests get 404 with a JSON message, like the providers do.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict
    headers: dict
    body: bytes
    match: dict = field(default_factory=dict)

    @property
    def json(self):
        return json.loads(self.body or b"null")

    def header(self, name: str, default=None):
        return self.headers.get(name.lower(), default)


Handler = Callable[[Request], tuple]


class FakeServer:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self.port = host, port
        self.routes: list[tuple[str, re.Pattern, Handler]] = []
        self.requests: list[Request] = []
        self._failures: list[tuple[int, object, dict]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- set-up -------------------------------------------------------------------------

    def route(self, method: str, pattern: str, handler: Handler) -> FakeServer:
        self.routes.append((method.upper(), re.compile(pattern + r"\Z"), handler))
        return self

    def fail_next(self, count: int, status: int, body=None, headers: dict | None = None) -> None:
        """The next ``count`` requests (any route) get ``status`` instead of their answer."""
        with self._lock:
            self._failures.extend(
                [(status, body if body is not None else {"message": "scripted failure"}, headers or {})] * count
            )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def seen(self, method: str | None = None, path: str | None = None) -> list[Request]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method) and (path is None or re.fullmatch(path, r.path))
            ]

    # --- life ---------------------------------------------------------------------------

    def start(self) -> FakeServer:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _serve(self):
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Request(
                    method=self.command,
                    path=parts.path,
                    query={k: v[0] if len(v) == 1 else v for k, v in parse_qs(parts.query).items()},
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                status, answer, headers = fake._answer(request)
                payload = (
                    answer
                    if isinstance(answer, bytes)
                    else (json.dumps(answer).encode() if not isinstance(answer, str) else answer.encode())
                )
                self.send_response(status)
                if not isinstance(answer, bytes | str):
                    self.send_header("Content-Type", "application/json")
                for name, value in headers.items():
                    self.send_header(name, str(value))
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        self._server = ThreadingHTTPServer((self.host, self.port), _Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"fake-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering (connections are refused) until ``start()`` again, on the same port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- answering ----------------------------------------------------------------------

    def _answer(self, request: Request) -> tuple[int, object, dict]:
        with self._lock:
            self.requests.append(request)
            failure = self._failures.pop(0) if self._failures else None
        if failure is not None:
            return failure
        for method, pattern, handler in self.routes:
            match = pattern.match(request.path)
            if method == request.method and match:
                request.match = match.groupdict()
                result = handler(request)
                status, body = result[0], result[1]
                headers = result[2] if len(result) > 2 else {}
                return status, body, headers
        return 404, {"message": "Not Found"}, {}
