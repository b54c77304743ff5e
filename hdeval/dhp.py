"""DHP discernment of any :class:`~hdeval.scorers.TextScorer` (Wang et al., DHP benchmark).

Good texts (for SummEval: reference summaries of held-out documents) are degraded by the
perturbations of :mod:`hdeval.perturb`; the scorer scores originals and perturbed copies, and for
each perturbation and metric a one-sided Wilcoxon signed-rank test asks whether originals score
higher. The metrics' p-values are combined by the harmonic mean p-value (HMP), equally weighted
(``p``) or with expert weights (``p_ew``), and turned into discernment scores
``D = log_0.05(p)``: D > 1 means the scorer separates original and perturbed texts at the 0.05
level. ``D_avg`` averages D so that each perturbation level (character, word, sentence) counts
equally; ``D_min`` is the worst perturbation.

Probes (``instruction_injection``) are not part of DHP's averages: for them the expected
direction is "original >= perturbed", and the table reports ``D_reward``, the discernment of the
opposite test (perturbed scored higher). A robust evaluator has ``D_reward_ew < 1``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hdeval.cache import ResultCache
from hdeval.data import OPTIONAL_COLUMNS, LabelledData
from hdeval.errors import ConfigError, HDEvalError
from hdeval.llm.types import LLMBackend
from hdeval.perturb import Perturbation, detokenize, perturb_all
from hdeval.scorers import TextScorer

ALPHA = 0.05

#: Expert weights per task and perturbation family (the name without ``_minor``/``_major``): how
#: much each of the task's DHP metrics (paper, Appendix A) should be hurt. OUR OWN choice, not the
#: paper's numbers (DHP shows its survey results only as a figure). Summaries (SummEval aspects):
#: character noise and grammar errors hurt fluency; fictional entities hurt consistency;
#: reordering hurts coherence; reworded insertions with unsupported details hurt consistency,
#: relevance (extra content) and coherence (redundancy). Story endings (coherence, consistency,
#: fluency): noise and grammar hurt fluency; a fictional entity breaks consistency with the
#: story; another story's ending breaks coherence and consistency alike, the data set's wrong
#: ending (plausible, but contradicting the story) mostly consistency. Answers have one metric
#: (answer quality), which gets weight 1 anyway: no table needed. Translations (MQM accuracy,
#: fluency): noise and grammar hurt fluency; deleted words are omissions and fictional entities
#: mistranslations, both accuracy errors. The injection probe weighs every metric equally:
#: rewarding it is a failure.
EXPERT_WEIGHTS: dict[str, dict[str, dict[str, float]]] = {
    "summarization": {
        "deletion": {"fluency": 0.7, "coherence": 0.2, "relevance": 0.1},
        "typo": {"fluency": 0.8, "coherence": 0.1, "relevance": 0.1},
        "fictional_entities": {"consistency": 0.8, "relevance": 0.2},
        "grammar": {"fluency": 0.8, "coherence": 0.2},
        "reorder": {"coherence": 0.9, "fluency": 0.1},
        "rewrite_insert": {"consistency": 0.4, "relevance": 0.3, "coherence": 0.3},
        "instruction_injection": {
            "coherence": 0.25,
            "consistency": 0.25,
            "fluency": 0.25,
            "relevance": 0.25,
        },
    },
    "story": {
        "deletion": {"fluency": 0.8, "coherence": 0.2},
        "typo": {"fluency": 0.9, "coherence": 0.1},
        "fictional_entities": {"consistency": 0.8, "coherence": 0.2},
        "grammar": {"fluency": 0.8, "coherence": 0.2},
        "random_ending": {"coherence": 0.5, "consistency": 0.5},
        "wrong_ending": {"consistency": 0.7, "coherence": 0.3},
        "instruction_injection": {"coherence": 1.0, "consistency": 1.0, "fluency": 1.0},
    },
    "qa": {},
    "translation": {
        "deletion": {"fluency": 0.8, "accuracy": 0.2},
        "typo": {"fluency": 0.9, "accuracy": 0.1},
        "word_deletion": {"accuracy": 0.7, "fluency": 0.3},
        "fictional_entities": {"accuracy": 1.0},
        "grammar": {"fluency": 0.9, "accuracy": 0.1},
        "instruction_injection": {"accuracy": 0.5, "fluency": 0.5},
    },
}
DEFAULT_EXPERT_WEIGHTS = EXPERT_WEIGHTS["summarization"]

ORIGINAL = "original"
_ID_SEP = "/"


# --------------------------------------------------------------------------- statistics


def wilcoxon_p(original: Sequence[float], perturbed: Sequence[float]) -> float:
    """One-sided Wilcoxon signed-rank p-value for "original scores higher than perturbed".

    ``scipy.stats.wilcoxon`` with ``alternative="greater"`` and its defaults (zero differences
    dropped; exact distribution for small samples without ties). Pairs with a NaN on either side
    are dropped; no pair left gives NaN. When every remaining pair is equal there is no evidence
    that the original is better, and the p-value is 1.0 (scipy itself would return NaN).
    """
    from scipy.stats import wilcoxon

    a = np.asarray(original, dtype=float)
    b = np.asarray(perturbed, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.shape} vs {b.shape}")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    if a.size == 0:
        return math.nan
    if np.all(a == b):
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # small-sample normal approximation
        return float(wilcoxon(a, b, alternative="greater").pvalue)


def harmonic_mean_p(pvalues: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Weighted harmonic mean p-value (Wilson 2019): ``sum(w) / sum(w / p)``, weights summing to 1.

    ``scipy.stats.combine_pvalues`` has no harmonic method, so this is ``scipy.stats.hmean``
    with weights normalised to sum 1; equal weights when ``weights`` is None. NaN p-values are
    left out with their weights; nothing left (or zero total weight) gives NaN.

    The DHP paper prints the unweighted form as ``1 / sum(1 / p)``, which is M times smaller; we
    use Wilson's definition for both forms, so one metric's p is returned unchanged.
    """
    from scipy.stats import hmean

    p = np.asarray(pvalues, dtype=float)
    w = np.ones_like(p) if weights is None else np.asarray(weights, dtype=float)
    if p.shape != w.shape:
        raise ValueError(f"{p.size} p-values but {w.size} weights")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be finite and non-negative, got {w.tolist()}")
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {p.tolist()}")
    keep = np.isfinite(p)
    p, w = p[keep], w[keep]
    if p.size == 0 or w.sum() <= 0:
        return math.nan
    w = w / w.sum()
    if np.any((p == 0) & (w > 0)):
        return 0.0
    return float(hmean(p[w > 0], weights=w[w > 0]))


