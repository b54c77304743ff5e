"""``hdeval train``: the pipeline's steps in one process, for users who do not use DVC.

The same library functions as the ``prepare``, ``layer``, ``train``, ``evaluate``, ``baselines``,
``dhp`` and ``acceptance`` stages, in the same order: split, Algorithm 1, model selection and
tuning, export, the exported bundle scored on the held-out documents with its ablations, the
same-judge baselines, DHP, and the two acceptance gates. Left out: the plots, the SHAP charts
(``explain``) and results.md (``report``); ``--no-gates`` also leaves out baselines, DHP and gates.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from hdeval.acceptance import Verdict, baseline_verdict, dhp_verdict, enforce
from hdeval.baselines import compare
from hdeval.columns import UNCONDITIONED, Profile
from hdeval.criteria import aspects_tree
from hdeval.criterion_scorer import CriterionScorer
from hdeval.data import LabelledData, load_labels
from hdeval.data.splitting import load_split
from hdeval.dhp.acceptance import dhp_samples, run_suite, summary
from hdeval.evaluator import Evaluator
from hdeval.hierarchy import train_hierarchy, usable_modes
from hdeval.judge import CachedJudge, open_decomposer, open_judge
from hdeval.params import Params
from hdeval.results import baseline_summary
from hdeval.text_scorers import BASELINES, HDEVAL, make_scorers, without_likelihood
from hdeval.training import ablation_predictions, agreements, export_evaluator, select_and_fit


def train_evaluator(
    params: Params,
    judge: CachedJudge,
    out_dir: Path,
    work_dir: Path,
    progress: bool = True,
    gates: bool = True,
) -> dict:
    """Train, export, evaluate and gate an evaluator; returns the metrics.

    The metrics hold the layers' reports, the model selection (with its CV table), the held-out
    agreement of the bundle and of every ablation and, with ``gates``, the baselines, DHP and
    the acceptance verdicts. They are written to ``work_dir/metrics.json`` before the gates are
    enforced: a refused bundle raises :class:`~hdeval.errors.AcceptanceError` when
    ``acceptance.on_failure`` is ``fail``, and the bundle and metrics stay written, as under
    ``dvc repro``.
    """
    train, test = load_split(params.data)
    problem = judge.likelihood_problem()
    hierarchy, left_out = usable_modes(params.hierarchy, problem)
    params = params.model_copy(update={"hierarchy": hierarchy})
    seed = hierarchy.seed
    layers = train_hierarchy(
        aspects_tree(params.data),
        train,
        judge,
        params.task,
        hierarchy,
        progress,
        partial(open_decomposer, hierarchy.decomposer, params.llm, judge),
    )
    final = layers[-1]
    hierarchy = hierarchy.model_copy(update={"modes": final.report.modes})  # modes kept to the end
    params = params.model_copy(update={"hierarchy": hierarchy})
    train_x = final.run.features
    selected = select_and_fit(params, final.tree, train_x, train, work_dir / "tune")
    export_evaluator(out_dir, selected, train, params, judge.identity)
    evaluator = Evaluator.load(out_dir, judge)
    scores = evaluator.score_samples(test.samples, progress=progress)
    unconditioned = UNCONDITIONED in train_x.columns  # kept when pruning dropped likelihood
    scorer = CriterionScorer(
        judge, params.task, hierarchy.modes, unconditioned, Profile.of(hierarchy)
    )
    test_x = scorer.score(test.samples, final.tree, progress=progress)
    predictions = ablation_predictions(
        final.tree,
        train_x,
        train,
        test_x.features.dropna(),
        selected.kind,
        selected.params,
        seed,
        params.data.ranges(),
        params.aggregator.nonnegative,
    )
    predictions[HDEVAL] = scores.aspects
    metrics: dict = {
        "layers": [layer.report.to_dict() for layer in layers],
        "selection": selected.summary(),
        "held_out": agreements(predictions, test, params.evaluate.bootstrap, seed),
        "rows": {"train": len(train), "test": len(test)},
    }
    verdicts = []
    if gates:
        verdicts = _gates(params, judge, evaluator, predictions, test, work_dir, metrics)
        left_out.update(metrics.pop("left_out"))
    metrics["left_out"] = left_out
    metrics["llm"] = {"identity": judge.identity, **judge.cost()}
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")
    metrics["acceptance_messages"] = enforce(verdicts, params.acceptance.on_failure)
    return metrics


def _gates(
    params: Params,
    judge: CachedJudge,
    evaluator: Evaluator,
    predictions: dict,
    test: LabelledData,
    work_dir: Path,
    metrics: dict,
) -> list[Verdict]:
    """The baselines and DHP stages and both gates' verdicts (added to ``metrics``)."""
    seed, data = params.hierarchy.seed, params.data
    layer_one = aspects_tree(data)
    problem = judge.likelihood_problem()
    names, left_baselines = without_likelihood(BASELINES, problem)
    baselines = make_scorers(names, judge, params.task, layer_one, data.aspects)
    table = compare(
        {**predictions, **{s.name: s for s in baselines}},
        test.samples,
        test.targets,
        n_boot=params.evaluate.bootstrap,
        seed=seed,
    )
    names, left_dhp = without_likelihood([HDEVAL, *params.dhp.baselines], problem)
    dhp_scorers = make_scorers(
        names,
        judge,
        params.task,
        layer_one,
        data.aspects,
        evaluator=evaluator,
    )
    settings = params.dhp
    labels = load_labels(data.path, data.aspects, data.score_range)
    perturber = None
    if settings.llm_perturbations:
        perturber = open_judge(settings.perturber, judge.cache) if settings.perturber else judge
    samples = dhp_samples(labels, settings)
    dhp = run_suite(dhp_scorers, samples, settings, perturber, work_dir / "dhp")
    verdicts = [
        dhp_verdict(HDEVAL, dhp[HDEVAL].D_min_ew, dhp[HDEVAL].table, params.acceptance),
        baseline_verdict(table, params.acceptance, HDEVAL),
    ]
    metrics["left_out"] = {
        **{f"baseline {k}": v for k, v in left_baselines.items()},
        **{f"DHP {k}": v for k, v in left_dhp.items()},
    }
    metrics["baselines"] = baseline_summary(table)
    metrics["dhp"] = summary(dhp)
    metrics["acceptance"] = {
        v.gate: {"accepted": v.accepted, "message": v.message, **v.figures} for v in verdicts
    }
    return verdicts
