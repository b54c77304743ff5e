"""The HTTP client of a judge server: separate connect and read timeouts, and a watch on the
server's progress that stops a run within ``llm.timeout`` seconds of no answer at all, and a
deadline of ``llm.timeout`` on each whole reply (:mod:`hdeval.llm.server.reply_deadline`): a server
that trickles bytes times out as one that sends none.

The ``openai`` client retries a request that timed out (``llm.max_retries``). Against a server
that accepts connections but never replies (hung or wedged) that costs every item all its
timeouts before the circuit breaker has counted enough of them: six of 120 s per item, about
25 minutes at concurrency 4. :class:`ProgressWatch` notes when the server last answered
anything. A request that times out after the server has answered nothing for ``llm.timeout``
seconds, while requests waited, raises :class:`ServerStalled`: an ``openai`` error, which the
client does not retry, and which the backend turns into a tripped breaker.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx2
import openai

from hdeval.llm.server.reply_deadline import deadline_transport, reply_deadline

PLACEHOLDER_API_KEY = "not-needed"
_HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "openai")


class ServerStalled(openai.APITimeoutError):
    """The server answered no request for ``seconds`` while requests waited for it."""

    def __init__(self, request: httpx2.Request, seconds: float) -> None:
        super().__init__(request=request)
        self.seconds = seconds


class ProgressWatch:
    """Since when requests have waited without the server answering anything (thread-safe).

    The quiet time starts when a request is sent while none waits, goes on through requests
    that fail without an answer, and ends with any answer (any HTTP status): then it starts
    again for the requests still waiting, or stops when none is left."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._waiting = 0
        self._quiet_since: float | None = None
        self._lock = threading.Lock()

    def sending(self) -> None:
        with self._lock:
            self._waiting += 1
            if self._quiet_since is None:
                self._quiet_since = time.monotonic()

    def answered(self) -> None:
        with self._lock:
            self._waiting -= 1
            self._quiet_since = time.monotonic() if self._waiting else None

    def failed(self) -> float:
        """A request ended without an answer; the seconds the server has been quiet."""
        with self._lock:
            self._waiting -= 1
            since = self._quiet_since
        return 0.0 if since is None else time.monotonic() - since


class _WatchedClient(openai.DefaultHttpxClient):
    """openai's HTTP client, telling a :class:`ProgressWatch` of every request and answer, and
    giving each request's whole reply its read timeout as a deadline
    (:mod:`hdeval.llm.server.reply_deadline`)."""

    def __init__(self, watch: ProgressWatch, **kwargs: Any) -> None:
        transport = deadline_transport(limits=openai.DEFAULT_CONNECTION_LIMITS)
        super().__init__(transport=transport, **kwargs)
        self._watch = watch

    def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        self._watch.sending()
        try:
            with reply_deadline(request.extensions.get("timeout", {}).get("read")):
                response = super().send(request, **kwargs)
        except BaseException as exc:
            quiet = self._watch.failed()
            # the timer fires at the limit, give or take
            if isinstance(exc, httpx2.TimeoutException) and quiet >= self._watch.limit * 0.99:
                raise ServerStalled(request, quiet) from None
            raise
        self._watch.answered()
        return response


def open_client(
    base_url: str, api_key: str, timeout: float, connect_timeout: float, max_retries: int
) -> tuple[openai.OpenAI, ProgressWatch]:
    """An ``openai`` client of the server at ``base_url`` that waits ``connect_timeout``
    seconds for a connection and ``timeout`` seconds for each reply, and the watch on its
    progress."""
    quiet_http_logs()
    watch = ProgressWatch(timeout)
    limits = openai.Timeout(timeout, connect=connect_timeout)
    client = openai.OpenAI(
        base_url=base_url,
        api_key=api_key or PLACEHOLDER_API_KEY,
        timeout=limits,
        max_retries=max_retries,
        http_client=_WatchedClient(watch, timeout=limits),
    )
    return client, watch


def quiet_http_logs() -> None:
    """Set the HTTP client loggers to WARNING unless a level was chosen for them: at INFO they
    log one line per request, with its full URL."""
    for name in _HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
