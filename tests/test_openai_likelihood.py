"""Log-likelihoods over ``/v1/completions`` echo, against a scripted server on 127.0.0.1.

The double tokenises with a small regex and scores each token by a table that depends on the
token and the one before it, so every expected value can be worked out by hand. It answers
``/v1/completions`` as OpenAI and vLLM do (``echo`` adds the prompt's tokens, the first with a
null log-probability, before the generated one) or, with ``shifted=True``, as llama-cpp-python
0.3.x does (each echoed value taken one position late, the generated token left out of the echo).
It renders its chat template by llama.cpp's ``/apply-template`` or vLLM's ``/tokenize`` and
``/detokenize``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from hdeval.errors import UnsupportedError
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.llm.server.echo import Echo, EchoError, continuation_loglikelihood, echo_problem
from hdeval.llm.server.likelihood import PROBE_TEXT
from hdeval.llm.types import LogLikelihood
from hdeval.llm.validity import readable_likelihood
from tests.http_double import HttpDouble

# Qwen2.5's chat frame around a user message, as the local backend renders it.
HEAD = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\n<|im_start|>user\n"
)
TAIL = "<|im_end|>\n<|im_start|>assistant\n"
TOKEN = re.compile(r"<\|\w+\|>| ?[A-Za-z]+| ?\d|\s|[^\w\s]")
# log p(token | previous token): the table, else -9 for a repeat, else -2.
TABLE = {"Good": -0.5, " summary": -1.25, ".": -0.25, "Bad": -3.0, " 7": -0.05}
MAX_PROMPT_CHARS = 2000


def tokenize(text: str) -> list[str]:
    tokens = TOKEN.findall(text)
    assert "".join(tokens) == text, text
    return tokens


def logprob(previous: str, token: str) -> float:
    return -9.0 if previous == token else TABLE.get(token, -2.0)


def next_token(prompt: str) -> str:
    return " 7" if prompt.endswith(",") else "\n"


class EchoServer(HttpDouble):
    """A threaded HTTP server speaking just enough of ``/v1/completions``."""

    def __init__(
        self, frame: str | None = "apply-template", shifted: bool = False, short: str = ""
    ) -> None:
        super().__init__()
        self.frame = frame
        self.shifted = shifted
        self.short = short  # a prompt ending with it is echoed without its last token
        self.usage = True  # whether replies count their tokens
        self.prompts: list[str] = []

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        self.send(handler, 200, {"object": "list", "data": [{"id": "echo"}]})

    def post(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        path = handler.path
        rendered = HEAD + "".join(m["content"] for m in body.get("messages", [])) + TAIL
        if path == "/v1/completions":
            self.complete(handler, body)
        elif path == "/apply-template" and self.frame == "apply-template":
            self.send(handler, 200, {"prompt": rendered})
        elif path == "/tokenize" and self.frame == "tokenize":
            self.send(handler, 200, {"tokens": [ord(c) for c in rendered], "count": 1})
        elif path == "/detokenize" and self.frame == "tokenize":
            self.send(handler, 200, {"prompt": "".join(chr(i) for i in body["tokens"])})
        else:
            self.send(handler, 404, {"error": {"message": "Not Found"}})

    def complete(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        prompt = body["prompt"]
        with self.lock:
            self.prompts.append(prompt)
        if len(prompt) > MAX_PROMPT_CHARS:
            error = {"message": "This model's maximum context length is 2000 tokens"}
            self.send(handler, 400, {"error": {**error, "code": "context_length_exceeded"}})
            return
        tokens = tokenize(prompt)
        new = next_token(prompt)
        if self.shifted:  # the value at i is that of token i under the distribution after it
            values: list[float | None] = [None] + [logprob(t, t) for t in tokens[1:]]
        else:
            values = [None] + [logprob(a, b) for a, b in itertools.pairwise(tokens)]
        new_value = logprob(tokens[-1], new)
        if not body.get("echo"):
            shown, values, start = [new], [new_value], len(prompt)
        elif self.shifted:
            shown, start = tokens, 0
        else:
            shown, values, start = [*tokens, new], [*values, new_value], 0
        offsets = list(itertools.accumulate((len(t) for t in shown[:-1]), initial=start))
        if self.short and prompt.endswith(self.short) and body.get("echo"):
            cut = len(tokens) - 1  # the last prompt token, echoed by no one
            shown, values, offsets = (x[:cut] + x[cut + 1 :] for x in (shown, values, offsets))
        choice = {
            "index": 0,
            "text": (prompt if body.get("echo") else "") + new,
            "finish_reason": "length",
            "logprobs": {"tokens": shown, "token_logprobs": values, "text_offset": offsets},
        }
        usage = {"prompt_tokens": len(tokens), "completion_tokens": 1}
        reply = {"id": "cmpl", "object": "text_completion", "created": 0, "model": "echo"}
        if self.usage:
            reply["usage"] = usage
        self.send(handler, 200, {**reply, "choices": [choice]})


@contextlib.contextmanager
def judge(**server_args: object) -> Iterator[tuple[OpenAICompatibleBackend, EchoServer]]:
    with (
        EchoServer(**server_args) as server,  # type: ignore[arg-type]
        OpenAICompatibleBackend(
            server.base_url, model="echo", api_key_env="HDEVAL_TEST_UNSET_KEY", max_retries=0
        ) as backend,
    ):
        yield backend, server


def test_the_double_scores_as_described() -> None:
    assert tokenize(TAIL + "Good summary.")[-3:] == ["Good", " summary", "."]
    assert tokenize(PROBE_TEXT + " 7")[-1] == " 7"


def test_loglikelihood_is_the_mean_over_the_continuation_tokens() -> None:
    segments = ["Article:\nThe cat sat.\n\n"]
    items = [("Is it fluent?\n", "Good summary."), ("Is it coherent?\n", "Bad summary.")]
    with judge() as (backend, server):
        good, bad = backend.loglikelihoods(segments, items)
        assert backend.supports_likelihood()
    # by hand: "Good" after "\n", " summary" after "Good", "." after " summary"
    assert good.n_tokens == 3 and math.isclose(good.sum, -0.5 - 1.25 - 0.25)
    assert math.isclose(good.mean, -2.0 / 3)
    assert bad.n_tokens == 3 and math.isclose(bad.mean, (-3.0 - 1.25 - 0.25) / 3)
    # the text scored is the local backend's: chat frame, user message, then the reply
    sent = server.prompts[-2:]
    expected = [HEAD + segments[0] + q + TAIL + a for q, a in items]
    assert sorted(sent) == sorted(expected)
    # the probe ran once: two echoed completions of the probe text, no more on later calls
    assert sum(p.startswith(PROBE_TEXT) for p in server.prompts) == 2
    assert server.hits["POST /apply-template"] == 1


def test_chat_frame_from_vllm_tokenize_endpoints() -> None:
    with judge(frame="tokenize") as (backend, server):
        (result,) = backend.loglikelihoods(["x\n"], [("q\n", "Good summary.")])
    assert math.isclose(result.mean, -2.0 / 3)
    assert server.prompts[-1] == HEAD + "x\nq\n" + TAIL + "Good summary."
    assert server.hits["POST /apply-template"] == 1 and server.hits["POST /detokenize"] == 1


def test_unknown_chat_template_is_unsupported() -> None:
    with judge(frame=None) as (backend, server):
        assert not backend.supports_likelihood()
        with pytest.raises(UnsupportedError, match="chat template cannot be learned") as caught:
            backend.loglikelihoods(["x\n"], [("q\n", "Good summary.")])
    assert server.base_url in str(caught.value) and "chat_frame" in str(caught.value)


def test_given_chat_frame_needs_no_template_endpoint() -> None:
    with EchoServer(frame=None) as server:
        backend = OpenAICompatibleBackend(
            server.base_url, model="echo", max_retries=0, chat_frame=(HEAD, TAIL)
        )
        (result,) = backend.loglikelihoods(["x\n"], [("q\n", "Good summary.")])
        backend.close()
    assert math.isclose(result.sum, -2.0)
    assert server.hits["POST /apply-template"] == 0


def test_shifted_echo_is_unsupported() -> None:
    """llama-cpp-python's kind of echo: right shape, values one position late."""
    with judge(shifted=True) as (backend, server):
        assert not backend.supports_likelihood()
        with pytest.raises(UnsupportedError) as caught:
            backend.loglikelihoods(["x\n"], [("q\n", "Good summary.")])
    message = str(caught.value)
    assert "generates ' 7' after the probe text with log-probability -0.050" in message
    assert "echoes it there with -9.000" in message and "local backend" in message
    assert server.hits["POST /v1/completions"] == 3  # echo, plain next token, echo again


