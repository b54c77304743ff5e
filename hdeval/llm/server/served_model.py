"""What an OpenAI-compatible server reports about the model it serves (``GET /models``), and the
identity hdeval names the judge by in every cache key and bundle card.

Everything the server reports about the model alias goes into the identity: vLLM's ``root``
(its weights directory or hub name), ``parent`` and ``max_model_len``, llama.cpp's ``meta``, a
weights fingerprint where a server gives one; only bookkeeping that says nothing about the
weights, or changes on every request (vLLM's ``created`` time and permission ids), is left out.
``llm.identity`` is added to it, never put in its place. A vLLM server is fingerprinted too
(:mod:`hdeval.llm.server.fingerprint`: its tokenizer, chat template and the log-probabilities
of a fixed text) at the first contact of a run and again whenever it answers after an outage
(the breaker's reset): other weights at the same path get another name, so their scores are
never read from, or written to, the old weights' cache entries, and weights that change mid-run
stop the run before any of their answers is kept. A server that reports nothing about the
weights, or only their path or name, and gives no fingerprint is named the same after its
weights change: a warning says what can go stale, unless ``llm.identity`` names the weights.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from hdeval.errors import JudgeUnavailableError
from hdeval.llm.server.failures import REFUSES_EVERY_REQUEST, is_outage
from hdeval.llm.server.fingerprint import (
    FINGERPRINT_TEXT,
    Fingerprint,
    FingerprintBook,
    probe_values,
    template_hash,
)
from hdeval.llm.server.urls import mask_secrets

log = logging.getLogger(__name__)

#: Longest wait for ``GET /models``, in seconds (no retry).
MODELS_TIMEOUT = 10.0

#: Fields of a ``/models`` entry that say nothing about the weights, or change on every request.
NOT_IDENTIFYING = frozenset({"id", "object", "created", "owned_by", "permission", "permissions"})
#: Names of reported fields that fingerprint the weights' content.
_FINGERPRINT = re.compile(r"sha|hash|digest|fingerprint|checksum|revision", re.IGNORECASE)


def reported_fields(models: Any, alias: str) -> tuple[dict[str, Any] | None, list[str]]:
    """(what the ``/models`` reply reports about ``alias``, or None where it does not list it;
    the model ids it lists). Fields with no value are left out."""
    listed: list[str] = []
    found: dict[str, Any] | None = None
    for entry in getattr(models, "data", None) or []:
        fields = entry.model_dump() if hasattr(entry, "model_dump") else dict(entry)
        listed.append(str(fields.get("id")))
        if fields.get("id") == alias:
            found = {k: v for k, v in fields.items() if k not in NOT_IDENTIFYING and v is not None}
    return found, listed


def serves_like_vllm(reported: dict[str, Any]) -> bool:
    """Whether ``/models`` reports what vLLM does (``root`` and ``max_model_len``): such a server
    is fingerprinted, and probed for prefix caching before it scores likelihoods."""
    return "root" in reported and "max_model_len" in reported


def server_identity(
    server: str,
    alias: str,
    reported: dict[str, Any],
    given: str | None,
    fingerprint: str | None = None,
) -> str:
    """``openai-compatible:<server>:<alias>``, then what the server reports with the name of its
    fingerprint where it has one (canonical JSON), then ``+<llm.identity>``."""
    identity = f"openai-compatible:{server}:{alias}"
    if fingerprint is not None:
        reported = {**reported, "fingerprint": fingerprint}
    if reported:
        identity += json.dumps(reported, sort_keys=True, separators=(",", ":"), default=str)
    if given:
        identity += f"+{given}"
    return identity


def staleness_warning(server: str, alias: str, reported: dict[str, Any]) -> str | None:
    """What can go stale when the judge is named by what the server reports (and no
    ``llm.identity``), or None where the server fingerprints its weights."""
    if any(_FINGERPRINT.search(key) for key in reported):
        return None
    consequence = (
        "new weights behind them would reuse the old weights' cached scores and pass a "
        "bundle's judge check; set llm.identity to a name that changes with the weights "
        "(e.g. qwen2.5-7b-instruct@2026-11)"
    )
    if "root" in reported:
        return (
            f"the judge at {server} names the weights it serves as {alias!r} by their path or "
            f"hub name only (root {reported['root']!r}), with no fingerprint of their content: "
            + consequence
        )
    return (
        f"the judge at {server} reports nothing about the weights it serves as {alias!r}: it "
        "is named by its URL and model name only, and " + consequence
    )


class ServedModel:
    """The ``GET /models`` part of :class:`~hdeval.llm.server.backend.OpenAICompatibleBackend`:
    what the server reports, and the identity built from it.

    It uses the backend's client, model, server name, breaker, timeout, secrets, ``_ready``,
    ``_describe``, ``_post_root`` and ``_echo``.
    """

    _identity: str | None
    _given_identity: str | None
    reported: dict[str, Any]
    #: What the server's fingerprint was at the first contact (None: it gives none).
    fingerprint: Fingerprint | None = None
    #: Where the fingerprints seen of each server are kept (set by the cached judge).
    fingerprint_book: FingerprintBook | None = None
    _fingerprint_name: str | None = None

    @property
    def identity(self) -> str:
        """What this judge is, in every cache key and bundle card: the server, the model alias,
        everything the server reports about the model (:mod:`hdeval.llm.server.served_model`) and
        ``llm.identity`` where given. Asked of the server once (``GET /models``)."""
        if self._identity is None:
            self._ready()
            given, name = self._given_identity, self._fingerprint_name
            if (
                given is None
                and name is None
                and (stale := staleness_warning(self.server, self.model, self.reported))
            ):
                log.warning(stale)
            named = server_identity(self.server, self.model, self.reported, given, name)
            self._identity = mask_secrets(named, self._secrets)
        return self._identity

    def _take_fingerprint(self) -> None:
        """Fingerprint a vLLM server (once, at the first contact) and name its weights: by the
        first fingerprint in :attr:`fingerprint_book` that this one matches, else by its own."""
        if not serves_like_vllm(self.reported):
            return
        found = self._probe_fingerprint()
        if found is None:
            return
        self.fingerprint = found
        book = self.fingerprint_book
        if book is None:
            self._fingerprint_name = found.id
            return
        base = server_identity(self.server, self.model, self.reported, self._given_identity)
        self._fingerprint_name = book.name(mask_secrets(base, self._secrets), found)

    def _probe_fingerprint(self) -> Fingerprint | None:
        """The server's fingerprint, or None where it gives none (an endpoint it lacks, a reply
        that cannot be read: a warning says why). No answer trips the breaker and raises."""
        try:
            message = [{"role": "user", "content": FINGERPRINT_TEXT}]
            body = {"model": self.model, "messages": message, "add_generation_prompt": True}
            ids = self._post_root("/tokenize", body)["tokens"]
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise ValueError("/tokenize answered no list of token ids")
            echo = self._echo(FINGERPRINT_TEXT)
            prompt = [
                v
                for v, o in zip(echo.logprobs, echo.offsets, strict=True)
                if o < len(FINGERPRINT_TEXT)
            ]
            return Fingerprint(template_hash(ids), probe_values(tuple(prompt)))
        except JudgeUnavailableError:
            raise
        except Exception as exc:
            reason = self._describe(exc, retries=0)
            status = getattr(exc, "status_code", 500)
            if is_outage(exc) and status not in REFUSES_EVERY_REQUEST:  # not a missing endpoint
                self.breaker.trip(f"the fingerprint probe of {self.server} failed", reason)
                self.breaker.check()
            log.warning(
                "the judge at %s gives no fingerprint of its weights: %s", self.server, reason
            )
            return None

    def recheck_identity(self) -> None:
        """Fingerprint the server again (it answers after an outage: it may have been restarted
        on other weights). Weights other than the first contact's, or no fingerprint, trip the
        breaker: the answers of the call at hand are not kept, and the next run names the new
        weights by their own fingerprint."""
        if self.fingerprint is None:
            return
        found = self._probe_fingerprint()
        change = (
            "it gives no fingerprint now" if found is None else self.fingerprint.difference(found)
        )
        if change is not None:
            self.breaker.trip(
                f"it answers again after an outage, but {change}: the answers since are not "
                "kept, and the next run names the new weights by their own fingerprint",
                f"the server's fingerprint changed: {change}",
            )
        self.breaker.check()

    def _ask_models(self) -> None:
        """One ``GET /models`` without retries. No answer at all is fatal; so is a failed one
        (an HTTP error, a reply that is no model list) unless ``llm.identity`` names the
        weights: hdeval names a server's weights by what it reports."""
        import openai

        wait = min(self.timeout, MODELS_TIMEOUT)
        try:
            models = self._client.with_options(timeout=wait, max_retries=0).models.list()
            reported, listed = reported_fields(models, self.model)
        except openai.APIConnectionError as exc:  # refused, unresolvable, or no reply in time
            why = f"GET {self.server}/models got no answer (waited up to {wait:g}s, no retry)"
            self.breaker.trip(why, self._describe(exc, retries=0))
            self.breaker.check()
            return
        except Exception as exc:
            reason = self._describe(exc, retries=0)
            if self._given_identity is None:
                why = (
                    f"GET {self.server}/models failed, and hdeval names a server's weights by "
                    "what it reports there; for a server without /models, set llm.identity to "
                    "a name that changes with its weights"
                )
                self.breaker.trip(why, reason)
                self.breaker.check()
            log.warning(
                "GET %s/models failed (%s); llm.identity names the judge", self.server, reason
            )
            return
        if reported is None:
            log.warning(
                "the judge at %s lists no model %r (it lists %s)",
                self.server,
                self.model,
                ", ".join(map(repr, listed[:10])) or "none",
            )
        self.reported = reported or {}
