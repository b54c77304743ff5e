"""A vLLM server's fingerprint and prefix cache, against a scripted vLLM double on 127.0.0.1.

The double reports vLLM's ``root`` and ``max_model_len``, tokenizes one character per token
(``/tokenize``, ``/detokenize``), echoes prompt log-probabilities that depend on its ``weights``
(one word a token, ``/v1/completions``), scores a digit that depends on them too
(``/v1/chat/completions``), and declares its prefix cache on ``/metrics``. It can go down (HTTP
503 on every request), come back on other weights, add noise of a batch computed in another
order, and give a request whose prefix it saw before other values (a prefix cache that changes
them).
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from hdeval.errors import JudgeUnavailableError, UnsupportedError
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.llm.server.breaker import CircuitBreaker
from hdeval.llm.server.prefix_cache import declared
from tests.http_double import HttpDouble

HEAD, TAIL = "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
WORD = re.compile(r" ?\w+|\s|[^\w\s]")
SECRET = "sk-identity-test-0123456789SECRET"
KEY_ENV = "HDEVAL_IDENTITY_TEST_KEY"
CACHED_CHARS = 64  # a prefix this long that was sent before is "cached"


def metrics(prefix_caching: bool) -> str:
    flag = "True" if prefix_caching else "False"
    return (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        f'vllm:cache_config_info{{block_size="16",enable_prefix_caching="{flag}"}} 1.0\n'
    )


class VllmDouble(HttpDouble):
    """A threaded HTTP server speaking just enough of vLLM's API (see the module)."""

    def __init__(self, declares: bool | None = False, caches: bool = False) -> None:
        super().__init__()
        self.weights = "v1"
        self.noise = 0.0  # added to every other echoed value (a batch in another order)
        self.template = HEAD
        self.down = False
        self.declares = declares  # what /metrics says of prefix caching (None: no /metrics)
        self.caches = caches  # whether a prefix sent before changes a request's values
        self.seen: set[str] = set()

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path == "/v1/models":
            entry = {"id": "local", "object": "model", "root": "/models/q", "max_model_len": 4096}
            self.send(handler, 200, {"object": "list", "data": [entry]})
        elif handler.path == "/metrics" and self.declares is not None:
            self.send(handler, 200, metrics(self.declares))
        else:
            self.send(handler, 404, {"error": {"message": "Not Found"}})

    def post(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        if self.down:
            self.send(handler, 503, {"error": {"message": "restarting"}})
        elif handler.path == "/tokenize":
            text = body.get("prompt")
            if text is None:
                text = self.template + "".join(m["content"] for m in body["messages"]) + TAIL
            self.send(handler, 200, {"tokens": [ord(c) for c in text], "count": len(text)})
        elif handler.path == "/detokenize":
            self.send(handler, 200, {"prompt": "".join(chr(i) for i in body["tokens"])})
        elif handler.path == "/v1/completions":
            self.complete(handler, body)
        elif handler.path == "/v1/chat/completions":
            self.chat(handler)
        else:
            self.send(handler, 404, {"error": {"message": "Not Found"}})

    def value(self, token: str, i: int) -> float:
        base = -0.05 - (zlib.crc32(f"{self.weights}|{token}".encode()) % 1000) / 250
        return min(base + (self.noise if i % 2 else -self.noise), -0.01)

    def complete(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        prompt = body["prompt"]
        tokens = WORD.findall(prompt)
        assert "".join(tokens) == prompt
        stale = self.caches and prompt[:CACHED_CHARS] in self.seen
        self.seen.add(prompt[:CACHED_CHARS])
        offsets, values, at = [], [], 0
        for i, token in enumerate(tokens):
            offsets.append(at)
            value = None if i == 0 else self.value(token, i)
            if stale and value is not None and at < CACHED_CHARS:
                value -= 0.7  # what another request left in the cached blocks
            values.append(value)
            at += len(token)
        new = self.value("\n", len(tokens))  # the token generated after the prompt
        if not body.get("echo"):
            tokens, values, offsets = [], [], []
        logprobs = {
            "tokens": [*tokens, "\n"],
            "token_logprobs": [*values, new],
            "text_offset": [*offsets, len(prompt)],
        }
        choice = {"index": 0, "text": "\n", "finish_reason": "length", "logprobs": logprobs}
        usage = {"prompt_tokens": len(tokens), "completion_tokens": 1, "total_tokens": 0}
        reply = {"id": "c", "object": "text_completion", "created": 0, "model": "local"}
        self.send(handler, 200, {**reply, "choices": [choice], "usage": usage})

    def chat(self, handler: BaseHTTPRequestHandler) -> None:
        digit = str(1 + zlib.crc32(self.weights.encode()) % 5)
        top = {d: (0.8 if d == digit else 0.05) for d in "12345"}
        entries = [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in top.items()]
        content = [{**entries[int(digit) - 1], "top_logprobs": entries}]
        message = {"role": "assistant", "content": digit}
        choice = {"index": 0, "message": message, "logprobs": {"content": content},
                  "finish_reason": "length"}  # fmt: skip
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "local"}
        self.send(handler, 200, {**reply, "choices": [choice]})


def backend(server: VllmDouble, **options: object) -> OpenAICompatibleBackend:
    settings = {"api_key_env": KEY_ENV, "max_retries": 0, "concurrency": 1, **options}
    return OpenAICompatibleBackend(server.base_url, "local", **settings)  # type: ignore[arg-type]


def digits(judge: CachedJudge, key: str = "k"):
    return judge.digit_scores(["Text.\n"], {key: "Rate it 1-5: "})


@pytest.fixture
def server() -> Iterator[VllmDouble]:
    with VllmDouble() as double:
        yield double


def test_a_vllm_server_is_named_by_its_fingerprint(server, caplog) -> None:
    """The identity names the fingerprint of the weights, so no warning says a path can go
    stale; the same weights give the same name, other weights or another chat template
    another."""
    first = backend(server).identity
    assert '"fingerprint":"' in first and '"root":"/models/q"' in first
    assert "path or hub name only" not in caplog.text
    assert backend(server).identity == first
    server.weights = "v2"
    second = backend(server).identity
    assert second != first
    server.weights, server.template = "v1", "<|user|>\n"
    assert backend(server).identity not in (first, second)
    assert server.hits["POST /tokenize"] == 4 and server.hits["POST /v1/completions"] == 4


def test_new_weights_at_the_same_path_never_get_the_old_weights_cached_scores(
    server, tmp_path
) -> None:
    """A run on the same weights reads the cache; after new weights at the same path it asks
    the server again and gets their score, and the old one stays the old weights' answer."""
    cache = ResultCache(tmp_path / "cache.sqlite")

    def run() -> tuple[float, int]:
        judge = CachedJudge(backend(server), cache)
        key = judge.key("digits", "the request")
        answers = digits(judge, key)
        return answers.results[key].expected, answers.computed

    old, computed = run()
    assert computed == 1 and run() == (old, 0)
    server.weights = "v2"
    new, computed = run()
    assert computed == 1 and abs(new - old) > 0.5
    server.weights = "v1"
    assert run() == (old, 0)


def test_a_probe_moved_by_batching_noise_keeps_the_weights_name(server, tmp_path) -> None:
    """Values moved by a batch computed in another order (0.03 nats a token) are the same
    weights: the cache names them by the first fingerprint seen, though their own differs."""
    cache = ResultCache(tmp_path / "cache.sqlite")
    first = CachedJudge(backend(server), cache)
    name = first.identity
    server.noise = 0.03
    again = CachedJudge(backend(server), cache)
    assert again.identity == name
    assert again.backend.fingerprint.id != first.backend.fingerprint.id
    server.noise = 0.2  # beyond SAME_WEIGHTS: other weights
    assert CachedJudge(backend(server), cache).identity != name


@pytest.mark.parametrize("weights", ["v1", "v2"])
def test_a_server_back_on_other_weights_stops_the_run_before_their_answers_are_kept(
    server, tmp_path, monkeypatch, weights
) -> None:
    """The server goes down mid-run (503) and comes back: the first answer after the outage
    resets the breaker's count, and the server is fingerprinted again before that call's answers
    are kept. Back on the same weights, the run goes on; on other weights it stops with one line
    naming the server (not the key), and no answer of the new weights is cached."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    cache = ResultCache(tmp_path / "cache.sqlite")
    judge = CachedJudge(backend(server, max_consecutive_failures=5), cache)
    assert digits(judge, "a").results
    server.down = True
    assert digits(judge, "b").failures
    server.down, server.weights = False, weights
    if weights == "v1":
        assert digits(judge, "c").results and len(cache.get_many(["a", "c"])) == 2
        return
    with pytest.raises(JudgeUnavailableError) as caught:
        digits(judge, "c")
    message = str(caught.value)
    assert "\n" not in message and server.base_url in message and SECRET not in message
    assert "answers again after an outage, but its weights changed" in message
    assert cache.get_many(["c"]) == {}
    with pytest.raises(JudgeUnavailableError):  # no further requests
        digits(judge, "d")


def test_prefix_caching_that_the_server_declares_is_refused_for_likelihoods(tmp_path) -> None:
    """vLLM's /metrics says it caches prefixes: likelihoods are refused with one line naming the
    server and how to start it; prompt scores are still served."""
    with VllmDouble(declares=True) as server:
        judge = backend(server)
        problem = judge.likelihood_problem()
        assert problem is not None and "--no-enable-prefix-caching" in problem
        with pytest.raises(UnsupportedError) as caught:
            judge.loglikelihoods(["x\n"], [("q\n", "A summary.")])
        message = str(caught.value)
        assert "\n" not in message and server.base_url in message
        assert judge.digit_scores(["x\n"], ["Rate: "])[0].ok


@pytest.mark.parametrize("caches", [True, False])
def test_prefix_caching_is_found_by_the_same_request_cold_and_warm(caches) -> None:
    """A server without /metrics: the same echoed request is sent cold and after its prefix was
    sent. Values that move are refused; values that stay are accepted, and likelihoods are
    scored."""
    with VllmDouble(declares=None, caches=caches) as server:
        judge = backend(server)
        problem = judge.likelihood_problem()
        if caches:
            assert problem is not None and "by up to 0.7 nats" in problem
            assert "--no-enable-prefix-caching" in problem and server.base_url in problem
        else:
            assert problem is None
            (result,) = judge.loglikelihoods(["x\n"], [("q\n", "A summary.")])
            assert result.ok and result.n_tokens == 3
        # the fingerprint, the echo probe's two, cold, the prefix, warm (and the item)
        assert server.hits["POST /v1/completions"] == 6 + (not caches)
        assert server.hits["GET /metrics"] == 1


def test_a_server_that_declares_no_prefix_caching_is_not_probed_further() -> None:
    """What /metrics says decides: no request is sent twice to find a cache it says it lacks."""
    with VllmDouble(declares=False) as server:
        judge = backend(server)
        assert judge.likelihood_problem() is None
        assert server.hits["POST /v1/completions"] == 3  # the fingerprint, the echo probe's two


def test_metrics_lines_are_read_as_vllm_writes_them() -> None:
    assert declared(metrics(True)) is True and declared(metrics(False)) is False
    assert declared("vllm:num_requests_running 0.0\n") is None


def test_the_breaker_counts_each_time_the_server_answers_again_after_an_outage() -> None:
    """A reset is an answer (a success, a bad reply or a refusal) after at least one outage;
    answers in a row, and failures that are no outage, reset nothing."""
    breaker = CircuitBreaker("http://h/v1", max_consecutive=10)
    breaker.record(None)
    breaker.record("bad reply")
    assert breaker.resets == 0
    breaker.record("503", outage=True)
    breaker.record("503", outage=True)
    breaker.record(None)
    breaker.record(None)
    assert breaker.resets == 1
    breaker.record("503", outage=True)
    breaker.record("unreadable reply")
    breaker.record("503", outage=True)
    breaker.record_refusal()
    assert breaker.resets == 3
