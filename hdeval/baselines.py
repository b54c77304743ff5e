"""Baselines HD-Eval is compared with, and the comparison table.

The LLM baselines use the same judge backend and the same result cache as HD-Eval, through
:class:`~hdeval.scoring.CriterionScorer`, so a comparison measures the method, not the judge:

* :class:`DirectPromptScorer`: G-Eval style, one 1-5 prompt per human aspect (the layer-1
  criteria, with the hierarchy-aware template of a root node); the expected score over the digit
  probabilities per aspect, plus their ``average``. These prompts are exactly HD-Eval's layer-1
  prompts, so they share cache entries with HD-Eval's features.
* :class:`OverallPromptScorer`: one prompt for a single overall 1-5 score, the aspects listed
  with their definitions (:func:`overall_prompt`; its own :data:`OVERALL_TEMPLATE_VERSION` is
  part of the cache key).
* :class:`LikelihoodScorer`: GPTScore style, mean token log-likelihood of the text as the reply
  to "write a <text> of the <source> above" after the source (``unconditioned``), and the same
  with the instruction naming each aspect, plus their ``average``.
* :class:`RougeScorer`: ROUGE-1/2/L F1 against the references (best over several references),
  with the ``rouge-score`` package (Porter stemming; its tokenizer keeps ASCII letters and
  digits only).

:func:`compare` correlates every scorer with the human scores (:func:`hdeval.metrics.agreement`:
Pearson, Spearman and Kendall at dataset, summary and system level, bootstrap CIs over
documents). A scorer's columns named like a human aspect are matched to it; each other column is
a single score (``overall``, ``rouge1``, ``average``...) and is correlated with every aspect.
:func:`render_markdown` and :func:`render_rich` draw the result as one table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from hdeval.cache import ResultCache, cache_key
from hdeval.criteria import CriteriaTree, Criterion
from hdeval.errors import ConfigError
from hdeval.llm.types import LLMBackend
from hdeval.metrics import CORRELATIONS, agreement
from hdeval.prompts import TaskSpec
from hdeval.scorers import TextScorer
from hdeval.scoring import UNCONDITIONED, CriterionScorer, ScoringRun, _Request

__all__ = [
    "LEVELS",
    "OVERALL_TEMPLATE_VERSION",
    "DirectPromptScorer",
    "LikelihoodScorer",
    "OverallPromptScorer",
    "RougeScorer",
    "compare",
    "default_baselines",
    "overall_prompt",
    "render_markdown",
    "render_rich",
]

#: Part of the cache key of every overall-quality prompt; bump it when the template changes.
OVERALL_TEMPLATE_VERSION = "hdeval-overall-1"
LEVELS: tuple[str, ...] = ("dataset", "summary", "system")
AVERAGE = "average"
COMPARE_COLUMNS = ["scorer", "aspect", "level", "correlation", "value", "ci_low", "ci_high", "n"]

#: The single node scored by :class:`OverallPromptScorer`.
OVERALL = Criterion("overall", "overall quality", "how good the text is as a whole")


def _aspects(tree: CriteriaTree, aspects: Sequence[str] | None) -> list[Criterion]:
    """The layer-1 criteria of ``tree`` (those named in ``aspects``, in that order)."""
    roots = tree.layer(1)
    if aspects is None:
        if not roots:
            raise ConfigError("the aspects tree has no layer-1 criteria")
        return roots
    by_id = {c.id: c for c in roots}
    missing = [a for a in aspects if a not in by_id]
    if missing:
        raise ConfigError(f"no layer-1 criterion for aspects {missing}")
    return [by_id[a] for a in aspects]


# ====================================================================== LLM baselines
class _LLMBaseline:
    """Shared plumbing: a CriterionScorer on a flat tree, the last run kept for inspection."""

    name: str
    metrics: list[str]

    def __init__(self, scorer: CriterionScorer, tree: CriteriaTree, progress: bool) -> None:
        self._scorer = scorer
        self._tree = tree
        self.progress = progress
        self.last_run: ScoringRun | None = None

    def _features(self, samples: pd.DataFrame) -> pd.DataFrame:
        self.last_run = self._scorer.score(samples, self._tree, progress=self.progress)
        return self.last_run.features


class DirectPromptScorer(_LLMBaseline):
    """One 1-5 prompt per layer-1 aspect (expected score from digit probabilities) + average."""

    def __init__(
        self,
        backend: LLMBackend,
        cache: ResultCache,
        task: TaskSpec | None,
        aspects_tree: CriteriaTree,
        *,
        aspects: Sequence[str] | None = None,
        name: str = "direct-prompt",
        progress: bool = False,
    ) -> None:
        self.aspects = [c.id for c in _aspects(aspects_tree, aspects)]
        flat = CriteriaTree(_aspects(aspects_tree, aspects))
        super().__init__(CriterionScorer(backend, cache, task, ("prompt",)), flat, progress)
        self.name = name
        self.metrics = [*self.aspects, AVERAGE]

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        features = self._features(samples)
        out = pd.DataFrame({a: features[f"prompt:{a}"] for a in self.aspects}, index=samples.index)
        out[AVERAGE] = out[self.aspects].mean(axis=1, skipna=False)
        return out


def overall_prompt(task: TaskSpec, aspects: Sequence[Criterion] = ()) -> str:
    """One instruction for a single overall 1-5 score, listing ``aspects`` with definitions."""
    text = (
        f"## Instructions\nWe would like to evaluate the overall quality of the "
        f"{task.output_noun} above."
    )
    if aspects:
        listed = "\n".join(f"- {c.name}: {c.definition}" for c in aspects)
        text += f" Take all of the following aspects into account.\n{listed}"
    return (
        text + f"\nScore the overall quality of the {task.output_noun} on a scale of 1 to 5, "
        "with 1 being the lowest and 5 the highest. Reply with the score only, a single digit."
    )


class _OverallCriterionScorer(CriterionScorer):
    """CriterionScorer whose prompt is :func:`overall_prompt`, keyed by its own version."""

    def __init__(
        self, backend: LLMBackend, cache: ResultCache, task: TaskSpec | None, aspects: list
    ) -> None:
        super().__init__(backend, cache, task, ("prompt",))
        self.aspects = aspects

    def _prompt_requests(
        self, tree: CriteriaTree, criteria: Sequence[Criterion], segments: list[str]
    ) -> list[_Request]:
        suffix = overall_prompt(self.task, self.aspects)
        key = cache_key("digits", self.backend.identity, OVERALL_TEMPLATE_VERSION, segments, suffix)
        return [_Request(f"prompt:{c.id}", key, suffix) for c in criteria]


class OverallPromptScorer(_LLMBaseline):
    """A single prompt for an overall quality score (expected 1-5 score): column ``overall``."""

    def __init__(
        self,
        backend: LLMBackend,
        cache: ResultCache,
        task: TaskSpec | None = None,
        aspects_tree: CriteriaTree | None = None,
        *,
        aspects: Sequence[str] | None = None,
        name: str = "overall-prompt",
        progress: bool = False,
    ) -> None:
        listed = [] if aspects_tree is None else _aspects(aspects_tree, aspects)
        scorer = _OverallCriterionScorer(backend, cache, task, listed)
        super().__init__(scorer, CriteriaTree([OVERALL]), progress)
        self.name = name
        self.metrics = [OVERALL.id]

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        features = self._features(samples)
        return pd.DataFrame({OVERALL.id: features[f"prompt:{OVERALL.id}"]}, index=samples.index)


class LikelihoodScorer(_LLMBaseline):
    """GPTScore: mean token log-likelihood (nats, higher = better) of the text given the source.

    Columns: ``unconditioned`` (plain "write a summary" instruction), one per aspect of
    ``aspects_tree`` (the instruction names the aspect) and their ``average``.
    """

    UNCONDITIONED_COLUMN = "unconditioned"

    def __init__(
        self,
        backend: LLMBackend,
        cache: ResultCache,
        task: TaskSpec | None = None,
        aspects_tree: CriteriaTree | None = None,
        *,
        aspects: Sequence[str] | None = None,
        name: str = "likelihood",
        progress: bool = False,
    ) -> None:
        roots = [] if aspects_tree is None else _aspects(aspects_tree, aspects)
        scorer = CriterionScorer(backend, cache, task, ("likelihood",), unconditioned=True)
        super().__init__(scorer, CriteriaTree(roots), progress)
        self.aspects = [c.id for c in roots]
        self.name = name
        self.metrics = [self.UNCONDITIONED_COLUMN, *self.aspects]
        if self.aspects:
            self.metrics.append(AVERAGE)

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        features = self._features(samples)
        out = pd.DataFrame(
            {self.UNCONDITIONED_COLUMN: features[UNCONDITIONED]}, index=samples.index
        )
        for a in self.aspects:
            out[a] = features[f"lik:{a}"]
        if self.aspects:
            out[AVERAGE] = out[self.aspects].mean(axis=1, skipna=False)
        return out


# ====================================================================== ROUGE
def _references(value: Any) -> list[str]:
    """A sample's references as a list of non-blank strings."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    if isinstance(value, str):
        value = [value]
    return [str(r) for r in value if str(r).strip()]


