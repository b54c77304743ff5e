"""What a scoring pass asks the judge: its requests, each with its cache key, and the plan of a
pass that ``hdeval estimate`` counts before a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from hdeval.llm.judge import DIGITS, LOGLIK
from hdeval.scoring.run import Sample

#: The passes over one sample: a scoring mode, the source-free likelihood of the text, or a
#: signal family's likelihood (:mod:`hdeval.scoring.family_scorer`).
Pass = Literal["prompt", "likelihood", "source_free", "family"]
Layout = tuple[list[str], str]  # a pass's shared segments and continuation (a likelihood's text)


@dataclass(frozen=True)
class Request:
    """One score to ask for: its column (a likelihood's: the mean's), cache key and suffix.

    ``ended``: for a likelihood of a text read without the judge's end-of-reply marker, the key
    of the same request with the marker after the text, whose answer answers this one too
    (:meth:`~hdeval.llm.judge.CachedJudge.loglikelihoods`).
    """

    column: str
    key: str
    suffix: str
    ended: str | None = None


class PlannedPass(NamedTuple):
    """One planned pass of :meth:`CriterionScorer.score` over a sample, with its requests."""

    sample: Sample
    kind: Pass
    segments: list[str]
    continuation: str
    requests: list[Request]


def cache_kind(kind: Pass) -> str:
    """The result-cache kind of a pass's requests: digits for a prompt, else a likelihood."""
    return DIGITS if kind == "prompt" else LOGLIK
