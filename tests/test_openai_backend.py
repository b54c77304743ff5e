"""OpenAICompatibleBackend against a real llama.cpp server running the embedded GGUF on 127.0.0.1.

The server runs the same Q4_K_M weights as the local ``embedded_backend``, so the two must give
nearly the same digit distributions; they differ only in runtime (llama.cpp's quantised kernels
versus transformers on the dequantised weights).

The server renders prompts with the chat template stored in the GGUF, which is also the template
the local backend uses (Qwen2.5's, with its default system message). llama-cpp-python's
``chatml`` format would instead send an empty system block; that changes the prompt and, measured
on these rows, the expected scores by up to 0.13, which would hide the runtime difference we test.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hdeval.errors import UnsupportedError
from hdeval.llm import LLMBackend
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.llm.truncation import ContextOverflow
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.servers import MODEL_ALIAS, free_port, llama_command, serve
from tests.test_scoring import _stored

pytestmark = pytest.mark.server

# Largest |expected score| difference allowed between the server and the local backend, and the
# largest difference of any single digit probability. Measured on 8 SummEval rows x 2 criteria
# (llama.cpp replies are deterministic): max 0.049 / 0.011 (mean 0.019) with the local backend in
# float32, max 0.044 / 0.027 (mean 0.022) in bfloat16, which "auto" picks on CPUs with native bf16.
# The bounds are about twice the worst case, and stay below the 0.13 that a prompt change (chatml's
# empty system block instead of the GGUF template's system message) caused on the same rows.
EXPECTED_TOLERANCE = 0.10
PROB_TOLERANCE = 0.06

CRITERIA = {
    "coherence": "the summary is well-structured and organized",
    "fluency": "the sentences of the summary are well-written and grammatical",
}


def _suffix(criterion: str) -> str:
    return (
        f"Evaluate the {criterion} of the summary ({CRITERIA[criterion]}). "
        "Answer with a single digit from 1 (worst) to 5 (best).\n"
    )


def _segments(row: dict) -> list[str]:
    return [f"Article:\n{row['source']}\n\n", f"Summary:\n{row['output']}\n\n"]


@pytest.fixture(scope="module")
def server_backend(llama_server: str) -> Iterator[OpenAICompatibleBackend]:
    # The server handles one request at a time; a generous timeout covers a loaded CI machine.
    with OpenAICompatibleBackend(
        llama_server,
        model=MODEL_ALIAS,
        api_key_env="HDEVAL_TEST_UNSET_KEY",
        concurrency=2,
        timeout=600.0,
        max_retries=1,
    ) as backend:
        yield backend


@pytest.fixture(scope="module")
def rows(summeval_rows: list[dict]) -> list[dict]:
    """Two summaries of the same article, so llama.cpp can reuse the article's KV cache."""
    return summeval_rows[:2]


def test_scores_agree_with_local_backend(
    server_backend: OpenAICompatibleBackend, embedded_backend, rows: list[dict]
) -> None:
    assert isinstance(server_backend, LLMBackend)
    suffixes = [_suffix(c) for c in CRITERIA]
    worst_expected = worst_prob = 0.0
    for row in rows:
        started = time.perf_counter()
        remote = server_backend.digit_scores(_segments(row), suffixes)
        latency = (time.perf_counter() - started) / len(suffixes)
        local = embedded_backend.digit_scores(_segments(row), suffixes)
        assert len(remote) == len(suffixes)
        for mine, theirs in zip(remote, local, strict=True):
            assert mine.ok, mine.failure
            assert math.isclose(sum(mine.probs), 1.0, abs_tol=1e-9)
            assert 1.0 <= mine.expected <= 5.0
            assert mine.mass > 0.5
            assert theirs.ok, theirs.failure
            worst_expected = max(worst_expected, abs(mine.expected - theirs.expected))
            worst_prob = max(
                worst_prob,
                max(abs(p - q) for p, q in zip(mine.probs, theirs.probs, strict=True)),
            )
        print(f"row {row['id']}: {latency:.2f}s per request")
    print(f"server vs local: max |d expected| {worst_expected:.4f}, max |d p| {worst_prob:.4f}")
    assert worst_expected <= EXPECTED_TOLERANCE
    assert worst_prob <= PROB_TOLERANCE


