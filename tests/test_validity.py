"""Every answer a judge gives is checked, whatever the backend, before it is used or cached:
a likelihood has one finite log-probability at most 0 per token sent, a digit distribution
clears llm.min_digit_mass. A failed check is the item's recorded failure."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
import torch

from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.local.backend import TransformersBackend
from hdeval.llm.types import DigitScore, LogLikelihood, TokenCounts
from hdeval.llm.validity import checked, likelihood_problem


class Scripted:
    """A backend that gives the answers it is told, for each continuation or suffix."""

    identity = "scripted"
    min_digit_mass = 0.5

    def __init__(self, answers: dict[str, DigitScore | LogLikelihood]) -> None:
        self.answers = answers
        self.tokens = TokenCounts()

    def digit_scores(self, segments: Sequence[str], suffixes: Sequence[str]) -> list[DigitScore]:
        return [self.answers[s] for s in suffixes]

    def loglikelihoods(self, segments, items) -> list[LogLikelihood]:
        return [self.answers[c] for _, c in items]

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        raise NotImplementedError


@pytest.mark.parametrize(
    ("values", "sent", "problem"),
    [
        ([-1.0, -0.5], 2, None),
        ([-1.0, 0.0], None, None),
        ([-1.0], 2, "1 token log-probabilities for the 2 tokens sent"),
        ([-1.0, math.nan], 2, "impossible log-probabilities [nan]"),
        ([-1.0, 0.6], 2, "impossible log-probabilities [0.6]"),
        ([None, -1.0], 2, "impossible log-probabilities [None]"),
        ([-math.inf], 1, "impossible log-probabilities [-inf]"),
        ([], None, "no token log-probabilities"),
    ],
)
def test_likelihood_checks(values, sent, problem) -> None:
    found = likelihood_problem(values, sent)
    assert found is None if problem is None else problem in (found or "")


def test_a_backends_impossible_answers_are_failures_never_cached(tmp_path) -> None:
    """Whatever a backend returns as a result passes the same check: a NaN or positive
    log-probability, a certain digit from a probability above 1, a mass below the minimum."""
    answers = {
        "ok": LogLikelihood(tokens=(-1.0, -2.0)),
        "nan": LogLikelihood(tokens=(-1.0, math.nan)),
        "above": LogLikelihood(tokens=(0.6,)),
        "3": DigitScore(probs=(0, 0, 1, 0, 0), mass=math.exp(0.6)),  # "3" at logprob 0.6
        "thin": DigitScore(probs=(0, 0, 1, 0, 0), mass=0.2),
        "fine": DigitScore(probs=(0, 0, 1, 0, 0), mass=0.9),
    }
    judge = CachedJudge(Scripted(answers), ResultCache(tmp_path / "cache.sqlite"))
    liks = judge.loglikelihoods(["x\n"], {k: ("q\n", k) for k in ("ok", "nan", "above")})
    digits = judge.digit_scores(["x\n"], {k: k for k in ("3", "thin", "fine")})
    assert set(liks.results) == {"ok"} and set(digits.results) == {"fine"}
    assert "impossible log-probabilities [nan]" in liks.failures["nan"]
    assert "impossible log-probabilities [0.6]" in liks.failures["above"]
    assert "impossible digit mass" in digits.failures["3"]
    assert "digit mass 0.200 below llm.min_digit_mass 0.5" in digits.failures["thin"]
    failed = judge.cache.failures()
    for key in ("nan", "above", "3", "thin"):
        assert judge.cache.get(key) is None and key in failed
    assert judge.cache.get("ok") is not None and judge.cache.get("fine") is not None


def test_a_failure_stays_a_failure() -> None:
    failure = DigitScore(failure="no reply")
    assert checked(failure, 0.5) is failure


def test_local_likelihoods_with_a_nan_or_a_missing_token_are_failures() -> None:
    """The local backend's likelihoods pass the check too (here without weights: its forward
    pass is replaced by given per-token log-probabilities)."""
    backend = object.__new__(TransformersBackend)
    backend._encode = lambda text: list(range(len(text.split())))  # one token per word
    given = [torch.tensor([-1.0, -0.5]), torch.tensor([-1.0, math.nan]), torch.tensor([-1.0])]
    backend.token_logprobs = lambda segments, items: given
    items = [("q\n", "two words"), ("q\n", "two more"), ("q\n", "and two")]
    ok, nan, short = backend.loglikelihoods(["x\n"], items)
    assert ok.ok and ok.tokens == (-1.0, -0.5)
    assert not nan.ok and "impossible log-probabilities [nan]" in nan.failure
    assert not short.ok and "1 token log-probabilities for the 2 tokens sent" in short.failure
