"""Score samples on the criteria of a tree with the cached judge: resumable, prefix-shared.

Feature columns follow :mod:`hdeval.scoring.columns`: a prompt request gives one column, a
likelihood request one column per statistic of its token log-probabilities, and the text's own
likelihoods (given the source, and without it) give its PMI and length too. A failed score is
NaN in the table and a :class:`ScoringFailure` in the run; it is never cached as a result, so
the next run retries it. A prompt longer than the judge's context is cut by the rule of
:mod:`hdeval.llm.truncation` before its cache key is computed, and counted in the run as a
:class:`Truncation`. This module needs numpy only (pandas is imported when a caller asks for a
DataFrame), so production scoring stays light. Each pass's requests are laid out by
:mod:`hdeval.scoring.criterion_requests`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from hdeval.errors import HDEvalError, JudgeUnavailableError
from hdeval.llm.judge import CachedJudge
from hdeval.llm.truncation import ContextOverflow, Fitted, fit_to_context
from hdeval.llm.types import ContextLimited, DigitScore, LogLikelihood
from hdeval.params import Mode, TaskSpec
from hdeval.scoring.columns import (
    PMI_MEAN,
    PMI_SUM,
    SOURCE_FREE,
    TEXT_LENGTH,
    UNCONDITIONED,
    Profile,
    criterion_of,
    feature_columns,
    with_unconditioned,
)
from hdeval.scoring.criterion_requests import CriterionRequests
from hdeval.scoring.family_scorer import FamilyScorer
from hdeval.scoring.likelihood_stats import statistics
from hdeval.scoring.requests import Pass, PlannedPass, Request, cache_kind
from hdeval.scoring.run import Sample, ScoringFailure, ScoringRun, Truncation, samples_of
from hdeval.tree.criteria import CriteriaTree, Criterion

log = logging.getLogger(__name__)


class CriterionScorer(CriterionRequests):
    """Scores samples on criteria of a tree through a :class:`CachedJudge`."""

    def __init__(
        self,
        judge: CachedJudge,
        task: TaskSpec | None = None,
        modes: Sequence[Mode] = ("prompt",),
        unconditioned: bool | None = None,
        profile: Profile = Profile(),
    ) -> None:
        unknown = set(modes) - {"prompt", "likelihood"}
        if unknown or not modes:
            raise HDEvalError(f"scoring modes must be 'prompt' and/or 'likelihood', got {modes}")
        self.judge = judge
        self.task = task or TaskSpec()
        self.modes = tuple(modes)
        self.unconditioned = with_unconditioned(self.modes, unconditioned)
        self.profile = profile
        families = profile.families if self.unconditioned else ()
        self.families = FamilyScorer(judge, self.task, families, profile.end_of_text)

    def plan(self, samples: Any, tree: CriteriaTree) -> list[PlannedPass]:
        """Every pass :meth:`score` makes over ``samples`` on all of ``tree``, with its
        requests, before any cut to the judge's context (what ``hdeval estimate`` counts)."""
        planned = []
        for sample in samples_of(samples):
            for kind, criteria in self._passes(list(tree)):
                segments, continuation = self._layout(kind, sample.source, sample.output)
                requests = self._requests(kind, tree, criteria, segments, continuation)
                planned.append(PlannedPass(sample, kind, segments, continuation, requests))
            for r in self.families.requests(sample):
                request = Request(r.family, r.key, r.spec.instruction)
                segments = list(r.spec.segments)
                planned.append(
                    PlannedPass(sample, "family", segments, r.spec.continuation, [request])
                )
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
        Results are written to the cache after every sample. A server judge
        (``llm.concurrency`` > 1) gets that many samples at a time, so a server with replicas
        behind it is kept busy; a local judge takes one after another.
        """
        rows = samples_of(samples)
        criteria = [tree.get(i) for i in criterion_ids] if criterion_ids else list(tree)
        ids = [c.id for c in criteria]
        columns = feature_columns(ids, self.modes, self.unconditioned, self.profile)
        ids = [s.id for s in rows]
        run = ScoringRun(ids, columns, np.full((len(rows), len(columns)), np.nan))
        position = {name: j for j, name in enumerate(columns)}
        order = sorted(range(len(rows)), key=lambda i: rows[i].doc_id)
        bar = tqdm(total=len(order), desc="LLM scoring", unit="sample", disable=not progress)
        workers = getattr(self.judge.backend, "concurrency", 1)  # a server: samples in parallel
        pool = ThreadPoolExecutor(workers, "hdeval-sample") if workers > 1 else None

        def one(i: int) -> dict[str, float]:
            return self._score_sample(rows[i], tree, criteria, run)

        scored = pool.map(one, order) if pool else (one(i) for i in order)
        try:
            for i in order:
                try:
                    values = next(scored)
                except JudgeUnavailableError as exc:
                    raise JudgeUnavailableError(
                        f"{exc}; {run.computed} scores computed by this run before it stopped "
                        "are kept in the cache, and the next run starts from them"
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
                bar.update()
                bar.set_postfix(computed=run.computed, cached=run.cached, failed=len(run.failures))
        finally:
            if pool is not None:  # samples not started yet are dropped
                pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        log.log(logging.INFO if progress else logging.DEBUG, run.summary())
        return run

    def _score_sample(
        self, sample: Sample, tree: CriteriaTree, criteria: list[Criterion], run: ScoringRun
    ) -> dict[str, float]:
        results: dict[str, DigitScore | LogLikelihood] = {}
        read = sample.output  # the text as the likelihood pass read it (cut to fit, maybe)
        for kind, scored in self._passes(criteria):
            output = read if kind == "source_free" else sample.output
            whole = output == sample.output  # a text cut to fit is not a whole reply: no end
            segments, continuation = self._layout(kind, sample.source, output, whole)
            requests = self._requests(kind, tree, scored, segments, continuation)
            fitted = self._fit(sample, kind, requests, run, output)
            if fitted is None:
                continue
            if fitted.truncated:
                whole = fitted.output == sample.output
                segments, continuation = self._layout(kind, fitted.source, fitted.output, whole)
                requests = self._requests(kind, tree, scored, segments, continuation)
            if kind == "likelihood":
                read = fitted.output
            results.update(self._resolve(sample.id, requests, run, kind, segments, continuation))
        values = self._values(results, read)
        if self.families.families:
            given, free = results.get(UNCONDITIONED), results.get(SOURCE_FREE)
            values.update(self.families.score(sample, read, given, free, run))  # type: ignore[arg-type]
        return values

    def _values(
        self, results: dict[str, DigitScore | LogLikelihood], read: str
    ) -> dict[str, float]:
        """The feature values of one sample's results: a prompt score's expected value, each
        statistic of a likelihood's tokens, and from the text's own likelihoods its PMI with
        the source and the length in words of the text they read (``read``)."""
        values: dict[str, float] = {}
        for name, result in results.items():
            if isinstance(result, DigitScore):
                values[name] = float(result.expected)
                continue
            columns = self.profile.likelihood_columns(criterion_of(name))
            stats = statistics(result.tokens, self.profile.stats)
            values.update(zip(columns, stats.values(), strict=True))
        given, free = results.get(UNCONDITIONED), results.get(SOURCE_FREE)
        if self.profile.source_free and given is not None and free is not None:
            values[PMI_MEAN] = given.mean - free.mean
            values[PMI_SUM] = given.sum - free.sum
        if self.profile.length and given is not None:
            values[TEXT_LENGTH] = float(len(read.split()))
        return values

    def _fit(
        self, sample: Sample, kind: Pass, requests: list[Request], run: ScoringRun, output: str
    ) -> Fitted | None:
        """Source and ``output`` cut to fit the judge's context (by :func:`fit_to_context`, for
        the longest of ``requests``); None, with every request recorded as failed, if they
        cannot."""
        backend = self.judge.backend
        if not (requests and isinstance(backend, ContextLimited) and backend.max_context):
            return Fitted(sample.source, output)
        longest = max((r.suffix for r in requests), key=lambda s: len(backend.tokenize(s)))

        def prompt_tokens(source: str, text: str) -> int:
            segments, continuation = self._layout(kind, source, text)
            return backend.prompt_tokens(segments, longest, continuation)

        try:
            fitted = fit_to_context(sample.source, output, prompt_tokens, backend)
        except ContextOverflow as exc:
            self.judge.record_failures(cache_kind(kind), {r.key: str(exc) for r in requests})
            with run.lock:
                run.failures += [ScoringFailure(sample.id, r.column, str(exc)) for r in requests]
            return None
        if fitted.truncated:
            mode: Mode = "prompt" if kind == "prompt" else "likelihood"
            with run.lock:
                run.truncations.append(
                    Truncation(sample.id, mode, fitted.source_cut, fitted.output_cut)
                )
        return fitted

    def _resolve(
        self,
        sample_id: str,
        requests: list[Request],
        run: ScoringRun,
        kind: Pass,
        segments: list[str],
        continuation: str,
    ) -> dict[str, DigitScore | LogLikelihood]:
        """The results of ``requests`` by column; failures are recorded in ``run``."""
        if kind == "prompt":
            answers = self.judge.digit_scores(segments, {r.key: r.suffix for r in requests})
        else:
            items = {r.key: (r.suffix, continuation) for r in requests}
            ended = {r.key: r.ended for r in requests if r.ended}
            answers = self.judge.loglikelihoods(segments, items, ended)
        results = {}
        with run.lock:
            run.cached += answers.cached
            run.computed += answers.computed
            for request in requests:
                result = answers.results.get(request.key)
                if result is not None:
                    results[request.column] = result
                elif request.key in answers.failures:
                    reason = answers.failures[request.key]
                    run.failures.append(ScoringFailure(sample_id, request.column, reason))
        return results
