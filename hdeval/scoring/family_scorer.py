"""Asking the cached judge for a sample's signal families (:mod:`hdeval.scoring.families`) and
turning the answers into columns: the criterion scorer's part for ``hierarchy.families``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hdeval.errors import HDEvalError
from hdeval.llm.judge import LOGLIK, CachedJudge
from hdeval.llm.types import ContextLimited, LogLikelihood
from hdeval.params import TaskSpec
from hdeval.scoring.families import FamilyPass, FamilySample, passes, values
from hdeval.scoring.family_columns import FAMILY_COLUMNS
from hdeval.scoring.prompts import TEMPLATE_VERSION
from hdeval.scoring.run import Sample, ScoringFailure, ScoringRun


@dataclass(frozen=True)
class FamilyRequest:
    """One family pass with its cache key."""

    family: str
    spec: FamilyPass
    key: str


class FamilyScorer:
    """The families of ``families`` for one sample at a time, through ``judge``."""

    def __init__(
        self,
        judge: CachedJudge,
        task: TaskSpec,
        families: Sequence[str],
        end_of_text: bool = False,
    ) -> None:
        self.judge = judge
        self.task = task
        self.families = tuple(families)
        self.end_of_text = end_of_text

    def requests(self, sample: Sample) -> list[FamilyRequest]:
        """Every likelihood request of the families for ``sample`` (what ``plan`` counts)."""
        seen = _of(sample)
        end = self.judge.end_of_reply if self.end_of_text and self.families else ""
        out = []
        for family in self.families:
            try:
                specs = passes(family, seen, self.task, end)
            except HDEvalError as exc:
                raise HDEvalError(f"sample {sample.id!r}: {exc}") from exc
            for spec in specs:
                key = self.judge.key(
                    LOGLIK, TEMPLATE_VERSION, list(spec.segments), spec.instruction,
                    spec.continuation,
                )  # fmt: skip
                out.append(FamilyRequest(family, spec, key))
        return out

    def score(
        self,
        sample: Sample,
        read: str,
        given: LogLikelihood | None,
        free: LogLikelihood | None,
        run: ScoringRun,
    ) -> dict[str, float]:
        """The family columns of ``sample`` (the text as the likelihood pass ``read`` it); a
        failed pass is recorded in ``run`` and leaves its columns NaN."""
        results: dict[str, dict[str, LogLikelihood]] = {f: {} for f in self.families}
        for request in self.requests(sample):
            result = self._ask(sample.id, request, run)
            if result is not None:
                results[request.family][request.spec.name] = result
        backend = self.judge.backend
        count = (
            (lambda s: len(backend.tokenize(s))) if isinstance(backend, ContextLimited) else None
        )
        seen = _of(sample, read)
        out: dict[str, float] = {}
        for family in self.families:
            try:
                out.update(values(family, seen, results[family], given, free, count))
            except HDEvalError as exc:
                raise HDEvalError(f"sample {sample.id!r}: {exc}") from exc
        return out

    def _ask(self, sample_id: str, request: FamilyRequest, run: ScoringRun) -> LogLikelihood | None:
        spec, backend = request.spec, self.judge.backend
        if isinstance(backend, ContextLimited) and backend.max_context:
            try:
                backend.prompt_tokens(list(spec.segments), spec.instruction, spec.continuation)
            except HDEvalError as exc:
                self.judge.record_failures(LOGLIK, {request.key: str(exc)})
                self._failed(sample_id, request, str(exc), run)
                return None
        items = {request.key: (spec.instruction, spec.continuation)}
        answers = self.judge.loglikelihoods(list(spec.segments), items)
        with run.lock:
            run.cached += answers.cached
            run.computed += answers.computed
        if request.key in answers.results:
            return answers.results[request.key]
        self._failed(sample_id, request, answers.failures.get(request.key, "no answer"), run)
        return None

    @staticmethod
    def _failed(sample_id: str, request: FamilyRequest, reason: str, run: ScoringRun) -> None:
        column = FAMILY_COLUMNS[request.family][0]
        with run.lock:
            run.failures.append(ScoringFailure(sample_id, column, f"{request.spec.name}: {reason}"))


def _of(sample: Sample, output: str | None = None) -> FamilySample:
    return FamilySample(sample.source, sample.output if output is None else output,
                        tuple(sample.references))  # fmt: skip
