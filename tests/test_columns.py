"""The feature-column protocol (hdeval.scoring.columns): names, modes and the order of feature
columns."""

from __future__ import annotations

from hdeval.scoring.columns import (
    UNCONDITIONED,
    column,
    criterion_of,
    feature_columns,
    of_mode,
    source_of,
)
from hdeval.scoring.family_columns import FAMILY_COLUMNS


def test_column_helpers() -> None:
    assert criterion_of("lik:coh.ord") == "coh.ord"
    assert criterion_of("prompt:a:b") == "a:b"
    assert criterion_of("coh") == "coh"
    assert source_of("lik:coh") == "lik" and source_of("coh") is None


def test_column_names_per_mode() -> None:
    assert column("prompt", "coh.ord") == "prompt:coh.ord"
    assert column("likelihood", "coh.ord") == "lik:coh.ord"
    assert UNCONDITIONED == "lik:_text"
    assert source_of(UNCONDITIONED) == "lik"


def test_feature_columns_prompt_first_then_likelihood_then_unconditioned() -> None:
    ids = ["coh", "coh.ord"]
    both = ["prompt:coh", "prompt:coh.ord", "lik:coh", "lik:coh.ord", UNCONDITIONED]
    assert feature_columns(ids, ["prompt", "likelihood"]) == both
    assert feature_columns(ids, ["likelihood", "prompt"]) == both  # the order of modes is fixed
    assert feature_columns(ids, ["prompt", "likelihood"], unconditioned=False) == both[:-1]
    assert feature_columns(ids, ["prompt"]) == both[:2]  # no likelihood, no unconditioned column
    assert feature_columns(ids, ["likelihood"]) == both[2:]
    # the text's own likelihood without the criterion ones (the likelihood mode pruned)
    assert feature_columns(ids, ["prompt"], unconditioned=True) == [*both[:2], "lik:_text"]
    assert of_mode(both, "prompt") == both[:2]
    assert of_mode(both, "likelihood") == both[2:]


def test_every_family_column_counts_as_likelihood_mode() -> None:
    """A family column comes with the text's likelihoods, so a likelihood-only ablation keeps
    it (the dialogue family's ``fact.none`` was once left out)."""
    family = [c for cols in FAMILY_COLUMNS.values() for c in cols]
    assert of_mode(["prompt:coh", *family], "likelihood") == family
    assert of_mode(["prompt:coh", *family], "prompt") == ["prompt:coh"]
