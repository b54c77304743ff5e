"""Whether a vLLM server caches prompt prefixes: its echoed log-probabilities can then depend on
the order of requests (vllm-project/vllm#42019), so it is refused for likelihoods.

Before the first likelihood of a run:

- **what the server declares**: vLLM's Prometheus ``/metrics`` has a ``vllm:cache_config_info``
  line whose ``enable_prefix_caching`` label says whether it caches prefixes (vLLM caches them
  unless started with ``--no-enable-prefix-caching``). What it says decides;
- **what it does**, where it says nothing: one echoed request after a prefix no one sent before
  (a random nonce, then a text of about 300 tokens: several of the cache's blocks), sent cold,
  then again after another request with the same prefix filled the cache. The same request's
  log-probabilities differ when cached prefixes change them. (vLLM 0.32 reads no cached block
  for a request that asks for prompt log-probabilities: on it the two answers agree with
  prefix caching on, and only the declaration finds it. The probe costs about 3 s on a 2-core
  CPU server, so it runs only where the server declares nothing.)
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from hdeval.llm.server.client import ServerStalled
from hdeval.llm.server.echo import Echo
from hdeval.llm.server.failures import probe_failure

#: What a server that caches prefixes is told.
RESTART = "restart it with --no-enable-prefix-caching to score likelihoods"
#: Largest difference (nats) at any token between the cold and the warm answer to one request.
SAME_ANSWER = 1e-3
_DECLARED = re.compile(r'^vllm:cache_config_info\{[^}]*\benable_prefix_caching="(\w+)"', re.M)
#: The shared prefix's text: with the nonce, about 300 tokens of a byte-level BPE tokenizer.
_SHARED = " ".join(
    f"Item {i}: the {word} report was filed on day {i * 7 % 31 + 1}."
    for i, word in enumerate(["annual", "weekly", "daily", "final", "draft", "budget"] * 4)
)
_ENDINGS = (" The last item is done.", " Nothing else was filed.")


def declared(metrics: str) -> bool | None:
    """Whether the ``/metrics`` text declares prefix caching on; None where it does not say."""
    found = _DECLARED.search(metrics)
    return None if found is None else found.group(1).lower() == "true"


def answers_differ(cold: Echo, warm: Echo) -> float | None:
    """The largest difference between two echoes of one prompt (infinite where their tokens
    differ), or None where they agree within :data:`SAME_ANSWER`."""
    if cold.tokens != warm.tokens:
        return float("inf")
    gaps = [
        abs(a - b) if a is not None and b is not None else (0.0 if a is b else float("inf"))
        for a, b in zip(cold.logprobs, warm.logprobs, strict=True)
    ]
    worst = max(gaps, default=0.0)
    return worst if worst > SAME_ANSWER else None


class PrefixCacheProbe:
    """The prefix-caching check of :class:`~hdeval.llm.server.backend.OpenAICompatibleBackend`.

    It uses the backend's client, server name, ``reported`` fields, ``_echo``, ``_complete``,
    ``_describe`` and ``_server_root``.
    """

    server: str
    reported: dict[str, Any]

    def _prefix_cache_problem(self) -> str | None:
        """Why a vLLM server's likelihoods depend on its prefix cache, or None (no vLLM server,
        or one that caches no prefixes)."""
        from hdeval.llm.server.served_model import serves_like_vllm

        if not serves_like_vllm(self.reported):
            return None
        declares = self._declared_prefix_caching()
        if declares is False:
            return None
        if declares:
            return (
                f"the vLLM server at {self.server} caches prompt prefixes (its /metrics says "
                "enable_prefix_caching), which makes echoed log-probabilities depend on the order "
                f"of requests (vllm-project/vllm#42019): {RESTART}"
            )
        try:
            gap = self._cold_and_warm()
        except Exception as exc:
            probe = f"the prefix-cache probe of {self.server}"
            return f"{probe} failed: {probe_failure(exc, probe, self._describe(exc))}"
        if gap is None:
            return None
        return (
            f"the vLLM server at {self.server} gives one request other log-probabilities once "
            f"its prefix was sent before (by up to {gap:.3g} nats): it caches prompt prefixes, "
            f"which makes likelihoods depend on the order of requests: {RESTART}"
        )

    def _cold_and_warm(self) -> float | None:
        """How far one request's echo moves once its prefix is cached (None: not at all)."""
        shared = f"{secrets.token_hex(8)}:{_SHARED}"
        cold = self._echo(shared + _ENDINGS[0])
        self._complete(shared + _ENDINGS[1], echo=False)  # fills the cache with the prefix
        warm = self._echo(shared + _ENDINGS[0])
        return answers_differ(cold, warm)

    def _declared_prefix_caching(self) -> bool | None:
        """Whether the server's ``/metrics`` declares prefix caching on; None where it has no
        such page or does not say. A server that answers nothing at all stops the run here as
        anywhere (:class:`~hdeval.llm.server.client.ServerStalled`)."""
        try:
            text = self._client.get(self._server_root() + "/metrics", cast_to=str)
        except ServerStalled:
            raise
        except Exception:
            return None
        return declared(text) if isinstance(text, str) else None
