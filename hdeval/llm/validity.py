"""The one check of every answer a judge gives, from every backend, before it is used or cached.

A likelihood must hold one log-probability per token sent, each finite and at most 0; a digit
distribution must come from log-probabilities a model can give and put at least
``llm.min_digit_mass`` on the score digits. An answer that fails is the item's failure, with the
reason: never a score, never a cached result. "At most 0" allows :data:`LOGPROB_CEILING`, the
rounding of a probability of 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from hdeval.llm.types import MAX_MASS, SCORE_DIGITS, DigitScore, LogLikelihood

#: Largest log-probability taken as a model's: log 1, and rounding.
LOGPROB_CEILING = math.log(MAX_MASS)


def _impossible(value: float | None) -> bool:
    return value is None or not math.isfinite(value) or value > LOGPROB_CEILING


def likelihood_problem(values: Sequence[float | None], sent: int | None = None) -> str | None:
    """Why ``values`` cannot be the log-probabilities of the ``sent`` tokens of a continuation
    (another count; a null, NaN, infinite or positive value), or None. ``sent`` None: the count
    is not known here (a cached or already counted answer); it must still be one or more."""
    if sent is not None and len(values) != sent:
        return f"{len(values)} token log-probabilities for the {sent} tokens sent"
    if not values:
        return "no token log-probabilities"
    bad = [v for v in values if _impossible(v)]
    if bad:
        return (
            f"impossible log-probabilities {bad[:5]} of tokens sent (null, NaN, infinite, or "
            "above 0: a probability above 1)"
        )
    return None


def checked_likelihood(values: Sequence[float], sent: int) -> LogLikelihood:
    """The likelihood of a continuation of ``sent`` tokens from its tokens' ``values``, or the
    failure :func:`likelihood_problem` finds."""
    problem = likelihood_problem(values, sent)
    return (
        LogLikelihood(tokens=tuple(values)) if problem is None else LogLikelihood(failure=problem)
    )


def readable_likelihood(data: dict) -> bool:
    """Whether a cached likelihood holds per-token log-probabilities (older ones held a sum),
    each one a model can give."""
    tokens = data.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int | float) for t in tokens):
        return False
    return likelihood_problem(tokens) is None


def reply_problem(token_logprobs: Mapping[str, float]) -> str | None:
    """Why these log-probabilities of reply tokens cannot come from a model (NaN, a positive
    one, probabilities adding up to more than 1), or None."""
    for token, logprob in token_logprobs.items():
        if math.isnan(logprob) or logprob > LOGPROB_CEILING:
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
    """Why a digit distribution cannot be a judge's answer (not five finite probabilities
    adding up to 1, a digit mass that is not a probability), or None."""
    probs = score.probs
    finite = len(probs) == len(SCORE_DIGITS) and all(math.isfinite(p) and p >= 0 for p in probs)
    if not finite or abs(math.fsum(probs) - 1.0) > MAX_MASS - 1.0:
        return f"impossible digit probabilities {probs}"
    if not 0.0 < score.mass <= MAX_MASS:  # NaN fails this too
        return f"impossible digit mass {score.mass}"
    return None


def mass_problem(mass: float, min_mass: float) -> str | None:
    """Why a digit mass is too small to be read as a score (below ``min_mass``, or 0), or None."""
    if mass < min_mass or mass == 0.0:
        return f"digit mass {mass:.3f} below llm.min_digit_mass {min_mass}"
    return None


def checked(result: DigitScore | LogLikelihood, min_mass: float) -> DigitScore | LogLikelihood:
    """``result``, or, where an answer fails its check, that answer as a failure with the
    reason. A failure stays as it is."""
    if not result.ok:
        return result
    if isinstance(result, LogLikelihood):
        problem = likelihood_problem(result.tokens)
        return result if problem is None else LogLikelihood(failure=problem)
    problem = distribution_problem(result) or mass_problem(result.mass, min_mass)
    return result if problem is None else DigitScore(mass=result.mass, failure=problem)
