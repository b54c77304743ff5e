"""End to end: human labels -> criteria tree -> features -> tuned aggregator -> bundle + metrics.

The DVC pipeline runs these steps as separate stages; ``train_evaluator`` runs them in one
process for users who do not use DVC (``hdeval train``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from hdeval.acceptance import DHPParams
from hdeval.aggregators import averaged_baseline
from hdeval.bundle import export_bundle
from hdeval.cache import ResultCache
from hdeval.config import LLMConfig
from hdeval.criteria import CriteriaTree
from hdeval.data import LabelledData, load_labels, split_by_document, subsample_documents
from hdeval.llm.types import LLMBackend
from hdeval.metrics import agreement
from hdeval.prompts import TaskSpec
from hdeval.training import (
    HierarchyParams,
    feature_subsets,
    fit_aggregator,
    make_scorer,
    train_hierarchy,
)

log = logging.getLogger(__name__)


class DataParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path = Path("data/summeval/summeval.jsonl")
    new_labels: list[Path] = Field(default_factory=list)
    aspects: list[str] = Field(
        default_factory=lambda: ["coherence", "consistency", "fluency", "relevance"]
    )
    score_range: tuple[float, float] = (1.0, 5.0)
    criteria: Path = Path("data/summeval/aspects.yaml")
    n_docs: int | None = 12
    test_fraction: float = Field(0.34, gt=0, lt=1)
    seed: int = 0


class AggregatorParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = "linear"
    n_trials: int = Field(20, ge=0)
    cv_folds: int = Field(5, ge=2)


class EvaluateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bootstrap: int = Field(200, ge=0)


class TrainConfig(BaseModel):
    """Everything ``train_evaluator`` needs; the same sections as ``params.yaml``."""

    model_config = ConfigDict(extra="forbid")

    data: DataParams = Field(default_factory=DataParams)
    task: TaskSpec = Field(default_factory=TaskSpec)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    hierarchy: HierarchyParams = Field(default_factory=HierarchyParams)
    aggregator: AggregatorParams = Field(default_factory=AggregatorParams)
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams)
    dhp: DHPParams = Field(default_factory=DHPParams)


def load_split(config: DataParams) -> tuple[LabelledData, LabelledData]:
    """Labels (plus any new label files), subsampled by document, split by document."""
    from hdeval.data import merge_labels

    data = load_labels(config.path, config.aspects, config.score_range)
    for extra in config.new_labels:
        data = merge_labels(data, load_labels(extra, config.aspects, config.score_range))
    data = subsample_documents(data, config.n_docs, config.seed)
    return split_by_document(data, config.test_fraction, config.seed)


def ablation_predictions(
    tree: CriteriaTree,
    train_x: pd.DataFrame,
    train: LabelledData,
    test_x: pd.DataFrame,
    kind: str,
    params: dict,
    seed: int,
) -> dict[str, pd.DataFrame]:
    """Held-out predictions of every ablation (:func:`feature_subsets`) and of averaged scores.

    ``hdeval`` uses the tuned ``params``; the ablations use the aggregator's defaults.
    """
    predictions = {}
    for name, columns in feature_subsets(tree, list(train_x.columns)).items():
        model = fit_aggregator(
            kind, params if name == "hdeval" else {}, train_x[columns], train.targets, seed
        )
        predictions[name] = pd.DataFrame(
            model.predict(test_x[columns].to_numpy(dtype=float)),
            index=test_x.index,
            columns=train.aspects,
        )
    prompt_columns = [c for c in test_x.columns if c.startswith("prompt:")]
    if prompt_columns:
        averaged = averaged_baseline(test_x[prompt_columns], tree, source="prompt")
        averaged.columns = train.aspects
        predictions["averaged_scores"] = averaged
    return predictions


def agreements(
    predictions: dict[str, pd.DataFrame], test: LabelledData, n_boot: int, seed: int
) -> dict:
    """Agreement with the human scores of each named prediction table."""
    return {
        name: agreement(
            predicted.dropna(),
            test.targets,
            test.samples["doc_id"],
            test.samples["system_id"],
            n_boot,
            seed,
        )
        for name, predicted in predictions.items()
    }


def ablation_metrics(
    tree: CriteriaTree,
    train_x: pd.DataFrame,
    train: LabelledData,
    test_x: pd.DataFrame,
    test: LabelledData,
    kind: str,
    params: dict,
    seed: int,
    n_boot: int,
) -> dict:
    """Held-out agreement of the full model and of the ablations."""
    predictions = ablation_predictions(tree, train_x, train, test_x, kind, params, seed)
    return agreements(predictions, test, n_boot, seed)


def tune_and_fit(
    config: TrainConfig, features: pd.DataFrame, train: LabelledData, work_dir: Path
) -> tuple[object, dict]:
    """Tune the aggregator with document-grouped CV (study in ``work_dir``), fit it on all rows."""
    from hdeval.tuning import tune

    targets = train.targets.loc[features.index]
    groups = train.samples.loc[features.index, "doc_id"].to_numpy()
    kind, seed = config.aggregator.kind, config.hierarchy.seed
    work_dir.mkdir(parents=True, exist_ok=True)
    params: dict = {}
    if config.aggregator.n_trials:
        params = tune(
            kind,
            features,
            targets,
            groups,
            config.aggregator.n_trials,
            seed,
            work_dir / "optuna.sqlite",
            f"{kind}-{train.fingerprint()[:12]}",
            n_splits=min(config.aggregator.cv_folds, len(set(groups))),
        )
    return fit_aggregator(kind, params, features, targets, seed), params


def export_evaluator(
    out_dir: Path,
    model,
    tree: CriteriaTree,
    features: pd.DataFrame,
    train: LabelledData,
    config: TrainConfig,
    llm_identity: str,
    metrics: dict | None = None,
) -> Path:
    """Write the bundle of a fitted aggregator, with a parity sample and SHAP background."""
    from hdeval.explain import make_background

    return export_bundle(
        out_dir,
        model,
        tree,
        list(features.columns),
        train.aspects,
        llm_identity=llm_identity,
        task=config.task,
        modes=list(config.hierarchy.modes),
        unconditioned=config.hierarchy.unconditioned,
        training_data=train.fingerprint(),
        metrics=metrics,
        sample=features.to_numpy(dtype=float),
        background=make_background(features),
    )


def train_evaluator(
    config: TrainConfig,
    backend: LLMBackend,
    cache: ResultCache,
    out_dir: Path,
    work_dir: Path,
    progress: bool = True,
) -> dict:
    """Run Algorithm 1, tune and fit the aggregator, export the bundle; return the metrics."""
    train, test = load_split(config.data)
    tree = CriteriaTree.from_yaml(config.data.criteria)
    missing = set(config.data.aspects) - {c.id for c in tree.layer(1)}
    if missing:
        raise ValueError(
            f"{config.data.criteria}: no layer-1 criterion for aspects {sorted(missing)}"
        )
    hp = config.hierarchy
    tree, run, reports = train_hierarchy(
        tree, train, backend, cache, config.task, config.task.description, hp, progress
    )
    train_x = run.features
    test_x = (
        make_scorer(backend, cache, config.task, hp)
        .score(test.samples, tree, progress=progress)
        .features
    )
    model, params = tune_and_fit(config, train_x, train, work_dir)
    kind = config.aggregator.kind
    metrics = {
        "layers": [r.to_dict() for r in reports],
        "aggregator": {"kind": kind, "params": {k: str(v) for k, v in params.items()}},
        "held_out": ablation_metrics(
            tree, train_x, train, test_x, test, kind, params, hp.seed, config.evaluate.bootstrap
        ),
        "n_train": len(train),
        "n_test": len(test),
        "llm": {"identity": backend.identity, "cache": cache.info()["results"]},
    }
    export_evaluator(
        out_dir,
        model,
        tree,
        train_x,
        train,
        config,
        backend.identity,
        metrics["held_out"]["hdeval"]["average"],
    )
    return metrics