def test_generate_returns_text_and_counts_its_tokens(
    server_backend: OpenAICompatibleBackend,
) -> None:
    before = server_backend.tokens.to_dict()
    text = server_backend.generate("Name one primary colour. Answer with one word.", 8)
    assert isinstance(text, str) and text.strip()
    after = server_backend.tokens.to_dict()
    assert after["prompt"] - before["prompt"] >= 10  # the message in the chat template
    assert 1 <= after["completion"] - before["completion"] <= 8


def test_shifted_echo_makes_likelihood_unsupported(server_backend: OpenAICompatibleBackend) -> None:
    """llama-cpp-python 0.3.x echoes each prompt token's log-probability one position late: the
    probe sees the token it generates after the probe text echoed with another value."""
    assert not server_backend.supports_likelihood()
    with pytest.raises(UnsupportedError, match="local backend") as caught:
        server_backend.loglikelihoods(_segments({"source": "a", "output": "b"}), [("c", "d")])
    message = str(caught.value)
    assert f"server at {server_backend.server} cannot score log-likelihoods" in message
    assert "after the probe text with log-probability" in message
    assert "not those of their tokens (shifted by one position?)" in message
    generated, echoed = (float(v) for v in re.findall(r"(-?\d+\.\d{3})", message)[:2])
    assert generated > -1.0 and echoed < generated - 3  # a likely token, echoed as unlikely


def test_identity_names_the_server_and_the_model(
    server_backend: OpenAICompatibleBackend, llama_server: str
) -> None:
    assert server_backend.identity == f"openai-compatible:{llama_server}:{MODEL_ALIAS}"


