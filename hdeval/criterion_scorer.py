"""Score samples on the criteria of a tree with the cached judge: resumable, prefix-shared.

Feature columns follow :mod:`hdeval.columns`. A failed score is NaN in the table and a
:class:`ScoringFailure` in the run; it is never cached as a result, so the next run retries it.
A prompt longer than the judge's context is cut by the rule of :mod:`hdeval.truncation` before
its cache key is computed, and counted in the run as a :class:`Truncation`. This module needs
numpy only (pandas is imported when a caller asks for a DataFrame), so production scoring stays
light.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hdeval.columns import UNCONDITIONED, column, feature_columns, with_unconditioned
from hdeval.criteria import CriteriaTree, Criterion
from hdeval.errors import HDEvalError, JudgeUnavailableError
from hdeval.judge import DIGITS, LOGLIK, CachedJudge
from hdeval.llm.types import ContextLimited, DigitScore
from hdeval.params import Mode, TaskSpec
from hdeval.prompts import (
    TEMPLATE_VERSION,
    likelihood_for,
    likelihood_instruction,
    prompt_for,
    prompt_segments,
    source_segment,
)
from hdeval.truncation import ContextOverflow, Fitted, fit_to_context

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """One text to score, with the source it was written from."""

    id: str
    doc_id: str
    source: str
    output: str


def samples_of(table: Any) -> list[Sample]:
    """Samples from a list of :class:`Sample` or a table indexed by id (doc_id, source, output)."""
    if isinstance(table, Sequence) and not isinstance(table, str):
        return list(table)
    rows = table[["doc_id", "source", "output"]].itertuples(index=True, name=None)
    return [Sample(str(i), str(d), str(s), str(o)) for i, d, s, o in rows]


@dataclass(frozen=True)
class ScoringFailure:
    sample_id: str
    column: str
    reason: str


@dataclass(frozen=True)
class Truncation:
    """A sample whose prompts (of one scoring mode) were cut to fit the judge's context."""

    sample_id: str
    mode: Mode
    source_tokens_cut: int
    text_tokens_cut: int


@dataclass
class ScoringRun:
    """Features of every sample (``values``: one row per id, one column per name), and cost."""

    ids: list[str]
    columns: list[str]
    values: np.ndarray
    failures: list[ScoringFailure] = field(default_factory=list)
    computed: int = 0
    cached: int = 0
    truncations: list[Truncation] = field(default_factory=list)

    @property
    def features(self):
        """The feature table as a pandas DataFrame indexed by sample id."""
        import pandas as pd

        return pd.DataFrame(self.values, index=pd.Index(self.ids), columns=self.columns)

    @property
    def truncated_samples(self) -> int:
        """Number of samples with at least one prompt cut to fit the judge's context."""
        return len({t.sample_id for t in self.truncations})

    def summary(self) -> str:
        total = self.computed + self.cached
        rate = self.cached / total if total else 1.0
        return (
            f"{len(self.ids)} samples x {len(self.columns)} features: "
            f"{self.computed} LLM scores computed, {self.cached} from cache "
            f"({rate:.0%} hit rate), {len(self.failures)} failed, "
            f"{self.truncated_samples} samples truncated to the judge's context"
        )


@dataclass(frozen=True)
class Request:
    """One criterion score to ask for: its feature column, cache key and prompt suffix."""

    column: str
    key: str
    suffix: str


