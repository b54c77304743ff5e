"""What a judge without likelihoods leaves out, and how the run says so (the whole pipeline on a
real server is tests/test_pipeline_server.py)."""

from __future__ import annotations

import pytest

from hdeval.baselines.registry import BASELINES, without_likelihood
from hdeval.errors import ConfigError
from hdeval.params import HierarchyParams
from hdeval.report.results import left_out_markdown
from hdeval.training.hierarchy import usable_modes


def test_likelihood_mode_and_scorers_are_left_out_with_the_reason() -> None:
    params = HierarchyParams(modes=["prompt", "likelihood"])
    assert usable_modes(params, None) == (params, {})
    kept, left_out = usable_modes(params, "echo misaligned")
    assert kept.modes == ["prompt"] and params.modes == ["prompt", "likelihood"]
    assert left_out == {
        "likelihood features": "the judge cannot score likelihoods: echo misaligned"
    }
    with pytest.raises(ConfigError, match=r"hierarchy\.modes is \[likelihood\].*echo misaligned"):
        usable_modes(HierarchyParams(modes=["likelihood"]), "echo misaligned")

    assert without_likelihood(BASELINES, None) == (list(BASELINES), {})
    names, left = without_likelihood(BASELINES, "echo misaligned")
    assert names == ["direct-prompt", "overall-prompt", "rouge"] and list(left) == ["likelihood"]


def test_results_list_what_was_left_out() -> None:
    assert left_out_markdown({}) == ""
    text = left_out_markdown({"baseline likelihood": "the judge cannot score likelihoods: x"})
    assert "Left out of this run" in text and "- baseline likelihood: the judge cannot" in text
