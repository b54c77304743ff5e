"""Cached criterion scoring on the real embedded model: results, cache hits, kill -9 resume."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.scoring.columns import UNCONDITIONED, Profile
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.batching import READ_OFF_TOLERANCE
from tests.processes import kill_when, start_worker

REPO = Path(__file__).resolve().parents[1]
ASPECTS = ["coherence", "consistency", "fluency", "relevance"]
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "the collective quality of all sentences", None, 1),
        Criterion("consistency", "consistency", "the factual alignment with the article", None, 1),
    ]
)


def labels_path() -> Path:
    return REPO / "data" / "summeval" / "summeval.jsonl"


@pytest.fixture(scope="module")
def samples():
    from hdeval.data import load_labels

    return load_labels(labels_path(), ASPECTS, (1.0, 5.0)).samples


@pytest.mark.model
def test_two_samples_two_criteria_both_modes_then_all_cached(embedded_backend, samples, tmp_path):
    cache = ResultCache(tmp_path / "cache.sqlite")
    scorer = CriterionScorer(CachedJudge(embedded_backend, cache), modes=("prompt", "likelihood"))
    first = scorer.score(samples.iloc[:2], TREE, progress=False)
    assert list(first.features.columns) == [
        "prompt:coherence",
        "prompt:consistency",
        "lik:coherence",
        "lik:consistency",
        UNCONDITIONED,
    ]
    assert first.failures == []
    assert first.computed == 2 * 5 and first.cached == 0
    prompt = first.features.filter(like="prompt:").to_numpy()
    assert ((prompt >= 1) & (prompt <= 5)).all()
    assert (first.features.filter(like="lik:").to_numpy() < 0).all()

    again = CriterionScorer(
        CachedJudge(embedded_backend, ResultCache(cache.path)), modes=("prompt", "likelihood")
    )
    second = again.score(samples.iloc[:2], TREE, progress=False)
    assert second.computed == 0 and second.cached == 10
    assert second.features.equals(first.features)


@pytest.mark.model
def test_failures_are_recorded_not_cached_and_retried(embedded_backend, samples, tmp_path):
    cache = ResultCache(tmp_path / "cache.sqlite")
    strict = CriterionScorer(CachedJudge(embedded_backend, cache))
    embedded_backend.min_digit_mass, saved = 1.01, embedded_backend.min_digit_mass
    try:
        run = strict.score(samples.iloc[:1], TREE, progress=False)
    finally:
        embedded_backend.min_digit_mass = saved
    assert len(run.failures) == 2 and "digit mass" in run.failures[0].reason
    assert run.features.isna().all().all()
    assert len(cache.failures()) == 2
    retry = strict.score(samples.iloc[:1], TREE, progress=False)
    assert retry.computed == 2 and retry.failures == []
    assert cache.failures() == {}


def _stored(path: Path) -> int:
    try:
        with sqlite3.connect(path, timeout=30) as conn:
            return conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.model
def test_resume_after_kill_minus_nine_loses_no_completed_score(embedded_backend, samples, tmp_path):
    path = tmp_path / "cache.sqlite"
    n_samples = 6
    worker = start_worker("scoring_worker", str(path), str(n_samples))
    kill_when(worker, lambda: _stored(path) >= 4)
    stored = _stored(path)
    assert 4 <= stored < 2 * n_samples

    resumed = CriterionScorer(CachedJudge(embedded_backend, ResultCache(path))).score(
        samples.iloc[:n_samples], TREE, progress=False
    )
    assert resumed.cached == stored
    assert resumed.computed == 2 * n_samples - stored
    assert not any(math.isnan(v) for v in resumed.features.to_numpy().ravel())


@pytest.fixture
def backend(embedded_backend):
    """The embedded backend; a test may lower its context length, which is restored afterwards."""
    saved = embedded_backend.max_context
    yield embedded_backend
    embedded_backend.max_context = saved


@pytest.mark.model
def test_text_longer_than_the_context_is_truncated_counted_and_scored(backend, samples, tmp_path):
    from hdeval.llm.truncation import ContextOverflow
    from hdeval.params import TaskSpec
    from hdeval.scoring.prompts import prompt_segments

    two = samples.iloc[:2]
    model_context, backend.max_context = backend.max_context, 300
    whole = prompt_segments(TaskSpec(), two.iloc[0]["source"], two.iloc[0]["output"])
    assert backend.prompt_tokens(whole, "") > 300  # the articles do not fit
    with pytest.raises(ContextOverflow, match="context of 300 tokens"):
        backend.digit_scores(whole, ["Score (1-5):"])  # refused before it reaches the model

    path = tmp_path / "cache.sqlite"
    modes = ("prompt", "likelihood")
    scorer = CriterionScorer(CachedJudge(backend, ResultCache(path)), modes=modes)
    run = scorer.score(two, TREE, progress=False)
    assert run.failures == [] and run.features.notna().all().all()
    assert run.computed == 2 * 5
    assert sorted((t.sample_id, t.mode) for t in run.truncations) == sorted(
        (i, m) for i in two.index for m in modes
    )
    for cut in run.truncations:
        assert cut.source_tokens_cut > 0 and cut.text_tokens_cut == 0  # the source only
    assert run.truncated_samples == 2
    assert "2 samples truncated to the judge's context" in run.summary()

    # Same rule, same cut prompts, same cache keys: all from cache, and counted again.
    scorer = CriterionScorer(CachedJudge(backend, ResultCache(path)), modes=modes)
    again = scorer.score(two, TREE, progress=False)
    assert again.computed == 0 and again.features.equals(run.features)
    assert again.truncations == run.truncations

    # The cut prompts are cached under their own keys: a whole prompt is scored anew.
    backend.max_context = model_context
    scorer = CriterionScorer(CachedJudge(backend, ResultCache(path)))
    whole_run = scorer.score(two[:1], TREE, progress=False)
    assert whole_run.computed == 2 and whole_run.truncations == []


@pytest.mark.model
def test_text_is_cut_once_the_source_is_gone_and_a_too_long_frame_fails(backend, samples, tmp_path):
    from hdeval.params import TaskSpec
    from hdeval.scoring.prompts import criterion_prompt, prompt_segments

    row = samples.iloc[:1]
    suffixes = [criterion_prompt(TaskSpec(), TREE.lineage(c)) for c in TREE]
    longest = max(suffixes, key=lambda s: len(backend.tokenize(s)))
    frame = backend.prompt_tokens(prompt_segments(TaskSpec(), "", ""), longest)
    cache = ResultCache(tmp_path / "cache.sqlite")

    backend.max_context = frame + 8
    run = CriterionScorer(CachedJudge(backend, cache)).score(row, TREE, progress=False)
    (cut,) = run.truncations
    assert cut.source_tokens_cut == len(backend.tokenize(row.iloc[0]["source"]))  # all of it
    assert cut.text_tokens_cut > 0
    # A 0.5B judge may not answer a near-empty prompt with a digit: that is a recorded failure,
    # never an exception and never a made-up score.
    assert run.features.notna().sum().sum() + len(run.failures) == 2

    backend.max_context = frame - 5  # not even the prompt without source and text fits
    run = CriterionScorer(CachedJudge(backend, cache)).score(row, TREE, progress=False)
    assert run.features.isna().all().all() and run.computed == 0 and run.truncations == []
    assert len(run.failures) == 2
    assert all(f"context of {frame - 5} tokens" in f.reason for f in run.failures)
    assert "2 failed" in run.summary()


def _swap_inner_letters(text: str) -> str:
    """A typo in every word of five letters or more (its 2nd and 3rd letters swapped): the
    words stay where they are, the tokenizer splits them differently."""
    return " ".join(w[0] + w[2] + w[1] + w[3:] if len(w) >= 5 else w for w in text.split())


@pytest.mark.model
def test_length_counts_words_so_typos_do_not_lengthen_a_text(embedded_backend, samples, tmp_path):
    """``len.words:_text`` is the word count of the text the likelihood read. Typos that the
    real tokenizer splits into more tokens leave it as it was (a length in tokens rose with
    them, so DHP's typo perturbations scored higher on a bundle that reads length)."""
    from hdeval.scoring.columns import TEXT_LENGTH, Profile

    row = samples.iloc[:1]
    typos = row.assign(output=[_swap_inner_letters(row.iloc[0]["output"])]).rename(
        index=lambda i: f"{i}-typos"
    )
    tokens = [
        len(embedded_backend.tokenizer(text)["input_ids"])
        for text in (row.iloc[0]["output"], typos.iloc[0]["output"])
    ]
    assert tokens[1] > tokens[0]  # the typos cost tokens

    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))
    profile = Profile(length=True)
    scorer = CriterionScorer(judge, modes=("likelihood",), profile=profile)
    run = scorer.score(pd.concat([row, typos]), TREE, progress=False)
    lengths = run.features[TEXT_LENGTH].tolist()
    assert lengths == [float(len(row.iloc[0]["output"].split()))] * 2
    assert run.features[UNCONDITIONED].iloc[1] < run.features[UNCONDITIONED].iloc[0]


