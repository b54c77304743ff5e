"""Score samples on criteria with an LLM: cached, resumable, prefix-shared.

Feature columns are named ``prompt:<criterion id>`` (expected 1..5 score from the hierarchy-aware
prompt), ``lik:<criterion id>`` (mean token log-likelihood of the text given an instruction naming
the criterion) and ``lik:_text`` (the same without any criterion, the reference the criterion
columns lift over). A failed score is NaN in the table and a :class:`ScoringFailure` in the run;
it is never cached as a result, so the next run retries it. A prompt longer than the judge's
context is cut by the rule of :mod:`hdeval.truncation` before its cache key is computed, and
counted in the run as a :class:`Truncation`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from hdeval.cache import ResultCache, cache_key
from hdeval.criteria import CriteriaTree, Criterion
from hdeval.errors import HDEvalError
from hdeval.llm.types import ContextLimited, DigitScore, LLMBackend, LogLikelihood
from hdeval.prompts import (
    TEMPLATE_VERSION,
    TaskSpec,
    criterion_prompt,
    likelihood_instruction,
    prompt_segments,
    source_segment,
)
from hdeval.truncation import ContextOverflow, Fitted, fit_to_context

log = logging.getLogger(__name__)

Mode = Literal["prompt", "likelihood"]
UNCONDITIONED = "lik:_text"
_KIND: dict[str, str] = {"prompt": "digits", "likelihood": "loglik"}  # cache kind per mode


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
    """Features of every sample, and what it cost."""

    features: pd.DataFrame
    failures: list[ScoringFailure] = field(default_factory=list)
    computed: int = 0
    cached: int = 0
    truncations: list[Truncation] = field(default_factory=list)

    @property
    def truncated_samples(self) -> int:
        """Number of samples with at least one prompt cut to fit the judge's context."""
        return len({t.sample_id for t in self.truncations})

    def summary(self) -> str:
        total = self.computed + self.cached
        rate = self.cached / total if total else 1.0
        return (
            f"{len(self.features)} samples x {self.features.shape[1]} features: "
            f"{self.computed} LLM scores computed, {self.cached} from cache "
            f"({rate:.0%} hit rate), {len(self.failures)} failed, "
            f"{self.truncated_samples} samples truncated to the judge's context"
        )


@dataclass(frozen=True)
class _Request:
    column: str
    key: str
    suffix: str


def feature_columns(
    criteria: Sequence[Criterion], modes: Sequence[Mode], unconditioned: bool = True
) -> list[str]:
    columns = []
    if "prompt" in modes:
        columns += [f"prompt:{c.id}" for c in criteria]
    if "likelihood" in modes:
        columns += [f"lik:{c.id}" for c in criteria]
        if unconditioned:
            columns.append(UNCONDITIONED)
    return columns


