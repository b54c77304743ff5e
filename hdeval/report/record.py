"""What a run directory holds for its report, read once, with every missing part explicit.

The report stage writes ``metrics.json`` first and renders from it; ``hdeval report`` renders a
run whose later stages did not run (``hdeval train --no-gates``) from the evaluate stage's
metrics, and the parts it lacks read as None (the page says "not run").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from hdeval.errors import HDEvalError
from hdeval.report.summary import agreement_of
from hdeval.tree.criteria import CriteriaTree
from hdeval.workspace import (
    BASELINES,
    BUNDLE,
    DHP,
    EVALUATE,
    EXPLAIN,
    LAYERS,
    METRICS,
    PLOTS,
    ROWS,
    TUNE,
)

#: The cross-fitted predictions of every row (the evaluate stage's).
PREDICTIONS = EVALUATE / "predictions" / "hdeval.csv"
#: Each text's explanation of the shipped bundle's score: one JSON object a line,
#: ``{"id", "explanation"}`` (the explain stage's).
EXPLANATIONS = EXPLAIN / "explanations.jsonl"
#: The SHAP charts of the explain stage, per aspect.
SHAP_CHARTS = PLOTS / "explain"


@dataclass
class RunRecord:
    """A run's outputs. ``None`` (or empty) where the stage that writes a part did not run."""

    root: Path
    metrics: dict
    compare: pd.DataFrame | None = None
    dhp: dict[str, pd.DataFrame] = field(default_factory=dict)
    layers: list[dict] = field(default_factory=list)
    tree: CriteriaTree | None = None
    mean_abs_shap: pd.DataFrame | None = None
    shap_charts: dict[str, dict[str, Path]] = field(default_factory=dict)
    predictions: pd.DataFrame | None = None
    held_out: pd.DataFrame | None = None
    explanations: dict[str, dict | None] = field(default_factory=dict)

    @property
    def aspects(self) -> list[str]:
        """The human aspects, in the evaluation's order."""
        return [a for a in agreement_of(self.metrics)["hdeval"] if a != "average"]

    @property
    def bundle(self) -> Path:
        return self.root / BUNDLE


def read_run(root: Path) -> RunRecord:
    """Every output of the run in ``root`` that its report shows."""
    root = Path(root)
    metrics = _metrics(root)
    compare = root / BASELINES / "compare.csv"
    record = RunRecord(
        root=root,
        metrics=metrics,
        compare=pd.read_csv(compare) if compare.is_file() and "baselines" in metrics else None,
        layers=_layers(root, list(metrics.get("layers", {}))),
        mean_abs_shap=_table(root / EXPLAIN / "mean_abs_shap.csv"),
        predictions=_table(root / PREDICTIONS),
        held_out=_held_out(root / ROWS),
        explanations=_explanations(root / EXPLANATIONS),
    )
    if "dhp" in metrics:
        record.dhp = {
            name: pd.read_csv(path, index_col=0)
            for name in metrics["dhp"]
            if (path := root / DHP / f"{name}.csv").is_file()
        }
    if record.layers:
        record.tree = CriteriaTree.from_yaml(root / LAYERS / str(len(record.layers)) / "tree.yaml")
    charts = root / SHAP_CHARTS
    for aspect in record.aspects:
        found = {k: charts / f"shap_{k}_{aspect}.png" for k in ("bar", "beeswarm")}
        if all(p.is_file() for p in found.values()):
            record.shap_charts[aspect] = found
    return record


def _metrics(root: Path) -> dict:
    """``metrics.json``, else the evaluate stage's part of it with the train stage's selection
    (a run that stopped before the report)."""
    for path in (root / METRICS, root / EVALUATE / "metrics.json"):
        if path.is_file():
            metrics = _json(path)
            selection = root / TUNE / "best_params.json"
            if "selection" not in metrics and selection.is_file():
                chosen = _json(selection)
                metrics["selection"] = {k: v for k, v in chosen.items() if k != "columns"}
            return metrics
    raise HDEvalError(
        f"{root} holds no run: it has neither {METRICS} nor {EVALUATE / 'metrics.json'} "
        "(run dvc repro or hdeval train there first)"
    )


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise HDEvalError(f"{path} is not valid JSON: {exc}") from exc


def _layers(root: Path, numbers: list[str]) -> list[dict]:
    """The reports of the run's layers (those its metrics name), layer 1 first; none where one
    is missing."""
    paths = [root / LAYERS / n / "report.json" for n in sorted(numbers, key=int)]
    if not paths or not all(p.is_file() for p in paths):
        return []
    return [json.loads(p.read_text()) for p in paths]


def _table(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    table = pd.read_csv(path, index_col=0)
    table.index = table.index.astype(str)
    return table


def _held_out(path: Path) -> pd.DataFrame | None:
    """The run's rows (id, doc_id, source, output, scores...) indexed by id."""
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    table = pd.DataFrame(rows)
    table.index = table.pop("id").astype(str)
    return table


def _explanations(path: Path) -> dict[str, dict | None]:
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {str(row["id"]): row["explanation"] for row in rows}