def test_credentials_in_the_url_are_never_shown(
    llama_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Scoring, generation and a refused likelihood through ``http://user:secret@...``: the
    password appears in no log line, message, repr or identity."""
    caplog.set_level(logging.DEBUG)
    url = llama_server.replace("http://", "http://user:secret@")
    with OpenAICompatibleBackend(
        url, model=MODEL_ALIAS, api_key_env="HDEVAL_TEST_UNSET_KEY", timeout=600.0, max_retries=0
    ) as judge:
        (score,) = judge.digit_scores(["Summary:\nThe cat sat.\n\n"], [_suffix("fluency")])
        text = judge.generate("Name one primary colour. Answer with one word.", 4)
        with pytest.raises(UnsupportedError) as caught:
            judge.loglikelihoods(["a\n"], [("b", "c")])
        shown = [judge.identity, repr(judge), str(caught.value), caplog.text, text]
    assert score.ok, score.failure
    assert judge.identity == f"openai-compatible:{llama_server}:{MODEL_ALIAS}"
    assert llama_server in str(caught.value)
    assert caplog.records  # something was logged, at DEBUG
    for item in shown:
        assert "secret" not in item
        assert base64.b64encode(b"user:secret").decode() not in item


def test_prompt_longer_than_the_server_context_is_a_recorded_failure(
    server_backend: OpenAICompatibleBackend, rows: list[dict], tmp_path: Path
) -> None:
    """The server (2048-token context) refuses a prompt of about 3,400 tokens: a failure naming
    the context, not retried; the other text of the run is scored."""
    import pandas as pd

    from hdeval.llm.cache import ResultCache
    from hdeval.llm.judge import CachedJudge
    from hdeval.scoring.criterion_scorer import CriterionScorer
    from hdeval.tree.criteria import CriteriaTree, Criterion

    tree = CriteriaTree([Criterion("fluency", "fluency", CRITERIA["fluency"])])
    samples = pd.DataFrame(
        {
            "doc_id": ["long", "short"],
            "source": ["\n\n".join([rows[0]["source"]] * 8), rows[0]["source"]],
            "output": [rows[0]["output"]] * 2,
        },
        index=pd.Index(["long", "short"]),
    )
    scorer = CriterionScorer(CachedJudge(server_backend, ResultCache(tmp_path / "cache.sqlite")))
    run = scorer.score(samples, tree, progress=False)
    (failure,) = run.failures
    assert failure.sample_id == "long"
    assert failure.reason.startswith("prompt longer than the server's context: HTTP 400")
    assert "(not retried)" in failure.reason
    assert math.isnan(run.features.loc["long", "prompt:fluency"])
    assert 1.0 <= run.features.loc["short", "prompt:fluency"] <= 5.0
    # generation (decomposition, LLM perturbations) raises the same as a local judge would
    with pytest.raises(ContextOverflow, match="prompt longer than the server's context"):
        server_backend.generate(samples.loc["long", "source"] + "\n\nSummarise this.", 8)


def test_with_llm_max_context_a_long_prompt_is_cut_to_fit_and_marked(
    llama_server: str, rows: list[dict], tmp_path: Path
) -> None:
    """llama.cpp reports no context; with llm.max_context the prompt is cut to fit it in the
    server's own tokens (llama-cpp-python's /extras/tokenize), as the embedded judge's prompts
    are: scored and marked truncated instead of refused. (A context of 512, below the server's
    2048, keeps the test quick: the server reads about 500 tokens, not 2,000.)"""
    import pandas as pd

    from hdeval.llm.cache import ResultCache
    from hdeval.llm.judge import CachedJudge
    from hdeval.scoring.criterion_scorer import CriterionScorer
    from hdeval.tree.criteria import CriteriaTree, Criterion

    tree = CriteriaTree([Criterion("fluency", "fluency", CRITERIA["fluency"])])
    samples = pd.DataFrame(
        {"doc_id": ["long"], "source": ["\n\n".join([rows[0]["source"]] * 2)],
         "output": [rows[0]["output"]]},
        index=pd.Index(["long"]),
    )  # fmt: skip
    with OpenAICompatibleBackend(
        llama_server, MODEL_ALIAS, "HDEVAL_TEST_UNSET_KEY", timeout=600.0, max_context=512
    ) as backend:
        judge = CachedJudge(backend, ResultCache(tmp_path / "cache.sqlite"))
        run = CriterionScorer(judge).score(samples, tree, progress=False)
        assert not backend._tokens.by_bytes  # the server's own tokenizer counted
        used = backend.tokens.prompt
    assert not run.failures, run.failures
    assert 1.0 <= run.features.loc["long", "prompt:fluency"] <= 5.0
    (cut,) = run.truncations
    assert cut.sample_id == "long" and cut.source_tokens_cut > 300 and cut.text_tokens_cut == 0
    assert 400 < used <= 511  # as the server counted the prompt it read


def test_a_server_killed_mid_run_keeps_every_finished_score(embedded_gguf, summeval_rows, tmp_path):
    """``hdeval features`` against a server that is killed once some scores are in the cache:
    two failed requests in a row (``llm.max_consecutive_failures``) stop the run, which exits
    non-zero naming the unavailable judge; every finished score stays in the cache, and no
    partial features file is written."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in summeval_rows[:8]))
    criteria = tmp_path / "criteria.yaml"
    CriteriaTree([Criterion("coherence", "coherence", CRITERIA["coherence"], None, 1)]).to_yaml(
        criteria
    )
    cache = tmp_path / "cache.sqlite"
    port = free_port()
    with serve("llama.cpp", llama_command(embedded_gguf, port, None), port, 120.0) as served:
        base_url, server = served
        params = tmp_path / "params.yaml"
        llm = {"backend": "openai", "base_url": base_url, "model": MODEL_ALIAS,
               "concurrency": 1, "timeout": 60.0, "max_retries": 1,
               "max_consecutive_failures": 2}  # fmt: skip
        params.write_text(yaml.safe_dump({"llm": llm}))
        command = [
            str(Path(sys.executable).parent / "hdeval"), "features", str(labels),
            "--criteria", str(criteria), "--aspects", "coherence", "--mode", "prompt",
            "--params", str(params), "--out", str(tmp_path / "features.csv"),
        ]  # fmt: skip
        env = {**os.environ, "HDEVAL_CACHE": str(cache)}
        worker = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 600
        while _stored(cache) < 2 and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert worker.poll() is None, worker.stdout.read().decode()[-2000:]
        server.kill()
        output = worker.communicate(timeout=600)[0].decode()
    kept = _stored(cache)
    assert worker.returncode != 0
    assert "unavailable" in output and "kept in the cache" in output, output[-2000:]
    assert 2 <= kept < 8  # one coherence score for each of 8 texts
    assert not (tmp_path / "features.csv").exists()
