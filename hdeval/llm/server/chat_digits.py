"""The digit score of a chat completion of one token: its first token's ``top_logprobs``, read
as :func:`~hdeval.llm.digits.digit_score` reads a distribution, or the reason the reply has
none to read."""

from __future__ import annotations

import math
from typing import Any

from hdeval.llm.digits import digit_score
from hdeval.llm.types import DigitScore


def read_digits(reply: Any, min_mass: float) -> DigitScore:
    """The digit score of ``reply`` (an OpenAI chat completion asked with ``logprobs`` on);
    tokens of the same text under distinct ids are pooled, and ``min_mass`` is the least
    probability the score digits must hold together."""
    choices = getattr(reply, "choices", None)
    if not choices:
        return DigitScore(failure="malformed reply: no choices")
    logprobs = getattr(choices[0], "logprobs", None)
    content = getattr(logprobs, "content", None) if logprobs is not None else None
    if not content:
        return DigitScore(
            failure="reply has no logprobs for the first token "
            "(the server ignored logprobs=True or returned no token)"
        )
    top = content[0].top_logprobs or []
    if not top:
        return DigitScore(failure="reply has no top_logprobs for the first token")
    token_logprobs: dict[str, float] = {}
    for entry in top:
        lp = float(entry.logprob)
        if entry.token in token_logprobs:  # distinct token ids with the same text
            prev = token_logprobs[entry.token]
            hi = max(prev, lp)
            lp = hi + math.log(math.exp(prev - hi) + math.exp(lp - hi))
        token_logprobs[entry.token] = lp
    return digit_score(token_logprobs, min_mass)
