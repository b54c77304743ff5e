"""What an OpenAI-compatible server reports about the model it serves (``GET /models``), and the
identity hdeval names the judge by in every cache key and bundle card.

Everything the server reports about the model alias goes into the identity: vLLM's ``root``
(its weights directory or hub name), ``parent`` and ``max_model_len``, llama.cpp's ``meta``, a
weights fingerprint where a server gives one; only bookkeeping that says nothing about the
weights, or changes on every request (vLLM's ``created`` time and permission ids), is left out.
``llm.identity`` is added to it, never put in its place. A server that reports nothing about
the weights, or only their path or name, is named the same after its weights change: a warning
says what can go stale, unless ``llm.identity`` names the weights.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from hdeval.llm.urls import mask_secrets

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


def server_identity(server: str, alias: str, reported: dict[str, Any], given: str | None) -> str:
    """``openai-compatible:<server>:<alias>``, then what the server reports (canonical JSON),
    then ``+<llm.identity>``."""
    identity = f"openai-compatible:{server}:{alias}"
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
    """The ``GET /models`` part of :class:`~hdeval.llm.openai_compat.OpenAICompatibleBackend`:
    what the server reports, and the identity built from it.

    It uses the backend's client, model, server name, breaker, timeout, secrets, ``_ready`` and
    ``_describe``.
    """

    _identity: str | None
    _given_identity: str | None
    reported: dict[str, Any]

    @property
    def identity(self) -> str:
        """What this judge is, in every cache key and bundle card: the server, the model alias,
        everything the server reports about the model (:mod:`hdeval.llm.server_models`) and
        ``llm.identity`` where given. Asked of the server once (``GET /models``)."""
        if self._identity is None:
            self._ready()
            given = self._given_identity
            if given is None and (
                stale := staleness_warning(self.server, self.model, self.reported)
            ):
                log.warning(stale)
            named = server_identity(self.server, self.model, self.reported, given)
            self._identity = mask_secrets(named, self._secrets)
        return self._identity

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