class RougeScorer:
    """ROUGE F1 against the ``references`` column; NaN for a sample without references."""

    def __init__(
        self,
        rouge_types: Sequence[str] = ("rouge1", "rouge2", "rougeL"),
        use_stemmer: bool = True,
        name: str = "rouge",
    ) -> None:
        try:
            from rouge_score import rouge_scorer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError(
                "RougeScorer needs the 'rouge-score' package: pip install rouge-score"
            ) from exc
        self.name = name
        self.metrics = list(rouge_types)
        self._scorer = rouge_scorer.RougeScorer(self.metrics, use_stemmer=use_stemmer)

    def score_one(self, output: str, references: Iterable[str]) -> dict[str, float]:
        """F1 per ROUGE type, best over the references."""
        refs = _references(list(references))
        if not refs:
            return dict.fromkeys(self.metrics, float("nan"))
        result = self._scorer.score_multi(refs, output)
        return {m: float(result[m].fmeasure) for m in self.metrics}

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        if "references" not in samples.columns:
            raise ConfigError("ROUGE needs a 'references' column in the samples")
        rows = [
            self.score_one(str(output), _references(refs))
            for output, refs in zip(samples["output"], samples["references"], strict=True)
        ]
        return pd.DataFrame(rows, index=samples.index, columns=self.metrics, dtype=float)


