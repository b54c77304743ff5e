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
from hdeval.llm.types import LLMBackend
from hdeval.workflow import (
    TrainConfig,
    ablation_predictions,
    agreements,
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
EVALUATE = WORK / "evaluate"
BASELINES = WORK / "baselines"
DHP = WORK / "dhp"
AGGREGATOR = "aggregator.joblib"
BUNDLE = Path("models") / "evaluator"
METRICS = Path("metrics.json")
RESULTS = Path("results.md")
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


def _cost(cache: ResultCache, backend: LLMBackend) -> dict:
    """What a stage asked of the judge: result-cache misses (LLM calls), hits and model tokens."""
    total = cache.hits + cache.misses
    return {
        "llm_calls": cache.misses,
        "cache_hits": cache.hits,
        "cache_hit_rate": cache.hits / total if total else 1.0,
        "tokens": backend.tokens.to_dict(),
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
            **_cost(cache, backend),
            "failed_scores": len(run.failures),
            "truncated_samples": run.truncated_samples,
            "not_decomposed": leaves,
            "llm_identity": backend.identity,
        },
    )
    print(f"layer {number}: {run.summary()}")


def _final_layer(cfg: TrainConfig) -> Path:
    return LAYERS / str(cfg.hierarchy.layers)


def _train_features(cfg: TrainConfig) -> pd.DataFrame:
    features = pd.read_csv(_final_layer(cfg) / "features.csv", index_col=0)
    features.index = features.index.astype(str)
    return features


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def train() -> None:
    """Tune the aggregator with document-grouped CV, fit it on all training rows, export."""
    import joblib

    cfg = config()
    data = _labels(cfg, "train")
    final = _final_layer(cfg)
    tree = CriteriaTree.from_yaml(final / "tree.yaml")
    features = _train_features(cfg)
    model, params = tune_and_fit(cfg, features, data, TUNE)
    _write_json(TUNE / "best_params.json", {"kind": cfg.aggregator.kind, "params": params})
    joblib.dump(model, TUNE / AGGREGATOR)
    identity = _read_json(final / "report.json")["llm_identity"]
    export_evaluator(BUNDLE, model, tree, features, data, cfg, identity)
    print(f"evaluator bundle written to {BUNDLE}")


def evaluate() -> None:
    """Score the held-out documents with the exported bundle; agreement of it and its ablations."""
    from hdeval.evaluator import Evaluator

    cfg = config()
    train_data, test = _labels(cfg, "train"), _labels(cfg, "test")
    backend, cache = _llm(cfg)
    evaluator = Evaluator.load(BUNDLE, backend, cache)
    scores = evaluator.score_samples(test.samples)
    best = _read_json(TUNE / "best_params.json")
    seed = cfg.hierarchy.seed
    complete = scores.criteria.dropna()
    predictions = ablation_predictions(
        evaluator.tree,
        _train_features(cfg),
        train_data,
        complete,
        best["kind"],
        best["params"],
        seed,
    )
    predictions["hdeval"] = scores.aspects  # the exported bundle itself, not a refit
    out = _fresh(EVALUATE)
    scores.criteria.to_csv(out / "test_features.csv")
    (out / "predictions").mkdir()
    for name, table in predictions.items():
        table.to_csv(out / "predictions" / f"{name}.csv")
    layers = [
        _read_json(LAYERS / str(n) / "report.json") for n in range(1, cfg.hierarchy.layers + 1)
    ]
    held_out = agreements(predictions, test, cfg.evaluate.bootstrap, seed)
    _write_json(
        out / "metrics.json",
        {
            "held_out": held_out,
            "layers": {
                str(r["layer"]): {"cv_pearson": r["cv_pearson"], "n_features": r["n_features"]}
                for r in layers
            },
            "llm": {
                "identity": backend.identity,
                "failed_scores": len(scores.failures),
                "truncated_samples": len({t.sample_id for t in scores.truncations}),
                "stages": {
                    **{f"layer@{r['layer']}": _stage_cost(r) for r in layers},
                    "evaluate": _cost(cache, backend),
                },
            },
            "rows": {"train": len(train_data), "test": len(test)},
        },
    )
    _write_plots(scores.aspects, test, layers)
    avg = held_out["hdeval"]["average"]
    print(json.dumps({level: avg[level] for level in ("dataset", "summary")}, indent=2))


def _stage_cost(report: dict) -> dict:
    return {k: report[k] for k in ("llm_calls", "cache_hits", "cache_hit_rate", "tokens")}


def _write_plots(predicted: pd.DataFrame, test: LabelledData, layers: list[dict]) -> None:
    out = _fresh(PLOTS / "evaluate")
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


