"""The DVC pipeline's stages. Each reads only its declared deps and rewrites its outs completely.

``pipelines/<stage>.py`` are one-line calls into these functions; the LLM result cache lives
outside the pipeline's outs (``HDEVAL_HOME``), so a re-run only pays for texts and criteria that
were never scored.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd

from hdeval.cache import ResultCache
from hdeval.config import load_yaml_model
from hdeval.criteria import CriteriaTree
from hdeval.data import LabelledData, load_labels, save_labels
from hdeval.errors import ConfigError
from hdeval.workflow import (
    TrainConfig,
    ablation_metrics,
    export_evaluator,
    load_split,
    tune_and_fit,
)

log = logging.getLogger(__name__)

PARAMS = Path("params.yaml")
WORK = Path("work")
PREPARED = WORK / "prepared"
LAYERS = WORK / "layers"
TUNE = WORK / "tune"
BUNDLE = Path("models") / "evaluator"
METRICS = Path("metrics.json")
PLOTS = Path("plots")


def config() -> TrainConfig:
    return load_yaml_model(PARAMS, TrainConfig)


def _fresh(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def _labels(cfg: TrainConfig, name: str) -> LabelledData:
    return load_labels(PREPARED / f"{name}.jsonl", cfg.data.aspects, cfg.data.score_range)


def _llm(cfg: TrainConfig):
    from hdeval.llm.factory import make_backend

    return make_backend(cfg.llm), ResultCache()


def _cost(cache: ResultCache) -> dict:
    total = cache.hits + cache.misses
    return {
        "llm_calls": cache.misses,
        "cache_hits": cache.hits,
        "cache_hit_rate": cache.hits / total if total else 1.0,
    }


# --------------------------------------------------------------------------- stages
def prepare() -> None:
    """Validate the labels (plus new label files), subsample and split them by document."""
    cfg = config()
    train, test = load_split(cfg.data)
    out = _fresh(PREPARED)
    save_labels(train, out / "train.jsonl")
    save_labels(test, out / "test.jsonl")
    _write_json(
        out / "split.json",
        {
            "train_rows": len(train),
            "test_rows": len(test),
            "train_documents": sorted(set(train.samples["doc_id"])),
            "test_documents": sorted(set(test.samples["doc_id"])),
        },
    )
    log.info("prepared %d train and %d test rows", len(train), len(test))


def layer(number: int) -> None:
    """One iteration of Algorithm 1: grow the tree, score, fit the proxy, select for the next."""
    from hdeval.decompose import undecomposed
    from hdeval.training import criteria_to_expand, grow, make_scorer, proxy_report

    cfg = config()
    hp = cfg.hierarchy
    if not 1 <= number <= hp.layers:
        raise ConfigError(
            f"dvc.yaml runs layer {number} but params hierarchy.layers is {hp.layers}; "
            "make the layer list in dvc.yaml match it"
        )
    train = _labels(cfg, "train")
    backend, cache = _llm(cfg)
    leaves: list[str] = []
    if number == 1:
        tree = CriteriaTree.from_yaml(cfg.data.criteria)
    else:
        previous = LAYERS / str(number - 1)
        selected = json.loads((previous / "report.json").read_text())["selected"]
        tree = grow(
            CriteriaTree.from_yaml(previous / "tree.yaml"),
            number,
            selected,
            backend,
            cache,
            cfg.task.description,
            hp.children,
        )
        leaves = undecomposed(tree, criteria_to_expand(tree, number, selected))
    run = make_scorer(backend, cache, cfg.task, hp).score(train.samples, tree)
    report = proxy_report(run.features, train, tree, number, hp)
    out = _fresh(LAYERS / str(number))
    tree.to_yaml(out / "tree.yaml")
    run.features.to_csv(out / "features.csv")
    _write_json(
        out / "report.json",
        {
            **report.to_dict(),
            **_cost(cache),
            "failed_scores": len(run.failures),
            "not_decomposed": leaves,
            "llm_identity": backend.identity,
        },
    )
    print(f"layer {number}: {run.summary()}")


def _final_layer(cfg: TrainConfig) -> Path:
    return LAYERS / str(cfg.hierarchy.layers)


def train() -> None:
    """Tune the aggregator with document-grouped CV, fit it on all training rows, export."""
    cfg = config()
    data = _labels(cfg, "train")
    final = _final_layer(cfg)
    tree = CriteriaTree.from_yaml(final / "tree.yaml")
    features = pd.read_csv(final / "features.csv", index_col=0)
    features.index = features.index.astype(str)
    model, params = tune_and_fit(cfg, features, data, TUNE)
    _write_json(TUNE / "best_params.json", {"kind": cfg.aggregator.kind, "params": params})
    identity = json.loads((final / "report.json").read_text())["llm_identity"]
    export_evaluator(BUNDLE, model, tree, features, data, cfg, identity)
    print(f"evaluator bundle written to {BUNDLE}")


def evaluate() -> None:
    """Score the held-out documents with the exported bundle; correlations, ablations, plots."""
    from hdeval.evaluator import Evaluator
    from hdeval.metrics import agreement

    cfg = config()
    train_data, test = _labels(cfg, "train"), _labels(cfg, "test")
    backend, cache = _llm(cfg)
    evaluator = Evaluator.load(BUNDLE, backend, cache)
    scores = evaluator.score_samples(test.samples)
    n_boot, seed = cfg.evaluate.bootstrap, cfg.hierarchy.seed
    held_out = {
        "evaluator": agreement(
            scores.aspects.dropna(),
            test.targets,
            test.samples["doc_id"],
            test.samples["system_id"],
            n_boot,
            seed,
        )
    }
    final = _final_layer(cfg)
    train_x = pd.read_csv(final / "features.csv", index_col=0)
    train_x.index = train_x.index.astype(str)
    best = json.loads((TUNE / "best_params.json").read_text())
    held_out.update(
        ablation_metrics(
            evaluator.tree,
            train_x,
            train_data,
            scores.criteria,
            test,
            best["kind"],
            best["params"],
            seed,
            n_boot,
        )
    )
    layers = [
        json.loads((LAYERS / str(n) / "report.json").read_text())
        for n in range(1, cfg.hierarchy.layers + 1)
    ]
    metrics = {
        "held_out": held_out,
        "layers": {
            str(r["layer"]): {"cv_pearson": r["cv_pearson"], "n_features": r["n_features"]}
            for r in layers
        },
        "llm": {
            **_cost(cache),
            "failed_scores": len(scores.failures),
            "identity": backend.identity,
        },
        "rows": {"train": len(train_data), "test": len(test)},
    }
    _write_json(METRICS, metrics)
    _write_plots(scores.aspects, test, layers)
    avg = held_out["evaluator"]["average"]
    print(json.dumps({level: avg[level] for level in ("dataset", "summary")}, indent=2))


def _write_plots(predicted: pd.DataFrame, test: LabelledData, layers: list[dict]) -> None:
    out = _fresh(PLOTS)
    rows = []
    for aspect in predicted.columns:
        for sample_id, value in predicted[aspect].dropna().items():
            rows.append(
                {
                    "aspect": aspect,
                    "id": sample_id,
                    "predicted": value,
                    "human": float(test.targets.at[sample_id, aspect]),
                }
            )
    pd.DataFrame(rows).to_csv(out / "predicted_vs_human.csv", index=False)
    pd.DataFrame([{"layer": r["layer"], "cv_pearson": r["cv_pearson"]} for r in layers]).to_csv(
        out / "correlation_by_layer.csv", index=False
    )
    final = layers[-1]["importances"]
    pd.DataFrame(
        [{"criterion": k, "importance": v} for k, v in sorted(final.items(), key=lambda kv: -kv[1])]
    ).to_csv(out / "importance.csv", index=False)
