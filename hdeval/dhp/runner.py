"""Running DHP for several scorers on the same perturbed texts: tables, charts, summary figures.

The pipeline's ``dhp`` stage and ``hdeval dhp`` both call :func:`run_suite`; the acceptance gate
on the result is :func:`hdeval.acceptance.dhp_verdict`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from hdeval.baselines.registry import TextScorer
from hdeval.data import LabelledData, load_labels
from hdeval.data.splitting import load_run_labels
from hdeval.dhp.benchmark import (
    DHPResult,
    _combined_samples,
    failed_perturbations,
    plot_dhp,
    run_dhp,
)
from hdeval.dhp.catalogue import perturb_all, perturbations_for
from hdeval.dhp.originals import best_rated_samples, reference_samples
from hdeval.dhp.weights import EXPERT_WEIGHTS
from hdeval.llm.judge import CachedJudge
from hdeval.params import DataParams, DHPParams

log = logging.getLogger(__name__)


def stage_labels(
    data: DataParams, with_references: bool, held_out: LabelledData | Path
) -> LabelledData:
    """The rows the dhp stage draws its originals from: the rows of the documents the tree never
    saw (``held_out``, or the file of them) for a bundle that reads the references, as its
    originals are texts of the run (:func:`dhp_samples`); otherwise every row of ``data.path``
    in ``data.documents``."""
    if not with_references:
        return load_run_labels(data)
    if isinstance(held_out, Path):
        return load_labels(held_out, data.aspects, data.score_range)
    return held_out


def dhp_samples(
    data: LabelledData, params: DHPParams, with_references: bool = False
) -> pd.DataFrame:
    """The originals DHP perturbs: one reference text per drawn document, or where a scorer
    reads the references (``with_references``), the document's best-rated text beside them."""
    n = min(params.n_texts, data.samples["doc_id"].nunique())
    draw = best_rated_samples if with_references else reference_samples
    return draw(data, n, params.seed)


def rule_perturbed_samples(
    data: LabelledData, params: DHPParams, with_references: bool = False
) -> pd.DataFrame:
    """The originals and their rule-made perturbed copies, as DHP scores them in one table
    (LLM-made perturbations left out: they need the perturber's replies)."""
    samples = dhp_samples(data, params, with_references)
    perturbations = perturbations_for(params.task, False, params.probes)
    tables, _ = perturb_all(samples, perturbations, None, params.seed)
    return _combined_samples(samples, tables)[0]


def run_suite(
    scorers: Sequence[TextScorer],
    samples: pd.DataFrame,
    params: DHPParams,
    perturber: CachedJudge | None,
    out_dir: Path,
) -> dict[str, DHPResult]:
    """DHP for every scorer on the same perturbed texts; a CSV table and a PNG chart per scorer.

    Perturbed texts are cached, so every scorer after the first sees exactly the same texts.
    """
    perturbations = perturbations_for(params.task, params.llm_perturbations, params.probes)
    weights = EXPERT_WEIGHTS[params.task] if params.weights is None else params.weights
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for scorer in scorers:
        log.info(
            "DHP of %s on %d texts x %d perturbations",
            scorer.name,
            len(samples),
            len(perturbations),
        )
        result = run_dhp(scorer, samples, perturbations, perturber, params.seed, weights)
        result.table.to_csv(out_dir / f"{scorer.name}.csv")
        plot_dhp(result, out_dir / f"{scorer.name}.png")
        results[scorer.name] = result
    return results


def summary(results: Mapping[str, DHPResult]) -> dict:
    """JSON-ready D figures per scorer, with the perturbations each did not discern (D^EW < 1)."""
    return {
        name: {
            "D_avg": _finite(r.D_avg),
            "D_min": _finite(r.D_min),
            "D_avg_ew": _finite(r.D_avg_ew),
            "D_min_ew": _finite(r.D_min_ew),
            "n_texts": r.n_samples,
            "failed": failed_perturbations(r),
            "dropped": {k: sum(v.values()) for k, v in r.drops.items() if v},
            "lower": _lower_shares(r),
        }
        for name, r in results.items()
    }


def _lower_shares(result: DHPResult) -> dict[str, dict[str, float | None]]:
    """Per perturbation and metric, the share of texts the perturbed copy scored lower, and
    (``mean``) the share whose mean over the metrics it scored lower."""
    return {
        name: {
            **{m: _finite(row[f"lower:{m}"]) for m in result.metrics if f"lower:{m}" in row},
            **({"mean": _finite(row["lower_mean"])} if "lower_mean" in row else {}),
        }
        for name, row in result.table.iterrows()
    }


DHP_FIGURES = ("D_avg", "D_min", "D_avg_ew", "D_min_ew")


def dhp_markdown(figures: Mapping[str, Mapping]) -> str:
    """A markdown table of :func:`summary` figures: a row per scorer."""
    lines = [
        "| scorer | texts | D_avg | D_min | D_avg^EW | D_min^EW | not discerned |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in figures.items():
        cells = ["-" if row[k] is None else f"{row[k]:.2f}" for k in DHP_FIGURES]
        failed = ", ".join(row["failed"]) or "none"
        lines.append(f"| {name} | {row['n_texts']} | " + " | ".join(cells) + f" | {failed} |")
    return "\n".join(lines) + "\n"


def _finite(value: float) -> float | None:
    return None if value != value or value in (float("inf"), float("-inf")) else float(value)


__all__ = ["dhp_markdown", "dhp_samples", "run_suite", "summary"]
