"""Per-text prediction intervals: split-conformal quantiles of cross-fitted errors, on synthetic
predictions with known noise (model-free), stored in the card, applied by the evaluator."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hdeval.errors import ConfigError, ModelIntegrityError
from hdeval.export.bundle import card_sha256, export_bundle, read_card
from hdeval.export.evaluator import Evaluator
from hdeval.export.intervals import (
    bounds,
    conformal_quantile,
    fit_intervals,
    half_widths,
    least_rows,
)
from hdeval.params import TaskSpec
from hdeval.report.coverage import coverage, held_out_widths
from hdeval.scoring.columns import feature_columns
from hdeval.training.aggregators import make_aggregator
from tests.test_evaluator import ASPECTS, SAMPLES, TREE, HashBackend, judge  # noqa: F401


def noisy(n: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Predictions on a 1-5 scale and human scores = prediction + noise whose spread grows
    with the prediction (sd 0.1 at 1, 0.9 at 5), and a second aspect with constant noise; the
    human scores are clipped to the scale, as a human rating is."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(1, 5, n)
    q = rng.uniform(1, 5, n)
    index = pd.Index([f"t{seed}-{i}" for i in range(n)])
    predicted = pd.DataFrame({"coherence": p, "fluency": q}, index=index)
    human = pd.DataFrame(
        {"coherence": p + rng.normal(0, 0.1 + 0.2 * (p - 1)), "fluency": q + rng.normal(0, 0.4, n)},
        index=index,
    ).clip(1.0, 5.0)
    return predicted, human


def covered(intervals: dict, predicted: pd.DataFrame, human: pd.DataFrame) -> pd.Series:
    width = half_widths(intervals, list(predicted.columns), predicted.to_numpy())
    return ((human - predicted).abs() <= width).mean()


def test_conformal_quantile_is_the_ceiling_rank_and_infinite_on_too_few() -> None:
    errors = np.arange(1.0, 11.0)  # 1..10
    assert conformal_quantile(errors, 0.9) == 10.0  # ceil(11 * 0.9) = 10th
    assert conformal_quantile(errors, 0.5) == 6.0  # ceil(5.5) = 6th
    assert conformal_quantile(errors[:8], 0.9) == np.inf
    assert least_rows(0.9) == 9 and least_rows(0.8) == 4


def test_90_percent_intervals_cover_88_to_92_percent_of_new_texts_per_aspect() -> None:
    predicted, human = noisy(2000, seed=0)
    intervals = fit_intervals(predicted, human, 0.9, bins=3)
    fresh_predicted, fresh_human = noisy(5000, seed=1)
    rates = covered(intervals, fresh_predicted, fresh_human)
    assert ((rates >= 0.88) & (rates <= 0.92)).all(), rates
    # at 0.8 the same errors give 80 %: the level is what sets the quantile
    rates = covered(fit_intervals(predicted, human, 0.8, bins=3), fresh_predicted, fresh_human)
    assert ((rates >= 0.78) & (rates <= 0.82)).all(), rates


def test_bins_follow_the_noise_where_one_width_would_not() -> None:
    predicted, human = noisy(3000, seed=2)
    fresh_predicted, fresh_human = noisy(6000, seed=3)
    low = fresh_predicted["coherence"] < 2.2  # the quietest third of the coherence scores
    binned = fit_intervals(predicted, human, 0.9, bins=3)
    single = fit_intervals(predicted, human, 0.9, bins=1)
    widths = binned["aspects"]["coherence"]["half_widths"]
    assert widths == sorted(widths) and widths[-1] > 2 * widths[0]
    assert len(single["aspects"]["coherence"]["half_widths"]) == 1
    quiet = covered(binned, fresh_predicted[low], fresh_human[low])["coherence"]
    assert 0.86 <= quiet <= 0.94  # the bin's own width holds there
    assert covered(single, fresh_predicted[low], fresh_human[low])["coherence"] > 0.97


def test_cross_conformal_coverage_of_held_out_documents_is_near_the_level() -> None:
    predicted, human = noisy(1500, seed=4)
    docs = pd.Series([f"d{i // 10}" for i in range(len(predicted))], index=predicted.index)
    widths = held_out_widths(predicted, human, docs, 0.9, 3, folds=5, seed=0)
    assert widths.notna().all().all()
    figures = coverage(predicted, human, widths, {"coherence": (1, 5), "fluency": (1, 5)})
    for aspect, f in figures.items():
        assert 0.88 <= f["coverage"] <= 0.92, (aspect, f)
        assert 0 < f["mean_width"] < f["range_width"] == 4 and f["n"] == 1500


def test_few_texts_use_fewer_bins_and_too_few_are_refused() -> None:
    predicted, human = noisy(20, seed=5)
    found = fit_intervals(predicted, human, 0.9, bins=3)
    assert all(
        len(a["half_widths"]) == 2 and min(a["rows"]) >= 9 for a in found["aspects"].values()
    )
    with pytest.raises(
        ConfigError, match="at least 9 cross-fitted texts of 'coherence', there are 8"
    ):
        fit_intervals(predicted.iloc[:8], human, 0.9)


def test_bounds_are_clipped_to_the_range_and_nan_for_a_failed_score() -> None:
    spec = {"edges": [3.0], "half_widths": [0.5, 1.0], "rows": [9, 9]}
    intervals = {"level": 0.9, "method": "m", "aspects": {"a": spec}}
    found = bounds(intervals, ["a"], np.array([[1.2], [4.5], [np.nan]]), {"a": (1.0, 5.0)})
    np.testing.assert_allclose(found[0, 0], [1.0, 1.7])
    np.testing.assert_allclose(found[1, 0], [3.5, 5.0])
    assert np.isnan(found[2, 0]).all()


def _bundle(path, intervals=None):
    names = feature_columns([c.id for c in TREE], ["prompt"])
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 5, (60, len(names)))
    Y = np.c_[X[:, 0] + 0.5 * X[:, 2], X[:, 1]]
    return export_bundle(
        path, make_aggregator("linear").fit(X, Y), TREE, names, ASPECTS,
        llm_identity=HashBackend.identity, task=TaskSpec(),
        modes=["prompt"], unconditioned=False, training_data="synthetic", sample=X,
        score_ranges={"coherence": (1.0, 5.0), "fluency": (1.0, 5.0)}, intervals=intervals,
    )  # fmt: skip


INTERVALS = {
    "level": 0.9,
    "method": "test",
    "aspects": {
        "coherence": {
            "edges": [3.0],
            "half_widths": [0.4, 0.8],
            "rows": [50, 50],
            "system_sd": 0.2,
        },
        "fluency": {"edges": [], "half_widths": [0.6], "rows": [100]},
    },
}


def test_scores_carry_their_intervals_and_a_bundle_without_them_scores_as_before(
    tmp_path,
    judge,  # noqa: F811
) -> None:
    with_them = Evaluator.load(_bundle(tmp_path / "with", INTERVALS), judge)
    scores = with_them.score_samples(SAMPLES, progress=False)
    assert scores.interval_level == 0.9 and scores.intervals.shape == (3, 2, 2)
    row = scores.row(0)
    for aspect, (low, high) in row["intervals"].items():
        value = row["aspects"][aspect]
        assert 1.0 <= low <= value <= high <= 5.0
        width = INTERVALS["aspects"][aspect]["half_widths"]
        assert max(high - value, value - low) == pytest.approx(
            width[-1] if aspect == "coherence" and value >= 3 else width[0]
        )
    assert scores.row(1)["intervals"] == {"coherence": None, "fluency": None}  # failed score
    assert "intervals" in with_them.score("An article.", "One.")

    without = Evaluator.load(_bundle(tmp_path / "without"), judge)
    plain = without.score_samples(SAMPLES, progress=False)
    assert plain.intervals is None and "intervals" not in plain.row(0)
    assert "intervals" not in read_card(tmp_path / "without")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c["intervals"]["aspects"].pop("fluency"), "intervals are given for"),
        (lambda c: c["intervals"]["aspects"]["fluency"].update(half_widths=[-1.0]), "non-negative"),
        (lambda c: c["intervals"]["aspects"]["coherence"].update(rows=[50]), "one half width"),
        (lambda c: c["intervals"].update(level=1.5), "intervals.level"),
        (lambda c: c["intervals"]["aspects"]["fluency"].update(system_sd=-0.1), "system_sd"),
    ],
)
def test_a_card_with_bad_intervals_is_refused(tmp_path, edit, message) -> None:
    bundle = _bundle(tmp_path / "b", INTERVALS)
    card = json.loads((bundle / "card.json").read_text())
    edit(card)
    card["card_sha256"] = card_sha256(card)
    (bundle / "card.json").write_text(json.dumps(card))
    with pytest.raises(ModelIntegrityError, match=message):
        read_card(bundle)


def test_score_rows_carry_document_system_and_intervals_also_in_the_explanation(
    tmp_path,
    judge,  # noqa: F811
) -> None:
    from hdeval.cli.scoring import _score_rows

    evaluator = Evaluator.load(_bundle(tmp_path / "b", INTERVALS), judge)
    where = {"a": {"doc_id": "d1", "system_id": "new"}, "c": {"doc_id": "d2"}}
    rows = _score_rows(evaluator, [SAMPLES[0], SAMPLES[2]], True, {}, {}, where)
    first, second = rows
    assert (first["doc_id"], first["system_id"]) == ("d1", "new")
    assert second["doc_id"] == "d2" and "system_id" not in second
    assert first["interval_level"] == 0.9
    assert first["system_error_sd"] == {"coherence": 0.2, "fluency": None}
    for aspect, (low, high) in first["intervals"].items():
        assert low <= first["scores"][aspect] <= high
        assert first["explanation"]["aspects"][aspect]["interval"] == [low, high]
    plain = Evaluator.load(_bundle(tmp_path / "plain"), judge)
    row = _score_rows(plain, [SAMPLES[0]], True, {}, {}, where)[0]
    assert "intervals" not in row and "interval" not in row["explanation"]["aspects"]["fluency"]
