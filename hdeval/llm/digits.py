"""Turn a judge's first-token distribution into a score over the digits 1..5."""

from __future__ import annotations

import math
from collections.abc import Mapping

from hdeval.llm.types import SCORE_DIGITS, DigitScore
from hdeval.llm.validity import mass_problem, reply_problem

DEFAULT_MIN_MASS = 0.5


def digit_of(token: str) -> str | None:
    """The score digit a reply token stands for ("3", " 3", "3\\n"), or None."""
    stripped = token.strip()
    return stripped if stripped in SCORE_DIGITS else None


def digit_score(
    token_logprobs: Mapping[str, float], min_mass: float = DEFAULT_MIN_MASS
) -> DigitScore:
    """Build a :class:`DigitScore` from token -> log-probability of the first reply token.

    Tokens that differ only by surrounding whitespace are pooled. Log-probabilities no model can
    give (:func:`~hdeval.llm.validity.reply_problem`) are a failure, as is a digit mass below
    ``min_mass`` (:func:`~hdeval.llm.validity.mass_problem`), which names the most likely tokens.
    """
    if problem := reply_problem(token_logprobs):
        return DigitScore(failure=problem)
    pooled = dict.fromkeys(SCORE_DIGITS, 0.0)
    for token, logprob in token_logprobs.items():
        digit = digit_of(token)
        if digit is not None:
            pooled[digit] += math.exp(logprob)
    mass = sum(pooled.values())
    if problem := mass_problem(mass, min_mass):
        top = sorted(token_logprobs.items(), key=lambda kv: kv[1], reverse=True)[:5]
        shown = ", ".join(f"{tok!r}:{math.exp(lp):.2f}" for tok, lp in top) or "none"
        return DigitScore(mass=mass, failure=f"{problem}; top reply tokens: {shown}")
    return DigitScore(probs=tuple(pooled[d] / mass for d in SCORE_DIGITS), mass=mass)
