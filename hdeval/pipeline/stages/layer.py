"""Stage layer@N: one iteration of HD-Eval's Algorithm 1 (grow, score, proxy, select)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hdeval import workspace as ws
from hdeval.data import load_labels
from hdeval.errors import ConfigError
from hdeval.llm.judge import open_decomposer, open_judge
from hdeval.params import HierarchyParams, Params
from hdeval.pipeline.stages.base import Out, Stage
from hdeval.pipeline.stages.final_layer import FinalLayer
from hdeval.training.hierarchy import (
    criteria_to_expand,
    layer_scorer,
    next_layer,
    run_layer,
    usable_modes,
)
from hdeval.tree.criteria import CriteriaTree, apply_overrides, aspects_tree, pinned

if TYPE_CHECKING:
    from hdeval.pipeline.scenario import Scenario

#: The hierarchy keys a layer reads: all but those only model selection reads.
HIERARCHY = tuple(
    f"hierarchy.{key}" for key in HierarchyParams.model_fields if key != "min_family_gain"
)


def run(params: Params, key: str) -> None:
    number = int(key)
    if not 1 <= number <= params.hierarchy.layers:
        raise ConfigError(
            f"dvc.yaml runs layer {number} but params hierarchy.layers is "
            f"{params.hierarchy.layers}; make the layer list in dvc.yaml match it"
        )
    train = load_labels(ws.PREPARED / "train.jsonl", params.data.aspects, params.data.score_range)
    judge = open_judge(params.llm)
    hierarchy, left_out = usable_modes(params.hierarchy, judge.likelihood_problem())
    if number == 1:
        tree, selected, modes, grow = aspects_tree(params.data), [], hierarchy.modes, True
    else:
        previous = ws.layer_dir(number - 1)
        tree = CriteriaTree.from_yaml(previous / "tree.yaml")
        report = ws.read_json(previous / "report.json")
        selected, (modes, grow) = report["selected"], next_layer(report)
    decomposer = None
    if number > 1 and grow:
        decomposer = open_decomposer(params.hierarchy.decomposer, params.llm, judge)
    layer = run_layer(
        number, tree, selected, train, judge, params.task, hierarchy, True, decomposer, modes, grow
    )
    out = ws.fresh(ws.layer_dir(number))
    layer.tree.to_yaml(out / "tree.yaml")
    layer.run.features.to_csv(out / "features.csv")
    report = {
        **layer.report.to_dict(),
        **judge.cost(),
        "failed_scores": len(layer.run.failures),
        "truncated_samples": layer.run.truncated_samples,
        "not_decomposed": layer.not_decomposed,
        "llm_identity": judge.identity,
        "left_out": left_out,
    }
    if decomposer is not None:
        report["decomposer"] = {"identity": decomposer.identity, **decomposer.tokens.to_dict()}
    ws.write_json(out / "report.json", report)
    print(f"layer {number}: {layer.run.summary()}")


def plan(scenario: Scenario) -> None:
    """Every layer stage's requests; the final tree and its modes into ``scenario.final``. A
    finished layer is read from its outs; one still to run is planned as :func:`run` runs it."""
    hierarchy, params, planner = scenario.hierarchy, scenario.params, scenario.planner
    keep = pinned(hierarchy.overrides)
    tree, selected, modes, grow = aspects_tree(params.data), [], list(hierarchy.modes), True
    known, picked = True, True  # the tree is the run's; `selected` is what pruning picked
    for number in range(1, hierarchy.layers + 1):
        name, final = f"layer@{number}", number == hierarchy.layers
        cost = scenario.cost(name)
        if scenario.state.finished(name, STAGE.out_paths(str(number))):  # its outs are known
            folder = scenario.state.root / ws.layer_dir(number)
            tree = CriteriaTree.from_yaml(folder / "tree.yaml")
            report = ws.read_json(folder / "report.json")
            selected, known, picked = report["selected"], True, True
            modes, grow = next_layer(report)
            continue
        expand: list[str] = []
        if number > 1 and grow:
            expand = criteria_to_expand(tree, number, selected, keep)
            tree, decided = planner.grow(cost, tree, expand, params)
            known = known and decided and picked
            if not decided:
                cost.notes.append(f"{hierarchy.children} criteria per decomposed node assumed")
        if known:
            tree = apply_overrides(tree, hierarchy.overrides, expand, final)
        scorer = layer_scorer(scenario.judge, params.task, hierarchy, modes)
        planner.count(cost, scorer.plan(scenario.train.samples, tree))
        if final:
            break
        if grow and hierarchy.min_mode_gain is not None:
            grow = scenario.upper
            scenario.assumptions.append(
                f"layer@{number + 1}: the tree grows only if a scoring mode of {name} adds "
                f">= {hierarchy.min_mode_gain:g} to the proxy's CV Pearson "
                "(hierarchy.min_mode_gain); expected: it stops, at most: it grows"
            )
        if number > 1:  # pruning picks the next layer's nodes; stand-ins until it has run
            newest = [c.id for c in tree.layer(number) if c.id not in keep]
            selected, picked = newest[: hierarchy.top_k], False
    scenario.final = FinalLayer(tree, tuple(modes), {})


STAGE = Stage(
    "layer",
    run,
    deps=("work/prepared/train.jsonl", "${item.prev}"),
    outs=(Out("work/layers/${key}"),),
    params=("data.aspects", "data.score_range", "data.criteria", "task", "llm", *HIERARCHY),
    plan=plan,
    per_layer=True,
)
