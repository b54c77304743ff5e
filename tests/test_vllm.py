"""hdeval against a real vLLM server (its CPU build) on 127.0.0.1, serving the embedded judge's
weights: what the backend reports about the server and its fingerprint, scores and likelihoods
that agree with the embedded backend and do not depend on how many texts are scored at once,
likelihoods without the end-of-reply marker read off those with it, a text too long for its
context (a server killed mid-run: test_openai_backend.py, on llama.cpp, which starts in seconds);
then `dvc repro` of the whole pipeline with the server as the judge, on the SFRES data-to-text
preset (short texts: the CPU build scores slowly), the likelihood mode with every likelihood
signal (a whole pipeline on a server's digit scores: test_pipeline_server.py), and ``hdeval
score`` with the bundle against the same server, in a new process with an empty cache, giving
the ``evaluate`` stage's scores. One file, so that one server serves every test but one: a
second server, started with prefix caching on, is refused for likelihoods."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from hdeval.errors import UnsupportedError
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.llm.server.fingerprint import FINGERPRINT_TEXT, template_hash
from hdeval.params import TaskSpec
from hdeval.scoring.columns import Profile
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.prompts import (
    criterion_prompt,
    likelihood_instruction,
    prompt_segments,
    source_free_instruction,
    source_free_segment,
    source_segment,
)
from hdeval.scoring.sources import parse_mr, value_spans
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.dvc_project import DVC, REPO, first_source_words, make_project, run
from tests.servers import MODEL_ALIAS

pytestmark = pytest.mark.server

TASK = TaskSpec()
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "the collective quality of all sentences", None, 1),
        Criterion("fluency", "fluency", "the quality of individual sentences", None, 1),
    ]
)


def _server_backend(base_url: str, **options) -> OpenAICompatibleBackend:
    settings = {"concurrency": 2, "timeout": 300, "max_retries": 1, **options}
    return OpenAICompatibleBackend(base_url, MODEL_ALIAS, **settings)


@pytest.fixture(scope="module")
def vllm_server(embedded_dir: Path) -> Iterator[str]:
    """Base URL of a vLLM server (CPU build) on the embedded judge's converted weights, for this
    file's tests only: the server's memory is free again for the files a worker runs next."""
    from tests.servers import run_vllm_server

    with run_vllm_server(embedded_dir) as (base_url, _):
        yield base_url


def _sfres_rows(n_docs: int) -> list[dict]:
    """The rows of the first ``n_docs`` SFRES meaning representations that have two outputs."""
    with open(REPO / "data" / "data_to_text" / "sfres.jsonl", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    pairs = [group for group in by_doc.values() if len(group) == 2][:n_docs]
    return [row for group in pairs for row in group]


def test_vllm_is_named_by_what_it_reports_and_its_fingerprint(vllm_server, embedded_dir, caplog):
    """Everything vLLM's /v1/models reports about the model is in the identity (its weights
    directory, context length; not its per-request creation time and permission ids), with
    the name of its fingerprint and llm.identity added, so no warning says a path can go stale.
    The fingerprint is the server's: its tokens are those of the weights' own tokenizer and chat
    template, and a second probe of the idle server gives the same values; the echo is
    accepted, and the probe of a server without prefix caching finds none."""
    from transformers import AutoTokenizer

    backend = _server_backend(vllm_server)
    started = time.perf_counter()
    identity = backend.identity  # /models and the fingerprint: the first contact
    contact = time.perf_counter() - started
    started = time.perf_counter()
    assert backend.likelihood_problem() is None  # echo aligned, chat frame, no prefix cache
    probes = time.perf_counter() - started
    prefix = f"openai-compatible:{vllm_server}:{MODEL_ALIAS}"
    reported = json.loads(identity.removeprefix(prefix))
    assert reported["root"] == str(embedded_dir) and reported["max_model_len"] == 2048
    assert reported["fingerprint"] == backend.fingerprint.id
    assert not {"created", "permission", "id", "object"} & set(reported)
    assert backend.max_context == 2047  # one token is left for the reply
    assert "by their path or hub name only" not in caplog.text
    tokenizer = AutoTokenizer.from_pretrained(embedded_dir)
    message = [{"role": "user", "content": FINGERPRINT_TEXT}]
    ids = tokenizer.apply_chat_template(message, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # a BatchEncoding in transformers 5
    assert backend.fingerprint.template == template_hash(list(ids))
    assert len(backend.fingerprint.logprobs) == len(tokenizer(FINGERPRINT_TEXT)["input_ids"]) - 1
    started = time.perf_counter()
    again = backend._probe_fingerprint()
    fingerprint = time.perf_counter() - started
    assert again == backend.fingerprint
    named = _server_backend(vllm_server, identity="qwen2.5-0.5b@2026-11")
    assert named.identity == backend.identity + "+qwen2.5-0.5b@2026-11"
    print(f"first contact {contact:.2f}s, fingerprint {fingerprint:.2f}s, probes {probes:.2f}s")


def test_vllm_with_prefix_caching_is_refused_for_likelihoods(embedded_dir):
    """vLLM started with prefix caching on (its default) declares it on /metrics: likelihoods
    are refused with one line naming the server and how to start it, and prompt scores are
    still served. (Its echo of one request cold and after its prefix was cached is printed:
    vLLM 0.32 reads no cached prefix for a request that asks for prompt log-probabilities.)"""
    from tests.servers import run_vllm_server

    with run_vllm_server(embedded_dir, prefix_caching=True) as (base_url, _):
        backend = _server_backend(base_url)
        problem = backend.likelihood_problem()
        assert problem is not None and "--no-enable-prefix-caching" in problem
        assert base_url in problem and "\n" not in problem
        with pytest.raises(UnsupportedError, match="no-enable-prefix-caching"):
            backend.loglikelihoods(["x\n"], [("q\n", "A short text.")])
        segments = prompt_segments(TASK, "An article.", "A summary.")
        fluency = criterion_prompt(TASK, TREE.lineage(TREE.get("fluency")))
        assert backend.digit_scores(segments, [fluency])[0].ok
        started = time.perf_counter()
        gap = backend._cold_and_warm()
        seconds = time.perf_counter() - started
        print(f"cold and warm echo differ by {gap} (None: not at all), probed in {seconds:.2f}s")


def test_vllm_scores_and_likelihoods_agree_with_the_embedded_judge(
    vllm_server, fp32_backend, summeval_rows
):
    """The same weights, bf16 or fp32 on the server (as the CPU suits, ``vllm_dtype``) and fp32
    here: digit scores within 0.1 of each
    other, every text's tokens the same and their mean log-probability within 0.03 nats, with
    and without the source (each article's first 120 words), and read as a whole reply (the
    end-of-reply marker, learned from the server's chat template, after the text)."""
    server = _server_backend(vllm_server)
    local = fp32_backend
    end = server.end_of_reply()
    assert end == local.end_of_reply() == "<|im_end|>"
    rows = [first_source_words(r, 120) for r in summeval_rows[:2]]
    row = rows[0]
    segments = prompt_segments(TASK, row["source"], row["output"])
    suffixes = [criterion_prompt(TASK, TREE.lineage(c)) for c in TREE]
    for ours, theirs in zip(
        server.digit_scores(segments, suffixes), local.digit_scores(segments, suffixes), strict=True
    ):
        assert ours.ok, ours.failure
        assert abs(ours.expected - theirs.expected) <= 0.1
    for row in rows:
        text = row["output"].strip()
        given = [source_segment(TASK, row["source"])]
        items = [(likelihood_instruction(TASK, TREE.lineage(c)), text) for c in TREE]
        items.append((likelihood_instruction(TASK), text))
        items.append((likelihood_instruction(TASK), text + end))
        free = [source_free_segment(TASK)], [(source_free_instruction(TASK), text)]
        pairs = [
            *zip(
                server.loglikelihoods(given, items), local.loglikelihoods(given, items), strict=True
            ),
            *zip(server.loglikelihoods(*free), local.loglikelihoods(*free), strict=True),
        ]
        for ours, theirs in pairs:
            assert ours.ok, ours.failure
            assert ours.n_tokens == theirs.n_tokens > 10
            assert abs(ours.mean - theirs.mean) <= 0.03


def test_a_text_longer_than_the_servers_context_is_cut_to_fit_and_marked(vllm_server, tmp_path):
    """A text longer than the server's context (max_model_len 2048) beside a short one: its
    prompt is cut to fit in the server's own tokens, as the embedded judge's are, scored and
    marked truncated; nothing fails, and the breaker stays closed."""
    judge = CachedJudge(_server_backend(vllm_server), ResultCache(tmp_path / "cache.sqlite"))
    scorer = CriterionScorer(judge, TASK, ["likelihood"], False)
    short = _sfres_rows(1)[0]
    samples = pd.DataFrame(
        {"doc_id": ["d0", "d1"], "source": [short["source"]] * 2,
         "output": [short["output"], "word " * 2500]},
        index=pd.Index(["short", "long"]),
    )  # fmt: skip
    run = scorer.score(samples, CriteriaTree([TREE.get("coherence")]), progress=False)
    assert run.features.notna().all().all() and not run.failures, run.failures
    assert [t.sample_id for t in run.truncations] == ["long"]
    assert run.truncations[0].text_tokens_cut > 400
    assert not judge.cache.failures() and not judge.backend.breaker.tripped


#: Largest difference between texts scored four at a time and one at a time on vLLM's CPU
#: build, of a 1-5 prompt score and of a likelihood statistic (nats), and measured: see
#: docs/design.md ("A server judge at concurrency 4").
CONCURRENCY_SCORE_TOLERANCE = 0.05
CONCURRENCY_LIKELIHOOD_TOLERANCE = 0.05
#: The same for a sum over a text's tokens (``pmi.sum``; these texts have 10-30): 0.36 measured
#: on a 2-core AMX Xeon.
CONCURRENCY_SUM_TOLERANCE = 1.0


def test_concurrency_4_gives_the_scores_of_concurrency_1(vllm_server, tmp_path):
    """The same texts, scored one at a time and four at a time (vLLM batches the concurrent
    requests together): the same prompt scores and likelihood statistics, within the
    tolerance measured on this build in bf16 (sums in another order in another batch)."""
    rows = _sfres_rows(2)  # two meaning representations, two texts each: short prompts
    samples = pd.DataFrame(
        {k: [r[k] for r in rows] for k in ("doc_id", "source", "output")},
        index=pd.Index([r["id"] for r in rows]),
    )
    tree = CriteriaTree([TREE.get("coherence")])
    features = {}
    for concurrency in (1, 4):
        backend = _server_backend(vllm_server, concurrency=concurrency)
        judge = CachedJudge(backend, ResultCache(tmp_path / f"cache-{concurrency}.sqlite"))
        profile = Profile(source_free=True)
        scorer = CriterionScorer(judge, TASK, ["prompt", "likelihood"], True, profile)
        run = scorer.score(samples, tree, progress=False)
        assert not run.failures, run.failures
        features[concurrency] = run.features
    gap = (features[4] - features[1]).abs().max()
    prompt = [c for c in gap.index if c.startswith("prompt:")]
    assert gap[prompt].max() <= CONCURRENCY_SCORE_TOLERANCE, gap.to_dict()
    sums = [c for c in gap.index if ".sum:" in c]
    assert gap[sums].max() <= CONCURRENCY_SUM_TOLERANCE, gap.to_dict()
    assert gap.drop(prompt + sums).max() <= CONCURRENCY_LIKELIHOOD_TOLERANCE, gap.to_dict()


def test_likelihoods_without_the_marker_are_read_off_the_servers_answers_with_it(
    vllm_server, tmp_path
):
    """After a run with ``end_of_text``, the same likelihoods without the end-of-reply marker
    (the GPTScore baseline's) cost the server no request: its tokenizer splits each text and the
    marker apart, and what is read off agrees with what the server answers for the text alone
    within its own batching tolerance, while the marker moves them further."""
    rows = _sfres_rows(1)
    samples = pd.DataFrame(
        {k: [r[k] for r in rows] for k in ("doc_id", "source", "output")},
        index=pd.Index([r["id"] for r in rows]),
    )
    tree = CriteriaTree([TREE.get("coherence")])

    def scored(cache: str, end_of_text: bool):
        judge = CachedJudge(_server_backend(vllm_server), ResultCache(tmp_path / cache))
        profile = Profile(source_free=True, end_of_text=end_of_text)
        run = CriterionScorer(judge, TASK, ["likelihood"], True, profile).score(
            samples, tree, progress=False
        )
        assert not run.failures, run.failures
        return run

    ended = scored("shared.sqlite", end_of_text=True)
    read_off = scored("shared.sqlite", end_of_text=False)
    asked = scored("fresh.sqlite", end_of_text=False)
    assert read_off.computed == 0 and read_off.cached == asked.computed == ended.computed == 6
    lik = [c for c in read_off.features.columns if c.startswith("lik")]
    gap = (read_off.features[lik] - asked.features[lik]).abs().max()
    assert gap.max() <= CONCURRENCY_LIKELIHOOD_TOLERANCE, gap.to_dict()
    moved = (read_off.features[lik] - ended.features[lik]).abs().max()
    assert moved.max() > CONCURRENCY_LIKELIHOOD_TOLERANCE, moved.to_dict()


def test_whole_pipeline_on_vllm_with_likelihoods(tmp_path, vllm_server, embedded_dir):
    root = tmp_path / "project"
    root.mkdir()
    server = {"backend": "openai", "base_url": vllm_server, "model": MODEL_ALIAS,
              "quantize": "auto", "concurrency": 1, "timeout": 300.0, "max_retries": 1}  # fmt: skip
    env, _ = make_project(
        root,
        _sfres_rows(6),
        {
            "data": {"test_fraction": 0.25},
            "llm": server,
            "hierarchy": {
                "modes": ["likelihood"],
                "cv_folds": 2,
                "importance_repeats": 1,
                "min_mode_gain": 1.0,  # layer 1 only: a CPU server writes criteria slowly
                "families": ["slots", "sentences", "wording"],  # no request of their own
                "min_family_gain": None,
            },
            "aggregator": {"n_trials": 2, "cv_folds": 2},
            "evaluate": {"bootstrap": 5, "peer": None},
            "dhp": {"n_texts": 2, "probes": False},
        },
        aspect="naturalness",
        preset=REPO / "params" / "sfres.yaml",
    )
    run([DVC, "repro"], root, env)

    metrics = json.loads((root / "metrics.json").read_text())
    assert metrics["left_out"] == {}  # vLLM gives likelihoods: nothing was left out
    variants = set(metrics["cross_fitted"])
    assert {"hdeval", "unconditioned_likelihood_only", "text_signals_only"} <= variants
    assert {"likelihood", "likelihood:source_free", "likelihood:pmi"} <= set(metrics["baselines"])
    assert {"hdeval", "likelihood"} == set(metrics["dhp"])
    features = pd.read_csv(root / "work/layers/1/features.csv", index_col=0)
    signals = ["lik:naturalness", "lik.p10:naturalness", "lik:_text", "lik:_free", "pmi:_text"]
    families = ["slots.realised:_text", "spmi.min:_text", "len.sents:_text", "word.given:_text"]
    assert features[[*signals, *families, "len.words:_text"]].notna().all().all()
    # the wording family split the text's tokens at the values, mapped by the server's /tokenize
    prepared = (root / "work/prepared/train.jsonl").read_text().splitlines()
    train = {r["id"]: r for r in map(json.loads, prepared)}
    said = pd.Series(
        {i: bool(value_spans(parse_mr(r["source"]), r["output"])) for i, r in train.items()}
    )
    said = said.loc[features.index]
    assert said.any() and not said.all()  # "dont_care" is not a value a text says
    assert features.loc[said, "vals.given.min:_text"].lt(0).all()
    assert (features.loc[said, "word.given:_text"] != features.loc[said, "lik:_text"]).all()
    assert features.loc[~said, "vals.given.min:_text"].eq(0).all()
    card = json.loads((root / "models/evaluator/card.json").read_text())
    named = json.loads(card["llm_identity"].removeprefix(f"openai-compatible:{vllm_server}:local"))
    assert re.fullmatch(r"[0-9a-f]{16}", named.pop("fingerprint"))
    assert named == {"max_model_len": 2048, "root": str(embedded_dir)}
    assert card["llm_precision"] is None and card["source_free"] and card["length"]
    assert metrics["llm"]["llm_calls"] > 0

    held_out = [json.loads(line) for line in (root / "work/prepared/test.jsonl").open()]
    texts = tmp_path / "texts.jsonl"
    texts.write_text(
        "".join(json.dumps({k: r[k] for k in ("id", "source", "output")}) + "\n" for r in held_out)
    )
    fresh = {**env, "HDEVAL_CACHE": str(tmp_path / "fresh-cache.sqlite")}
    out = tmp_path / "scores.jsonl"
    hdeval = str(Path(sys.executable).parent / "hdeval")
    run(
        [hdeval, "score", "--model", "models/evaluator", str(texts), "--out", str(out)], root, fresh
    )
    # the production path gives the bundle's own scores of these rows, as the explain stage has
    expected = pd.read_csv(root / "work/explain/bundle_scores.csv", index_col=0)
    expected.index = expected.index.astype(str)
    scored = {r["id"]: r["scores"] for r in map(json.loads, out.read_text().splitlines())}
    assert set(scored) == {r["id"] for r in held_out} and set(scored) <= set(expected.index)
    for sample_id, scores in scored.items():
        assert scores["naturalness"] == pytest.approx(
            expected.loc[sample_id, "naturalness"], abs=1e-6
        )
