"""What a pipeline run will cost before it runs: per LLM stage, the calls and prompt tokens that
``dvc repro`` would spend, and their time on the configured judge.

A stage ``dvc repro`` would not re-run costs nothing (:mod:`hdeval.pipeline.project_state`);
one it re-runs costs the requests its scorers plan that the cache does not hold
(:mod:`hdeval.pipeline.request_count`), timed by a calibration on the judge
(:mod:`hdeval.pipeline.calibration`). A finished layer is read from its outs; one still to run
is planned as the layer stage would run it.

What cannot be known before the run is given twice. With ``hierarchy.min_mode_gain`` set the
tree grows past a layer only if one of its scoring modes adds that much to the proxy's CV
Pearson: the **expected** case takes the tree to stop there, the **at most** case to grow with
every mode. Where decompositions are not cached yet, each decomposed node is taken to get
``hierarchy.children`` criteria, and the nodes pruning will pick (layer 3 onwards) are stood in
for by the first ``top_k``. Until ``train`` has run, the bundle ``dhp`` scores with is taken to
read what the present bundle reads (where there is one for these aspects and criteria), at most
every criterion of the final tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pandas as pd

from hdeval import workspace as ws
from hdeval.baselines.registry import BASELINES, make_scorers, without_likelihood
from hdeval.data import LabelledData
from hdeval.data.splitting import load_split
from hdeval.dhp.runner import rule_perturbed_samples, stage_labels
from hdeval.errors import HDEvalError
from hdeval.export.evaluator import Evaluator, open_bundle
from hdeval.llm.judge import CachedJudge
from hdeval.params import Params
from hdeval.pipeline.project_state import ProjectState
from hdeval.pipeline.request_count import Planner, Probes, StageCost
from hdeval.scoring.columns import Profile
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.family_columns import reads_references
from hdeval.scoring.family_scorer import FamilyScorer
from hdeval.scoring.run import samples_of
from hdeval.training.hierarchy import criteria_to_expand, next_layer, usable_modes
from hdeval.tree.criteria import CriteriaTree, apply_overrides, aspects_tree, pinned

#: Passes per kind of request a calibration times (a server: at least its concurrency).
PROBE_PASSES = 8


@dataclass
class Estimate:
    """Per LLM stage, the expected cost and the most it can cost (``upper``, same stages),
    what the expected case assumes, and the work a calibration can time."""

    expected: list[StageCost]
    upper: list[StageCost]
    assumptions: list[str] = field(default_factory=list)
    probes: Probes = field(default_factory=lambda: Probes(PROBE_PASSES))


@dataclass
class _Run:
    """What every scenario of one estimate shares."""

    params: Params
    judge: CachedJudge
    decomposer: CachedJudge
    state: ProjectState
    probes: Probes
    train: LabelledData
    test: LabelledData

    def __post_init__(self) -> None:
        self.hierarchy, _ = usable_modes(self.params.hierarchy, self.judge.likelihood_problem())
        self.profile = Profile.of(self.hierarchy)
        self.unconditioned = self.hierarchy.unconditioned and "likelihood" in self.hierarchy.modes
        self.lengths: dict[tuple[str, str], int] = {}  # tokens per text, for every planner

    def scorer(self, modes, families: Sequence[str] | None = None) -> CriterionScorer:
        """The layer stages' scorer in ``modes``; ``families`` instead of the params' ones."""
        profile = self.profile
        if families is not None:
            profile = replace(profile, families=tuple(families))
        return CriterionScorer(self.judge, self.params.task, modes, self.unconditioned, profile)

    def families_for(self, samples, notes: list[str]) -> list[str]:
        """The params' signal families that ``samples`` can feed (DHP's texts have no other
        reference to read); a note names each one left out."""
        rows, kept = samples_of(samples), []
        for family in self.profile.families:
            scorer = FamilyScorer(self.judge, self.params.task, [family])
            try:
                for row in rows:
                    scorer.requests(row)
            except HDEvalError as exc:
                notes.append(f"{family} family left out: {exc}")
                continue
            kept.append(family)
        return kept

    def bundle(self, tree: CriteriaTree, retrained_too: bool) -> Evaluator | None:
        """The trained bundle, where it scores this run's aspects on criteria of ``tree`` with
        this judge: only where ``dvc repro`` would not retrain it, unless ``retrained_too``."""
        path = self.state.root / ws.BUNDLE
        if not path.is_dir() or (self.state.reruns("train") and not retrained_too):
            return None
        try:
            bundle = open_bundle(path)
            fits = bundle.card["aspects"] == list(self.params.data.aspects) and {
                c.id for c in bundle.tree
            } <= {c.id for c in tree}
            return Evaluator.load(bundle, self.judge) if fits else None
        except (HDEvalError, OSError, KeyError):
            return None


def estimate(
    params: Params, judge: CachedJudge, decomposer: CachedJudge, state: ProjectState
) -> Estimate:
    """The LLM work of every LLM stage that ``dvc repro`` in ``state``'s project would run,
    after the cache: the expected case and the most it can be."""
    concurrency = int(getattr(judge.backend, "concurrency", 1))
    probes = Probes(max(PROBE_PASSES, 2 * concurrency))
    train, test = load_split(params.data)
    run = _Run(params, judge, decomposer, state, probes, train, test)
    expected, assumed = _plan(run, upper=False)
    upper, more = _plan(run, upper=True)
    return Estimate(expected, upper, list(dict.fromkeys(assumed + more)), probes)


def _plan(run: _Run, upper: bool) -> tuple[list[StageCost], list[str]]:
    """Every LLM stage's cost in the expected case or (``upper``) the most it can be, and
    what was assumed."""
    planner = Planner(run.judge, run.decomposer, run.probes, run.lengths)
    stages, assumptions = [], []
    tree, modes = _layers(run, planner, stages, assumptions, grow_when_unknown=upper)
    evaluate = StageCost("evaluate", run.state.reruns("evaluate"))
    if evaluate.rerun:
        # every feature of the final layer for the rows the layers did not score; explain's
        # bundle then reads a subset of these features, all cached
        planner.count(evaluate, run.scorer(modes).plan(run.test.samples, tree))
    stages.append(evaluate)

    params, problem = run.params, run.judge.likelihood_problem()
    aspects, task, names = aspects_tree(params.data), params.task, params.data.aspects
    baselines = StageCost("baselines", run.state.reruns("baselines"))
    if baselines.rerun:
        kept, _ = without_likelihood([n for n in BASELINES if n != "rouge"], problem)
        every = pd.concat([run.train.samples, run.test.samples])  # every row of the run
        for baseline in make_scorers(kept, run.judge, task, aspects, names):
            planner.count(baselines, baseline.plan(every))
    stages.append(baselines)

    dhp = StageCost("dhp", run.state.reruns("dhp"))
    if dhp.rerun:
        current = run.bundle(tree, retrained_too=True)
        bundle = current if not upper or not run.state.reruns("train") else None
        reads = (
            bundle.reads_references
            if bundle is not None
            else reads_references(params.hierarchy.families)
        )
        # the stage's draw; the rows the tree is not grown on, as prepare may not have run yet
        labels = stage_labels(params.data, reads, held_out=run.test)
        combined = rule_perturbed_samples(labels, params.dhp, reads)
        if bundle is not None:
            try:
                planner.count(dhp, bundle.scorer.plan(combined, bundle.tree))
            except HDEvalError as exc:
                dhp.notes.append(f"the bundle cannot score DHP's texts: {exc}")
        else:
            families = run.families_for(combined, dhp.notes)
            planner.count(dhp, run.scorer(modes, families).plan(combined, tree))
        if run.state.reruns("train") and current is not None:
            assumptions.append(
                "dhp: the retrained bundle reads what the current one reads; at most: every "
                "criterion of the final tree"
            )
        elif run.state.reruns("train"):
            dhp.notes.append(
                "bundle counted as reading every criterion and signal family (train picks a "
                "subset: a family that adds less than hierarchy.min_family_gain, and its passes, "
                "are left out)"
            )
        kept, _ = without_likelihood(params.dhp.baselines, problem)
        for baseline in make_scorers(kept, run.judge, task, aspects, names):
            planner.count(dhp, baseline.plan(combined))
        if params.dhp.llm_perturbations:
            dhp.notes.append("LLM-made perturbations are not counted")
    stages.append(dhp)
    return stages, assumptions


def _layers(
    run: _Run,
    planner: Planner,
    stages: list[StageCost],
    assumptions: list[str],
    grow_when_unknown: bool,
) -> tuple[CriteriaTree, list[str]]:
    """Plan the layer stages into ``stages``; the final tree and its scoring modes."""
    hierarchy = run.hierarchy
    keep = pinned(hierarchy.overrides)
    tree, selected, modes, grow = aspects_tree(run.params.data), [], list(hierarchy.modes), True
    known, picked = True, True  # the tree is the run's; `selected` is what pruning picked
    for number in range(1, hierarchy.layers + 1):
        name, final = f"layer@{number}", number == hierarchy.layers
        cost = StageCost(name, run.state.reruns(name))
        stages.append(cost)
        finished = run.state.finished_layer(number)
        if finished is not None:  # dvc repro skips it: what it made is known
            tree, report = finished
            selected, known, picked = report["selected"], True, True
            modes, grow = next_layer(report)
            continue
        expand: list[str] = []
        if number > 1 and grow:
            expand = criteria_to_expand(tree, number, selected, keep)
            tree, decided = planner.grow(cost, tree, expand, run.params)
            known = known and decided and picked
            if not decided:
                cost.notes.append(f"{hierarchy.children} criteria per decomposed node assumed")
        if known:
            tree = apply_overrides(tree, hierarchy.overrides, expand, final)
        planner.count(cost, run.scorer(modes).plan(run.train.samples, tree))
        if final:
            break
        if grow and hierarchy.min_mode_gain is not None:
            grow = grow_when_unknown
            assumptions.append(
                f"layer@{number + 1}: the tree grows only if a scoring mode of {name} adds "
                f">= {hierarchy.min_mode_gain:g} to the proxy's CV Pearson "
                "(hierarchy.min_mode_gain); expected: it stops, at most: it grows"
            )
        if number > 1:  # pruning picks the next layer's nodes; stand-ins until it has run
            newest = [c.id for c in tree.layer(number) if c.id not in keep]
            selected, picked = newest[: hierarchy.top_k], False
    return tree, modes
