"""Baselines: ROUGE by hand, the comparison table, and the LLM baselines on the real judge."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from hdeval.baselines import (
    OVERALL_TEMPLATE_VERSION,
    DirectPromptScorer,
    LikelihoodScorer,
    OverallPromptScorer,
    RougeScorer,
    compare,
    overall_prompt,
    render_markdown,
    render_rich,
)
from hdeval.baselines.registry import TextScorer
from hdeval.errors import ConfigError
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.params import TaskSpec
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.prompts import TEMPLATE_VERSION
from hdeval.tree.criteria import CriteriaTree, Criterion

ASPECTS = ["coherence", "fluency"]
TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "the summary is well-structured and organized"),
        Criterion("fluency", "fluency", "the sentences are grammatical and easy to read"),
        Criterion("coherence.order", "order", "ideas follow a logical order", "coherence", 2),
    ]
)


# ---------------------------------------------------------------------- ROUGE
def _samples(outputs: list[str], references: list) -> pd.DataFrame:
    n = len(outputs)
    return pd.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(n)],
            "system_id": ["m"] * n,
            "source": ["src"] * n,
            "output": outputs,
            "references": references,
        },
        index=pd.Index([f"r{i}" for i in range(n)]),
    )


def test_rouge_on_hand_examples() -> None:
    scorer = RougeScorer()
    assert isinstance(scorer, TextScorer)
    table = scorer.score(
        _samples(
            ["the cat sat on the mat", "the cat sat on the mat", "a dog", "anything"],
            [
                ["the cat sat on the mat"],
                ["the cat is on the mat"],
                ["the cat is on the mat", "a dog barked"],  # best reference counts
                [],
            ],
        )
    )
    assert list(table.columns) == ["rouge1", "rouge2", "rougeL"]
    assert table.loc["r0"].tolist() == [1.0, 1.0, 1.0]
    # 5 of 6 unigrams, 3 of 5 bigrams, LCS "the cat on the mat" = 5 of 6 tokens
    np.testing.assert_allclose(table.loc["r1"].to_numpy(), [5 / 6, 3 / 5, 5 / 6])
    # "a dog" vs "a dog barked": P = 1, R = 2/3 -> F = 0.8; bigram 1 of 1 vs 1 of 2 -> 2/3
    np.testing.assert_allclose(table.loc["r2"].to_numpy(), [0.8, 2 / 3, 0.8])
    assert table.loc["r3"].isna().all()  # no reference, no score


def test_rouge_needs_references() -> None:
    samples = _samples(["x"], [["x"]]).drop(columns="references")
    with pytest.raises(ConfigError, match="references"):
        RougeScorer().score(samples)


# ---------------------------------------------------------------------- compare
class _Perfect:
    """A TextScorer that returns the human scores (plus a constant 'extra' column)."""

    name = "oracle"

    def __init__(self, human: pd.DataFrame) -> None:
        self.metrics = [*ASPECTS, "extra"]
        self.human = human

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        out = self.human.loc[samples.index, ASPECTS].copy()
        out["extra"] = np.arange(len(samples), dtype=float)
        return out


@pytest.fixture(scope="module")
def labelled() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    n_docs, n_sys = 8, 5
    n = n_docs * n_sys
    samples = pd.DataFrame(
        {
            "doc_id": np.repeat([f"d{i}" for i in range(n_docs)], n_sys),
            "system_id": np.tile([f"m{i}" for i in range(n_sys)], n_docs),
            "source": "src",
            "output": "out",
            "references": [["ref"]] * n,
        },
        index=pd.Index([f"r{i}" for i in range(n)]),
    )
    human = pd.DataFrame(rng.uniform(1, 5, (n, 2)), index=samples.index, columns=ASPECTS)
    return samples, human


def test_compare_table_shape_columns_and_values(labelled) -> None:
    samples, human = labelled
    rng = np.random.default_rng(1)
    noisy = human + rng.normal(0, 1, human.shape)
    noisy.iloc[0, 0] = np.nan  # a failed score leaves its row out of that entry
    overall = pd.DataFrame({"overall": rng.normal(size=len(samples))}, index=samples.index)
    table = compare(
        {"hdeval": noisy, "overall-prompt": overall, "oracle": _Perfect(human)},
        samples,
        human,
        n_boot=5,
    )
    assert list(table.columns) == [
        "scorer",
        "aspect",
        "level",
        "correlation",
        "value",
        "ci_low",
        "ci_high",
        "n",
    ]
    entries = ["hdeval", "overall-prompt:overall", "oracle", "oracle:extra"]
    assert list(dict.fromkeys(table["scorer"])) == entries
    # per entry: (2 aspects + average) x 3 levels x 3 correlations
    assert len(table) == len(entries) * 3 * 3 * 3
    assert set(table["aspect"]) == {*ASPECTS, "average"}
    assert set(table["level"]) == {"dataset", "summary", "system"}
    assert set(table["correlation"]) == {"pearson", "spearman", "kendall"}
    n_used = table.groupby("scorer")["n"].first()
    assert n_used["hdeval"] == len(samples) - 1 and n_used["oracle"] == len(samples)
    oracle = table[(table["scorer"] == "oracle") & (table["level"] == "dataset")]
    np.testing.assert_allclose(oracle["value"], 1.0)
    assert table[["ci_low", "ci_high"]].notna().any().all()
    # a single score is correlated with every human aspect
    single = table[(table["scorer"] == "overall-prompt:overall") & (table["level"] == "dataset")]
    assert set(single["aspect"]) == {*ASPECTS, "average"}


def test_compare_accepts_a_list_of_scorers_without_bootstrap(labelled) -> None:
    samples, human = labelled
    table = compare([_Perfect(human), RougeScorer()], samples, human, n_boot=0)
    assert {"oracle", "rouge:rouge1", "rouge:rougeL"} <= set(table["scorer"])
    assert table["ci_low"].isna().all()


def test_render_markdown_and_rich(labelled) -> None:
    from rich.console import Console

    samples, human = labelled
    table = compare({"oracle": _Perfect(human)}, samples, human, n_boot=5)
    text = render_markdown(table, levels=["summary"], correlations=["spearman", "kendall"])
    lines = text.strip().splitlines()
    assert lines[0] == "| scorer | level | correlation | n | coherence | fluency | average |"
    assert len(lines) == 2 + 2 * 2  # header, rule, 2 entries x 2 correlations
    assert "**1.000 [" in lines[2]
    console = Console(width=200, record=True)
    console.print(render_rich(table))
    rendered = console.export_text()
    assert "oracle:extra" in rendered and "kendall" in rendered


def test_overall_prompt_template() -> None:
    text = overall_prompt(TaskSpec(), TREE.layer(1))
    assert text.startswith("## Instructions\n")
    assert "- coherence: the summary is well-structured" in text and "a single digit" in text
    assert OVERALL_TEMPLATE_VERSION != TEMPLATE_VERSION


# ---------------------------------------------------------------------- real judge
@pytest.fixture(scope="module")
def two_rows(summeval_rows) -> pd.DataFrame:
    rows = summeval_rows[:2]
    return pd.DataFrame(
        {
            "doc_id": [r["doc_id"] for r in rows],
            "system_id": [r["system_id"] for r in rows],
            "source": [r["source"] for r in rows],
            "output": [r["output"] for r in rows],
            "references": [r.get("references") or [] for r in rows],
        },
        index=pd.Index([r["id"] for r in rows]),
    )


@pytest.mark.model
def test_llm_baselines_on_two_summeval_rows_then_cached(embedded_backend, two_rows, tmp_path):
    cache = ResultCache(tmp_path / "cache.sqlite")
    task = TaskSpec()

    def make():
        shared = CachedJudge(embedded_backend, ResultCache(cache.path))
        return (
            DirectPromptScorer(shared, task, TREE),
            OverallPromptScorer(shared, task, TREE),
            LikelihoodScorer(shared, task, TREE),
        )

    direct, overall, likelihood = make()
    assert direct.metrics == [*ASPECTS, "average"]  # layer 1 only
    assert overall.metrics == ["overall"]
    assert likelihood.metrics == ["unconditioned", "source_free", "pmi", *ASPECTS, "average"]

    d = direct.score(two_rows)
    assert list(d.columns) == direct.metrics and list(d.index) == list(two_rows.index)
    assert ((d.to_numpy() >= 1) & (d.to_numpy() <= 5)).all()
    np.testing.assert_allclose(d["average"], d[ASPECTS].mean(axis=1))
    assert direct.last_run.computed == 2 * 2 and not direct.last_run.failures

    o = overall.score(two_rows)
    assert list(o.columns) == ["overall"]
    assert ((o["overall"] >= 1) & (o["overall"] <= 5)).all()
    assert overall.last_run.computed == 2

    lik = likelihood.score(two_rows)
    assert list(lik.columns) == likelihood.metrics
    assert np.isfinite(lik.to_numpy()).all()
    log_probs = lik.drop(columns="pmi").to_numpy()
    assert (log_probs < 0).all()  # mean log-prob, nats per token
    np.testing.assert_allclose(lik["pmi"], lik["unconditioned"] - lik["source_free"], atol=1e-9)
    # per text: the unconditioned, the source-free and one per aspect; PMI costs no call
    assert likelihood.last_run.computed == 2 * 4

    info = ResultCache(cache.path).info()["results"]
    assert info["digits"] == 2 * 2 + 2  # the overall prompt has its own cache entries
    assert info["loglik"] == 2 * 4

    # a second call, from fresh scorers on the same cache file: everything from cache
    for scorer, first in zip(make(), (d, o, lik), strict=True):
        again = scorer.score(two_rows)
        assert scorer.last_run.computed == 0 and scorer.last_run.cached > 0
        pd.testing.assert_frame_equal(again, first)

    # the direct prompts are HD-Eval's layer-1 prompts: they share cache entries
    flat = CriteriaTree(TREE.layer(1))
    judge = CachedJudge(embedded_backend, ResultCache(cache.path))
    run = CriterionScorer(judge, task).score(two_rows, flat, progress=False)
    assert run.computed == 0
    assert math.isclose(run.features.iloc[0, 0], d.iloc[0, 0])


@pytest.mark.model
def test_prompt_baselines_named_together_share_one_pass(
    embedded_backend, two_rows, tmp_path, monkeypatch
):
    """make_scorers asks the direct and overall prompts of a text in one call to the model
    (one pass over its source and text), with the same scores and cache keys as one baseline
    after the other."""
    from hdeval.baselines.registry import make_scorers

    task, names = TaskSpec(), ["direct-prompt", "overall-prompt"]
    calls: list[int] = []
    real = embedded_backend.digit_scores

    def counted(segments, suffixes):
        calls.append(len(suffixes))
        return real(segments, suffixes)

    monkeypatch.setattr(embedded_backend, "digit_scores", counted)

    def run(packed: bool) -> tuple[list[pd.DataFrame], list, CachedJudge]:
        judge = CachedJudge(embedded_backend, ResultCache(tmp_path / f"{packed}.sqlite"))
        if packed:
            scorers = make_scorers(names, judge, task, TREE, ASPECTS)
        else:
            scorers = [
                DirectPromptScorer(judge, task, TREE, aspects=ASPECTS),
                OverallPromptScorer(judge, task, TREE, aspects=ASPECTS),
            ]
        calls.clear()
        return [s.score(two_rows) for s in scorers], scorers, judge

    apart, _, _ = run(False)
    assert calls == [2, 2, 1, 1]  # per text: the aspects, then later the overall prompt
    packed, (direct, overall), judge = run(True)
    assert calls == [3, 3]  # per text: both aspects and the overall prompt together
    assert direct.last_run.computed == 2 * 3
    assert overall.last_run.computed == 0 and overall.last_run.cached == 2 * 3
    for got, want in zip(packed, apart, strict=True):
        assert list(got.columns) == list(want.columns)
        np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), atol=0.05)
    assert judge.cache.info()["results"]["digits"] == 2 * 3  # the keys of the separate runs