class CriterionScorer:
    """Scores a table of samples on criteria of a tree, through a result cache."""

    def __init__(
        self,
        backend: LLMBackend,
        cache: ResultCache,
        task: TaskSpec | None = None,
        modes: Sequence[Mode] = ("prompt",),
        unconditioned: bool = True,
    ) -> None:
        unknown = set(modes) - {"prompt", "likelihood"}
        if unknown or not modes:
            raise HDEvalError(f"scoring modes must be 'prompt' and/or 'likelihood', got {modes}")
        self.backend = backend
        self.cache = cache
        self.task = task or TaskSpec()
        self.modes = tuple(modes)
        self.unconditioned = unconditioned

    # ----------------------------------------------------------------- requests per sample
    def _prompt_requests(
        self, tree: CriteriaTree, criteria: Sequence[Criterion], segments: list[str]
    ) -> list[_Request]:
        requests = []
        for c in criteria:
            suffix = criterion_prompt(self.task, c, tree.parent(c))
            key = cache_key("digits", self.backend.identity, TEMPLATE_VERSION, segments, suffix)
            requests.append(_Request(f"prompt:{c.id}", key, suffix))
        return requests

    def _likelihood_requests(
        self, tree: CriteriaTree, criteria: Sequence[Criterion], segments: list[str], output: str
    ) -> list[_Request]:
        pairs = [
            (f"lik:{c.id}", likelihood_instruction(self.task, c, tree.parent(c))) for c in criteria
        ]
        if self.unconditioned:
            pairs.append((UNCONDITIONED, likelihood_instruction(self.task, None, None)))
        return [
            _Request(
                column,
                cache_key(
                    "loglik", self.backend.identity, TEMPLATE_VERSION, segments, text, output
                ),
                text,
            )
            for column, text in pairs
        ]

    # ----------------------------------------------------------------- main loop
    def score(
        self,
        samples: pd.DataFrame,
        tree: CriteriaTree,
        criterion_ids: Sequence[str] | None = None,
        progress: bool = True,
    ) -> ScoringRun:
        """Score ``samples`` (indexed by id; columns doc_id, source, output) on the criteria.

        Samples are visited grouped by document so a document's prefix is computed once.
        Results are written to the cache after every sample.
        """
        criteria = [tree.get(i) for i in criterion_ids] if criterion_ids else list(tree)
        columns = feature_columns(criteria, self.modes, self.unconditioned)
        table = pd.DataFrame(np.nan, index=samples.index, columns=columns, dtype=float)
        run = ScoringRun(features=table)
        order = samples.sort_values("doc_id", kind="stable").index
        bar = tqdm(order, desc="LLM scoring", unit="sample", disable=not progress)
        for sample_id in bar:
            row = samples.loc[sample_id]
            try:
                self._score_sample(str(sample_id), row, tree, criteria, run)
            except HDEvalError:
                raise
            except Exception as exc:
                raise HDEvalError(
                    f"scoring sample {sample_id!r} failed: {type(exc).__name__}: {exc}; "
                    "every score finished before it is kept in the cache"
                ) from exc
            bar.set_postfix(computed=run.computed, cached=run.cached, failed=len(run.failures))
        log.info(run.summary())
        return run

    def _score_sample(
        self,
        sample_id: str,
        row: pd.Series,
        tree: CriteriaTree,
        criteria: list[Criterion],
        run: ScoringRun,
    ) -> None:
        for mode in self.modes:
            segments, continuation = self._layout(mode, row["source"], row["output"])
            requests = self._requests(mode, tree, criteria, segments, continuation)
            fitted = self._fit(sample_id, mode, row["source"], row["output"], requests, run)
            if fitted is None:
                continue
            if fitted.truncated:
                segments, continuation = self._layout(mode, fitted.source, fitted.output)
                requests = self._requests(mode, tree, criteria, segments, continuation)
            self._resolve(sample_id, requests, run, mode, segments, continuation)

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
    ) -> list[_Request]:
        if mode == "prompt":
            return self._prompt_requests(tree, criteria, segments)
        return self._likelihood_requests(tree, criteria, segments, continuation)

    def _fit(
        self,
        sample_id: str,
        mode: Mode,
        source: str,
        output: str,
        requests: list[_Request],
        run: ScoringRun,
    ) -> Fitted | None:
        """Source and text cut to fit the judge's context (by :func:`fit_to_context`, for the
        longest of ``requests``); None, with every request recorded as failed, if they cannot.
        """
        backend = self.backend
        if not (requests and isinstance(backend, ContextLimited) and backend.max_context):
            return Fitted(source, output)
        longest = max((r.suffix for r in requests), key=lambda s: len(backend.tokenize(s)))

        def prompt_tokens(source: str, output: str) -> int:
            segments, continuation = self._layout(mode, source, output)
            return backend.prompt_tokens(segments, longest, continuation)

        try:
            fitted = fit_to_context(source, output, prompt_tokens, backend)
        except ContextOverflow as exc:
            run.failures += [ScoringFailure(sample_id, r.column, str(exc)) for r in requests]
            self.cache.record_failures(_KIND[mode], {r.key: str(exc) for r in requests})
            return None
        if fitted.truncated:
            run.truncations.append(
                Truncation(sample_id, mode, fitted.source_cut, fitted.output_cut)
            )
        return fitted

    def _resolve(
        self,
        sample_id: str,
        requests: list[_Request],
        run: ScoringRun,
        mode: Mode,
        segments: list[str],
        continuation: str,
    ) -> None:
        kind = _KIND[mode]
        found = self.cache.get_many(r.key for r in requests)
        todo = [r for r in requests if r.key not in found]
        run.cached += len(requests) - len(todo)
        computed: dict[str, dict] = {}
        failed: dict[str, str] = {}
        if todo:
            if mode == "prompt":
                results = self.backend.digit_scores(segments, [r.suffix for r in todo])
            else:
                items = [(r.suffix, continuation) for r in todo]
                results = self.backend.loglikelihoods(segments, items)
            for request, result in zip(todo, results, strict=True):
                if isinstance(result, DigitScore) and not result.ok:
                    failed[request.key] = result.failure or "unknown failure"
                    run.failures.append(
                        ScoringFailure(sample_id, request.column, failed[request.key])
                    )
                else:
                    computed[request.key] = result.to_dict()
            run.computed += len(todo)
            self.cache.put_many(kind, computed)
            self.cache.record_failures(kind, failed)
        for request in requests:
            value = found.get(request.key) or computed.get(request.key)
            if value is not None:
                run.features.at[sample_id, request.column] = _feature_value(kind, value)


def _feature_value(kind: str, value: dict) -> float:
    if kind == "digits":
        return float(DigitScore.from_dict(value).expected)
    return LogLikelihood.from_dict(value).mean
