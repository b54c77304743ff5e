"""The cached judge: one LLM backend behind the persistent result cache.

Every caller (criterion scoring, baselines, decomposition, perturbation) asks the judge, never
the backend and the cache separately, as lm-evaluation-harness's ``CachingLM`` wraps a model:
each request is looked up first, only misses reach the backend, results are stored as soon as
they arrive, and failures are recorded (and reported) but never served as results, so the next
run retries them. A cache key is the sha256 of the request kind, the judge's identity and every
rendered prompt part (:func:`hdeval.llm.cache.cache_key`). A server's identity names its
weights by the first fingerprint in this cache that the server's matches
(:mod:`hdeval.llm.server.fingerprint`): other weights get other keys.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hdeval.errors import ConfigError, HDEvalError
from hdeval.invalid_unicode import unicode_problems
from hdeval.llm.cache import ResultCache, cache_key
from hdeval.llm.digits import DEFAULT_MIN_MASS
from hdeval.llm.server.fingerprint import FingerprintBook
from hdeval.llm.types import DigitScore, LLMBackend, LogLikelihood, TokenCounts
from hdeval.llm.validity import checked, distribution_problem, mass_problem, readable_likelihood
from hdeval.params import LLMConfig

DIGITS = "digits"
LOGLIK = "loglik"
Result = TypeVar("Result", DigitScore, LogLikelihood)


@dataclass
class Answers(Generic[Result]):
    """Results of one batch of requests, by cache key; failed keys carry a reason instead."""

    results: dict[str, Result] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    cached: int = 0
    computed: int = 0


class CachedJudge:
    """An LLM backend whose every answer goes through a :class:`ResultCache`."""

    def __init__(self, backend: LLMBackend, cache: ResultCache | None = None) -> None:
        self.backend = backend
        self.cache = cache if cache is not None else ResultCache()
        if hasattr(backend, "fingerprint_book"):  # a server named by its fingerprint
            backend.fingerprint_book = FingerprintBook(self.cache)
        self._opened = time.monotonic()

    def __repr__(self) -> str:
        return f"CachedJudge({self.identity!r}, cache={str(self.cache.path)!r})"

    @property
    def identity(self) -> str:
        return self.backend.identity

    @property
    def tokens(self) -> TokenCounts:
        return self.backend.tokens

    @property
    def min_digit_mass(self) -> float:
        return float(getattr(self.backend, "min_digit_mass", DEFAULT_MIN_MASS))

    def likelihood_problem(self) -> str | None:
        """Why this judge cannot score log-likelihoods, or None. Local backends always can; an
        OpenAI-compatible server is asked once (its echoed log-probabilities are probed)."""
        probe = getattr(self.backend, "likelihood_problem", None)
        return probe() if probe is not None else None

    @functools.cached_property
    def reply_end(self) -> str:
        """The marker the judge's chat template ends a reply with (``<|im_end|>``), or "" where
        it has none. Looked up once."""
        return getattr(self.backend, "end_of_reply", lambda: "")()

    @property
    def end_of_reply(self) -> str:
        """:attr:`reply_end`, what follows a text read as a whole reply
        (``hierarchy.end_of_text``); a judge without one is a configuration error."""
        marker = self.reply_end
        if not marker:
            raise ConfigError(
                f"hierarchy.end_of_text: the judge {self.identity} marks no end of a reply in its "
                "chat template; set hierarchy.end_of_text: false"
            )
        return marker

    def key(self, kind: str, *parts: object) -> str:
        """The cache key of a request of ``kind`` to this judge."""
        return cache_key(kind, self.identity, *parts)

    # ------------------------------------------------------------------ scoring requests
    def digit_scores(
        self, segments: Sequence[str], suffixes: Mapping[str, str]
    ) -> Answers[DigitScore]:
        """Score digit distributions for ``suffixes`` (cache key -> criterion suffix).

        A cached distribution whose digit mass is below this judge's ``min_digit_mass`` (it was
        stored under a laxer setting) is a failure now, as a fresh one would be; one that no
        model can give (NaN, a mass above 1: stored before hdeval checked) is asked again.
        """
        answers: Answers[DigitScore] = Answers()
        found = self.cache.get_many(suffixes, usable=_possible_distribution)
        for key, value in found.items():
            score = DigitScore.from_dict(value)
            if problem := mass_problem(score.mass, self.min_digit_mass):
                answers.failures[key] = f"cached {problem}"
            else:
                answers.results[key] = score
        answers.cached = len(found)
        todo = [k for k in suffixes if k not in found]
        if todo:
            fresh = self.backend.digit_scores(segments, [suffixes[k] for k in todo])
            self._store(DIGITS, dict(zip(todo, fresh, strict=True)), answers)
        return answers

    def loglikelihoods(
        self,
        segments: Sequence[str],
        items: Mapping[str, tuple[str, str]],
        ended: Mapping[str, str] | None = None,
    ) -> Answers[LogLikelihood]:
        """Log-likelihoods of ``items`` (cache key -> (instruction, continuation)), each with
        its per-token log-probabilities. A cached value without them (written by an older
        hdeval, which kept only their sum) is asked again. ``ended`` maps a key to the key of
        the same request with :attr:`reply_end` after the continuation: where only that one is
        cached, this one is read off it (:meth:`_before_marker`) and costs no LLM call."""
        answers: Answers[LogLikelihood] = Answers()
        found = self.cache.get_many(items, usable=readable_likelihood)
        missing = [k for k in items if k not in found]
        derived = self._before_marker(missing, items, ended or {})
        self.cache.put_many(LOGLIK, derived)
        self.cache.recount(len(derived))
        found.update(derived)
        answers.results = {k: LogLikelihood.from_dict(v) for k, v in found.items()}
        answers.cached = len(found)
        todo = [k for k in items if k not in found]
        if todo:
            fresh = self.backend.loglikelihoods(segments, [items[k] for k in todo])
            self._store(LOGLIK, dict(zip(todo, fresh, strict=True)), answers)
        return answers

    def _before_marker(
        self, keys: Sequence[str], items: Mapping[str, tuple[str, str]], ended: Mapping[str, str]
    ) -> dict[str, dict]:
        """Cached answers to ``keys`` read off the cached answers to their ``ended`` twins: a
        causal model's log-probabilities of a text's tokens do not depend on what follows them,
        so they are the twin's less the marker's last tokens (to the rounding of a pass's last
        rows, docs/design.md), wherever the backend's tokenizer splits the text and the marker
        apart (a backend without one gets none)."""
        twins = {ended[k]: k for k in keys if k in ended}
        tokenize = getattr(self.backend, "tokenize", None)
        if not twins or tokenize is None:
            return {}
        cached = self.cache.get_many(twins, usable=readable_likelihood, count=False)
        marker = tokenize(self.reply_end) if cached else []
        derived = {}
        for twin, value in cached.items():
            key = twins[twin]
            text = tokenize(items[key][1])
            apart = tokenize(items[key][1] + self.reply_end) == text + marker
            if apart and len(value["tokens"]) == len(text) + len(marker):
                derived[key] = {"tokens": value["tokens"][: len(text)]}
        return derived

    def _store(self, kind: str, fresh: Mapping[str, DigitScore | LogLikelihood], answers) -> None:
        """Keep and cache the answers that pass their check (:func:`~hdeval.llm.validity.checked`,
        whatever the backend); record the others as failures."""
        answers.computed += len(fresh)
        fresh = {k: checked(r, self.min_digit_mass) for k, r in fresh.items()}
        ok = {k: r for k, r in fresh.items() if r.ok}
        failed = {k: r.failure or "unknown failure" for k, r in fresh.items() if k not in ok}
        self.cache.put_many(kind, {k: r.to_dict() for k, r in ok.items()})
        self.cache.record_failures(kind, failed)
        answers.results.update(ok)
        answers.failures.update(failed)

    def record_failures(self, kind: str, reasons: Mapping[str, str]) -> None:
        """Record requests that failed before reaching the backend (too long for its context)."""
        self.cache.record_failures(kind, reasons)

    # ------------------------------------------------------------------ free text
    def reply(self, kind: str, prompt: str, max_new_tokens: int, *key_parts: object) -> str:
        """The judge's greedy reply to ``prompt``: cached raw text under ``kind``.

        ``key_parts`` (a template version, say) join the prompt in the key. A reply holding
        invalid Unicode (:mod:`hdeval.invalid_unicode`) is refused, and not cached.
        """
        key = self.key(kind, *key_parts, prompt)
        hit = self.cache.get(key)
        if hit is not None:
            return hit["reply"]
        reply = self.backend.generate(prompt, max_new_tokens)
        if problem := unicode_problems(reply):
            raise HDEvalError(f"the reply of the judge {self.identity} is not text: {problem}")
        self.cache.put(kind, key, {"reply": reply})
        return reply

    # ------------------------------------------------------------------ accounting
    def cost(self) -> dict:
        """What was asked of this judge so far: LLM calls (cache misses), hits, tokens, and the
        seconds since it was opened (a stage opens its judge first: about the stage's time)."""
        hits, misses = self.cache.hits, self.cache.misses
        total = hits + misses
        return {
            "llm_calls": misses,
            "cache_hits": hits,
            "cache_hit_rate": hits / total if total else 1.0,
            "tokens": self.tokens.to_dict(),
            "seconds": round(time.monotonic() - self._opened, 1),
        }


def _possible_distribution(value: dict) -> bool:
    """Whether a cached digit distribution is one a model can give (see
    :func:`~hdeval.llm.validity.distribution_problem`)."""
    try:
        return distribution_problem(DigitScore.from_dict(value)) is None
    except (KeyError, TypeError, ValueError):
        return False


def open_judge(config: LLMConfig, cache: ResultCache | None = None) -> CachedJudge:
    """The judge ``config`` names, behind ``cache`` (default: the user's persistent cache)."""
    from hdeval.llm.factory import make_backend

    return CachedJudge(make_backend(config), cache)


def open_decomposer(
    decomposer: LLMConfig | None, judge_config: LLMConfig, judge: CachedJudge
) -> CachedJudge | None:
    """The LLM that writes the criteria (``hierarchy.decomposer``), behind the judge's cache, or
    None when the judge itself writes them. A judge running int8 weights (``llm.quantize``)
    hands the writing to the same model unquantized: int8 costs generation more than scoring
    (the embedded 0.5B in int8 wrote no usable criteria where fp32 did), and a layer makes only
    a few generations."""
    if decomposer is not None:
        return open_judge(decomposer, judge.cache)
    if "-int8" in judge.identity.rpartition(":")[2]:  # float32-int8, float32-int8_fbgemm
        return open_judge(judge_config.model_copy(update={"quantize": "none"}), judge.cache)
    return None
