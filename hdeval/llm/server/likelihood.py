"""Log-likelihoods from an OpenAI-compatible server: the legacy ``/v1/completions`` endpoint
with ``echo=True`` (see :mod:`hdeval.llm.server.echo`), on the same text the local backend
scores: the model's chat frame around the user message, then the continuation as the reply.

Whether the server's echo can be trusted is probed once
(:meth:`EchoLikelihood.supports_likelihood`): llama.cpp's shifted echo is refused, vLLM's is
accepted unless it caches prompt prefixes (:mod:`hdeval.llm.server.prefix_cache`). The chat frame is
asked of the server (llama.cpp's ``/apply-template``, vLLM's ``/tokenize``) unless it was
given. An item that fails (a prompt longer than the server's context, an error that outlived the
retries) is a :class:`~hdeval.llm.types.LogLikelihood` failure: one bad item never stops the others.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from hdeval.errors import JudgeUnavailableError, UnsupportedError
from hdeval.llm.chat_template import reply_end
from hdeval.llm.server.echo import (
    Echo,
    EchoError,
    continuation_loglikelihood,
    echo_problem,
    generated,
    repeat_problem,
)
from hdeval.llm.server.failures import REFUSES_EVERY_REQUEST, is_outage, probe_failure
from hdeval.llm.types import LogLikelihood

log = logging.getLogger(__name__)

# A text whose next token every model predicts (" 7", or " " then "7"): the probe of an echo.
PROBE_TEXT = "Counting: 1, 2, 3, 4, 5, 6,"
_MESSAGE_MARK = "HDEVAL_USER_MESSAGE_MARK"
_LIKELIHOOD_HINT = (
    "score likelihood with a local backend (llm.backend: embedded or transformers), "
    "or set hierarchy.modes: [prompt]"
)


def _split_frame(rendered: Any) -> tuple[str, str]:
    """(text before, text after) the marked user message in a rendered chat template."""
    if not isinstance(rendered, str) or rendered.count(_MESSAGE_MARK) != 1:
        raise ValueError(f"the rendered template does not hold the message once: {rendered!r}")
    head, tail = rendered.split(_MESSAGE_MARK)
    return head, tail


class EchoLikelihood:
    """The likelihood path of :class:`~hdeval.llm.server.backend.OpenAICompatibleBackend`.

    It uses the backend's client, model, server name, breaker, ``_each``, ``_ready``,
    ``_describe``, ``_record_failure``, ``_count`` and ``_chat_frame``.
    """

    _probed: bool
    _likelihood_problem: str | None
    _probe_lock: threading.Lock
    _chat_frame: tuple[str, str] | None

    def supports_likelihood(self) -> bool:
        """Whether the server's echoed prompt log-probabilities line up with their tokens, the
        model's chat frame is known and (vLLM) no prefix cache changes them; probed once (two
        tiny completions, and three of about 300 tokens on vLLM), then remembered."""
        return self.likelihood_problem() is None

    def likelihood_problem(self) -> str | None:
        """Why likelihoods cannot be scored on this server, or None."""
        with self._probe_lock:
            if not self._probed:
                self._ready()
                self._likelihood_problem = (
                    self._probe_echo() or self._frame_problem() or self._prefix_cache_problem()
                )
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
        :mod:`hdeval.llm.server.echo`). No answer at all raises instead: it says nothing of the
        echo."""
        try:
            first = self._echo(PROBE_TEXT)
            if problem := echo_problem(first, PROBE_TEXT):
                return problem
            token, logprob = self._next_token(PROBE_TEXT, first)
            return repeat_problem(self._echo(PROBE_TEXT + token), PROBE_TEXT, token, logprob)
        except EchoError as exc:
            return str(exc)
        except Exception as exc:
            probe = f"the likelihood probe of {self.server}"
            reason = probe_failure(exc, probe, self._describe(exc))
            return f"/completions with echo=True failed: {reason}"

    def _server_root(self) -> str:
        """The server URL without its ``/v1`` API prefix, where llama.cpp and vLLM serve their
        own endpoints."""
        return self.base_url.rstrip("/").removesuffix("/v1")

    def _post_root(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` to one of the server's own endpoints (``/tokenize``,
        ``/apply-template``) as a scoring request is sent: with the client's retries and
        deadline, an outage counted by the breaker, which raises
        :class:`~hdeval.errors.JudgeUnavailableError` once tripped. An endpoint the server does
        not offer (HTTP 4xx) is no outage: the caller tries the next."""
        self.breaker.check()
        try:
            return self._client.post(self._server_root() + path, cast_to=object, body=body)
        except Exception as exc:
            if is_outage(exc) and getattr(exc, "status_code", 500) not in REFUSES_EVERY_REQUEST:
                self._record_failure(exc)
                self.breaker.check()
            raise

    def _rendered_by_apply_template(self, messages: list[dict], generation: bool) -> str:
        """``messages`` as the model's chat template renders them, by llama.cpp's
        ``/apply-template`` (which always adds the reply's opening)."""
        return self._post_root("/apply-template", {"messages": messages})["prompt"]

    def _rendered_by_tokenize(self, messages: list[dict], generation: bool) -> str:
        """The same by vLLM's ``/tokenize`` (chat messages) and ``/detokenize``."""
        body = {"model": self.model, "messages": messages, "add_generation_prompt": generation}
        ids = self._post_root("/tokenize", body)["tokens"]
        return self._post_root("/detokenize", {"model": self.model, "tokens": ids})["prompt"]

    def _lookups(self) -> tuple[tuple[str, Any], ...]:
        return (
            ("/apply-template", self._rendered_by_apply_template),
            ("/tokenize", self._rendered_by_tokenize),
        )

    def _frame_problem(self) -> str | None:
        """Learn the chat frame from the server unless it was given; why not, or None."""
        if self._chat_frame is not None:
            return None
        problems = []
        message = [{"role": "user", "content": _MESSAGE_MARK}]
        for path, render in self._lookups():
            try:
                self._chat_frame = _split_frame(render(message, True))
                return None
            except JudgeUnavailableError:
                raise
            except Exception as exc:
                problems.append(f"{path}: {self._describe(exc, retries=0)}")
        return (
            "the model's chat template cannot be learned from the server ("
            + "; ".join(problems)
            + "); give it as chat_frame=(text before, text after the user message)"
        )

    def end_of_reply(self) -> str:
        """What the model's chat template puts right after a reply (``<|im_end|>``), asked of
        the server as its chat frame is; "" where no look-up answers."""
        messages = [
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": _MESSAGE_MARK},
        ]
        for path, render in self._lookups():
            try:
                return reply_end(_split_frame(render(messages, False))[1])
            except JudgeUnavailableError:
                raise
            except Exception as exc:
                log.debug("%s: %s", path, self._describe(exc, retries=0))
        return ""

    def _likelihood_one(self, job: tuple[str, str]) -> LogLikelihood:
        """Log-likelihood of ``continuation`` after ``context``, or a failure with its reason
        (a prompt longer than the server's context, an error that outlived the retries, an
        echo that cannot be read): one bad item never stops the others."""
        context, continuation = job
        if self.breaker.tripped:  # the rest of a batch, once the breaker has tripped
            return LogLikelihood(failure="not sent: the judge was found unavailable")
        try:
            echo = self._echo(context + continuation)
            result = continuation_loglikelihood(
                echo, len(context), len(context) + len(continuation)
            )
        except Exception as exc:
            result = LogLikelihood(failure=self._record_failure(exc))
        else:
            self.breaker.record(None)
        if not result.ok:
            log.warning("no likelihood from %s: %s", self.identity, result.failure)
        return result

    def loglikelihoods(
        self, segments: Sequence[str], items: Sequence[tuple[str, str]]
    ) -> list[LogLikelihood]:
        """Per (instruction, continuation): log p(continuation as the reply | segments +
        instruction as the user message), one echoed ``/v1/completions`` request each, in
        input order; an item that fails is a :class:`LogLikelihood` failure with its reason.

        Raises :class:`UnsupportedError` where :meth:`supports_likelihood` is false, and
        :class:`JudgeUnavailableError` if the server cannot be reached or the circuit breaker
        trips during the call.
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
        return self._each(self._likelihood_one, jobs)
