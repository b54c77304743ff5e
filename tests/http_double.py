"""A scripted HTTP server on 127.0.0.1 for tests that talk to a judge server: a subclass answers
``get`` and ``post``; the base counts every request and owns the server and its thread."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

Double = TypeVar("Double", bound="HttpDouble")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, double: HttpDouble) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.double = double


class _Handler(BaseHTTPRequestHandler):
    """Counts each request in its double's ``hits`` and hands it to the double; a client that
    hangs up before the reply is written is no error."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.double.opened(self.connection)

    def do_GET(self) -> None:
        double = self.server.double
        with double.lock:
            double.hits["GET " + self.path] += 1
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            double.get(self)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        double = self.server.double
        with double.lock:
            double.hits["POST " + self.path] += 1
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            double.post(self, body)


class HttpDouble:
    """A threaded HTTP/1.1 server on a free port of 127.0.0.1, serving while used as a context
    manager. ``hits`` counts requests by method and path ("POST /v1/completions"); ``lock``
    guards it and whatever else a subclass records from its handler threads."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.connections: list[socket.socket] = []
        self.httpd = _Server(self)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        """Answer a GET request (here: 404)."""
        self.send(handler, 404, {"error": {"message": "Not Found"}})

    def post(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        """Answer a POST request whose JSON body is ``body`` (here: 404)."""
        self.send(handler, 404, {"error": {"message": "Not Found"}})

    @staticmethod
    def send(
        handler: BaseHTTPRequestHandler,
        status: int,
        payload: dict | str | bytes,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Write a JSON reply: ``payload`` as JSON, or its text or bytes as they are."""
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        data = payload.encode() if isinstance(payload, str) else payload
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    def opened(self, connection: socket.socket) -> None:
        """Record a client's connection, so that :meth:`stop` can drop it."""
        with self.lock:
            self.connections.append(connection)

    def __enter__(self: Double) -> Double:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and drop open connections: from now on the port is closed."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            for connection in self.connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def __exit__(self, *exc: object) -> None:
        self.stop()