class CriterionScorer:
    """Scores samples on criteria of a tree through a :class:`CachedJudge`."""

    def __init__(
        self,
        judge: CachedJudge,
        task: TaskSpec | None = None,
        modes: Sequence[Mode] = ("prompt",),
        unconditioned: bool | None = None,
    ) -> None:
        unknown = set(modes) - {"prompt", "likelihood"}
        if unknown or not modes:
            raise HDEvalError(f"scoring modes must be 'prompt' and/or 'likelihood', got {modes}")
        self.judge = judge
        self.task = task or TaskSpec()
        self.modes = tuple(modes)
        self.unconditioned = with_unconditioned(self.modes, unconditioned)

    # ----------------------------------------------------------------- requests per sample
    def prompt_requests(
        self, tree: CriteriaTree, criteria: Sequence[Criterion], segments: list[str]
    ) -> list[Request]:
        requests = []
        for c in criteria:
            suffix = prompt_for(tree, c, self.task)
            key = self.judge.key(DIGITS, TEMPLATE_VERSION, segments, suffix)
            requests.append(Request(column("prompt", c.id), key, suffix))
        return requests

    def likelihood_requests(
        self, tree: CriteriaTree, criteria: Sequence[Criterion], segments: list[str], output: str
    ) -> list[Request]:
        pairs = [(column("likelihood", c.id), likelihood_for(tree, c, self.task)) for c in criteria]
        if self.unconditioned:
            pairs.append((UNCONDITIONED, likelihood_instruction(self.task)))
        return [
            Request(name, self.judge.key(LOGLIK, TEMPLATE_VERSION, segments, text, output), text)
            for name, text in pairs
        ]

    def plan(
        self, samples: Any, tree: CriteriaTree
    ) -> list[tuple[Mode, list[str], str, list[Request]]]:
        """Every request :meth:`score` makes for ``samples`` on all of ``tree``, before any cut
        to the judge's context: per sample and mode, the shared segments, the continuation and
        the requests (what ``hdeval estimate`` counts)."""
        planned = []
        for sample in samples_of(samples):
            for mode, criteria in self._passes(list(tree)):
                segments, continuation = self._layout(mode, sample.source, sample.output)
                requests = self._requests(mode, tree, criteria, segments, continuation)
                planned.append((mode, segments, continuation, requests))
        return planned

    # ----------------------------------------------------------------- main loop
    def score(
        self,
        samples: Any,
        tree: CriteriaTree,
        criterion_ids: Sequence[str] | None = None,
        progress: bool = True,
    ) -> ScoringRun:
        """Score ``samples`` (see :func:`samples_of`) on the criteria of ``tree``.

        Samples are visited grouped by document so a document's prefix is computed once.
        Results are written to the cache after every sample.
        """
        rows = samples_of(samples)
        criteria = [tree.get(i) for i in criterion_ids] if criterion_ids else list(tree)
        columns = feature_columns([c.id for c in criteria], self.modes, self.unconditioned)
        ids = [s.id for s in rows]
        run = ScoringRun(ids, columns, np.full((len(rows), len(columns)), np.nan))
        position = {name: j for j, name in enumerate(columns)}
        order = sorted(range(len(rows)), key=lambda i: rows[i].doc_id)
        bar = tqdm(order, desc="LLM scoring", unit="sample", disable=not progress)
        for i in bar:
            try:
                values = self._score_sample(rows[i], tree, criteria, run)
            except JudgeUnavailableError as exc:
                raise JudgeUnavailableError(
                    f"{exc}; {run.computed} scores computed by this run before it stopped are "
                    "kept in the cache, and the next run starts from them"
                ) from exc
            except HDEvalError:
                raise
            except Exception as exc:
                raise HDEvalError(
                    f"scoring sample {rows[i].id!r} failed: {type(exc).__name__}: {exc}; "
                    "every score finished before it is kept in the cache"
                ) from exc
            for name, value in values.items():
                run.values[i, position[name]] = value
            bar.set_postfix(computed=run.computed, cached=run.cached, failed=len(run.failures))
        log.info(run.summary())
        return run

    def _score_sample(
        self, sample: Sample, tree: CriteriaTree, criteria: list[Criterion], run: ScoringRun
    ) -> dict[str, float]:
        values: dict[str, float] = {}
        for mode, scored in self._passes(criteria):
            segments, continuation = self._layout(mode, sample.source, sample.output)
            requests = self._requests(mode, tree, scored, segments, continuation)
            fitted = self._fit(sample, mode, requests, run)
            if fitted is None:
                continue
            if fitted.truncated:
                segments, continuation = self._layout(mode, fitted.source, fitted.output)
                requests = self._requests(mode, tree, scored, segments, continuation)
            values.update(self._resolve(sample.id, requests, run, mode, segments, continuation))
        return values

    def _passes(self, criteria: list[Criterion]) -> list[tuple[Mode, list[Criterion]]]:
        """The scoring passes over one sample: each mode on ``criteria``, and a likelihood pass
        for :data:`UNCONDITIONED` alone when it is scored without the likelihood mode."""
        passes = [(mode, criteria) for mode in self.modes]
        if self.unconditioned and "likelihood" not in self.modes:
            passes.append(("likelihood", []))
        return passes

    def _layout(self, mode: Mode, source: str, output: str) -> tuple[list[str], str]:
        """Shared segments of a sample's requests, and the continuation (likelihood: the text)."""
        if mode == "prompt":
            return prompt_segments(self.task, source, output), ""
        return [source_segment(self.task, source)], output.strip()

    def _requests(
        self,
        mode: Mode,
        tree: CriteriaTree,
        criteria: Sequence[Criterion],
        segments: list[str],
        continuation: str,
    ) -> list[Request]:
        if mode == "prompt":
            return self.prompt_requests(tree, criteria, segments)
        return self.likelihood_requests(tree, criteria, segments, continuation)

    def _fit(
        self, sample: Sample, mode: Mode, requests: list[Request], run: ScoringRun
    ) -> Fitted | None:
        """Source and text cut to fit the judge's context (by :func:`fit_to_context`, for the
        longest of ``requests``); None, with every request recorded as failed, if they cannot.
        """
        backend = self.judge.backend
        if not (requests and isinstance(backend, ContextLimited) and backend.max_context):
            return Fitted(sample.source, sample.output)
        longest = max((r.suffix for r in requests), key=lambda s: len(backend.tokenize(s)))

        def prompt_tokens(source: str, output: str) -> int:
            segments, continuation = self._layout(mode, source, output)
            return backend.prompt_tokens(segments, longest, continuation)

        try:
            fitted = fit_to_context(sample.source, sample.output, prompt_tokens, backend)
        except ContextOverflow as exc:
            run.failures += [ScoringFailure(sample.id, r.column, str(exc)) for r in requests]
            kind = DIGITS if mode == "prompt" else LOGLIK
            self.judge.record_failures(kind, {r.key: str(exc) for r in requests})
            return None
        if fitted.truncated:
            run.truncations.append(
                Truncation(sample.id, mode, fitted.source_cut, fitted.output_cut)
            )
        return fitted

    def _resolve(
        self,
        sample_id: str,
        requests: list[Request],
        run: ScoringRun,
        mode: Mode,
        segments: list[str],
        continuation: str,
    ) -> dict[str, float]:
        if mode == "prompt":
            answers = self.judge.digit_scores(segments, {r.key: r.suffix for r in requests})
        else:
            items = {r.key: (r.suffix, continuation) for r in requests}
            answers = self.judge.loglikelihoods(segments, items)
        run.cached += answers.cached
        run.computed += answers.computed
        values = {}
        for request in requests:
            result = answers.results.get(request.key)
            if result is not None:
                values[request.column] = _feature_value(result)
            elif request.key in answers.failures:
                reason = answers.failures[request.key]
                run.failures.append(ScoringFailure(sample_id, request.column, reason))
        return values


def _feature_value(result: Any) -> float:
    if isinstance(result, DigitScore):
        return float(result.expected)
    return float(result.mean)
