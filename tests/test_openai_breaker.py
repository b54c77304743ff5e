"""The circuit breaker and the reachability check of OpenAICompatibleBackend, against the
scripted fault server of ``test_openai_faults`` on 127.0.0.1 (and a server that went away, and
one that takes requests but never answers them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from hdeval.errors import HDEvalError, JudgeUnavailableError
from hdeval.llm.server.backend import OpenAICompatibleBackend
from tests.http_double import HttpDouble
from tests.test_openai_faults import CLIENT_TIMEOUT, SLOW_SECONDS, FaultServer


@pytest.fixture()
def server() -> Iterator[FaultServer]:
    with FaultServer() as running:
        yield running


def _judge(server: FaultServer, **options: object) -> OpenAICompatibleBackend:
    """One request at a time, so the order in which items finish is the input order."""
    settings: dict = {"concurrency": 1, "timeout": CLIENT_TIMEOUT, "max_retries": 1}
    settings.update(options)
    return OpenAICompatibleBackend(server.base_url, model="fault", **settings)


def _scores(judge: OpenAICompatibleBackend, *scenarios: str) -> list:
    return judge.digit_scores(["Text:\nhello\n\n"], [f"[[{s}]] Score 1-5:" for s in scenarios])


def test_consecutive_outages_trip_and_stop_sending(server: FaultServer) -> None:
    judge = _judge(server)
    assert all(r.ok for r in _scores(judge, "ok-3", "ok-4"))
    with pytest.raises(JudgeUnavailableError) as caught:
        _scores(judge, *["always-500"] * 12)
    message = str(caught.value)
    assert f"the judge at {server.base_url} is unavailable" in message
    assert "8 items in a row failed" in message and "llm.max_consecutive_failures" in message
    assert "last error: HTTP 500 (InternalServerError) after 1 retry" in message
    assert "2 of 10 items succeeded" in message
    assert server.hits["always-500"] == 8 * 2  # the last 4 items of the batch were not sent
    before = sum(server.hits.values())
    with pytest.raises(JudgeUnavailableError):
        _scores(judge, "ok-3")
    with pytest.raises(JudgeUnavailableError):
        judge.generate("[[generate]] hi")
    assert sum(server.hits.values()) == before  # nothing more was sent


def test_bad_replies_do_not_count_as_outages(server: FaultServer) -> None:
    """A reply that is not a score, or a 4xx refusal of one item, shows the server is up."""
    judge = _judge(server, max_consecutive_failures=3)
    results = _scores(
        judge, "always-500", "always-500", "words", "always-500", "always-500", "too-long"
    )
    assert not any(r.ok for r in results)
    results = _scores(judge, "always-500", "always-500", "ok-2", "always-500", "always-500")
    assert [r.ok for r in results] == [False, False, True, False, False]
    with pytest.raises(JudgeUnavailableError, match="3 items in a row"):
        _scores(judge, "always-500")


def test_refusals_of_every_request_count_as_outages(server: FaultServer) -> None:
    """HTTP 404 (unknown model or wrong URL), like 401/403, will fail every item alike."""
    with pytest.raises(JudgeUnavailableError, match=r"HTTP 404 \(NotFoundError\)"):
        _scores(_judge(server), *["unknown"] * 8)
    assert server.hits["unknown"] == 8


def test_failure_share_trips_after_twenty_items(server: FaultServer) -> None:
    judge = _judge(server)
    _scores(judge, *["ok-3"] * 10, *["words"] * 9)  # 19 items, 9 failed
    _scores(judge, "words")  # 20 items, half failed: not more than 0.5
    with pytest.raises(JudgeUnavailableError) as caught:
        _scores(judge, "words")
    message = str(caught.value)
    assert "11 of 21 items failed (52%, more than llm.max_failure_share 0.5)" in message
    assert "last error: digit mass" in message and "10 of 21 items succeeded" in message


def test_share_of_outages_also_counts(server: FaultServer) -> None:
    judge = _judge(server, max_failure_share=0.2)
    _scores(judge, *["ok-3", "ok-3", "ok-3", "ok-3", "always-500"] * 4)  # 20 items, 20% failed
    with pytest.raises(JudgeUnavailableError, match="5 of 21 items failed"):
        _scores(judge, "always-500")


def test_generation_failures_trip_the_breaker(server: FaultServer) -> None:
    judge = _judge(server, max_consecutive_failures=2)
    with pytest.raises(HDEvalError, match="HTTP 500") as first:
        judge.generate("[[always-500]] hi")
    assert not isinstance(first.value, JudgeUnavailableError)
    with pytest.raises(JudgeUnavailableError, match="2 items in a row"):
        judge.generate("[[always-500]] hi")


def test_server_gone_mid_run_trips_quickly(server: FaultServer) -> None:
    """After the server stops, each item fails at once (connection refused on a closed port)."""
    judge = _judge(server, max_retries=0)
    assert _scores(judge, "ok-1")[0].ok
    server.stop()
    started = time.perf_counter()
    with pytest.raises(JudgeUnavailableError, match="APIConnectionError") as caught:
        _scores(judge, *["ok-2"] * 20)
    assert time.perf_counter() - started < 10
    assert "1 of 9 items succeeded" in str(caught.value)


@pytest.mark.parametrize("status", [401, 404, 500])
def test_a_failed_models_endpoint_is_an_error_unless_llm_identity_names_the_weights(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """hdeval names a server's weights by what GET /models reports: a failed one stops the run
    before any item is sent. A server without /models is used when llm.identity names its
    weights, with a warning."""
    with FaultServer(models_status=status) as server:
        with pytest.raises(JudgeUnavailableError) as caught:
            _scores(_judge(server), "ok-5")
        named = _judge(server, identity="fault-7b@2026-11")
        assert _scores(named, "ok-5")[0].ok
        assert named.generate("[[generate]] hi", 3) == "echo (3 tokens)"
        assert named.identity == f"openai-compatible:{server.base_url}:fault+fault-7b@2026-11"
    message = str(caught.value)
    assert f"GET {server.base_url}/models failed" in message and "llm.identity" in message
    assert f"HTTP {status}" in message
    assert f"GET {server.base_url}/models failed (HTTP {status}" in caplog.text
    assert server.hits["GET /v1/models"] == 2  # once per judge, not retried
    assert server.hits["ok-5"] == 1  # by the named judge only


def test_silent_models_endpoint_is_unavailable() -> None:
    """A server that accepts the connection but does not answer within the short wait."""
    with FaultServer(models_delay=SLOW_SECONDS) as server:
        judge = _judge(server, max_retries=3)
        started = time.perf_counter()
        with pytest.raises(JudgeUnavailableError, match="no answer from the server") as caught:
            _scores(judge, "ok-3")
        assert time.perf_counter() - started < SLOW_SECONDS
    assert f"GET {server.base_url}/models got no answer" in str(caught.value)
    assert server.hits["ok-3"] == 0 and server.hits["GET /v1/models"] == 1


def test_config_fields_reach_the_breaker() -> None:
    from hdeval.llm.factory import make_backend
    from hdeval.params import LLMConfig

    default = LLMConfig(backend="openai", base_url="http://127.0.0.1:9/v1", model="m")
    assert (default.max_consecutive_failures, default.max_failure_share) == (8, 0.5)
    config = default.model_copy(update={"max_consecutive_failures": 3, "max_failure_share": 0.25})
    backend = make_backend(config)
    assert (backend.breaker.max_consecutive, backend.breaker.max_share) == (3, 0.25)
    with pytest.raises(ValueError):
        LLMConfig(backend="openai", base_url="http://h/v1", model="m", max_failure_share=1.5)
    with pytest.raises(HDEvalError, match=r"llm\.max_consecutive_failures"):
        OpenAICompatibleBackend("http://h/v1", model="m", max_consecutive_failures=0)


class HangServer(HttpDouble):
    """A real HTTP server on 127.0.0.1 that answers ``GET /v1/models`` and takes completion
    requests, but never answers one (it holds them until the test ends)."""

    def __init__(self) -> None:
        super().__init__()
        self.posts = 0
        self.release = threading.Event()

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        self.send(handler, 200, {"object": "list", "data": [{"id": "hang", "object": "model"}]})

    def post(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        with self.lock:
            self.posts += 1
        self.release.wait()  # taken, never answered
        handler.close_connection = True

    def stop(self) -> None:
        self.release.set()
        super().stop()


HANG_TIMEOUT = 2.0


def test_a_server_that_never_answers_stops_the_run_within_its_timeout() -> None:
    """Eight items at concurrency 4 against a server that takes requests and never answers:
    the run stops with a clear error one llm.timeout after the first requests were sent, each
    of them sent once (no retry), the other four never. Without the watch on the server's
    progress each item costs max_retries + 1 timeouts: here 6 x 2 s for each of two rounds."""
    with HangServer() as server:
        judge = OpenAICompatibleBackend(
            server.base_url, "hang", concurrency=4, timeout=HANG_TIMEOUT, max_retries=5
        )
        judge.identity  # noqa: B018  (GET /models, answered)
        started = time.perf_counter()
        with pytest.raises(JudgeUnavailableError) as caught:
            judge.digit_scores(["Text:\nhello\n\n"], [f"item {i}" for i in range(8)])
        elapsed = time.perf_counter() - started
        posts = server.posts
    message = str(caught.value)
    assert f"the judge at {server.base_url} is unavailable: no answer from the server" in message
    assert "(llm.timeout 2s): it takes requests but does not reply" in message
    assert posts == 4
    assert elapsed < 2 * HANG_TIMEOUT, elapsed


def test_connect_and_read_timeouts_are_separate() -> None:
    from hdeval.llm.factory import make_backend
    from hdeval.params import LLMConfig

    config = LLMConfig(backend="openai", base_url="http://127.0.0.1:9/v1", model="m")
    limits = make_backend(config)._client.timeout
    assert (limits.connect, limits.read) == (10.0, 60.0)
    config = config.model_copy(update={"timeout": 30.0, "connect_timeout": 2.0})
    limits = make_backend(config)._client.timeout
    assert (limits.connect, limits.read, limits.write) == (2.0, 30.0, 30.0)
