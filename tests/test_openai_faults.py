"""OpenAICompatibleBackend against a real, scripted, fault-injecting HTTP server on 127.0.0.1.

The server speaks just enough of ``/v1/chat/completions`` (and answers ``GET /v1/models``, and
404 on any other path). The user message names a scenario between ``[[`` and ``]]``; the server
counts requests per scenario, so each test can assert how often the client retried.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from hdeval.errors import HDEvalError, JudgeUnavailableError, UnsupportedError
from hdeval.llm import LLMBackend
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.server.backend import OpenAICompatibleBackend
from tests.http_double import HttpDouble
from tests.servers import free_port

SECRET = "sk-test-0123456789abcdefSECRET"
KEY_ENV = "HDEVAL_FAULT_TEST_KEY"
CLIENT_TIMEOUT = 1.0  # a first request in a busy process (lazy imports) took over 0.5 s
SLOW_SECONDS = 3.0
SCENARIO = re.compile(r"\[\[([\w-]+)\]\]")
#: Log-probabilities no model can give, by scenario (json writes NaN as the bare word NaN).
IMPOSSIBLE = {"nan-logprob": math.nan, "positive-logprob": 0.4}


def _completion(top: dict[str, float] | None, content: str = "3") -> dict:
    """A chat.completion body; ``top`` maps token -> probability, None means no logprobs."""
    logprobs = None
    if top is not None:
        entries = [{"token": tok, "logprob": math.log(p), "bytes": None} for tok, p in top.items()]
        first = entries[0]
        logprobs = {"content": [{**first, "top_logprobs": entries}]}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "fault",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": logprobs,
                "finish_reason": "length",
            }
        ],
    }


def _peaked(digit: str) -> dict[str, float]:
    """Most mass on ``digit``, a little on the others and on a non-digit token."""
    top = {digit: 0.6}
    top.update({d: 0.08 for d in "12345" if d != digit})
    top["The"] = 0.08
    return top


class FaultServer(HttpDouble):
    """A threaded HTTP server whose reply depends on the scenario named in the prompt; ``hits``
    also counts each chat request under its scenario."""

    def __init__(
        self, models_status: int = 200, models_delay: float = 0.0, reports: dict | None = None
    ) -> None:
        """``reports``: more fields of the model's ``/models`` entry (vLLM's root...)."""
        super().__init__()
        self.models_status = models_status
        self.models_delay = models_delay
        self.reports = reports or {}
        self.longest = 0  # the longest message asked, in UTF-8 bytes
        self.auth_headers: list[str] = []

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        time.sleep(self.models_delay)
        if self.models_status != 200 or not handler.path.endswith("/models"):
            status = self.models_status if self.models_status != 200 else 404
            self.send(handler, status, {"error": {"message": "not here"}})
            return
        entry = {"id": "fault", "object": "model", "owned_by": "t", **self.reports}
        entry["created"] = time.time_ns()  # it changes on every request (vLLM: every second)
        models = {"object": "list", "data": [entry]}
        self.send(handler, 200, models)

    def post(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        if not handler.path.endswith("/chat/completions"):
            self.send(handler, 404, {"error": {"message": "no such endpoint"}})
            return
        text = body["messages"][-1]["content"]
        match = SCENARIO.search(text)
        scenario = match.group(1) if match else "ok-3"
        context = self.reports.get("max_model_len")  # in bytes, here
        with self.lock:
            self.longest = max(self.longest, len(text.encode()))
        if context and len(text.encode()) >= context:
            scenario = "too-long"
        with self.lock:
            self.hits[scenario] += 1
            count = self.hits[scenario]
            self.auth_headers.append(handler.headers.get("Authorization", ""))
        self.respond(handler, scenario, count, body)

    def respond(
        self, handler: BaseHTTPRequestHandler, scenario: str, count: int, body: dict
    ) -> None:
        fast_retry = {"retry-after-ms": "10"}
        if scenario.startswith("ok-"):
            time.sleep(0.05 * (5 - int(scenario[-1])))  # finish out of order
            self.send(handler, 200, _completion(_peaked(scenario[-1])))
        elif scenario == "ratelimit-then-ok":
            if count == 1:
                error = {"error": {"message": "Rate limit reached", "type": "rate_limit"}}
                self.send(handler, 429, error, fast_retry)
            else:
                self.send(handler, 200, _completion(_peaked("4")))
        elif scenario == "always-500":
            # A careless server echoes the credentials back; they must not reach our messages.
            echoed = handler.headers.get("Authorization", "")
            error = {"error": {"message": f"internal error for {echoed}", "type": "server"}}
            self.send(handler, 500, error, fast_retry)
        elif scenario == "slow" or (scenario == "slow-once" and count == 1):
            time.sleep(SLOW_SECONDS)
            self.send(handler, 200, _completion(_peaked("2")))
        elif scenario in ("slow-once", "late-ok"):
            time.sleep(CLIENT_TIMEOUT / 2 if scenario == "late-ok" else 0)
            self.send(handler, 200, _completion(_peaked("2")))
        elif scenario == "truncated":
            whole = json.dumps(_completion(_peaked("2"))).encode()
            cut = whole[: len(whole) // 2]
            self.send(handler, 200, cut)
        elif scenario == "words":
            top = {"The": 0.5, "This": 0.3, "Sure": 0.15, "3": 0.01}
            self.send(handler, 200, _completion(top, "The"))
        elif scenario == "too-long":
            error = {
                "message": "This model's maximum context length is 2048 tokens",
                "code": "context_length_exceeded",
            }
            self.send(handler, 400, {"error": error})
        elif scenario in IMPOSSIBLE:  # a broken server: NaN, or a probability above 1
            reply = _completion(_peaked("3"))
            top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            top[0]["logprob"] = IMPOSSIBLE[scenario]
            self.send(handler, 200, reply)
        elif scenario == "no-logprobs":
            self.send(handler, 200, _completion(None))
        elif scenario == "generate":
            reply = _completion(None, content=f"  echo ({body.get('max_tokens')} tokens)\n")
            self.send(handler, 200, reply)
        else:
            self.send(handler, 404, {"error": {"message": "unknown scenario"}})


@pytest.fixture()
def server() -> Iterator[FaultServer]:
    with FaultServer() as running:
        yield running


@pytest.fixture()
def backend(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[OpenAICompatibleBackend]:
    monkeypatch.setenv(KEY_ENV, SECRET)
    with OpenAICompatibleBackend(
        server.base_url,
        model="fault",
        api_key_env=KEY_ENV,
        concurrency=4,
        timeout=CLIENT_TIMEOUT,
        max_retries=1,
    ) as judge:
        yield judge


def _scores(backend: OpenAICompatibleBackend, *scenarios: str):
    return backend.digit_scores(["Text:\nhello\n\n"], [f"[[{s}]] Score 1-5:" for s in scenarios])


def test_protocol_and_results_in_input_order(backend: OpenAICompatibleBackend) -> None:
    assert isinstance(backend, LLMBackend)
    results = _scores(backend, "ok-1", "ok-5", "ok-3", "ok-2")
    assert all(r.ok for r in results)
    assert [max(range(5), key=r.probs.__getitem__) + 1 for r in results] == [1, 5, 3, 2]
    for r in results:
        assert math.isclose(sum(r.probs), 1.0)
        assert math.isclose(r.mass, 0.92)


def test_rate_limit_is_retried(backend: OpenAICompatibleBackend, server: FaultServer) -> None:
    (result,) = _scores(backend, "ratelimit-then-ok")
    assert result.ok, result.failure
    assert server.hits["ratelimit-then-ok"] == 2
    assert max(range(5), key=result.probs.__getitem__) == 3


def test_persistent_500_is_a_failure_not_a_score(
    backend: OpenAICompatibleBackend, server: FaultServer
) -> None:
    good, bad = _scores(backend, "ok-4", "always-500")
    assert good.ok
    assert not bad.ok and bad.expected is None and bad.probs == ()
    assert "HTTP 500" in bad.failure and "InternalServerError" in bad.failure
    assert server.hits["always-500"] == backend.max_retries + 1


def test_a_timeout_while_the_server_answers_others_is_retried(
    backend: OpenAICompatibleBackend, server: FaultServer
) -> None:
    """A request without a reply within llm.timeout is retried while the server answers other
    requests meanwhile (here one at half the timeout): the server is busy, not stalled."""
    slow, other = _scores(backend, "slow-once", "late-ok")
    assert slow.ok and other.ok, (slow.failure, other.failure)
    assert server.hits["slow-once"] == 2 and not backend.breaker.tripped


def test_truncated_body_is_a_failure(backend: OpenAICompatibleBackend) -> None:
    (result,) = _scores(backend, "truncated")
    assert not result.ok and result.expected is None
    assert "malformed reply" in result.failure and "JSONDecodeError" in result.failure


def test_client_error_is_not_retried(backend: OpenAICompatibleBackend, server: FaultServer) -> None:
    (result,) = _scores(backend, "unknown")
    assert not result.ok and result.expected is None
    assert "HTTP 404 (NotFoundError) (not retried)" in result.failure
    assert server.hits["unknown"] == 1


def test_non_digit_reply_is_a_failure(backend: OpenAICompatibleBackend) -> None:
    (result,) = _scores(backend, "words")
    assert not result.ok and result.expected is None
    assert "digit mass" in result.failure
    assert math.isclose(result.mass, 0.01)


@pytest.mark.parametrize("scenario", sorted(IMPOSSIBLE))
def test_impossible_log_probabilities_are_a_failure_never_cached(
    backend: OpenAICompatibleBackend, tmp_path, scenario: str
) -> None:
    """A NaN or positive log-probability (a probability above 1) in the reply: that item's
    failure, recorded as such, never a score and never a cached result."""
    judge = CachedJudge(backend, ResultCache(tmp_path / "cache.sqlite"))
    answers = judge.digit_scores(["Text:\nhello\n\n"], {"k": f"[[{scenario}]] Score 1-5:"})
    assert not answers.results
    assert "impossible log-probability" in answers.failures["k"]
    assert judge.cache.get("k") is None and "k" in judge.cache.failures()


def test_an_impossible_cached_distribution_is_asked_again(
    backend: OpenAICompatibleBackend, server: FaultServer, tmp_path
) -> None:
    """A distribution cached before the check (NaN, or a mass above 1) is not served: the
    judge is asked again and its answer replaces it."""
    cache = ResultCache(tmp_path / "cache.sqlite")
    cache.put("digits", "nan", {"probs": [math.nan] * 5, "mass": math.nan})
    cache.put("digits", "above", {"probs": [0.2] * 5, "mass": 1.6})
    judge = CachedJudge(backend, cache)
    answers = judge.digit_scores(["x\n"], {"nan": "[[ok-2]]", "above": "[[ok-4]]"})
    assert answers.computed == 2 and not answers.failures
    best = {k: max(range(5), key=r.probs.__getitem__) + 1 for k, r in answers.results.items()}
    assert best == {"nan": 2, "above": 4}
    assert math.isclose(cache.get("nan")["mass"], 0.92)


def test_reply_without_logprobs_is_a_failure(backend: OpenAICompatibleBackend) -> None:
    (result,) = _scores(backend, "no-logprobs")
    assert not result.ok and result.expected is None
    assert "no logprobs" in result.failure


def test_closed_port_is_unavailable_before_any_request(caplog: pytest.LogCaptureFixture) -> None:
    """A dead port costs one refused GET /models, not every item's retries."""
    caplog.set_level(logging.DEBUG)
    port = free_port()
    judge = OpenAICompatibleBackend(
        f"http://127.0.0.1:{port}/v1", model="x", api_key_env=KEY_ENV, max_retries=5, timeout=60
    )
    started = time.perf_counter()
    with pytest.raises(JudgeUnavailableError) as caught:
        judge.digit_scores(["a\n"], ["b", "c"])
    assert time.perf_counter() - started < 5
    message = str(caught.value)
    assert f"http://127.0.0.1:{port}/v1/models got no answer" in message
    assert "APIConnectionError after 0 retries" in message and "0 of 0 items" in message
    with pytest.raises(JudgeUnavailableError):  # stays unavailable, without another request
        judge.generate("hi")


