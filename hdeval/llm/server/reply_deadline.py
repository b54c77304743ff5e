"""A total deadline on each reply from a judge server, not a limit per chunk.

An HTTP client's read timeout bounds each wait for the next bytes, so a server that trickles a
byte every few seconds never times out. :func:`deadline_transport` is httpx's own transport with
its network streams wrapped: while :func:`reply_deadline` is in force (the whole of one request,
its reply's headers and body), every read and write waits at most until the deadline, after
which it raises the same ``ReadTimeout`` (``WriteTimeout``) a stalled read raises, so the
``openai`` client treats it as the timeout it is.
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
import time
from collections.abc import Iterator
from typing import Any

import httpcore2
import httpx2

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "hdeval_reply_deadline", default=None
)


@contextlib.contextmanager
def reply_deadline(seconds: float | None) -> Iterator[None]:
    """Every network read and write of this thread, for the block, ends within ``seconds``
    of its start (None: no deadline)."""
    token = _DEADLINE.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _wait(timeout: float | None, error: type[Exception]) -> float | None:
    """The longest wait allowed now: ``timeout``, cut to what is left of the deadline."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the reply did not complete within its deadline (llm.timeout)")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    """A network stream whose every read and write keeps to the deadline in force."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _wait(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _wait(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    """httpcore's network backend, its connections wrapped in :class:`_DeadlineStream`."""

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore2.NetworkStream:
        return _DeadlineStream(self._inner.connect_tcp(*args, **kwargs))

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore2.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(*args, **kwargs))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_transport(**kwargs: Any) -> httpx2.HTTPTransport:
    """An ``httpx`` transport (``kwargs`` as for ``HTTPTransport``) that keeps to
    :func:`reply_deadline`. Its connection pool takes a network backend only when built, and
    ``HTTPTransport`` builds it, so the backend is wrapped in place."""
    transport = httpx2.HTTPTransport(**kwargs)
    pool = transport._pool
    pool._network_backend = _DeadlineBackend(pool._network_backend)
    return transport