def test_a_prompt_longer_than_the_context_is_that_items_failure() -> None:
    """One item too long for the server's context is a failure naming why; the others in the
    same call are scored."""
    with judge() as (backend, _):
        long, short = backend.loglikelihoods(
            ["x\n"], [("q\n" + "word " * 500 + "\n", "Good summary."), ("q\n", "Good summary.")]
        )
    assert not long.ok and long.failure.startswith("prompt longer than the server's context")
    assert short.ok and short.n_tokens > 0


@pytest.mark.parametrize("usage", [True, False])
def test_an_echo_of_fewer_tokens_than_sent_is_a_failure_never_cached(tmp_path, usage) -> None:
    """An echo that leaves out a continuation token (its usage counts it; or, without usage, the
    echo stops short of the prompt's end) is that item's failure, not a shorter likelihood."""
    segments, items = (
        ["Article:\nThe cat sat.\n\n"],
        {"ok": ("q\n", "Good."), "cut": ("q\n", "Bad.")},
    )
    with judge(short="Bad.") as (backend, server):
        if not usage:
            server.usage = False
        cached = CachedJudge(backend, ResultCache(tmp_path / "cache.sqlite"))
        answers = cached.loglikelihoods(segments, items)
    assert answers.results["ok"].n_tokens == 2 and "cut" not in answers.results
    expected = "1 token log-probabilities for the 2 tokens sent" if usage else "for the 2 tokens"
    assert expected in answers.failures["cut"]
    assert cached.cache.get("cut") is None and "cut" in cached.cache.failures()
    assert cached.cache.get("ok") is not None


