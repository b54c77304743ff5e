"""Turn a judge's first-token distribution into a score over the digits 1..5."""

from __future__ import annotations

import math
from collections.abc import Mapping

from hdeval.llm.types import MAX_MASS, SCORE_DIGITS, DigitScore

DEFAULT_MIN_MASS = 0.5


def digit_of(token: str) -> str | None:
    """The score digit a reply token stands for ("3", " 3", "3\\n"), or None."""
    stripped = token.strip()
    return stripped if stripped in SCORE_DIGITS else None


def impossible(token_logprobs: Mapping[str, float]) -> str | None:
    """Why these log-probabilities of reply tokens cannot come from a model (NaN, a positive
    one, probabilities adding up to more than 1), or None."""
    for token, logprob in token_logprobs.items():
        if math.isnan(logprob) or logprob > math.log(MAX_MASS):
            return (
                f"impossible log-probability {logprob} for the reply token {token!r} (NaN, or "
                "above 0: a probability above 1); the server's reply is not a distribution"
            )
    total = math.fsum(math.exp(lp) for lp in token_logprobs.values())
    if total > MAX_MASS:
        return (
            f"impossible log-probabilities: the reply tokens' probabilities add up to {total:.3f}, "
            "more than 1"
        )
    return None


def distribution_problem(score: DigitScore) -> str | None:
    """Why a stored distribution cannot be a judge's answer (not five finite probabilities
    adding up to 1, a digit mass that is not a probability), or None."""
    probs = score.probs
    finite = len(probs) == len(SCORE_DIGITS) and all(math.isfinite(p) and p >= 0 for p in probs)
    if not finite or abs(math.fsum(probs) - 1.0) > MAX_MASS - 1.0:
        return f"impossible digit probabilities {probs}"
    if not 0.0 < score.mass <= MAX_MASS:  # NaN fails this too
        return f"impossible digit mass {score.mass}"
    return None


def digit_score(
    token_logprobs: Mapping[str, float], min_mass: float = DEFAULT_MIN_MASS
) -> DigitScore:
    """Build a :class:`DigitScore` from token -> log-probability of the first reply token.

    Tokens that differ only by surrounding whitespace are pooled. Log-probabilities no model can
    give (:func:`impossible`) are a failure, as is a digit mass below ``min_mass``, which names
    the most likely tokens.
    """
    if problem := impossible(token_logprobs):
        return DigitScore(failure=problem)
    pooled = dict.fromkeys(SCORE_DIGITS, 0.0)
    for token, logprob in token_logprobs.items():
        digit = digit_of(token)
        if digit is not None:
            pooled[digit] += math.exp(logprob)
    mass = sum(pooled.values())
    if mass < min_mass or mass == 0.0:
        top = sorted(token_logprobs.items(), key=lambda kv: kv[1], reverse=True)[:5]
        shown = ", ".join(f"{tok!r}:{math.exp(lp):.2f}" for tok, lp in top) or "none"
        return DigitScore(
            mass=mass, failure=f"digit mass {mass:.3f} below {min_mass}; top reply tokens: {shown}"
        )
    return DigitScore(probs=tuple(pooled[d] / mass for d in SCORE_DIGITS), mass=mass)