def test_generate(backend: OpenAICompatibleBackend, server: FaultServer) -> None:
    assert backend.generate("[[generate]] hi", max_new_tokens=7) == "echo (7 tokens)"
    with pytest.raises(HDEvalError, match="HTTP 500") as caught:
        backend.generate("[[always-500]] hi")
    assert SECRET not in str(caught.value)


def test_loglikelihoods_unsupported(backend: OpenAICompatibleBackend, server: FaultServer) -> None:
    """A server without /v1/completions (HTTP 404) cannot score likelihoods; probed once."""
    assert not backend.supports_likelihood()
    with pytest.raises(UnsupportedError, match="local backend") as caught:
        backend.loglikelihoods(["a\n"], [("b", "c")])
    assert f"server at {server.base_url} cannot score log-likelihoods" in str(caught.value)
    assert "HTTP 404" in str(caught.value)
    assert not backend.supports_likelihood()
    assert server.hits["POST /v1/completions"] == 1


def test_api_key_is_sent_but_never_shown(
    backend: OpenAICompatibleBackend, server: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    results = _scores(backend, "ok-3", "ratelimit-then-ok", "always-500", "truncated", "words")
    with pytest.raises(HDEvalError) as caught:
        backend.generate("[[always-500]] hi")
    assert server.auth_headers and set(server.auth_headers) == {f"Bearer {SECRET}"}
    shown = [backend.identity, repr(backend), str(caught.value), caplog.text]
    shown += [r.failure or "" for r in results]
    assert any("internal error for Bearer ***" in s for s in shown)  # the echo was masked
    for text in shown:
        assert SECRET not in text
    assert caplog.records  # the failures were logged


def test_identity_and_placeholder_key(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that reports nothing about its weights is named by URL and model alone, with a
    warning saying what can go stale; llm.identity is added to the name."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    judge = OpenAICompatibleBackend(server.base_url, model="judge-7b", api_key_env=KEY_ENV)
    assert judge.identity == f"openai-compatible:{server.base_url}:judge-7b"
    warned = " ".join(caplog.text.split())
    assert "lists no model 'judge-7b' (it lists 'fault')" in warned
    assert "reports nothing about the weights it serves as 'judge-7b'" in warned
    assert "would reuse the old weights' cached scores" in warned and "llm.identity" in warned
    assert judge.digit_scores(["x\n"], ["[[ok-2]]"])[0].ok
    assert server.auth_headers[-1] == "Bearer not-needed"
    caplog.clear()
    named = OpenAICompatibleBackend(server.base_url, model="fault", identity="fault-7b@2026-11")
    assert named.identity == f"openai-compatible:{server.base_url}:fault+fault-7b@2026-11"
    assert "reports nothing" not in caplog.text


def test_everything_the_server_reports_names_the_judge(caplog: pytest.LogCaptureFixture) -> None:
    """vLLM's root and max_model_len (and whatever else it reports) are in the identity, its
    creation time and permission ids (new on every request) are not; llm.identity is added,
    never put in their place. Without a fingerprint of the weights, a warning says a path can
    hold new weights."""
    reports = {"root": "/models/qwen", "max_model_len": 4096, "parent": None,
               "permission": [{"id": "modelperm-random"}]}  # fmt: skip
    with FaultServer(reports=reports) as server:
        judge = OpenAICompatibleBackend(server.base_url, model="fault")
        reported = '{"max_model_len":4096,"root":"/models/qwen"}'
        assert judge.identity == f"openai-compatible:{server.base_url}:fault{reported}"
        assert "by their path or hub name only (root '/models/qwen')" in caplog.text
        named = OpenAICompatibleBackend(server.base_url, model="fault", identity="q@2026-11")
        assert named.identity == f"openai-compatible:{server.base_url}:fault{reported}+q@2026-11"
        assert named.max_context == 4095  # the reply's one token is left free
    caplog.clear()
    with FaultServer(reports={"root": "/models/qwen", "sha256": "ab" * 32}) as server:
        judge = OpenAICompatibleBackend(server.base_url, model="fault")
        assert '"sha256":"' + "ab" * 32 in judge.identity
    assert "path or hub name" not in caplog.text
