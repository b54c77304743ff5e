"""DHP statistics against hand-computed numbers, and run_dhp on a deterministic fake scorer."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from pydantic import ValidationError

from hdeval.data import load_labels, save_labels
from hdeval.dhp.benchmark import (
    DHPResult,
    _perturbation_row,
    failed_perturbations,
    plot_dhp,
    run_dhp,
)
from hdeval.dhp.catalogue import perturbations_for
from hdeval.dhp.originals import best_rated_samples, reference_samples
from hdeval.dhp.rules import CharacterDeletion, InstructionInjection, SentenceReorder
from hdeval.dhp.runner import dhp_samples, run_suite, stage_labels
from hdeval.dhp.statistics import discernment, harmonic_mean_p, level_weighted_average, wilcoxon_p
from hdeval.dhp.text import detokenize
from hdeval.dhp.weights import EXPERT_WEIGHTS, resolve_weights
from hdeval.errors import ConfigError
from hdeval.params import DataParams, DHPParams
from hdeval.scoring.family_columns import reads_references

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- Wilcoxon


def exact_upper_tail(differences: list[float]) -> float:
    """P(W+ >= observed W+) under H0 by enumerating all 2^n sign patterns (no ties, no zeros)."""
    ranks = {abs(d): r for r, d in enumerate(sorted(differences, key=abs), start=1)}
    observed = sum(ranks[abs(d)] for d in differences if d > 0)
    n = len(differences)
    count = sum(
        sum(r for r, s in zip(range(1, n + 1), signs, strict=True) if s) >= observed
        for signs in itertools.product([False, True], repeat=n)
    )
    return count / 2**n


def test_wilcoxon_one_sided_exact_small_case():
    original = [1.0, 2.0, 3.0, 4.0]
    perturbed = [0.0, 0.0, 0.0, 4.5]
    # differences 1, 2, 3, -0.5 -> ranks 2, 3, 4, 1 -> W+ = 9; W+ >= 9 for {2,3,4} and {1,2,3,4}
    assert exact_upper_tail([1.0, 2.0, 3.0, -0.5]) == 2 / 16
    assert wilcoxon_p(original, perturbed) == pytest.approx(2 / 16)


def test_wilcoxon_all_higher_and_direction():
    original = [5.0, 4.0, 3.0, 2.0, 1.0]
    perturbed = [4.0, 2.0, 0.0, -2.0, -4.0]  # differences 1..5, all positive
    assert wilcoxon_p(original, perturbed) == pytest.approx(1 / 32)
    # the one-sided test asks "original > perturbed": the reverse gives no evidence
    assert wilcoxon_p(perturbed, original) == pytest.approx(1.0)


def test_wilcoxon_drops_nan_pairs_and_zero_differences():
    original = [1.0, 2.0, 3.0, 4.0, np.nan, 7.0, 9.0]
    perturbed = [0.0, 0.0, 0.0, 4.5, 1.0, np.nan, 9.0]  # NaN pairs dropped, 9 vs 9 is a zero
    assert wilcoxon_p(original, perturbed) == pytest.approx(2 / 16)


def test_wilcoxon_degenerate_cases():
    assert wilcoxon_p([3.0, 3.0, 4.0], [3.0, 3.0, 4.0]) == 1.0  # documented: all pairs equal
    assert math.isnan(wilcoxon_p([np.nan, 1.0], [2.0, np.nan]))  # no pair left
    with pytest.raises(ValueError):
        wilcoxon_p([1.0, 2.0], [1.0])


# --------------------------------------------------------------------------- HMP and D


def test_harmonic_mean_p_unweighted_and_weighted():
    assert harmonic_mean_p([0.01, 0.04]) == pytest.approx(2 / (100 + 25))  # 0.016
    # weights 3:1 -> 0.75, 0.25: 1 / (0.75 / 0.01 + 0.25 / 0.04) = 1 / 81.25
    assert harmonic_mean_p([0.01, 0.04], [3, 1]) == pytest.approx(1 / 81.25)
    assert harmonic_mean_p([0.01, 0.04], [0.75, 0.25]) == pytest.approx(1 / 81.25)
    assert harmonic_mean_p([0.01, 0.5], [0.0, 1.0]) == pytest.approx(0.5)
    assert harmonic_mean_p([0.03]) == pytest.approx(0.03)


def test_harmonic_mean_p_nan_and_bad_input():
    assert harmonic_mean_p([0.02, np.nan], [0.5, 0.5]) == pytest.approx(0.02)
    assert math.isnan(harmonic_mean_p([np.nan]))
    assert math.isnan(harmonic_mean_p([0.1, 0.2], [0.0, 0.0]))
    with pytest.raises(ValueError):
        harmonic_mean_p([0.1, 0.2], [1.0])
    with pytest.raises(ValueError):
        harmonic_mean_p([0.1, 1.2])
    with pytest.raises(ValueError):
        harmonic_mean_p([0.1, 0.2], [-1.0, 2.0])


def test_discernment_values():
    assert discernment(0.05) == pytest.approx(1.0)
    assert discernment(0.0025) == pytest.approx(2.0)
    assert discernment(1.0) == 0.0
    assert math.isnan(discernment(math.nan))


def test_level_weighted_average_counts_each_level_equally():
    values = [1.0, 2.0, 3.0, 4.0]
    levels = ["character", "character", "character", "sentence"]
    # character mean 2, sentence mean 4 -> 3 (a plain mean would give 2.5)
    assert level_weighted_average(values, levels) == pytest.approx(3.0)
    assert level_weighted_average([1.0, math.nan, 4.0], ["word", "word", "sentence"]) == 2.5
    assert math.isnan(level_weighted_average([math.nan], ["word"]))


def test_resolve_weights_restricts_and_normalises():
    ew, source = resolve_weights("deletion_major", ["fluency", "coherence"], None)
    assert source == "expert"
    assert ew == pytest.approx({"fluency": 0.7 / 0.9, "coherence": 0.2 / 0.9})
    ew, source = resolve_weights("deletion_minor", ["overall"], None)
    assert (ew, source) == ({"overall": 1.0}, "equal")
    ew, _ = resolve_weights("reorder_minor", ["a", "b"], {"reorder_minor": {"a": 2, "b": 2}})
    assert ew == {"a": 0.5, "b": 0.5}


TASK_METRICS = {
    "summarization": ["coherence", "consistency", "fluency", "relevance"],
    "story": ["coherence", "consistency", "fluency"],
    "qa": ["answer_quality"],
    "translation": ["accuracy", "fluency"],
}


@pytest.mark.parametrize("task", list(TASK_METRICS))
def test_every_task_perturbation_has_expert_weights(task):
    metrics = TASK_METRICS[task]
    for pert in perturbations_for(task):
        ew, source = resolve_weights(pert.name, metrics, EXPERT_WEIGHTS[task])
        assert sum(ew.values()) == pytest.approx(1.0)
        # one metric needs no table: its weight is 1 either way
        assert source == ("equal" if len(metrics) == 1 else "expert"), pert.name


# --------------------------------------------------------------------------- run_dhp

TEXTS = [
    "The council approved the new budget on Monday. Spending on schools rises by 4%. "
    "The mayor called it a fair deal.",
    "A storm closed the harbour for two days. Fishing boats stayed in port. "
    "Repairs to the pier will start next week.",
    "The museum opened a wing for modern art. Visitors queued for hours. "
    "Tickets are free until the end of May.",
    "Scientists found a new species of frog in Peru. It is smaller than a coin. "
    "The team plans a second expedition next year.",
    "The local team won the cup after extra time. Their striker scored twice. "
    "Fans celebrated in the main square until midnight.",
    "A new bridge links the two halves of the town. It took three years to build. "
    "Traffic in the centre has already fallen.",
]


def make_samples(texts: list[str]) -> pd.DataFrame:
    ids = [f"d{i}" for i in range(len(texts))]
    return pd.DataFrame(
        {
            "doc_id": ids,
            "system_id": "reference",
            "source": "an article",
            "output": texts,
            "references": [[] for _ in texts],
        },
        index=pd.Index(ids, name="id"),
    )


class LengthScorer:
    """fluency = text length (hurt by deletions, raised by injections); other metrics constant."""

    def __init__(self, metrics: tuple[str, ...] = ("fluency", "coherence")) -> None:
        self.name = "length"
        self.metrics = list(metrics)
        self.calls = 0

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        self.calls += 1
        self.seen = samples
        length = samples["output"].str.len().astype(float)
        return pd.DataFrame(
            {m: length if m == "fluency" else 3.0 for m in self.metrics}, index=samples.index
        )


@pytest.fixture(scope="module")
def fake_result() -> tuple[DHPResult, LengthScorer]:
    scorer = LengthScorer()
    perturbations = [
        CharacterDeletion("minor"),
        CharacterDeletion("major"),
        SentenceReorder("minor"),
        SentenceReorder("major"),
        InstructionInjection(),
    ]
    result = run_dhp(scorer, make_samples(TEXTS), perturbations, None, seed=7)
    return result, scorer


def test_run_dhp_table_matches_hand_numbers(fake_result):
    result, scorer = fake_result
    assert scorer.calls == 1  # originals and every perturbed copy scored in one call
    table = result.table
    assert list(table.index) == [
        "deletion_minor",
        "deletion_major",
        "reorder_minor",
        "reorder_major",
        "instruction_injection",
    ]
    n = len(TEXTS)
    # deletions: every fluency difference positive -> p = 1/2^6; coherence all equal -> p = 1
    p_del = harmonic_mean_p([1 / 2**n, 1.0])
    assert p_del == pytest.approx(2 / (2**n + 1))
    for name in ("deletion_minor", "deletion_major"):
        row = table.loc[name]
        assert row["n_texts"] == n and row["n_dropped"] == 0 and row["n_pairs"] == n
        assert row["p:fluency"] == pytest.approx(1 / 2**n)
        assert row["p:coherence"] == 1.0
        assert row["D"] == pytest.approx(discernment(p_del))
        # expert weights fluency 0.7, coherence 0.2 (relevance not a metric) -> renormalised
        p_ew = 1 / ((0.7 / 0.9) * 2**n + (0.2 / 0.9) * 1)
        assert row["p_ew"] == pytest.approx(p_ew)
        assert row["D_ew"] == pytest.approx(discernment(p_ew))
    assert table.loc["deletion_minor", "delta:fluency"] == pytest.approx(10)
    assert table.loc["deletion_major", "delta:fluency"] == pytest.approx(50)
    # reordering keeps the length: no discernment at all
    assert table.loc["reorder_minor", "D"] == 0.0 and table.loc["reorder_major", "D_ew"] == 0.0
    # D_avg: character level mean D_del, sentence level mean 0 -> D_del / 2; D_min = 0
    assert result.D_avg == pytest.approx(discernment(p_del) / 2)
    assert result.D_min == 0.0 and result.D_min_ew == 0.0
    assert result.D_avg_ew == pytest.approx(discernment(p_ew) / 2)


def test_lower_mean_is_the_share_whose_mean_over_metrics_fell():
    """``lower_mean`` counts a text whose mean over the metrics fell, even where one metric rose:
    the share a user reads for "scored lower" (per-metric shares say less)."""
    original = pd.DataFrame({"a": [3.0, 3.0, 3.0, 3.0], "b": [3.0, 3.0, 3.0, 3.0]})
    # text 0: a -1, b +0.5 (mean falls); text 1: a +1, b -0.5 (mean rises); 2: both fall;
    # text 3: a -1, b +1 (mean equal: not lower)
    perturbed = pd.DataFrame({"a": [2.0, 4.0, 2.5, 2.0], "b": [3.5, 2.5, 2.5, 4.0]})
    row = _perturbation_row(
        SentenceReorder("minor"), original, perturbed, ["a", "b"], {"a": 0.5, "b": 0.5}
    )
    assert row["lower:a"] == 0.75 and row["lower:b"] == 0.5
    assert row["lower_mean"] == 0.5


def test_run_dhp_probe_reported_not_averaged(fake_result):
    result, _ = fake_result
    row = result.table.loc["instruction_injection"]
    assert bool(row["probe"])
    # the injection makes every text longer: the reverse test is significant
    assert row["D"] == 0.0
    assert row["D_reward"] == pytest.approx(discernment(2 / (2 ** len(TEXTS) + 1)))
    assert row["D_reward_ew"] > 1
    assert math.isnan(result.table.loc["deletion_minor", "D_reward"])
    assert failed_perturbations(result) == [
        "reorder_minor",
        "reorder_major",
        "instruction_injection",
    ]
    assert failed_perturbations(result, threshold=0.5, probe_threshold=math.inf) == [
        "reorder_minor",
        "reorder_major",
    ]


def test_run_dhp_to_dict_and_plot(fake_result, tmp_path):
    result, _ = fake_result
    data = result.to_dict()
    json.dumps(data)  # JSON-ready
    assert data["D_min"] == 0.0 and len(data["perturbations"]) == 5
    assert data["failed"] == failed_perturbations(result)
    png = plot_dhp(result, tmp_path / "plots" / "dhp.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_dhp_counts_drops():
    texts = [*TEXTS[:3], "Too short."]  # 8 alphanumerics: deletion_minor (k=10) drops it
    result = run_dhp(
        LengthScorer(), make_samples(texts), [CharacterDeletion("minor")], None, seed=1
    )
    assert result.drops == {"deletion_minor": {"fewer than 10 alphanumeric characters": 1}}
    assert result.table.loc["deletion_minor", "n_dropped"] == 1
    assert result.table.loc["deletion_minor", "n_texts"] == 3
    assert result.table.loc["deletion_minor", "p:fluency"] == pytest.approx(1 / 8)


# --------------------------------------------------------------------------- reference samples


@pytest.fixture()
def summeval_data(summeval_rows, tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in summeval_rows))
    aspects = list(summeval_rows[0]["scores"])
    return load_labels(path, aspects, (1.0, 5.0))


def test_reference_samples_one_row_per_document(summeval_data, summeval_rows):
    table = reference_samples(summeval_data, n=None, seed=0)
    docs = list(dict.fromkeys(r["doc_id"] for r in summeval_rows))
    assert list(table.index) == docs and list(table["doc_id"]) == docs
    first = next(r for r in summeval_rows if r["doc_id"] == docs[0])
    row = table.loc[docs[0]]
    assert row["output"] == detokenize(first["references"][0])
    assert row["references"] == first["references"][1:]
    assert row["source"] == first["source"] and row["system_id"] == "reference"
    raw = reference_samples(summeval_data, n=None, seed=0, detokenise=False)
    assert raw.loc[docs[0], "output"] == first["references"][0]


def test_reference_samples_seeded_choice(summeval_data):
    one = reference_samples(summeval_data, n=1, seed=3)
    assert len(one) == 1
    assert one.equals(reference_samples(summeval_data, n=1, seed=3))
    with pytest.raises(ConfigError):
        reference_samples(summeval_data, n=5, seed=0)


def test_the_dhp_stage_draws_a_references_bundles_originals_from_held_out_documents(
    summeval_data, summeval_rows, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    held_out = summeval_rows[0]["doc_id"]
    prepared = summeval_data.samples.index[summeval_data.samples["doc_id"] == held_out]
    (tmp_path / "work" / "prepared").mkdir(parents=True)
    save_labels(summeval_data.subset(prepared), tmp_path / "work" / "prepared" / "test.jsonl")
    config = DataParams(path=tmp_path / "labels.jsonl", aspects=list(summeval_data.aspects))
    settings = DHPParams(n_texts=2)

    test_rows = tmp_path / "work" / "prepared" / "test.jsonl"
    every = dhp_samples(stage_labels(config, False, test_rows), settings, False)
    assert len(every) == 2 and held_out in every.index  # reference-free: every document
    drawn = dhp_samples(stage_labels(config, True, test_rows), settings, True)
    assert list(drawn.index) == [held_out]  # the training document is never drawn
    # the stage passes the file of the held-out rows; the estimate the rows of its split
    # (prepare may not have run yet)
    split = summeval_data.subset(prepared)
    assert stage_labels(config, True, held_out=split) is split
    assert len(stage_labels(config, False, held_out=split).ids) == len(summeval_data.ids)


def test_a_bundle_reading_references_perturbs_each_documents_best_rated_text(
    summeval_data, summeval_rows
):
    best = best_rated_samples(summeval_data, n=2, seed=3, detokenise=False)
    assert list(best.index) == list(reference_samples(summeval_data, n=2, seed=3).index)
    rank = summeval_data.targets.rank(pct=True).mean(axis=1)
    for doc_id, row in best.iterrows():
        texts = summeval_data.samples.index[summeval_data.samples["doc_id"] == doc_id]
        top = rank.loc[texts].idxmax()
        assert row["output"] == summeval_data.samples.loc[top, "output"]
        assert row["references"] == summeval_data.samples.loc[top, "references"]  # every one
        assert row["system_id"] == summeval_data.samples.loc[top, "system_id"]
    settings = DHPParams(n_texts=2, seed=3)
    assert dhp_samples(summeval_data, settings, with_references=True).equals(
        best_rated_samples(summeval_data, 2, 3)
    )
    assert dhp_samples(summeval_data, settings).equals(reference_samples(summeval_data, 2, 3))
    assert reads_references(["slots", "references"])
    assert not reads_references(["coverage"]) and not reads_references([])


# --------------------------------------------------------------------------- tasks


def test_dhp_params_task_defaults_to_summarization():
    section = yaml.safe_load((REPO / "params.yaml").read_text())["dhp"]
    assert DHPParams.model_validate(section).task == DHPParams().task == "summarization"
    assert DHPParams(task="story").task == "story"
    with pytest.raises(ValidationError):
        DHPParams(task="poetry")


def test_run_suite_uses_the_tasks_perturbations_and_weights(tmp_path):
    scorer = LengthScorer(("accuracy", "fluency"))
    params = DHPParams(task="translation", n_texts=6)
    result = run_suite([scorer], make_samples(TEXTS), params, None, tmp_path)["length"]
    table = result.table
    assert list(table.index) == [p.name for p in perturbations_for("translation", llm=False)]
    assert result.weights["word_deletion_minor"] == pytest.approx({"accuracy": 0.7, "fluency": 0.3})
    row = table.loc["word_deletion_minor"]
    n = len(TEXTS)
    assert row["n_texts"] == n and row["p:fluency"] == pytest.approx(1 / 2**n)
    assert row["p_ew"] == pytest.approx(1 / (0.7 / 1.0 + 0.3 * 2**n))  # accuracy: p = 1
    # every text has at most 25 words: the major word deletion cannot run and is not tested
    major = table.loc["word_deletion_major"]
    assert major["n_texts"] == 0 and major["n_dropped"] == n and math.isnan(major["D_ew"])
    assert "word_deletion_major" not in failed_perturbations(result)
    assert (tmp_path / "length.csv").exists() and (tmp_path / "length.png").exists()


def test_story_suite_swaps_endings_and_reports_missing_wrong_endings(tmp_path):
    scorer = LengthScorer(("coherence", "consistency", "fluency"))
    samples = make_samples(TEXTS)
    params = DHPParams(task="story", n_texts=6, probes=False)
    result = run_suite([scorer], samples, params, None, tmp_path)["length"]
    table = result.table
    assert list(table.index) == [
        p.name for p in perturbations_for("story", llm=False, probes=False)
    ]
    assert table.loc["random_ending", "n_texts"] == len(TEXTS)
    for i in samples.index:  # each ending replaced by another story's
        swapped = scorer.seen.loc[f"random_ending/{i}", "output"]
        assert swapped in set(samples["output"].drop(index=i))
    assert result.drops["wrong_ending"] == {"no 'wrong_ending' given": len(TEXTS)}
    assert math.isnan(table.loc["wrong_ending", "D_ew"]) and math.isfinite(result.D_min_ew)
    assert result.weights["random_ending"] == {"coherence": 0.5, "consistency": 0.5, "fluency": 0.0}


def test_story_wrong_endings_from_a_label_file(tmp_path):
    """A label file's ``wrong_ending`` reaches DHP's story task through the reference samples."""
    rows = [
        {
            "id": f"s{i}",
            "doc_id": f"story{i}",
            "source": f"Story {i} begins.",
            "output": f"A system ending {i}.",
            "references": [text],
            "wrong_ending": f"No {i}." if i else None,
            "scores": {"coherence": 3, "consistency": 3, "fluency": 3},
        }
        for i, text in enumerate(TEXTS)
    ]
    labels = tmp_path / "stories.jsonl"
    labels.write_text("".join(json.dumps({k: v for k, v in r.items() if v}) + "\n" for r in rows))
    data = load_labels(labels, ["coherence", "consistency", "fluency"], (1.0, 5.0))
    samples = reference_samples(data, None, 0, detokenise=False)
    assert samples["wrong_ending"].tolist() == [None] + [f"No {i}." for i in range(1, len(TEXTS))]
    scorer = LengthScorer(("coherence", "consistency", "fluency"))
    params = DHPParams(task="story", n_texts=len(TEXTS), probes=False)
    result = run_suite([scorer], samples, params, None, tmp_path)["length"]
    row = result.table.loc["wrong_ending"]
    assert row["n_texts"] == len(TEXTS) - 1 and row["n_dropped"] == 1
    assert result.drops["wrong_ending"] == {"no 'wrong_ending' given": 1}
    assert row["p:fluency"] == pytest.approx(1 / 2 ** (len(TEXTS) - 1))  # every one is shorter


def test_cli_dhp_task_option(tmp_path, summeval_rows, monkeypatch):
    from typer.testing import CliRunner

    from hdeval.cli import app

    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in summeval_rows))
    # a judge that is never called: ROUGE needs none and the perturbations are rule-based
    params = tmp_path / "params.yaml"
    params.write_text("llm: {backend: openai, base_url: 'http://127.0.0.1:9/v1', model: unused}\n")
    monkeypatch.setenv("HDEVAL_CACHE", str(tmp_path / "cache.sqlite"))
    common = ["dhp", str(labels), "--scorer", "rouge", "--params", str(params)]
    common += ["--criteria", str(REPO / "data" / "summeval" / "aspects.yaml"), "--n-texts", "2"]
    runner = CliRunner()
    bad = runner.invoke(app, [*common, "--out", str(tmp_path / "bad"), "--task", "poetry"])
    assert bad.exit_code == 2 and "poetry" in bad.output
    done = runner.invoke(app, [*common, "--out", str(tmp_path / "out"), "--task", "translation"])
    assert done.exit_code == 0, done.output
    table = pd.read_csv(tmp_path / "out" / "rouge.csv", index_col=0)
    assert list(table.index) == [p.name for p in perturbations_for("translation", llm=False)]
