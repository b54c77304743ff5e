"""A person's corrections of the criteria tree (hierarchy.overrides)."""

from __future__ import annotations

import json

import pytest

from hdeval.data import load_labels
from hdeval.errors import ConfigError
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.params import CriterionOverride, HierarchyParams, TaskSpec, load_params
from hdeval.training.hierarchy import run_layer
from hdeval.tree.criteria import CriteriaTree, Criterion, apply_overrides
from tests.conftest import REPO
from tests.dvc_project import summeval_rows

TREE = CriteriaTree(
    [
        Criterion("coherence", "coherence", "well organised"),
        Criterion("coherence.clarity", "Clarity", "clear", "coherence", 2),
        Criterion("coherence.flow", "Flow", "flows", "coherence", 2),
        Criterion("coherence.flow.links", "Links", "linked", "coherence.flow", 3),
    ]
)


def _o(**kwargs) -> CriterionOverride:
    return CriterionOverride(**kwargs)


def test_rename_redefine_and_delete_with_descendants() -> None:
    tree = apply_overrides(
        TREE,
        {
            "coherence.clarity": _o(name="Plain wording", definition="no jargon"),
            "coherence.flow": _o(delete=True),
        },
    )
    assert [c.id for c in tree] == ["coherence", "coherence.clarity"]
    clarity = tree.get("coherence.clarity")
    assert (clarity.name, clarity.definition, clarity.layer) == ("Plain wording", "no jargon", 2)
    # applied again (the next layer does): a deleted criterion already gone is no error
    assert apply_overrides(tree, {"coherence.flow": _o(delete=True)}, final=True) == tree


def test_unknown_criterion_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"'coherence\.clarty'.*'coherence' has"):
        apply_overrides(TREE, {"coherence.clarty": _o(pin=True)}, decomposed=["coherence"])
    with pytest.raises(ConfigError, match="'coherense'"):
        apply_overrides(TREE, {"coherense": _o(name="x")})
    with pytest.raises(ConfigError, match=r"'coherence\.clarity\.x'"):
        apply_overrides(TREE, {"coherence.clarity.x": _o(name="x")}, final=True)
    # a criterion of a later layer is not known yet before its parent is decomposed
    assert apply_overrides(TREE, {"coherence.clarity.x": _o(name="x")}) == TREE
    with pytest.raises(ConfigError, match="deletes aspect 'coherence'"):
        apply_overrides(TREE, {"coherence": _o(delete=True)})


def test_params_validate_overrides(tmp_path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("hierarchy:\n  overrides:\n    coherence.flow: {delete: true, name: X}\n")
    with pytest.raises(ConfigError, match="delete cannot be combined"):
        load_params(path)
    path.write_text("hierarchy:\n  overrides:\n    coherence.flow: {pinned: true}\n")
    with pytest.raises(ConfigError, match="pinned"):
        load_params(path)


@pytest.mark.model
def test_layers_apply_overrides_on_the_real_judge(embedded_backend, tmp_path) -> None:
    """Layer 2 on the embedded judge: a renamed child is scored under its new name, a deleted
    one has no feature column, a pinned one is never picked for decomposition."""
    rows = summeval_rows(48, source_words=120)
    rows = [r for r in rows if r["system_id"] in {"M0", "M8"}]  # 3 documents x 2 summaries
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train = load_labels(labels, ["coherence"], (1.0, 5.0))
    shipped = CriteriaTree.from_yaml(REPO / "data/summeval/aspects.yaml")
    aspects = CriteriaTree([shipped.get("coherence")])
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))
    params = HierarchyParams(
        layers=3,
        children=2,
        top_k=1,
        modes=["prompt"],
        cv_folds=2,
        importance_repeats=1,
        min_mode_gain=None,  # pruning picks a criterion whatever the prompt scores add
    )
    plain = run_layer(2, aspects, [], train, judge, TaskSpec(), params, progress=False)
    first, second = [c.id for c in plain.tree.layer(2)]
    overrides = {
        first: _o(name="Order of events", definition="events are told in the order they happen"),
        second: _o(delete=True),
    }
    edited = params.model_copy(update={"overrides": overrides})
    layer = run_layer(2, aspects, [], train, judge, TaskSpec(), edited, progress=False)
    assert [c.id for c in layer.tree.layer(2)] == [first]
    assert layer.tree.get(first).name == "Order of events"
    assert not [c for c in layer.run.features.columns if second in c]
    assert layer.run.computed > 0  # the renamed criterion is a new prompt: scored anew
    assert layer.report.selected == [first]

    pinned = {first: _o(pin=True)}
    kept = run_layer(
        2, aspects, [], train, judge, TaskSpec(),
        params.model_copy(update={"overrides": pinned}), progress=False,
    )  # fmt: skip
    assert first in [c.id for c in kept.tree.layer(2)] and first not in kept.report.selected
