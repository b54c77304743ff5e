"""DHP discernment of any :class:`~hdeval.baselines.registry.TextScorer` (Wang et al., DHP
benchmark).

Good texts are degraded by the perturbations of :mod:`hdeval.dhp.catalogue`; the scorer scores
originals and perturbed copies, and for each perturbation and metric a one-sided Wilcoxon
signed-rank test asks whether originals score higher. The p-values are combined by the harmonic
mean p-value, equally weighted (``p``) or with expert weights (``p_ew``), and turned into
``D = log_0.05(p)``: D > 1 separates original and perturbed texts at the 0.05 level. Probes
(``instruction_injection``) are not part of the averages; their table reports ``D_reward``.
The originals are drawn by :mod:`hdeval.dhp.originals`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hdeval.baselines.registry import TextScorer
from hdeval.dhp.catalogue import perturb_all
from hdeval.dhp.perturbation import Perturbation
from hdeval.dhp.statistics import (
    _finite_min,
    discernment,
    harmonic_mean_p,
    level_weighted_average,
    missed_and_rewarded,
    wilcoxon_p,
)
from hdeval.dhp.weights import resolve_weights
from hdeval.errors import ConfigError, HDEvalError
from hdeval.llm.judge import CachedJudge

ORIGINAL = "original"
_ID_SEP = "/"


# --------------------------------------------------------------------------- run


@dataclass
class DHPResult:
    """Discernment of one scorer.

    ``table`` has one row per perturbation (index: name) with its level, severity, method,
    ``probe`` flag, ``n_texts`` (perturbed texts scored), ``n_dropped``, per metric ``p:<m>``,
    ``lower:<m>`` (the share of texts the perturbation scored lower), ``lower_mean`` (the share
    whose mean over the metrics it scored lower), ``delta:<m>`` (mean original minus perturbed
    score), the combined ``p``/``D`` and ``p_ew``/``D_ew``, and for probes
    ``D_reward``/``D_reward_ew`` (perturbed scored higher).
    """

    scorer: str
    metrics: list[str]
    table: pd.DataFrame
    D_avg: float
    D_min: float
    D_avg_ew: float
    D_min_ew: float
    drops: dict[str, dict[str, int]]
    n_samples: int
    weights: dict[str, dict[str, float]] = field(default_factory=dict)
    scores: pd.DataFrame | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (NaN and infinities become None)."""
        rows = []
        for name, row in self.table.iterrows():
            rows.append({"perturbation": str(name), **{k: _json(v) for k, v in row.items()}})
        return {
            "scorer": self.scorer,
            "metrics": list(self.metrics),
            "n_samples": self.n_samples,
            "D_avg": _json(self.D_avg),
            "D_min": _json(self.D_min),
            "D_avg_ew": _json(self.D_avg_ew),
            "D_min_ew": _json(self.D_min_ew),
            "perturbations": rows,
            "drops": {k: dict(v) for k, v in self.drops.items()},
            "weights": self.weights,
            "failed": failed_perturbations(self),
        }


