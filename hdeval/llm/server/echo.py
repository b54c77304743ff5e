"""Reading prompt log-probabilities from a legacy ``/v1/completions`` reply with ``echo=True``.

Asked with ``echo=True, logprobs=1, max_tokens=1``, an OpenAI-compatible server returns the
prompt's tokens followed by one generated token, each with its character offset in the text and
its log-probability given everything before it (the approach of lm-evaluation-harness for
OpenAI-style completions). The first token has nothing before it, so its log-probability is null.

Not every server gets this right: llama-cpp-python (0.3.x) echoes at each token the
log-probability of that token under the distribution *after* it (its values are one position
off, though the first is null as it should be), and other servers ignore ``echo``.
:func:`echo_problem` checks the structure of a reply to a known prompt; :func:`repeat_problem`
checks that the log-probability the server echoes for a token equals the one it gave when it
generated that token after the same text, which a shift breaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hdeval.llm.types import LogLikelihood
from hdeval.llm.validity import likelihood_problem

# Largest difference (nats) between the echoed and the generated log-probability of one token
# at one position; they are the same quantity, computed by a prefill and by a decoding step.
ECHO_TOLERANCE = 0.1


class EchoError(ValueError):
    """An echoed reply cannot be read as the prompt's log-probabilities."""


@dataclass(frozen=True)
class Echo:
    """Tokens of an echoed completion, their character offsets and log-probabilities."""

    tokens: tuple[str, ...]
    offsets: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    prompt_tokens: int | None = None  # as the reply's ``usage`` counts them

    @classmethod
    def from_reply(cls, reply: Any) -> Echo:
        """The echo of the first choice of a ``Completion`` reply."""
        choices = getattr(reply, "choices", None)
        if not choices:
            raise EchoError("the reply has no choices")
        lp = getattr(choices[0], "logprobs", None)
        tokens = getattr(lp, "tokens", None)
        offsets = getattr(lp, "text_offset", None)
        values = getattr(lp, "token_logprobs", None)
        if not (tokens and offsets and values):
            raise EchoError(
                "the reply has no tokens, text_offset and token_logprobs "
                "(the server ignored echo=True or logprobs)"
            )
        if not len(tokens) == len(offsets) == len(values):
            raise EchoError(
                f"the reply has {len(tokens)} tokens, {len(offsets)} text offsets and "
                f"{len(values)} log-probabilities"
            )
        usage = getattr(reply, "usage", None)
        return cls(
            tokens=tuple(tokens),
            offsets=tuple(int(o) for o in offsets),
            logprobs=tuple(None if v is None else float(v) for v in values),
            prompt_tokens=getattr(usage, "prompt_tokens", None),
        )

    def span(self, start: int, end: int) -> range:
        """Indices of the tokens that begin at character ``start`` and before ``end``.

        Raises :class:`EchoError` when no token begins exactly at ``start`` (the token there also
        covers text before it, so the continuation's tokens cannot be told apart).
        """
        first = next((i for i, o in enumerate(self.offsets) if o >= start), None)
        if first is None or self.offsets[first] != start:
            raise EchoError(
                f"no echoed token begins at character {start}, where the continuation begins: "
                "the server merged its first token with the prompt before it"
            )
        stop = next((i for i in range(first, len(self.offsets)) if self.offsets[i] >= end), None)
        return range(first, len(self.offsets) if stop is None else stop)


def continuation_loglikelihood(echo: Echo, context_chars: int, prompt_chars: int) -> LogLikelihood:
    """The log-probabilities of the tokens in ``[context_chars, prompt_chars)``.

    ``prompt_chars`` is the length of the whole prompt sent; tokens after it were generated.
    There must be one for every continuation token the server read: as many as its ``usage``
    counts after the context's, or, where it reports no usage, enough to reach the prompt's
    end (:func:`~hdeval.llm.validity.likelihood_problem` checks them).
    """
    span = echo.span(context_chars, prompt_chars)
    if not span:
        raise EchoError("the continuation has no echoed tokens")
    values = [echo.logprobs[i] for i in span]
    if echo.prompt_tokens is not None:
        sent = echo.prompt_tokens - span.start
    elif echo.offsets[span[-1]] + len(echo.tokens[span[-1]]) < prompt_chars:
        sent = len(span) + 1  # at least one more: the echo stops before the prompt's end
    else:
        sent = len(span)
    if problem := likelihood_problem(values, sent):
        raise EchoError(f"the echoed continuation: {problem}")
    return LogLikelihood(tokens=tuple(values))  # type: ignore[arg-type]


def _offsets_problem(echo: Echo, prompt: str) -> str | None:
    """Whether the tokens before ``len(prompt)`` spell ``prompt`` at consistent offsets."""
    n = sum(1 for o in echo.offsets if o < len(prompt))
    spelled = "".join(echo.tokens[:n])
    if echo.offsets[0] != 0 or spelled != prompt:
        return f"the echoed tokens {list(echo.tokens[:n])} do not spell the prompt {prompt!r}"
    expected = [sum(len(t) for t in echo.tokens[:i]) for i in range(n + 1)]
    if list(echo.offsets[: n + 1]) != expected[: len(echo.offsets[: n + 1])]:
        return f"text offsets {list(echo.offsets)} do not match the token lengths {expected}"
    return None


def echo_problem(echo: Echo, prompt: str) -> str | None:
    """What is wrong with the echo of ``prompt`` (and maybe a generated token), or None."""
    if problem := _offsets_problem(echo, prompt):
        return problem
    n = sum(1 for o in echo.offsets if o < len(prompt))
    if echo.prompt_tokens is not None and echo.prompt_tokens != n:
        return f"the reply echoes {n} prompt tokens but counts {echo.prompt_tokens} in its usage"
    if echo.logprobs[0] is not None:
        return (
            f"the first prompt token {echo.tokens[0]!r} has a log-probability "
            f"({echo.logprobs[0]:.3f}) although nothing precedes it: the echoed values are "
            "shifted by one token"
        )
    missing = [echo.tokens[i] for i in range(1, n) if echo.logprobs[i] is None]
    if missing:
        return f"prompt tokens {missing} have no log-probability"
    return None


def generated(echo: Echo, prompt: str) -> tuple[str, float] | None:
    """Text and log-probability of the token generated after ``prompt``, if the echo has it
    (OpenAI and vLLM add it; llama-cpp-python leaves it out)."""
    n = sum(1 for o in echo.offsets if o < len(prompt))
    if n >= len(echo.tokens) or echo.logprobs[n] is None or not echo.tokens[n]:
        return None
    return echo.tokens[n], echo.logprobs[n]  # type: ignore[return-value]


def repeat_problem(echo: Echo, prompt: str, token: str, logprob: float) -> str | None:
    """Whether ``token``, sent after ``prompt``, is echoed with the ``logprob`` the server gave it
    when it generated that token after ``prompt``."""
    if problem := echo_problem(echo, prompt + token):
        return problem
    try:
        span = echo.span(len(prompt), len(prompt) + len(token))
    except EchoError as exc:
        return str(exc)
    if [echo.tokens[i] for i in span] != [token]:
        return f"{token!r} after the probe text is echoed as {[echo.tokens[i] for i in span]}"
    echoed = echo.logprobs[span[0]]
    if echoed is None or abs(echoed - logprob) > ECHO_TOLERANCE:
        shown = "null" if echoed is None else f"{echoed:.3f}"
        return (
            f"the server generates {token!r} after the probe text with log-probability "
            f"{logprob:.3f} but echoes it there with {shown}: the echoed log-probabilities are "
            "not those of their tokens (shifted by one position?)"
        )
    return None