def default_baselines(
    backend: LLMBackend,
    cache: ResultCache,
    task: TaskSpec | None,
    aspects_tree: CriteriaTree,
    *,
    aspects: Sequence[str] | None = None,
    rouge: bool = True,
) -> list[TextScorer]:
    """Direct per-aspect prompts, an overall prompt, GPTScore likelihoods and (optionally) ROUGE."""
    options = {"aspects": aspects}
    scorers: list[TextScorer] = [
        DirectPromptScorer(backend, cache, task, aspects_tree, **options),
        OverallPromptScorer(backend, cache, task, aspects_tree, **options),
        LikelihoodScorer(backend, cache, task, aspects_tree, **options),
    ]
    if rouge:
        scorers.append(RougeScorer())
    return scorers


# ====================================================================== comparison
def _entries(name: str, scores: pd.DataFrame, aspects: list[str]) -> dict[str, pd.DataFrame]:
    """Predicted-score frames to correlate: matched aspect columns, then single scores."""
    out: dict[str, pd.DataFrame] = {}
    matched = [a for a in aspects if a in scores.columns]
    if matched:
        out[name] = scores[matched].astype(float)
    for column in scores.columns:
        if column not in aspects:
            single = scores[column].astype(float)
            out[f"{name}:{column}"] = pd.DataFrame({a: single for a in aspects})
    return out


def _ci(values: dict, name: str) -> tuple[float, float]:
    ci = values.get(name + "_ci")
    return (float(ci[0]), float(ci[1])) if ci else (float("nan"), float("nan"))


def compare(
    scorers: Sequence[TextScorer] | Mapping[str, TextScorer | pd.DataFrame],
    samples: pd.DataFrame,
    human_targets: pd.DataFrame,
    docs: pd.Series | None = None,
    systems: pd.Series | None = None,
    n_boot: int = 200,
    seed: int = 0,
) -> pd.DataFrame:
    """Agreement of every scorer with the human scores, one row per figure.

    ``scorers`` are TextScorers (scored on ``samples`` here) or, in a mapping, precomputed score
    tables keyed by name. ``docs`` and ``systems`` default to the samples' ``doc_id`` and
    ``system_id``. Rows with a NaN score of an entry are left out of that entry (``n`` counts the
    rows used); the ``average`` aspect is the mean correlation over the aspects the entry scores.
    Columns: scorer, aspect, level, correlation, value, ci_low, ci_high, n.
    """
    aspects = [str(a) for a in human_targets.columns]
    docs = samples["doc_id"] if docs is None else docs
    if systems is None and "system_id" in samples.columns:
        systems = samples["system_id"]
    named: list[tuple[str, TextScorer | pd.DataFrame]] = (
        list(scorers.items()) if isinstance(scorers, Mapping) else [(s.name, s) for s in scorers]
    )
    rows: list[dict[str, Any]] = []
    for name, scorer in named:
        scores = scorer if isinstance(scorer, pd.DataFrame) else scorer.score(samples)
        scores = scores.reindex(samples.index)
        for entry, predicted in _entries(name, scores, aspects).items():
            used = predicted.dropna(how="any")
            result = agreement(
                used,
                human_targets.loc[used.index, list(predicted.columns)],
                docs.loc[used.index],
                None if systems is None else systems.loc[used.index],
                n_boot,
                seed,
            )
            for aspect in [*predicted.columns, AVERAGE]:
                for level in LEVELS:
                    values = result[aspect][level]
                    for corr in CORRELATIONS:
                        low, high = _ci(values, corr)
                        rows.append(
                            {
                                "scorer": entry,
                                "aspect": aspect,
                                "level": level,
                                "correlation": corr,
                                "value": float(values[corr]),
                                "ci_low": low,
                                "ci_high": high,
                                "n": len(used),
                            }
                        )
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS)


