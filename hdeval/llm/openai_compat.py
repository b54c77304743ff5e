"""Backend for any OpenAI-compatible chat endpoint (llama.cpp server, vLLM, hosted APIs).

Each criterion suffix is one chat completion of a single token with ``logprobs`` on; the digit
distribution is read from the first token's ``top_logprobs``. Requests run on a bounded thread
pool and the ``openai`` client retries 408/409/429/5xx replies, timeouts and connection errors
with exponential backoff. An item that still fails, or whose reply cannot be read as a score,
becomes a :class:`DigitScore` failure with the reason; no score is ever invented. A prompt longer
than the server's context is refused by the server (HTTP 400, not retried) and recorded as such.

The API key is read from an environment variable only, and is scrubbed from every failure reason
and error message this module produces.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hdeval.errors import ConfigError, HDEvalError, UnsupportedError
from hdeval.llm.digits import DEFAULT_MIN_MASS, digit_score
from hdeval.llm.types import DigitScore, LogLikelihood, TokenCounts
from hdeval.truncation import ContextOverflow

log = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "not-needed"
_MAX_DETAIL = 300
_RETRIED_STATUS = frozenset({408, 409, 429})  # and every 5xx, as the openai client does
# How OpenAI, vLLM, llama.cpp and llama-cpp-python word a prompt that exceeds the context.
_CONTEXT_ERROR = re.compile(r"context (length|window|size)", re.IGNORECASE)


def _is_context_error(exc: Exception) -> bool:
    """Whether ``exc`` is a server's refusal of a prompt longer than its context."""
    import openai

    return isinstance(exc, openai.APIStatusError) and (
        exc.code == "context_length_exceeded" or bool(_CONTEXT_ERROR.search(exc.message))
    )


class OpenAICompatibleBackend:
    """An LLM judge behind an OpenAI-compatible ``/v1/chat/completions`` endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 4,
        timeout: float = 60.0,
        max_retries: int = 5,
        min_digit_mass: float = DEFAULT_MIN_MASS,
        top_logprobs: int = 20,
        identity: str | None = None,
    ) -> None:
        from openai import OpenAI

        if not base_url:
            raise ConfigError("llm.base_url is empty; give the server's /v1 URL")
        if concurrency < 1:
            raise ConfigError(f"llm.concurrency must be at least 1, got {concurrency}")
        if max_retries < 0:
            raise ConfigError(f"llm.max_retries must be 0 or more, got {max_retries}")
        if timeout <= 0:
            raise ConfigError(f"llm.timeout must be positive, got {timeout}")
        if top_logprobs < 5:
            raise ConfigError(
                f"llm.top_logprobs must be at least 5 (one per digit), got {top_logprobs}"
            )
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.min_digit_mass = min_digit_mass
        self.top_logprobs = top_logprobs
        self.identity = identity if identity is not None else f"openai-compatible:{model}"
        key = os.environ.get(api_key_env) or ""
        self._secret = key
        self._client = OpenAI(
            base_url=base_url,
            api_key=key or PLACEHOLDER_API_KEY,
            timeout=timeout,
            max_retries=max_retries,
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self.tokens = TokenCounts()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, concurrency={self.concurrency}, "
            f"timeout={self.timeout}, max_retries={self.max_retries})"
        )

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Stop the worker threads and close HTTP connections."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        self._client.close()

    def __enter__(self) -> OpenAICompatibleBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.concurrency, thread_name_prefix="hdeval-openai"
                )
            return self._pool

    # ----------------------------------------------------------------- helpers
    def _scrub(self, text: str) -> str:
        """``text`` with the API key masked, cut to a readable length."""
        if self._secret:
            text = text.replace(self._secret, "***")
        if len(text) > _MAX_DETAIL:
            text = text[:_MAX_DETAIL] + "..."
        return text

    def _describe(self, exc: Exception) -> str:
        """A failure reason naming the exception class and, for HTTP errors, the status."""
        import openai

        name = type(exc).__name__
        n = self.max_retries
        retried = f"after {n} {'retry' if n == 1 else 'retries'}"
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if status not in _RETRIED_STATUS and status < 500:
                retried = "(not retried)"
            detail = f"HTTP {status} ({name}) {retried}: {exc.message}"
            if _is_context_error(exc):
                detail = f"prompt longer than the server's context: {detail}"
        elif isinstance(exc, openai.APITimeoutError):
            detail = f"{name}: no reply within {self.timeout}s, {retried}"
        elif isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            because = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
            detail = f"{name} {retried}: {exc.message}{because}"
        else:
            detail = f"malformed reply ({name}: {exc})"
        return self._scrub(detail)

    def _chat(self, message: str, **params: Any) -> Any:
        reply = self._client.chat.completions.create(
            model=self.model,
            messages=[{"role": "user", "content": message}],
            temperature=0,
            **params,
        )
        self._count(getattr(reply, "usage", None))
        return reply

    def _count(self, usage: Any) -> None:
        """Add a reply's token usage, as far as the server reports it."""
        if usage is None:
            return
        details = getattr(usage, "prompt_tokens_details", None)
        self.tokens.add(
            prompt=getattr(usage, "prompt_tokens", None) or 0,
            completion=getattr(usage, "completion_tokens", None) or 0,
            reused=getattr(details, "cached_tokens", None) or 0,
        )

    # ----------------------------------------------------------------- scoring
    def _score_one(self, message: str) -> DigitScore:
        started = time.perf_counter()
        try:
            reply = self._chat(message, max_tokens=1, logprobs=True, top_logprobs=self.top_logprobs)
            result = self._read_digits(reply)
        except Exception as exc:  # one bad item must not sink the batch
            result = DigitScore(failure=self._describe(exc))
        elapsed = time.perf_counter() - started
        if result.ok:
            log.debug("digit score from %s in %.3fs", self.identity, elapsed)
        else:
            log.warning("no digit score from %s: %s", self.identity, result.failure)
        return result

    def _read_digits(self, reply: Any) -> DigitScore:
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
        return digit_score(token_logprobs, self.min_digit_mass)

    def digit_scores(self, segments: Sequence[str], suffixes: Sequence[str]) -> list[DigitScore]:
        """One single-token chat completion per suffix, in input order."""
        prefix = "".join(segments)
        messages = [prefix + suffix for suffix in suffixes]
        if len(messages) == 1:
            return [self._score_one(messages[0])]
        return list(self._executor().map(self._score_one, messages))

    # ----------------------------------------------------------------- other capabilities
    def loglikelihoods(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[LogLikelihood]:
        raise UnsupportedError(
            "the OpenAI-compatible backend cannot compute log-likelihoods: chat endpoints do not "
            "return log-probabilities of a given reply, and llama.cpp's /v1/completions echo "
            "log-probabilities are shifted by one token in 0.3.x; score likelihood with a local "
            "backend (llm.backend: embedded or transformers), or set hierarchy.modes: [prompt]"
        )

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        """Greedy reply to one user message."""
        try:
            reply = self._chat(prompt, max_tokens=max_new_tokens)
            text = reply.choices[0].message.content
        except Exception as exc:
            error = ContextOverflow if _is_context_error(exc) else HDEvalError
            raise error(
                f"generation with {self.identity} at {self.base_url} failed: {self._describe(exc)}"
            ) from None
        if text is None:
            raise HDEvalError(f"generation with {self.identity} returned no text")
        return text.strip()
