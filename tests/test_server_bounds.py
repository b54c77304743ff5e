"""Every call to a judge server is bounded: the tokenizer and chat-template look-ups retry and
count towards the breaker as scoring requests do, a reply has a total deadline of llm.timeout
(a server trickling bytes times out), the tokenizer memo is bounded in bytes, and a run facing
a server that answers nothing stops within llm.timeout + 10 s."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from hdeval.errors import JudgeUnavailableError
from hdeval.llm.server import context as server_context
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.llm.server.context import ServerTokens
from tests.test_bad_inputs import HDEVAL, make_bundle, texts
from tests.test_openai_faults import _completion, _peaked
from tests.test_openai_likelihood import EchoServer

TIMEOUT = 3.0


class ScriptedServer(EchoServer):
    """``GET /models`` answers; each POST path does what ``script`` says: ``ok``, ``503-once``
    (503, then ``ok``), ``trickle-headers`` or ``trickle-body`` (a byte every 0.1 s for 8 s,
    never a whole reply), ``silent`` (reads the request, never answers)."""

    def __init__(self, script: dict[str, str]) -> None:
        super().__init__()
        self.script = script
        self.closing = threading.Event()

    def answer(self, path: str, body: dict) -> dict:
        if path == "/v1/chat/completions":
            return _completion(_peaked("4"))
        if path == "/tokenize":
            return {"tokens": [ord(c) for c in body.get("prompt", "")]}
        if path == "/apply-template":
            rendered = "<s>" + "".join(m["content"] for m in body["messages"]) + "</s>"
            return {"prompt": rendered}
        return {}

    def trickle(self, handler: BaseHTTPRequestHandler, data: bytes) -> None:
        for i in range(80):
            if self.closing.wait(0.1):
                return
            handler.wfile.write(data[i : i + 1])
            handler.wfile.flush()
        handler.close_connection = True

    def post(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        path = handler.path
        mode = self.script.get(path, "missing")
        if mode == "503-once" and self.hits["POST " + path] == 1:
            self.send(handler, 503, {"error": {"message": "busy"}})
        elif mode in ("ok", "503-once"):
            self.send(handler, 200, self.answer(path, body))
        elif mode == "trickle-headers":
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 999"
            self.trickle(handler, head)
        elif mode == "trickle-body":
            handler.send_response(200)
            handler.send_header("Content-Length", "999")
            handler.end_headers()
            handler.wfile.flush()
            self.trickle(handler, json.dumps(self.answer(path, body)).encode())
        elif mode == "silent":
            self.closing.wait(30)
            handler.close_connection = True
        else:
            self.send(handler, 404, {"error": {"message": "Not Found"}})

    def stop(self) -> None:
        self.closing.set()
        super().stop()


@contextlib.contextmanager
def judge(script: dict[str, str], **options: object) -> Iterator[OpenAICompatibleBackend]:
    with (
        ScriptedServer(script) as server,
        OpenAICompatibleBackend(
            server.base_url,
            model="echo",
            api_key_env="HDEVAL_TEST_UNSET_KEY",
            timeout=TIMEOUT,
            max_retries=2,
            **options,  # type: ignore[arg-type]
        ) as backend,
    ):
        backend.hits = server.hits  # type: ignore[attr-defined]
        yield backend


def test_one_503_from_tokenize_or_the_chat_template_is_retried() -> None:
    """A transient 503 from /tokenize or /apply-template costs a retry, as a scoring request's
    would: the server's tokenizer and chat frame are still used."""
    script = {"/tokenize": "503-once", "/apply-template": "503-once"}
    with judge(script) as backend:
        assert backend.tokenize("abc") == [97, 98, 99]
        assert not backend._tokens.by_bytes
        assert backend._frame_problem() is None and backend._chat_frame == ("<s>", "</s>")
        assert backend.hits["POST /tokenize"] == 3  # the probe twice, then "abc"
        assert backend.hits["POST /apply-template"] == 2
        assert not backend.breaker.tripped


@pytest.mark.parametrize("trickle", ["trickle-headers", "trickle-body"])
def test_a_server_trickling_bytes_times_out_at_llm_timeout(trickle: str) -> None:
    """A byte every 0.1 s keeps every read under its timeout; the reply's deadline is total,
    so the run stops at llm.timeout instead of after every retry of 8 s each."""
    with judge({"/v1/chat/completions": trickle}) as backend:
        started = time.monotonic()
        with pytest.raises(JudgeUnavailableError, match="no answer from the server"):
            backend.digit_scores(["Text:\nhello\n\n"], ["Score 1-5:"] * 4)
        assert time.monotonic() - started < TIMEOUT + 2


