"""The acceptance gates on comparison and DHP tables: the baseline gate names the best same-judge
baseline and both figures with CIs; fail raises, warn records; absent baselines are named."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from hdeval.acceptance import baseline_verdict, dhp_verdict, enforce
from hdeval.errors import AcceptanceError
from hdeval.params import AcceptanceParams


def _table(values: dict[str, float]) -> pd.DataFrame:
    """A comparison table with the aspect average at every level, CI +-0.05."""
    rows = []
    for scorer, value in values.items():
        for level in ("dataset", "summary"):
            for aspect in ("coherence", "average"):
                shift = 0.0 if level == "dataset" else 0.3  # summary level tells a different story
                rows.append(
                    {
                        "scorer": scorer,
                        "aspect": aspect,
                        "level": level,
                        "correlation": "pearson",
                        "value": value + shift,
                        "ci_low": value + shift - 0.05,
                        "ci_high": value + shift + 0.05,
                        "n": 48,
                    }
                )
    return pd.DataFrame(rows)


def test_bundle_below_the_best_baseline_is_refused_naming_it() -> None:
    table = _table(
        {"hdeval": 0.335, "direct-prompt": -0.006, "likelihood": 0.395, "rouge:rouge1": 0.9}
    )
    verdict = baseline_verdict(table, AcceptanceParams(baseline_margin=0.02))
    assert not verdict.accepted
    assert "'likelihood'" in verdict.message  # the best same-judge one, not ROUGE
    assert "0.335 [0.29, 0.39]" in verdict.message and "0.395 [0.35, 0.45]" in verdict.message
    assert "not in the table: likelihood:unconditioned" in verdict.message
    assert verdict.figures["likelihood"]["value"] == pytest.approx(0.395)
    with pytest.raises(AcceptanceError, match=r"baselines refused hdeval.*on_failure: warn"):
        enforce([verdict], "fail")
    assert enforce([verdict], "warn") == ["WARNING " + verdict.message]


def test_margin_and_level_decide() -> None:
    table = _table({"hdeval": 0.38, "likelihood": 0.395, "likelihood:unconditioned": 0.39})
    assert baseline_verdict(table, AcceptanceParams(baseline_margin=0.02)).accepted
    assert not baseline_verdict(table, AcceptanceParams(baseline_margin=0.0)).accepted
    ahead = _table({"hdeval": 0.5, "likelihood": 0.395})
    verdict = baseline_verdict(ahead, AcceptanceParams(level="summary", baseline_margin=0.0))
    assert verdict.accepted and "cross-fitted summary pearson 0.800" in verdict.message
    assert enforce([verdict], "fail") == [verdict.message]


def test_no_baseline_or_no_bundle_figure() -> None:
    only_rouge = _table({"hdeval": 0.3, "rouge:rouge1": 0.2})
    verdict = baseline_verdict(only_rouge, AcceptanceParams())
    assert verdict.accepted and "not checked" in verdict.message
    assert "direct-prompt" in verdict.message
    missing = _table({"likelihood": 0.3})
    assert not baseline_verdict(missing, AcceptanceParams()).accepted


def test_dhp_verdict_uses_the_threshold_and_the_probes() -> None:
    table = pd.DataFrame(
        {
            "probe": [False, False, True],
            "D_ew": [1.2, 0.8, math.nan],
            "D_reward_ew": [math.nan, math.nan, 0.1],
        },
        index=["deletion_minor", "swap_sentences", "injection"],
    )
    refused = dhp_verdict("hdeval", 0.8, table, AcceptanceParams(dhp_threshold=1.0))
    assert not refused.accepted and "not discerned: swap_sentences" in refused.message
    assert dhp_verdict("hdeval", 0.8, table, AcceptanceParams(dhp_threshold=0.5)).accepted
    table.loc["injection", "D_reward_ew"] = 1.5  # the probe raised the scores
    rewarded = dhp_verdict("hdeval", 1.2, table.drop("swap_sentences"), AcceptanceParams())
    assert not rewarded.accepted
    assert rewarded.message == (
        "DHP refused hdeval: D_min^EW 1.200 >= threshold 1.0; "
        "scored higher (a probe it should not reward): injection"
    )
    with pytest.raises(AcceptanceError, match=r"DHP refused.*baselines refused"):
        base = baseline_verdict(_table({"hdeval": 0.1, "likelihood": 0.4}), AcceptanceParams())
        enforce([refused, base], "fail")


def test_results_show_the_verdicts_and_the_cv_table() -> None:
    from hdeval.report.results import acceptance_markdown, selection_markdown

    refused = baseline_verdict(_table({"hdeval": 0.1, "likelihood": 0.4}), AcceptanceParams())
    text = acceptance_markdown([refused.to_dict()])
    assert "- **refused**: baselines refused hdeval" in text
    table = [
        {"features": f"likelihood L1-{d}", "kind": "linear", "n_features": d, "cv_pearson": 0.1 * d}
        for d in (3, 2)
    ]
    selection = {
        "cv_table": table,
        "kind": "linear",
        "features": "likelihood L1-3",
        "cv_pearson": 0.31,
    }
    text = selection_markdown(selection, limit=1)
    assert "| likelihood L1-3 | linear | 3 | 0.300 |" in text and "L1-2 |" not in text
    assert "best 1 of 2 candidates" in text and "tuned CV Pearson 0.310" in text
    assert "all 2 candidates" in selection_markdown(selection, limit=12)
