"""A fingerprint of what a vLLM server serves, beyond the path of its weights that ``/v1/models``
reports: its tokenizer and chat template, and its weights' log-probabilities.

- **tokenizer and template**: the sha256 of the token ids ``/tokenize`` gives for a fixed user
  message in the model's chat template (vLLM offers no vocabulary size without a start-up flag;
  another tokenizer or template gives other ids);
- **weights**: the echoed log-probabilities of the tokens of a fixed text
  (``/v1/completions``, ``echo=True``), which other weights at the same path change.

A server computes in other orders when a request shares its batch with others, and its values
move by a few hundredths of a nat (docs/design.md): two fingerprints are the same weights when
their tokens agree and their log-probabilities do within :data:`SAME_WEIGHTS`. The
:class:`FingerprintBook` in the result cache remembers every fingerprint seen of a server, so
that a run names the weights by the first one its probe matches: their cached scores are used
again, while other weights are a new name, and the old weights' entries are not used for them.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from hdeval.llm.cache import ResultCache, cache_key

#: The fixed text whose tokens and log-probabilities fingerprint a server (words, digits, code
#: and non-Latin letters: a tokenizer that differs anywhere is likely to differ here).
FINGERPRINT_TEXT = (
    "The quick brown fox jumps over the lazy dog. Die Würde des Menschen ist unantastbar. "
    "数字 12345, def area(r): return 3.14159 * r ** 2"
)
#: Largest mean difference per token (nats) between two probes of the same weights, and the
#: largest at any one token: a batch computed in another order moves them by a few hundredths.
SAME_WEIGHTS = 0.05
SAME_WEIGHTS_ANY_TOKEN = 0.5
_KIND = "server-fingerprints"


@dataclass(frozen=True)
class Fingerprint:
    """The tokenizer-and-template hash and the probe text's log-probabilities of one server."""

    template: str
    logprobs: tuple[float, ...]

    @property
    def id(self) -> str:
        """A short name of this fingerprint (its values to 0.01 nats)."""
        values = ",".join(f"{v:.2f}" for v in self.logprobs)
        return hashlib.sha256(f"{self.template}|{values}".encode()).hexdigest()[:16]

    def difference(self, other: Fingerprint) -> str | None:
        """How ``other`` differs from this beyond :data:`SAME_WEIGHTS`, or None."""
        if other.template != self.template:
            return "its tokenizer or chat template changed (other token ids for the probe text)"
        if len(other.logprobs) != len(self.logprobs):
            return f"the probe text has {len(other.logprobs)} tokens, not {len(self.logprobs)}"
        gaps = [abs(a - b) for a, b in zip(self.logprobs, other.logprobs, strict=True)]
        mean = sum(gaps) / len(gaps) if gaps else 0.0
        if mean > SAME_WEIGHTS or max(gaps, default=0.0) > SAME_WEIGHTS_ANY_TOKEN:
            return (
                f"its weights changed (the probe text's log-probabilities moved by {mean:.3f} "
                f"nats per token, at most {max(gaps):.3f})"
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"template": self.template, "logprobs": list(self.logprobs)}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Fingerprint:
        return cls(str(value["template"]), tuple(float(v) for v in value["logprobs"]))


def template_hash(token_ids: list[int]) -> str:
    """The sha256 of the token ids of :data:`FINGERPRINT_TEXT` in the chat template."""
    return hashlib.sha256(json.dumps(token_ids).encode()).hexdigest()


def probe_values(values: tuple[float | None, ...]) -> tuple[float, ...]:
    """The echoed log-probabilities of the probe text, the first (null) left out; a value that
    no model gives raises ``ValueError``."""
    kept = tuple(values[1:])
    if not kept or any(v is None or not math.isfinite(v) or v > 0 for v in kept):
        raise ValueError(f"the probe text's echoed log-probabilities are not usable: {kept}")
    return tuple(round(float(v), 4) for v in kept)  # type: ignore[arg-type]


class FingerprintBook:
    """The fingerprints seen of each server (by its identity without them), kept in the result
    cache: the name a fingerprint is given is that of the first one seen that it matches."""

    def __init__(self, cache: ResultCache) -> None:
        self.cache = cache

    def name(self, server: str, found: Fingerprint) -> str:
        """The name of the weights behind ``server`` whose fingerprint is ``found``."""
        key = cache_key(_KIND, server)
        entry = self.cache.get_many([key], count=False).get(key) or {}
        known = [(str(k["id"]), Fingerprint.from_dict(k)) for k in entry.get("known", [])]
        for name, fingerprint in known:
            if fingerprint.difference(found) is None:
                return name
        known.append((found.id, found))
        book = {"known": [{"id": name, **fp.to_dict()} for name, fp in known]}
        self.cache.put(_KIND, key, book)
        return found.id
