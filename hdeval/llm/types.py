"""The backend interface and the results it returns.

A prompt is given as *segments*: shared parts first (for example the source document, then the
text under evaluation), then one suffix per criterion. Backends may reuse the computation of the
shared segments across suffixes and across calls; the answer must not depend on whether they do.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

SCORE_DIGITS: tuple[str, ...] = ("1", "2", "3", "4", "5")
#: Largest total probability a model's listed tokens may hold: 1, and rounding.
MAX_MASS = 1.0 + 1e-3


@dataclass(frozen=True)
class DigitScore:
    """The judge's next-token distribution over the score digits "1".."5".

    ``probs`` are renormalised over the digits; ``mass`` is the un-normalised probability the
    model put on them. When ``failure`` is set the reply could not be read as a score and
    ``expected`` is ``None``: a failure is never turned into a number.
    """

    probs: tuple[float, ...] = field(default_factory=tuple)
    mass: float = 0.0
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def expected(self) -> float | None:
        """Expected score sum d * p(d), or None for a failure."""
        if self.failure is not None:
            return None
        return float(sum((i + 1) * p for i, p in enumerate(self.probs)))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DigitScore:
        return cls(probs=tuple(data["probs"]), mass=data["mass"], failure=data.get("failure"))


@dataclass(frozen=True)
class LogLikelihood:
    """The log-probability (nats) of every token of a continuation given a prompt, or, when
    ``failure`` is set, why the judge gave none (never a number then).

    The per-token values are kept, not only their sum: the likelihood features are statistics
    of them (:mod:`hdeval.scoring.likelihood_stats`), so a new statistic costs no LLM call.
    """

    tokens: tuple[float, ...] = ()
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def sum(self) -> float:
        return math.fsum(self.tokens)

    @property
    def mean(self) -> float:
        return self.sum / self.n_tokens

    def to_dict(self) -> dict:
        return {"tokens": list(self.tokens)}

    @classmethod
    def from_dict(cls, data: dict) -> LogLikelihood:
        return cls(tokens=tuple(data["tokens"]))


@dataclass
class TokenCounts:
    """Tokens a backend has sent through its model since it was created (thread-safe).

    ``prompt`` tokens were read (prefilled) and ``completion`` tokens generated; ``reused`` prompt
    tokens were not recomputed because a KV cache of them was kept (locally, or as the server
    reports it). A cache hit in hdeval's result cache costs no tokens at all.
    """

    prompt: int = 0
    completion: int = 0
    reused: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, prompt: int = 0, completion: int = 0, reused: int = 0) -> None:
        with self._lock:
            self.prompt += prompt
            self.completion += completion
            self.reused += reused

    def to_dict(self) -> dict[str, int]:
        return {"prompt": self.prompt, "completion": self.completion, "reused": self.reused}


@dataclass
class PrefixWork:
    """Prompt tokens computed in prefix levels' own passes, and the seconds those passes took:
    a long prefix in one pass costs less per token than the batched rows read over it, so
    ``hdeval estimate`` times the two apart."""

    tokens: int = 0
    seconds: float = 0.0


@runtime_checkable
class LLMBackend(Protocol):
    """What hdeval needs from an LLM.

    ``identity`` names everything about the model that changes its answers (weights hash or server
    model name, precision); it is part of every cache key. ``tokens`` counts what it has cost.
    """

    identity: str
    tokens: TokenCounts

    def digit_scores(self, segments: Sequence[str], suffixes: Sequence[str]) -> list[DigitScore]:
        """Score each ``segments + suffix`` user message by the first reply token over 1..5."""
        ...

    def loglikelihoods(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[LogLikelihood]:
        """Per (instruction, continuation): log p(continuation as reply | segments, instruction)."""
        ...

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        """Greedy reply to one user message."""
        ...


@runtime_checkable
class ContextLimited(Protocol):
    """A backend that knows its context length and tokenizer, so prompts can be fitted to it
    (see :mod:`hdeval.llm.truncation`). ``max_context`` None means no known limit."""

    max_context: int | None

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def prompt_tokens(self, segments: Sequence[str], suffix: str, continuation: str = "") -> int:
        """Length in tokens of ``segments + suffix`` as a request, plus ``continuation``."""
        ...
