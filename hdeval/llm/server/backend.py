"""Backend for any OpenAI-compatible chat endpoint (llama.cpp server, vLLM, hosted APIs).

Each criterion suffix is one chat completion of a single token with ``logprobs`` on; the digit
distribution is read from the first token's ``top_logprobs``. Requests run on a bounded thread
pool and the ``openai`` client retries 408/409/429/5xx replies, timeouts and connection errors
with exponential backoff. An item that still fails, or whose reply cannot be read as a score,
becomes a :class:`DigitScore` failure with the reason; no score is ever invented. A reply is
read by :mod:`hdeval.llm.server.chat_digits`.

Before its first request the backend asks the server once, without retries, what it serves
(``GET /models``: :mod:`hdeval.llm.server.served_model` names the judge by it, and by a vLLM
server's fingerprint, taken again whenever the server answers after an outage). A server that keeps
failing trips a :class:`~hdeval.llm.server.breaker.CircuitBreaker`, and one that answers nothing for
``llm.timeout`` seconds trips it at once (:mod:`hdeval.llm.server.client`): the run stops with
:class:`~hdeval.errors.JudgeUnavailableError` instead of paying every remaining item's retries.
Prompts are cut to the server's context (vLLM's ``max_model_len``, else ``llm.max_context``) in
its own tokens (:mod:`hdeval.llm.server.context`); a prompt the server still refuses as too long
is that item's failure, not an outage.

Log-likelihoods use the legacy ``/v1/completions`` endpoint with ``echo=True``
(:mod:`hdeval.llm.server.likelihood`), refused on a vLLM server that caches prompt prefixes
(:mod:`hdeval.llm.server.prefix_cache`).

The API key is read from an environment variable only. It, and any credentials in the server URL
(``user:password@``, ``?api_key=``), are scrubbed from every failure reason, log line and error
message this module produces, and from the backend's ``identity`` and ``repr``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hdeval.errors import ConfigError, HDEvalError
from hdeval.llm.digits import DEFAULT_MIN_MASS
from hdeval.llm.server.breaker import CircuitBreaker
from hdeval.llm.server.chat_digits import read_digits
from hdeval.llm.server.client import ServerStalled, open_client
from hdeval.llm.server.context import ServerContext, ServerTokens
from hdeval.llm.server.failures import describe_failure, is_context_error, is_outage
from hdeval.llm.server.likelihood import EchoLikelihood
from hdeval.llm.server.prefix_cache import PrefixCacheProbe
from hdeval.llm.server.served_model import ServedModel
from hdeval.llm.server.urls import mask_secrets, scrub_url, url_secrets
from hdeval.llm.truncation import ContextOverflow
from hdeval.llm.types import DigitScore, TokenCounts

log = logging.getLogger(__name__)

_MAX_DETAIL = 300


class OpenAICompatibleBackend(ServedModel, ServerContext, EchoLikelihood, PrefixCacheProbe):
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
        connect_timeout: float = 10.0,
        max_context: int | None = None,
    ) -> None:
        """``timeout`` is the read timeout of a request, and how long the server may answer
        nothing at all before the run stops; ``max_context`` the server's context in tokens
        (prompt and reply) where it does not report it. ``chat_frame`` is the text the model's
        chat template puts before and after a user message; by default it is asked from the
        server when it is first needed."""
        if not base_url:
            raise ConfigError("llm.base_url is empty; give the server's /v1 URL")
        if concurrency < 1:
            raise ConfigError(f"llm.concurrency must be at least 1, got {concurrency}")
        if max_retries < 0:
            raise ConfigError(f"llm.max_retries must be 0 or more, got {max_retries}")
        if timeout <= 0 or connect_timeout <= 0:
            raise ConfigError(
                f"llm.timeout and llm.connect_timeout must be positive, got {timeout} and "
                f"{connect_timeout}"
            )
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
        self._given_identity = identity
        self._identity: str | None = None
        self.reported: dict[str, Any] = {}  # what the server's /models reports about the model
        self._given_context = max_context
        self.breaker = CircuitBreaker(self.server, max_consecutive_failures, max_failure_share)
        key = os.environ.get(api_key_env) or ""
        self._secrets = sorted({key, *url_secrets(base_url)} - {""}, key=len, reverse=True)
        self._client, self.progress = open_client(
            base_url, key, timeout, connect_timeout, max_retries
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._reached = False
        self._reach_lock = threading.Lock()
        self._checked_resets = 0  # the breaker's resets after which the identity was checked
        self._recheck_lock = threading.Lock()
        self._chat_frame = chat_frame
        self._frame_asked = chat_frame is not None
        self._probed = False
        self._likelihood_problem: str | None = None
        self._probe_lock = threading.Lock()
        self._tokens = ServerTokens(self._post_root, model, self.server)
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
        then raise :class:`JudgeUnavailableError` if the breaker tripped meanwhile, or if the
        server answered again after an outage serving other weights (:meth:`_answers_kept`)."""
        results = [one(jobs[0])] if len(jobs) == 1 else list(self._executor().map(one, jobs))
        self._answers_kept()
        return results

    def _answers_kept(self) -> None:
        """Raise :class:`JudgeUnavailableError` if the breaker has tripped. Where the server
        answered again after an outage, first check that it serves what it served before
        (:meth:`~hdeval.llm.server.served_model.ServedModel.recheck_identity`): once per reset of
        the breaker, every call that ends after it waiting for the check."""
        self.breaker.check()
        if self.breaker.resets > self._checked_resets:
            with self._recheck_lock:
                resets = self.breaker.resets
                if resets > self._checked_resets:
                    self.recheck_identity()
                    self._checked_resets = resets
            self.breaker.check()

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

    def _record_failure(self, exc: Exception) -> str:
        """The reason of a request that failed, counted by the breaker: a server that answers
        nothing trips it at once; a prompt longer than the server's context is a problem of
        that item only and not counted; any other failure is counted (as an outage where the
        server could not be used at all)."""
        reason = self._describe(exc)
        if isinstance(exc, ServerStalled):
            self.breaker.trip(
                f"no answer from the server to any request for {exc.seconds:.3g}s "
                f"(llm.timeout {self.timeout:g}s): it takes requests but does not reply; if it "
                "is only slow, raise llm.timeout",
                reason,
            )
        if is_context_error(exc):
            self.breaker.record_refusal()
        else:
            self.breaker.record(reason, is_outage(exc))
        return reason

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

    # ----------------------------------------------------------------- availability
    def _ready(self) -> None:
        """Raise if the judge was found unavailable; ask once what the server serves."""
        self.breaker.check()
        if self._reached:
            return
        with self._reach_lock:
            if not self._reached:
                self._ask_models()
                self._take_fingerprint()
                self._reached = True

    # ----------------------------------------------------------------- scoring
    def _score_one(self, message: str) -> DigitScore:
        if self.breaker.tripped:  # the rest of a batch, once the breaker has tripped
            return DigitScore(failure="not sent: the judge was found unavailable")
        started = time.perf_counter()
        try:
            reply = self._chat(message, max_tokens=1, logprobs=True, top_logprobs=self.top_logprobs)
            result = read_digits(reply, self.min_digit_mass)
        except Exception as exc:  # one bad item must not sink the batch
            result = DigitScore(failure=self._record_failure(exc))
        else:
            self.breaker.record(result.failure)
        elapsed = time.perf_counter() - started
        if result.ok:
            log.debug("digit score from %s in %.3fs", self.identity, elapsed)
        else:
            log.warning("no digit score from %s: %s", self.identity, result.failure)
        return result

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
            reason = self._record_failure(exc)
            self.breaker.check()
            error = ContextOverflow if is_context_error(exc) else HDEvalError
            raise error(f"generation with {self.identity} failed: {reason}") from None
        if text is None:
            self.breaker.record("the reply has no text")
            self.breaker.check()
            raise HDEvalError(f"generation with {self.identity} returned no text")
        self.breaker.record(None)
        self._answers_kept()
        return text.strip()
