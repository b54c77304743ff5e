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

Log-likelihoods use the legacy ``/v1/completions`` endpoint with ``echo=True`` (see
:mod:`hdeval.llm.echo`), on the same text the local backend scores: the model's chat frame around
the user message, then the continuation as the reply. Whether the server's echo can be trusted is
probed once (:meth:`OpenAICompatibleBackend.supports_likelihood`).

The API key is read from an environment variable only. It, and any credentials in the server URL
(``user:password@``, ``?api_key=``), are scrubbed from every failure reason, log line and error
message this module produces, and from the backend's ``identity`` and ``repr``.
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

from hdeval.errors import ConfigError, HDEvalError, JudgeUnavailableError, UnsupportedError
from hdeval.llm.breaker import CircuitBreaker
from hdeval.llm.digits import DEFAULT_MIN_MASS, digit_score
from hdeval.llm.echo import (
    Echo,
    EchoError,
    continuation_loglikelihood,
    echo_problem,
    generated,
    repeat_problem,
)
from hdeval.llm.types import DigitScore, LogLikelihood, TokenCounts
from hdeval.llm.urls import mask_secrets, scrub_url, url_secrets
from hdeval.truncation import ContextOverflow

log = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "not-needed"
# Longest wait for the one reachability check (and for the template look-ups), in seconds.
REACHABILITY_TIMEOUT = 10.0
# A text whose next token every model predicts (" 7", or " " then "7"): the probe of an echo.
PROBE_TEXT = "Counting: 1, 2, 3, 4, 5, 6,"
_MESSAGE_MARK = "HDEVAL_USER_MESSAGE_MARK"
_HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "openai")
_MAX_DETAIL = 300
_RETRIED_STATUS = frozenset({408, 409, 429})  # and every 5xx, as the openai client does
_REFUSES_EVERY_REQUEST = frozenset({401, 403, 404})  # bad key, unknown model, wrong URL
# How OpenAI, vLLM, llama.cpp and llama-cpp-python word a prompt that exceeds the context.
_CONTEXT_ERROR = re.compile(r"context (length|window|size)", re.IGNORECASE)
_LIKELIHOOD_HINT = (
    "score likelihood with a local backend (llm.backend: embedded or transformers), "
    "or set hierarchy.modes: [prompt]"
)


def _is_context_error(exc: Exception) -> bool:
    """Whether ``exc`` is a server's refusal of a prompt longer than its context."""
    import openai

    return isinstance(exc, openai.APIStatusError) and (
        exc.code == "context_length_exceeded" or bool(_CONTEXT_ERROR.search(exc.message))
    )


def _is_outage(exc: Exception) -> bool:
    """Whether ``exc`` means the server cannot be used at all, rather than for this item only."""
    import openai

    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        return True
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        return status >= 500 or status in _RETRIED_STATUS or status in _REFUSES_EVERY_REQUEST
    return False


def quiet_http_logs() -> None:
    """Set the HTTP client loggers to WARNING unless a level was chosen for them: at INFO they
    log one line per request, with its full URL."""
    for name in _HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


def _split_frame(rendered: Any) -> tuple[str, str]:
    """(text before, text after) the marked user message in a rendered chat template."""
    if not isinstance(rendered, str) or rendered.count(_MESSAGE_MARK) != 1:
        raise ValueError(f"the rendered template does not hold the message once: {rendered!r}")
    head, tail = rendered.split(_MESSAGE_MARK)
    return head, tail