def explain() -> None:
    """SHAP beeswarm and bar charts per aspect and the permutation importance of the aggregator."""
    import joblib

    from hdeval.explain import explain_report, load_background

    cfg = config()
    data = _labels(cfg, "train")
    features = _train_features(cfg)
    importances = pd.Series(_read_json(_final_layer(cfg) / "report.json")["importances"])
    written = explain_report(
        joblib.load(TUNE / AGGREGATOR),
        features,
        _fresh(PLOTS / "explain"),
        output_names=data.aspects,
        importances=importances,
        background=load_background(BUNDLE),
        seed=cfg.hierarchy.seed,
    )
    print(f"explanations: {', '.join(sorted(p.name for p in written.values()))}")


def baselines() -> None:
    """Direct/overall prompts, GPTScore likelihood and ROUGE vs HD-Eval on the held-out rows."""
    from hdeval.baselines import compare, default_baselines, render_markdown

    cfg = config()
    test = _labels(cfg, "test")
    backend, cache = _llm(cfg)
    tree = CriteriaTree.from_yaml(cfg.data.criteria)
    entries: dict = {}
    for path in sorted((EVALUATE / "predictions").glob("*.csv")):
        table = pd.read_csv(path, index_col=0)
        table.index = table.index.astype(str)
        entries[path.stem] = table
    scorers = default_baselines(backend, cache, cfg.task, tree, aspects=cfg.data.aspects)
    entries.update({scorer.name: scorer for scorer in scorers})
    table = compare(
        entries, test.samples, test.targets, n_boot=cfg.evaluate.bootstrap, seed=cfg.hierarchy.seed
    )
    out = _fresh(BASELINES)
    table.to_csv(out / "compare.csv", index=False)
    (out / "compare.md").write_text(
        render_markdown(table, levels=("dataset", "summary"), correlations=("pearson", "spearman"))
    )
    _write_json(out / "cost.json", _cost(cache, backend))
    print(f"comparison of {table['scorer'].nunique()} scorers written to {out / 'compare.md'}")


def dhp() -> None:
    """DHP acceptance test of the evaluator (and the LLM baselines); fails on a refusal."""
    from hdeval.acceptance import dhp_samples, gate, run_suite, summary
    from hdeval.baselines import DirectPromptScorer, LikelihoodScorer
    from hdeval.evaluator import Evaluator
    from hdeval.llm.factory import make_backend
    from hdeval.scorers import BundleScorer

    cfg = config()
    params = cfg.dhp
    backend, cache = _llm(cfg)
    data = load_labels(cfg.data.path, cfg.data.aspects, cfg.data.score_range)
    tree = CriteriaTree.from_yaml(cfg.data.criteria)
    scorers = [
        BundleScorer(Evaluator.load(BUNDLE, backend, cache)),
        DirectPromptScorer(backend, cache, cfg.task, tree, aspects=cfg.data.aspects),
        LikelihoodScorer(backend, cache, cfg.task, tree, aspects=cfg.data.aspects),
    ]
    perturber = None
    if params.llm_perturbations:
        perturber = make_backend(params.perturber) if params.perturber else backend
    out = _fresh(DHP)
    results = run_suite(scorers, dhp_samples(data, params), params, perturber, cache, out)
    cost = _cost(cache, backend)
    if perturber is not None and perturber is not backend:
        cost["perturber_tokens"] = perturber.tokens.to_dict()
    _write_json(out / "summary.json", {"scorers": summary(results, params), "llm": cost})
    print(gate(results[scorers[0].name], params))


def report() -> None:
    """metrics.json (held-out agreement, ablations, baselines, DHP, LLM cost) and results.md."""
    from hdeval.results import baseline_summary, llm_totals, results_markdown

    evaluation = _read_json(EVALUATE / "metrics.json")
    table = pd.read_csv(BASELINES / "compare.csv")
    dhp_summary = _read_json(DHP / "summary.json")
    stages = {
        **evaluation["llm"]["stages"],
        "baselines": _read_json(BASELINES / "cost.json"),
        "dhp": dhp_summary["llm"],
    }
    metrics = {
        **evaluation,
        "baselines": baseline_summary(table),
        "dhp": dhp_summary["scorers"],
        "llm": {**evaluation["llm"], "stages": stages, **llm_totals(stages)},
    }
    _write_json(METRICS, metrics)
    RESULTS.write_text(results_markdown(table, dhp_summary["scorers"], metrics))
    print(f"metrics written to {METRICS}, results table to {RESULTS}")


STAGES = {
    "prepare": prepare,
    "layer": layer,
    "train": train,
    "evaluate": evaluate,
    "explain": explain,
    "baselines": baselines,
    "dhp": dhp,
    "report": report,
}


def run(name: str, *args: str) -> None:
    """Run a stage as a script: progress logged, a failure reported in one line with exit 1."""
    import sys

    from hdeval.errors import HDEvalError

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        STAGES[name](*(int(a) for a in args))
    except HDEvalError as exc:
        print(f"stage {name} failed: {exc}", file=sys.stderr)
        sys.exit(1)