def _json(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _combined_samples(
    samples: pd.DataFrame, tables: Mapping[str, pd.DataFrame]
) -> tuple[pd.DataFrame, dict[str, pd.Index]]:
    """Originals and every perturbed copy in one table (ids ``<variant>/<id>``).

    Scoring them in one call lets a scorer share work per document (the source prefix).
    """
    parts, ids = [], {}
    for variant, table in [(ORIGINAL, samples), *tables.items()]:
        part = table.copy()
        part.index = pd.Index([f"{variant}{_ID_SEP}{i}" for i in table.index], dtype=object)
        ids[variant] = part.index
        parts.append(part)
    return pd.concat(parts), ids


def run_dhp(
    scorer: TextScorer,
    samples: pd.DataFrame,
    perturbations: Sequence[Perturbation],
    perturber: CachedJudge | None,
    seed: int,
    weights: Mapping[str, Mapping[str, float]] | None = None,
) -> DHPResult:
    """Perturb ``samples``, score originals and perturbed copies with ``scorer``, test, combine.

    ``weights`` maps a perturbation name or family to per-metric expert weights (default
    :data:`DEFAULT_EXPERT_WEIGHTS`). Texts a perturbation could not change are dropped and
    counted; the tests use the remaining pairs.
    """
    metrics = list(scorer.metrics)
    if not metrics:
        raise ConfigError(f"scorer {scorer.name!r} has no metrics")
    if not samples.index.is_unique:
        raise ConfigError("sample ids must be unique")
    tables, drops = perturb_all(samples, perturbations, perturber, seed)
    combined, ids = _combined_samples(samples, tables)
    scores = scorer.score(combined)
    missing = [m for m in metrics if m not in scores.columns]
    if missing:
        raise HDEvalError(f"scorer {scorer.name!r} returned no column for metrics {missing}")
    scores = scores.reindex(combined.index)[metrics].astype(float)
    original = scores.loc[ids[ORIGINAL]].set_axis(samples.index)

    rows, used_weights = [], {}
    for pert in perturbations:
        perturbed = scores.loc[ids[pert.name]].set_axis(tables[pert.name].index)
        before = original.loc[perturbed.index]
        ew, source = resolve_weights(pert.name, metrics, weights)
        used_weights[pert.name] = ew
        row = _perturbation_row(pert, before, perturbed, metrics, ew)
        row.update(n_dropped=sum(drops[pert.name].values()), weights_source=source)
        rows.append(row)
    table = pd.DataFrame(rows).set_index("perturbation")
    dhp = table[~table["probe"]]
    levels = dhp["level"].tolist()
    return DHPResult(
        scorer=scorer.name,
        metrics=metrics,
        table=table,
        D_avg=level_weighted_average(dhp["D"].tolist(), levels),
        D_min=_finite_min(dhp["D"].tolist()),
        D_avg_ew=level_weighted_average(dhp["D_ew"].tolist(), levels),
        D_min_ew=_finite_min(dhp["D_ew"].tolist()),
        drops=drops,
        n_samples=len(samples),
        weights=used_weights,
        scores=scores,
    )


def _perturbation_row(
    pert: Perturbation,
    original: pd.DataFrame,
    perturbed: pd.DataFrame,
    metrics: Sequence[str],
    ew: Mapping[str, float],
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "perturbation": pert.name,
        "level": pert.level,
        "severity": pert.severity,
        "method": pert.method,
        "probe": bool(pert.probe),
        "n_texts": len(perturbed),
    }
    p, p_reward, pairs = [], [], []
    for m in metrics:
        a, b = original[m].to_numpy(), perturbed[m].to_numpy()
        valid = np.isfinite(a) & np.isfinite(b)
        pairs.append(int(valid.sum()))
        p.append(wilcoxon_p(a, b))
        p_reward.append(wilcoxon_p(b, a) if pert.probe else math.nan)
        row[f"p:{m}"] = p[-1]
        row[f"delta:{m}"] = float(np.mean(a[valid] - b[valid])) if valid.any() else math.nan
        row[f"lower:{m}"] = float(np.mean(b[valid] < a[valid])) if valid.any() else math.nan
    a, b = original[list(metrics)].to_numpy(float), perturbed[list(metrics)].to_numpy(float)
    valid = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    means = a[valid].mean(axis=1), b[valid].mean(axis=1)
    row["lower_mean"] = float(np.mean(means[1] < means[0])) if valid.any() else math.nan
    w = [ew[m] for m in metrics]
    row["n_pairs"] = min(pairs) if pairs else 0
    row["p"] = harmonic_mean_p(p)
    row["D"] = discernment(row["p"])
    row["p_ew"] = harmonic_mean_p(p, w)
    row["D_ew"] = discernment(row["p_ew"])
    row["D_reward"] = discernment(harmonic_mean_p(p_reward)) if pert.probe else math.nan
    row["D_reward_ew"] = discernment(harmonic_mean_p(p_reward, w)) if pert.probe else math.nan
    return row


def failed_perturbations(
    result: DHPResult, threshold: float = 1.0, probe_threshold: float = 1.0
) -> list[str]:
    """Perturbations the scorer fails: the DHP ones it did not discern, then the probes it
    rewarded (:func:`~hdeval.dhp.statistics.missed_and_rewarded`)."""
    missed, rewarded = missed_and_rewarded(result.table, threshold, probe_threshold)
    return missed + rewarded


# --------------------------------------------------------------------------- plot


def plot_dhp(result: DHPResult, path: str | Path) -> Path:
    """Bar chart (PNG) of D and D^EW per perturbation with the D = 1 line.

    Probes are drawn hatched with their ``D_reward`` (lower is better).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    table = result.table
    names = [str(n) for n in table.index]
    probe = table["probe"].to_numpy(dtype=bool)
    d = np.where(probe, table["D_reward"], table["D"]).astype(float)
    d_ew = np.where(probe, table["D_reward_ew"], table["D_ew"]).astype(float)
    finite = np.concatenate([d[np.isfinite(d)], d_ew[np.isfinite(d_ew)], [1.0]])
    top = float(finite.max()) * 1.15 + 0.1
    d, d_ew = np.nan_to_num(d, nan=0.0, posinf=top), np.nan_to_num(d_ew, nan=0.0, posinf=top)

    fig = Figure(figsize=(max(6.0, 0.7 * len(names) + 2), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x = np.arange(len(names))
    ax.bar(x - 0.2, d, 0.4, label="D", color="tab:blue")
    ax.bar(x + 0.2, d_ew, 0.4, label="D^EW", color="tab:orange")
    for i in np.flatnonzero(probe):
        for offset, value in ((-0.2, d[i]), (0.2, d_ew[i])):
            ax.bar(x[i] + offset, value, 0.4, fill=False, hatch="//", edgecolor="black")
    ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="D = 1 (p = 0.05)")
    labels = [f"{n}\n(probe: reward D)" if p else n for n, p in zip(names, probe, strict=True)]
    ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("discernment D = log_0.05(p)")
    ax.set_ylim(0, top)
    ax.set_title(
        f"DHP {result.scorer}: D_avg={result.D_avg:.2f} D_min={result.D_min:.2f} "
        f"D_avg^EW={result.D_avg_ew:.2f} D_min^EW={result.D_min_ew:.2f}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