def discernment(p: float) -> float:
    """``D = log_0.05(p) = log(p) / log(0.05)``: 1 at p = 0.05, 2 at p = 0.0025, 0 at p = 1."""
    if p is None or not math.isfinite(p):
        return math.nan
    if p <= 0:
        return math.inf
    return math.log(p) / math.log(ALPHA) + 0.0


def level_weighted_average(values: Sequence[float], levels: Sequence[str]) -> float:
    """Mean over levels of the mean within each level: every level present counts equally.

    Non-finite values (perturbations with no usable pairs) are left out; none left gives NaN.
    """
    if len(values) != len(levels):
        raise ValueError(f"{len(values)} values but {len(levels)} levels")
    by_level: dict[str, list[float]] = {}
    for value, level in zip(values, levels, strict=True):
        if value is not None and math.isfinite(value):
            by_level.setdefault(level, []).append(float(value))
    if not by_level:
        return math.nan
    return float(np.mean([np.mean(v) for v in by_level.values()]))


def _finite_min(values: Sequence[float]) -> float:
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    return min(finite) if finite else math.nan


# --------------------------------------------------------------------------- weights


def _family(name: str) -> str:
    for suffix in ("_minor", "_major"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def resolve_weights(
    name: str, metrics: Sequence[str], weights: Mapping[str, Mapping[str, float]] | None
) -> tuple[dict[str, float], str]:
    """Expert weights of perturbation ``name`` over ``metrics``, normalised to sum 1.

    Looked up by full name, then by family (name without ``_minor``/``_major``). Metrics the
    weights do not name get 0. Returns (weights, source): source is "expert", or "equal" when no
    weight names one of the scorer's metrics (e.g. a scorer with a single "overall" metric).
    """
    table = DEFAULT_EXPERT_WEIGHTS if weights is None else weights
    given = table.get(name, table.get(_family(name), {}))
    raw = {m: float(given.get(m, 0.0)) for m in metrics}
    if any(v < 0 or not math.isfinite(v) for v in raw.values()):
        raise ConfigError(f"expert weights of {name!r} must be non-negative: {dict(given)}")
    total = sum(raw.values())
    if total <= 0:
        return {m: 1.0 / len(metrics) for m in metrics}, "equal"
    return {m: v / total for m, v in raw.items()}, "expert"


# --------------------------------------------------------------------------- samples


def reference_samples(
    data: LabelledData, n: int | None, seed: int, detokenise: bool = True
) -> pd.DataFrame:
    """One row per document whose ``output`` is the document's first reference (DHP's originals).

    ``n`` documents with at least one reference are drawn with ``seed`` (all when None) and kept
    in data order. The row id is the doc id, ``system_id`` is "reference" and ``references``
    holds the *other* references, so a reference-based metric is not handed the text itself;
    optional columns (a story's ``wrong_ending``) come from the document's first row.
    ``detokenise`` undoes SummEval's word tokenisation ("Spurs 's draw ." -> "Spurs's draw."),
    as an LLM perturber returns natural text and the two must not differ in that alone.
    """
    first = data.samples.drop_duplicates("doc_id", keep="first")
    first = first[first["references"].map(lambda refs: len(refs) > 0)]
    if n is not None:
        if not 1 <= n <= len(first):
            raise ConfigError(f"n must be between 1 and {len(first)} documents, got {n}")
        chosen = np.random.default_rng(seed).choice(len(first), size=n, replace=False)
        first = first.iloc[np.sort(chosen)]
    optional = [c for c in OPTIONAL_COLUMNS if c in first.columns]
    rows = []
    for _, row in first.iterrows():
        refs = list(row["references"])
        rows.append(
            {
                "doc_id": row["doc_id"],
                "system_id": "reference",
                "source": row["source"],
                "output": detokenize(refs[0]) if detokenise else refs[0],
                "references": refs[1:],
                **{c: row[c] for c in optional},
            }
        )
    columns = ["doc_id", "system_id", "source", "output", "references", *optional]
    table = pd.DataFrame(rows, columns=columns, dtype=object)
    table.index = pd.Index([str(d) for d in table["doc_id"]], dtype=object, name="id")
    return table


# --------------------------------------------------------------------------- run


@dataclass
class DHPResult:
    """Discernment of one scorer.

    ``table`` has one row per perturbation (index: name) with its level, severity, method,
    ``probe`` flag, ``n_texts`` (perturbed texts scored), ``n_dropped``, per metric ``p:<m>`` and
    ``delta:<m>`` (mean original minus perturbed score), the combined ``p``/``D`` and
    ``p_ew``/``D_ew``, and for probes ``D_reward``/``D_reward_ew`` (perturbed scored higher).
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
    backend: LLMBackend | None,
    cache: ResultCache | None,
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
    tables, drops = perturb_all(samples, perturbations, backend, cache, seed)
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
    """Perturbations the scorer fails: DHP ones with ``D_ew < threshold``, and probes whose
    ``D_reward_ew >= probe_threshold`` (the perturbed text was scored significantly higher).

    A perturbation with no usable pairs (NaN) is not listed: it was not tested.
    """
    table = result.table
    failed = table[~table["probe"] & (table["D_ew"] < threshold)].index.tolist()
    failed += table[table["probe"] & (table["D_reward_ew"] >= probe_threshold)].index.tolist()
    return [str(name) for name in failed]


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


__all__ = [
    "ALPHA",
    "DEFAULT_EXPERT_WEIGHTS",
    "EXPERT_WEIGHTS",
    "DHPResult",
    "discernment",
    "failed_perturbations",
    "harmonic_mean_p",
    "level_weighted_average",
    "plot_dhp",
    "reference_samples",
    "resolve_weights",
    "run_dhp",
    "wilcoxon_p",
]