def _layout(
    table: pd.DataFrame, levels: Sequence[str] | None, correlations: Sequence[str] | None
) -> tuple[pd.DataFrame, list[str]]:
    """Filtered rows and the aspect column order (human aspects, then average)."""
    keep = table
    if levels is not None:
        keep = keep[keep["level"].isin(levels)]
    if correlations is not None:
        keep = keep[keep["correlation"].isin(correlations)]
    aspects = [a for a in dict.fromkeys(keep["aspect"]) if a != AVERAGE] + [AVERAGE]
    return keep, aspects


def _cells(
    table: pd.DataFrame, ci: bool, digits: int
) -> tuple[list[tuple[str, str, str, int]], dict[tuple, str], set[tuple]]:
    """Row keys, formatted cells and the keys of the best value per (level, corr, aspect)."""
    keys = list(
        dict.fromkeys(
            zip(table["scorer"], table["level"], table["correlation"], table["n"], strict=True)
        )
    )
    text: dict[tuple, str] = {}
    best: set[tuple] = set()
    for row in table.itertuples(index=False):
        cell = "-" if np.isnan(row.value) else f"{row.value:.{digits}f}"
        if ci and not np.isnan(row.value) and not np.isnan(row.ci_low):
            cell += f" [{row.ci_low:.{digits}f}, {row.ci_high:.{digits}f}]"
        text[(row.scorer, row.level, row.correlation, row.aspect)] = cell
    for (level, corr, aspect), group in table.groupby(["level", "correlation", "aspect"]):
        if group["value"].notna().any():
            top = group.loc[group["value"].idxmax()]
            best.add((top["scorer"], level, corr, aspect))
    return keys, text, best


def render_markdown(
    table: pd.DataFrame,
    *,
    levels: Sequence[str] | None = None,
    correlations: Sequence[str] | None = None,
    ci: bool = True,
    digits: int = 3,
) -> str:
    """A :func:`compare` table as one markdown table: a row per scorer, level and correlation,
    a column per aspect and the average; the best value of each column and block in bold."""
    keep, aspects = _layout(table, levels, correlations)
    keys, text, best = _cells(keep, ci, digits)
    lines = [
        "| scorer | level | correlation | n | " + " | ".join(aspects) + " |",
        "|---|---|---|---:|" + "---:|" * len(aspects),
    ]
    for scorer, level, corr, n in keys:
        cells = []
        for aspect in aspects:
            cell = text.get((scorer, level, corr, aspect), "")
            cells.append(f"**{cell}**" if (scorer, level, corr, aspect) in best else cell)
        lines.append(f"| {scorer} | {level} | {corr} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_rich(
    table: pd.DataFrame,
    *,
    levels: Sequence[str] | None = None,
    correlations: Sequence[str] | None = None,
    ci: bool = True,
    digits: int = 3,
    title: str = "Agreement with human scores",
):
    """The same table as a ``rich.table.Table`` (print it with a rich Console)."""
    from rich.table import Table

    keep, aspects = _layout(table, levels, correlations)
    keys, text, best = _cells(keep, ci, digits)
    out = Table(title=title)
    for column in ("scorer", "level", "correlation"):
        out.add_column(column)
    out.add_column("n", justify="right")
    for aspect in aspects:
        out.add_column(aspect, justify="right")
    previous = None
    for scorer, level, corr, n in keys:
        if previous is not None and scorer != previous:
            out.add_section()
        previous = scorer
        cells = []
        for aspect in aspects:
            cell = text.get((scorer, level, corr, aspect), "")
            cells.append(f"[bold]{cell}[/bold]" if (scorer, level, corr, aspect) in best else cell)
        out.add_row(scorer, level, corr, str(n), *cells)
    return out