class OpenAICompatibleBackend:
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
        self.identity = (
            identity if identity is not None else f"openai-compatible:{self.server}:{model}"
        )
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

    # ----------------------------------------------------------------- helpers
    def _scrub(self, text: str) -> str:
        """``text`` with the API key and URL credentials masked, cut to a readable length."""
        text = mask_secrets(text, self._secrets)
        if len(text) > _MAX_DETAIL:
            text = text[:_MAX_DETAIL] + "..."
        return text

    def _describe(self, exc: Exception, retries: int | None = None) -> str:
        """A failure reason naming the exception class and, for HTTP errors, the status."""
        import openai

        name = type(exc).__name__
        n = self.max_retries if retries is None else retries
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
            self._client.with_options(timeout=wait, max_retries=0).models.list()
        except openai.APIConnectionError as exc:  # refused, unresolvable, or no reply in time
            why = f"GET {self.server}/models got no answer (waited up to {wait:g}s, no retry)"
            self.breaker.trip(why, self._describe(exc, retries=0))
            self.breaker.check()
        except Exception as exc:
            log.debug("GET /models at %s: %s", self.server, self._describe(exc, retries=0))

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
            outage = _is_outage(exc)
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
        messages = [prefix + suffix for suffix in suffixes]
        if len(messages) == 1:
            results = [self._score_one(messages[0])]
        else:
            results = list(self._executor().map(self._score_one, messages))
        self.breaker.check()
        return results

    # ----------------------------------------------------------------- likelihood
    def supports_likelihood(self) -> bool:
        """Whether the server's echoed prompt log-probabilities line up with their tokens and the
        model's chat frame is known; probed once (two tiny completions), then remembered."""
        return self.likelihood_problem() is None

    def likelihood_problem(self) -> str | None:
        """Why likelihoods cannot be scored on this server, or None."""
        with self._probe_lock:
            if not self._probed:
                self._ready()
                self._likelihood_problem = self._probe_echo() or self._frame_problem()
                self._probed = True
            return self._likelihood_problem

    def _complete(self, prompt: str, echo: bool) -> Any:
        """A one-token greedy ``/v1/completions`` reply with log-probabilities."""
        reply = self._client.completions.create(
            model=self.model, prompt=prompt, max_tokens=1, temperature=0, echo=echo, logprobs=1
        )
        self._count(getattr(reply, "usage", None))
        return reply

    def _echo(self, prompt: str) -> Echo:
        """``prompt``'s tokens and their log-probabilities (and maybe one generated token)."""
        return Echo.from_reply(self._complete(prompt, echo=True))

    def _next_token(self, prompt: str, echo: Echo) -> tuple[str, float]:
        """The token the server generates after ``prompt``, and its log-probability."""
        found = generated(echo, prompt)
        if found is not None:
            return found
        logprobs = getattr(self._complete(prompt, echo=False).choices[0], "logprobs", None)
        tokens = getattr(logprobs, "tokens", None)
        values = getattr(logprobs, "token_logprobs", None)
        if not tokens or not values or values[0] is None or not tokens[0]:
            raise EchoError("the server returns no log-probability for a generated token")
        return tokens[0], float(values[0])

    def _probe_echo(self) -> str | None:
        """What makes the server's echo unusable for likelihoods, or None (see
        :mod:`hdeval.llm.echo`). No answer at all raises instead: it says nothing of the echo."""
        try:
            first = self._echo(PROBE_TEXT)
            if problem := echo_problem(first, PROBE_TEXT):
                return problem
            token, logprob = self._next_token(PROBE_TEXT, first)
            return repeat_problem(self._echo(PROBE_TEXT + token), PROBE_TEXT, token, logprob)
        except EchoError as exc:
            return str(exc)
        except Exception as exc:
            import openai

            reason = self._describe(exc)
            if isinstance(exc, openai.APIConnectionError):  # no answer: nothing learned
                message = f"the likelihood probe of {self.server} got no answer: {reason}"
                raise JudgeUnavailableError(message) from None
            return f"/completions with echo=True failed: {reason}"

    def _server_root(self) -> str:
        """The server URL without its ``/v1`` API prefix, where llama.cpp and vLLM serve their
        own endpoints."""
        return self.base_url.rstrip("/").removesuffix("/v1")

    def _post_root(self, path: str, body: dict[str, Any]) -> Any:
        wait = min(self.timeout, REACHABILITY_TIMEOUT)
        client = self._client.with_options(timeout=wait, max_retries=0)
        return client.post(self._server_root() + path, cast_to=object, body=body)

    def _frame_by_apply_template(self) -> str:
        """The chat template around the marked message, by llama.cpp's ``/apply-template``."""
        message = {"role": "user", "content": _MESSAGE_MARK}
        return self._post_root("/apply-template", {"messages": [message]})["prompt"]

    def _frame_by_tokenize(self) -> str:
        """The same by vLLM's ``/tokenize`` (chat messages) and ``/detokenize``."""
        message = {"role": "user", "content": _MESSAGE_MARK}
        body = {"model": self.model, "messages": [message], "add_generation_prompt": True}
        ids = self._post_root("/tokenize", body)["tokens"]
        return self._post_root("/detokenize", {"model": self.model, "tokens": ids})["prompt"]

    def _frame_problem(self) -> str | None:
        """Learn the chat frame from the server unless it was given; why not, or None."""
        if self._chat_frame is not None:
            return None
        problems = []
        for path, ask in (
            ("/apply-template", self._frame_by_apply_template),
            ("/tokenize", self._frame_by_tokenize),
        ):
            try:
                self._chat_frame = _split_frame(ask())
                return None
            except Exception as exc:
                problems.append(f"{path}: {self._describe(exc, retries=0)}")
        return (
            "the model's chat template cannot be learned from the server ("
            + "; ".join(problems)
            + "); give it as chat_frame=(text before, text after the user message)"
        )

    def _likelihood_one(self, job: tuple[str, str]) -> LogLikelihood | HDEvalError:
        """Log-likelihood of ``continuation`` after ``context``, or the error to raise."""
        context, continuation = job
        if self.breaker.tripped:
            return JudgeUnavailableError("not sent: the judge was found unavailable")
        try:
            echo = self._echo(context + continuation)
            result = continuation_loglikelihood(
                echo, len(context), len(context) + len(continuation)
            )
        except Exception as exc:
            reason = self._describe(exc)
            self.breaker.record(reason, _is_outage(exc))
            error = ContextOverflow if _is_context_error(exc) else HDEvalError
            return error(f"likelihood with {self.identity} failed: {reason}")
        self.breaker.record(None)
        return result

    def loglikelihoods(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[LogLikelihood]:
        """Per (instruction, continuation): log p(continuation as the reply | segments +
        instruction as the user message), one echoed ``/v1/completions`` request each.

        Raises :class:`UnsupportedError` where :meth:`supports_likelihood` is false, and, as a
        likelihood has no failure value, :class:`HDEvalError` (:class:`ContextOverflow` for a
        prompt longer than the server's context) for the first item that fails.
        """
        problem = self.likelihood_problem()
        if problem is not None:
            raise UnsupportedError(
                f"the OpenAI-compatible server at {self.server} cannot score log-likelihoods: "
                f"{problem}; {_LIKELIHOOD_HINT}"
            )
        self._ready()
        head, tail = self._chat_frame or ("", "")
        prefix = head + "".join(segments)
        jobs = []
        for i, (instruction, continuation) in enumerate(items):
            if not continuation:
                raise ValueError(f"empty continuation for item {i}")
            jobs.append((prefix + instruction + tail, continuation))
        if len(jobs) == 1:
            outcomes = [self._likelihood_one(jobs[0])]
        else:
            outcomes = list(self._executor().map(self._likelihood_one, jobs))
        self.breaker.check()
        for outcome in outcomes:
            if isinstance(outcome, HDEvalError):
                raise outcome
        return outcomes  # type: ignore[return-value]

    # ----------------------------------------------------------------- generation
    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        """Greedy reply to one user message."""
        self._ready()
        try:
            reply = self._chat(prompt, max_tokens=max_new_tokens)
            text = reply.choices[0].message.content
        except Exception as exc:
            reason = self._describe(exc)
            self.breaker.record(reason, _is_outage(exc))
            self.breaker.check()
            error = ContextOverflow if _is_context_error(exc) else HDEvalError
            raise error(f"generation with {self.identity} failed: {reason}") from None
        if text is None:
            self.breaker.record("the reply has no text")
            self.breaker.check()
            raise HDEvalError(f"generation with {self.identity} returned no text")
        self.breaker.record(None)
        return text.strip()
