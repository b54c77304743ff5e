"""Backend for any OpenAI-compatible chat endpoint (llama.cpp server, vLLM, hosted APIs).

Each criterion suffix is one chat completion of a single token with ``logprobs`` on; the digit
distribution is read from the first token's ``top_logprobs``. Requests run on a bounded thread
pool and the ``openai`` client retries 408/409/429/5xx replies, timeouts and connection errors
with exponential backoff. An item that still fails, or whose reply cannot be read as a score,
becomes a :class:`DigitScore` failure with the reason; no score is ever invented. A prompt longer
than the server's context is refused by the server (HTTP 400, not retried) and recorded as such.

Before its first request the backend checks once, without retries, that the server answers
``GET /models`` at all, and a :class:`~hdeval.llm.breaker.CircuitBreaker` stops the run with
:class:`~hdeval.errors.JudgeUnavailableError` when the server keeps failing, instead of paying
every remaining item's retries.

Log-likelihoods use the legacy ``/v1/completions`` endpoint with ``echo=True``
(:mod:`hdeval.llm.server_likelihood`).

The API key is read from an environment variable only. It, and any credentials in the server URL
(``user:password@``, ``?api_key=``), are scrubbed from every failure reason, log line and error
message this module produces, and from the backend's ``identity`` and ``repr``.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hdeval.errors import ConfigError, HDEvalError
from hdeval.llm.breaker import CircuitBreaker
from hdeval.llm.digits import DEFAULT_MIN_MASS, digit_score
from hdeval.llm.server_errors import describe_failure, is_context_error, is_outage
from hdeval.llm.server_likelihood import EchoLikelihood
from hdeval.llm.truncation import ContextOverflow
from hdeval.llm.types import DigitScore, TokenCounts
from hdeval.llm.urls import mask_secrets, scrub_url, url_secrets

log = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "not-needed"
# Longest wait for the one reachability check (and for the template look-ups), in seconds.
REACHABILITY_TIMEOUT = 10.0
_HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "openai")
_MAX_DETAIL = 300


def quiet_http_logs() -> None:
    """Set the HTTP client loggers to WARNING unless a level was chosen for them: at INFO they
    log one line per request, with its full URL."""
    for name in _HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


class OpenAICompatibleBackend(EchoLikelihood):
    """An LLM judge behind an OpenAI-compatible server: ``/v1/chat/completions`` for scores and
    generation, ``/v1/completions`` for log-likelihoods where the server supports them."""

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
        max_consecutive_failures: int = 8,
        max_failure_share: float = 0.5,
        chat_frame: tuple[str, str] | None = None,
    ) -> None:
        """``chat_frame`` is the text the model's chat template puts before and after a user
        message; by default it is asked from the server when a likelihood is first needed."""
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
        self.server = scrub_url(base_url.rstrip("/"))
        self.model = model
        self.api_key_env = api_key_env
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.min_digit_mass = min_digit_mass
        self.top_logprobs = top_logprobs
        self._identity = identity
        self.served_weights: str | None = None  # as the server's /models reports them
        self.max_model_len: int | None = None
        self.breaker = CircuitBreaker(self.server, max_consecutive_failures, max_failure_share)
        key = os.environ.get(api_key_env) or ""
        self._secrets = sorted({key, *url_secrets(base_url)} - {""}, key=len, reverse=True)
        quiet_http_logs()
        self._client = OpenAI(
            base_url=base_url,
            api_key=key or PLACEHOLDER_API_KEY,
            timeout=timeout,
            max_retries=max_retries,
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._reached = False
        self._reach_lock = threading.Lock()
        self._chat_frame = chat_frame
        self._probed = False
        self._likelihood_problem: str | None = None
        self._probe_lock = threading.Lock()
        self.tokens = TokenCounts()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.server!r}, model={self.model!r}, "
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

    def _each(self, one: Callable[[Any], Any], jobs: Sequence[Any]) -> list[Any]:
        """``one`` of every job, in order, on the worker threads (a single job on this one);
        then raise :class:`JudgeUnavailableError` if the breaker tripped meanwhile."""
        results = [one(jobs[0])] if len(jobs) == 1 else list(self._executor().map(one, jobs))
        self.breaker.check()
        return results

    # ----------------------------------------------------------------- helpers
    def _scrub(self, text: str) -> str:
        """``text`` with the API key and URL credentials masked, cut to a readable length."""
        text = mask_secrets(text, self._secrets)
        if len(text) > _MAX_DETAIL:
            text = text[:_MAX_DETAIL] + "..."
        return text

    def _describe(self, exc: Exception, retries: int | None = None) -> str:
        """A failure reason naming the exception class and, for HTTP errors, the status."""
        n = self.max_retries if retries is None else retries
        return self._scrub(describe_failure(exc, self.timeout, n))

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

    @property
    def identity(self) -> str:
        """What this judge is, in every cache key and bundle card: the identity given
        (``llm.identity``), else the server, the model alias and the weights the server reports
        serving under it (vLLM's ``root``: its weights directory or hub name), so that new
        weights behind the same alias never reuse stale scores. Asked of the server once
        (``GET /models``, with the reachability check); a server that reports no weights is
        named by its URL and alias alone: give ``llm.identity`` when you change its weights."""
        if self._identity is None:
            self._ready()
            weights = f"@{self.served_weights}" if self.served_weights else ""
            self._identity = f"openai-compatible:{self.server}:{self.model}{weights}"
        return self._identity

    # ----------------------------------------------------------------- availability
    def _ready(self) -> None:
        """Raise if the judge was found unavailable; check once that the server answers."""
        self.breaker.check()
        if self._reached:
            return
        with self._reach_lock:
            if not self._reached:
                self._check_reachable()
                self._reached = True

    def _check_reachable(self) -> None:
        """One ``GET /models`` without retries. Only no answer at all is fatal: some servers
        lack ``/models`` or want a key for it, and say so with an HTTP error."""
        import openai

        wait = min(self.timeout, REACHABILITY_TIMEOUT)
        try:
            models = self._client.with_options(timeout=wait, max_retries=0).models.list()
            self._learn_weights(models)
        except openai.APIConnectionError as exc:  # refused, unresolvable, or no reply in time
            why = f"GET {self.server}/models got no answer (waited up to {wait:g}s, no retry)"
            self.breaker.trip(why, self._describe(exc, retries=0))
            self.breaker.check()
        except Exception as exc:
            log.debug("GET /models at %s: %s", self.server, self._describe(exc, retries=0))

    def _learn_weights(self, models: Any) -> None:
        """The weights and context the server reports for our model alias (vLLM: ``root``,
        ``max_model_len``), where it reports them."""
        for entry in getattr(models, "data", None) or []:
            if getattr(entry, "id", None) != self.model:
                continue
            root = getattr(entry, "root", None)
            if isinstance(root, str) and root and root != self.model:
                self.served_weights = mask_secrets(root, self._secrets)
            length = getattr(entry, "max_model_len", None)
            self.max_model_len = length if isinstance(length, int) else None

    # ----------------------------------------------------------------- scoring
    def _score_one(self, message: str) -> DigitScore:
        if self.breaker.tripped:  # the rest of a batch, once the breaker has tripped
            return DigitScore(failure="not sent: the judge was found unavailable")
        started = time.perf_counter()
        outage = False
        try:
            reply = self._chat(message, max_tokens=1, logprobs=True, top_logprobs=self.top_logprobs)
            result = self._read_digits(reply)
        except Exception as exc:  # one bad item must not sink the batch
            outage = is_outage(exc)
            result = DigitScore(failure=self._describe(exc))
        self.breaker.record(result.failure, outage)
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
        """One single-token chat completion per suffix, in input order.

        Raises :class:`JudgeUnavailableError` if the server cannot be reached, or if the circuit
        breaker trips during the call (the call's items not yet sent are then not sent).
        """
        self._ready()
        prefix = "".join(segments)
        return self._each(self._score_one, [prefix + suffix for suffix in suffixes])

    # ----------------------------------------------------------------- generation
    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        """Greedy reply to one user message."""
        self._ready()
        try:
            reply = self._chat(prompt, max_tokens=max_new_tokens)
            text = reply.choices[0].message.content
        except Exception as exc:
            reason = self._describe(exc)
            self.breaker.record(reason, is_outage(exc))
            self.breaker.check()
            error = ContextOverflow if is_context_error(exc) else HDEvalError
            raise error(f"generation with {self.identity} failed: {reason}") from None
        if text is None:
            self.breaker.record("the reply has no text")
            self.breaker.check()
            raise HDEvalError(f"generation with {self.identity} returned no text")
        self.breaker.record(None)
        return text.strip()
