"""Stage dhp: the DHP benchmark of the exported evaluator and of the LLM baselines on the same
perturbed texts (the acceptance stage gates the evaluator on it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hdeval import workspace as ws
from hdeval.baselines.registry import HDEVAL, TextScorer, make_scorers, without_likelihood
from hdeval.dhp.runner import (
    dhp_markdown,
    dhp_samples,
    rule_perturbed_samples,
    run_suite,
    stage_labels,
    summary,
)
from hdeval.errors import HDEvalError
from hdeval.export.evaluator import Evaluator, open_bundle
from hdeval.llm.judge import CachedJudge, open_judge
from hdeval.params import Params
from hdeval.pipeline.stages.base import Out, Stage
from hdeval.scoring.family_columns import reads_references
from hdeval.scoring.family_scorer import FamilyScorer
from hdeval.scoring.run import samples_of
from hdeval.training.hierarchy import layer_scorer
from hdeval.tree.criteria import CriteriaTree, aspects_tree

if TYPE_CHECKING:
    import pandas as pd

    from hdeval.pipeline.scenario import Scenario

HELD_OUT = ws.PREPARED / "test.jsonl"


def scorers(
    judge: CachedJudge, params: Params, evaluator: Evaluator | None = None, progress: bool = False
) -> tuple[list[TextScorer], dict]:
    """The bundle (where ``evaluator`` is given) and the DHP baselines the judge can score, and
    ``{left-out name: why}``."""
    names = [HDEVAL] if evaluator is not None else []
    names, left_out = without_likelihood(
        [*names, *params.dhp.baselines], judge.likelihood_problem()
    )
    data = params.data
    made = make_scorers(
        names, judge, params.task, aspects_tree(data), data.aspects, evaluator, progress=progress
    )
    return made, left_out


def run(params: Params) -> None:
    settings, data = params.dhp, params.data
    judge = open_judge(params.llm)
    evaluator = Evaluator.load(ws.BUNDLE, judge, params.llm.strict_precision)
    made, left_out = scorers(judge, params, evaluator, progress=True)
    perturber = None
    if settings.llm_perturbations:
        perturber = open_judge(settings.perturber, judge.cache) if settings.perturber else judge
    out = ws.fresh(ws.DHP)
    reads = evaluator.reads_references
    samples = dhp_samples(stage_labels(data, reads, HELD_OUT), settings, reads)
    results = run_suite(made, samples, settings, perturber, out)
    cost = judge.cost()
    if perturber is not None and perturber is not judge:
        cost["perturber_tokens"] = perturber.tokens.to_dict()
    figures = summary(results)
    ws.write_json(
        out / "summary.json",
        {
            "scorers": figures,
            "llm": cost,
            "left_out": {f"DHP {k}": v for k, v in left_out.items()},
        },
    )
    print(dhp_markdown(figures))


def plan(scenario: Scenario) -> None:
    """The bundle's and the baselines' requests on the rule-made perturbed texts. Until train
    has run, the bundle is taken to read what the present one reads (at most: every criterion
    of the final tree)."""
    cost = scenario.cost("dhp")
    final = scenario.final
    if not cost.rerun or final is None:
        return
    params, retrains = scenario.params, scenario.state.reruns("train")
    current = _bundle(scenario, final.tree)
    bundle = current if not scenario.upper or not retrains else None
    reads = (
        bundle.reads_references
        if bundle is not None
        else reads_references(params.hierarchy.families)
    )
    # the stage's draw; the rows the tree is not grown on, as prepare may not have run yet
    combined = rule_perturbed_samples(
        stage_labels(params.data, reads, scenario.test), params.dhp, reads
    )
    if bundle is not None:
        try:
            scenario.planner.count(cost, bundle.scorer.plan(combined, bundle.tree))
        except HDEvalError as exc:
            cost.notes.append(f"the bundle cannot score DHP's texts: {exc}")
    else:
        families = _families_for(scenario, combined, cost.notes)
        scorer = layer_scorer(
            scenario.judge, params.task, scenario.hierarchy, final.modes, families
        )
        scenario.planner.count(cost, scorer.plan(combined, final.tree))
    if retrains and current is not None:
        scenario.assumptions.append(
            "dhp: the retrained bundle reads what the current one reads; at most: every "
            "criterion of the final tree"
        )
    elif retrains:
        cost.notes.append(
            "bundle counted as reading every criterion and signal family (train picks a "
            "subset: a family that adds less than hierarchy.min_family_gain, and its passes, "
            "are left out)"
        )
    for scorer in scorers(scenario.judge, params)[0]:
        scenario.planner.count(cost, scorer.plan(combined))
    if params.dhp.llm_perturbations:
        cost.notes.append("LLM-made perturbations are not counted")


def _bundle(scenario: Scenario, tree: CriteriaTree) -> Evaluator | None:
    """The trained bundle, where it scores this run's aspects on criteria of ``tree`` with this
    judge."""
    path = scenario.state.root / ws.BUNDLE
    if not path.is_dir():
        return None
    try:
        bundle = open_bundle(path)
        fits = bundle.card["aspects"] == list(scenario.params.data.aspects) and {
            c.id for c in bundle.tree
        } <= {c.id for c in tree}
        return Evaluator.load(bundle, scenario.judge) if fits else None
    except (HDEvalError, OSError, KeyError):
        return None


def _families_for(scenario: Scenario, samples: pd.DataFrame, notes: list[str]) -> list[str]:
    """The params' signal families that ``samples`` can feed (DHP's texts have no other
    reference to read); a note names each one left out."""
    rows, kept = samples_of(samples), []
    for family in scenario.hierarchy.families:
        scorer = FamilyScorer(scenario.judge, scenario.params.task, [family])
        try:
            for row in rows:
                scorer.requests(row)
        except HDEvalError as exc:
            notes.append(f"{family} family left out: {exc}")
            continue
        kept.append(family)
    return kept


STAGE = Stage(
    "dhp",
    run,
    deps=(
        "${data.path}",
        "${data.criteria}",
        "work/labels.json",
        str(HELD_OUT),
        "models/evaluator",
    ),
    outs=(Out("work/dhp", cache=False),),
    params=("data.aspects", "data.score_range", "data.documents", "task", "llm", "dhp"),
    plan=plan,
)