def test_empty_continuation_is_refused() -> None:
    with judge() as (backend, _), pytest.raises(ValueError, match="empty continuation"):
        backend.loglikelihoods(["x\n"], [("q\n", "")])


def _echo(tokens: list[str], values: list[float | None], prompt_tokens: int | None = None) -> Echo:
    offsets = tuple(itertools.accumulate((len(t) for t in tokens[:-1]), initial=0))
    return Echo(tuple(tokens), offsets, tuple(values), prompt_tokens)


@pytest.mark.parametrize(
    ("echo", "problem"),
    [
        (_echo(["a", " b", " c"], [None, -1.0, -2.0], 2), None),  # " c" was generated
        (_echo(["a", " b"], [-0.5, -1.0]), "has a log-probability (-0.500) although nothing"),
        (_echo(["a", " b"], [None, -1.0], 3), "echoes 2 prompt tokens but counts 3"),
        (_echo(["a", " b"], [None, None]), "prompt tokens [' b'] have no log-probability"),
        (_echo(["a"], [None]), "do not spell the prompt 'a b'"),
        (Echo(("a", " b"), (0, 2), (None, -1.0)), "text offsets [0, 2] do not match"),
    ],
)
def test_echo_checks(echo: Echo, problem: str | None) -> None:
    found = echo_problem(echo, "a b")
    assert found == problem if problem is None else problem in (found or "")


def test_continuation_must_start_on_a_token_boundary() -> None:
    echo = _echo(["a", " bc", "d"], [None, -1.0, -2.0])
    assert continuation_loglikelihood(echo, 1, 4) == LogLikelihood(tokens=(-1.0,))
    with pytest.raises(EchoError, match="no echoed token begins at character 2"):
        continuation_loglikelihood(echo, 2, 4)


def test_an_impossible_echoed_log_probability_is_refused() -> None:
    """A positive log-probability (a probability above 1) is no likelihood."""
    with pytest.raises(EchoError, match="impossible log-probabilities"):
        continuation_loglikelihood(_echo(["a", " bc", "d"], [None, 0.7, -2.0]), 1, 4)
    # nor is one cached before hdeval checked: it is asked again
    assert readable_likelihood({"tokens": [-1.0, -0.2]})
    for tokens in ([-1.0, 0.7], [float("nan")], [], None):
        assert not readable_likelihood({"tokens": tokens})