@pytest.mark.model
def test_a_likelihood_without_the_marker_is_read_off_the_text_read_as_a_whole_reply(
    embedded_backend, samples, tmp_path
):
    """What the GPTScore baseline asks (the text alone) after a run with end_of_text asked the
    same likelihoods with the end-of-reply marker: no LLM call, and the model's answer to the
    rounding of a pass's last rows (what the marker adds is far more)."""
    rows = samples.iloc[:2]

    def scored(cache: str, end_of_text: bool):
        profile = Profile(source_free=True, end_of_text=end_of_text)
        judge = CachedJudge(embedded_backend, ResultCache(tmp_path / cache))
        scorer = CriterionScorer(judge, None, ("likelihood",), True, profile)
        return scorer.score(rows, TREE, progress=False)

    ended = scored("shared.sqlite", end_of_text=True)
    read_off = scored("shared.sqlite", end_of_text=False)
    asked = scored("fresh.sqlite", end_of_text=False)
    assert ended.computed == read_off.cached == asked.computed == 2 * 4
    assert read_off.computed == 0
    lik = read_off.features.filter(like="lik")
    assert ((lik - asked.features[lik.columns]).abs() <= READ_OFF_TOLERANCE).all().all()
    assert ((lik - ended.features[lik.columns]).abs() > 5 * READ_OFF_TOLERANCE).any().any()
