"""How a failed request to an OpenAI-compatible server is classified and worded: an outage of
the whole server (the circuit breaker counts those) or a problem of one item, such as a prompt
longer than the server's context."""

from __future__ import annotations

import re

from hdeval.errors import JudgeUnavailableError

RETRIED_STATUS = frozenset({408, 409, 429})  # and every 5xx, as the openai client does
REFUSES_EVERY_REQUEST = frozenset({401, 403, 404})  # bad key, unknown model, wrong URL
# How OpenAI, vLLM, llama.cpp and llama-cpp-python word a prompt that exceeds the context.
_CONTEXT_ERROR = re.compile(r"context (length|window|size)", re.IGNORECASE)


def is_context_error(exc: Exception) -> bool:
    """Whether ``exc`` is a server's refusal of a prompt longer than its context."""
    import openai

    return isinstance(exc, openai.APIStatusError) and (
        exc.code == "context_length_exceeded" or bool(_CONTEXT_ERROR.search(exc.message))
    )


def is_outage(exc: Exception) -> bool:
    """Whether ``exc`` means the server cannot be used at all, rather than for this item only."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        return True
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        return status >= 500 or status in RETRIED_STATUS or status in REFUSES_EVERY_REQUEST
    return False


def probe_failure(exc: Exception, probe: str, reason: str) -> str:
    """``reason``, why ``probe`` (such as "the likelihood probe of URL") failed with ``exc``.
    A probe that got no answer at all learned nothing of what it checks: it raises
    :class:`~hdeval.errors.JudgeUnavailableError` instead, naming ``probe``."""
    import openai

    if isinstance(exc, openai.APIConnectionError):
        raise JudgeUnavailableError(f"{probe} got no answer: {reason}") from None
    return reason


def describe_failure(exc: Exception, timeout: float, retries: int) -> str:
    """A failure reason naming the exception class and, for HTTP errors, the status; a prompt
    longer than the context says so first. Not yet scrubbed of secrets."""
    import openai

    from hdeval.llm.server.client import ServerStalled

    name = type(exc).__name__
    retried = f"after {retries} {'retry' if retries == 1 else 'retries'}"
    if isinstance(exc, ServerStalled):
        detail = f"{name}: no answer from the server to any request for {exc.seconds:.3g}s"
    elif isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status not in RETRIED_STATUS and status < 500:
            retried = "(not retried)"
        detail = f"HTTP {status} ({name}) {retried}: {exc.message}"
        if is_context_error(exc):
            detail = f"prompt longer than the server's context: {detail}"
    elif isinstance(exc, openai.APITimeoutError):
        detail = f"{name}: no reply within {timeout}s, {retried}"
    elif isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        because = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        detail = f"{name} {retried}: {exc.message}{because}"
    else:
        detail = f"malformed reply ({name}: {exc})"
    return detail