def test_a_run_facing_a_silent_server_stops_within_the_timeout_and_ten_seconds() -> None:
    """A server that lists its model and then answers nothing: sizing prompts to its context
    (its tokenizer, its chat template) and scoring stop within llm.timeout + 10 s; here at the
    first look-up to time out, well within that (each look-up waiting on its own, as they did
    without retries, costs several timeouts)."""
    silent = {p: "silent" for p in ("/tokenize", "/apply-template", "/v1/chat/completions")}
    with judge(silent, max_context=64) as backend:
        started = time.monotonic()
        with pytest.raises(JudgeUnavailableError, match="no answer from the server"):
            backend.prompt_tokens(["Text:\n" + "hello " * 40 + "\n"], "Score 1-5:")
            backend.digit_scores(["Text:\nhello\n\n"], ["Score 1-5:"] * 4)
        assert time.monotonic() - started < TIMEOUT + 3


class SilentVllm(ScriptedServer):
    """Lists its model as vLLM does (``root``, ``max_model_len``), then answers nothing: every
    POST and every other GET (``/metrics``, ``/version``) is read and left waiting. ``first``:
    when the first request came (``time.monotonic``)."""

    first: float | None = None

    def get(self, handler: BaseHTTPRequestHandler) -> None:
        self.first = self.first or time.monotonic()
        if handler.path.rstrip("/").endswith("/models"):
            model = {"id": "echo", "root": "/models/echo", "max_model_len": 4096}
            self.send(handler, 200, {"object": "list", "data": [model]})
        else:
            self.closing.wait(30)
            handler.close_connection = True


def test_hdeval_score_facing_a_silent_vllm_like_server_stops_within_the_timeout(tmp_path):
    """The real CLI against a server that lists a vLLM model and then answers nothing: reading
    its identity, its context and prefix caching, then scoring, all stop within llm.timeout +
    10 s in total from its first request, with exit 2 and a message saying the server does not
    answer."""
    silent = {p: "silent" for p in ("/tokenize", "/apply-template", "/v1/chat/completions",
                                    "/v1/completions", "/detokenize")}  # fmt: skip
    with SilentVllm(silent) as server:
        make_bundle(tmp_path / "bundle", f"openai-compatible:{server.base_url}:echo")
        texts(tmp_path / "in.jsonl", 2)
        llm = {"backend": "openai", "base_url": server.base_url, "model": "echo",
               "api_key_env": "HDEVAL_TEST_UNSET_KEY", "timeout": TIMEOUT}  # fmt: skip
        (tmp_path / "p.yaml").write_text(json.dumps({"llm": llm}))
        env = {**os.environ, "HDEVAL_CACHE": str(tmp_path / "cache.sqlite")}
        args = [HDEVAL, "score", "in.jsonl", "--model", "bundle", "--params", "p.yaml"]
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
        ended = time.monotonic()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "no answer from the server" in done.stderr, done.stderr[-2000:]
    assert server.first is not None and ended - server.first < TIMEOUT + 10
    assert not (tmp_path / "out.jsonl").exists()


def test_the_tokenizer_memo_is_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long texts are forgotten, least recently asked first, before the memo passes its size;
    the texts still in it cost no request."""
    monkeypatch.setattr(server_context, "MEMO_BYTES", 20_000)
    asked: Counter[str] = Counter()

    def post(path: str, body: dict) -> dict:
        asked[body["prompt"]] += 1
        return {"tokens": list(range(len(body["prompt"]) // 4))}

    tokens = ServerTokens(post, "m", "server")
    texts = [f"{i:04d}" + "x" * 996 for i in range(60)]
    for text in texts:
        assert len(tokens.tokenize(text)) == 250
    assert 0 < tokens.memo_bytes <= 20_000
    assert tokens.memo_bytes == sum(len(t) + 8 * len(ids) for t, ids in tokens._known.items())
    tokens.tokenize(texts[-1])
    tokens.tokenize(texts[0])
    assert asked[texts[-1]] == 1 and asked[texts[0]] == 2
    assert tokens.tokenize("y" * 40_000) and "y" * 40_000 not in tokens._known  # too big to keep
