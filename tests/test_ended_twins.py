"""A likelihood of a text read without the judge's end-of-reply marker is read off the cached
answer to the same request with the marker, where the tokenizer splits the two apart."""

from __future__ import annotations

from collections.abc import Callable

from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.types import LogLikelihood, TokenCounts

MARKER = "<E>"


class CountingBackend:
    """Token log-probabilities -0.1, -0.2, ... by position, from a given tokenizer; counts calls."""

    identity = "counting-stand-in:v1"

    def __init__(self, tokenize: Callable[[str], list[str]]) -> None:
        self.tokenize = tokenize
        self.tokens = TokenCounts()
        self.calls = 0

    def end_of_reply(self) -> str:
        return MARKER

    def loglikelihoods(self, segments, items):
        self.calls += len(items)
        return [
            LogLikelihood(tuple(-0.1 * (i + 1) for i in range(len(self.tokenize(text)))))
            for _, text in items
        ]


def by_character(text: str) -> list[str]:
    """Characters, the marker one token of its own (as a chat template's special token)."""
    head, marker, tail = text.partition(MARKER)
    return [*head, *([marker] if marker else []), *(by_character(tail) if tail else [])]


def by_word(text: str) -> list[str]:
    """Words: the marker joins the text's last word, so the text's tokens change."""
    return text.split()


def _ask_plain_after_ended(tokenize, tmp_path) -> tuple[CountingBackend, LogLikelihood, dict]:
    backend = CountingBackend(tokenize)
    judge = CachedJudge(backend, ResultCache(tmp_path / "cache.sqlite"))
    ended_key, plain_key = judge.key("loglik", "text", MARKER), judge.key("loglik", "text")
    judge.loglikelihoods(["source"], {ended_key: ("instruction", "a b." + MARKER)})
    answers = judge.loglikelihoods(
        ["source"], {plain_key: ("instruction", "a b.")}, {plain_key: ended_key}
    )
    return backend, answers.results[plain_key], judge.cost()


def test_the_plain_answer_is_the_ended_one_less_the_marker_and_costs_no_call(tmp_path):
    backend, plain, cost = _ask_plain_after_ended(by_character, tmp_path)
    assert backend.calls == 1
    assert plain.tokens == tuple(-0.1 * (i + 1) for i in range(4))  # "a b." without "<E>"
    assert cost["llm_calls"] == 1 and cost["cache_hits"] == 1


def test_a_marker_that_joins_the_text_s_last_token_is_asked_of_the_model(tmp_path):
    backend, plain, cost = _ask_plain_after_ended(by_word, tmp_path)
    assert backend.calls == 2
    assert plain.tokens == (-0.1, -0.2)  # the model's own answer for ["a", "b."]
    assert cost["llm_calls"] == 2 and cost["cache_hits"] == 0


def test_the_estimate_counts_a_request_its_ended_twin_answers_as_no_call(tmp_path):
    from hdeval.pipeline.request_count import Planner, Probes, StageCost
    from hdeval.scoring.requests import PlannedPass, Request
    from hdeval.scoring.run import Sample

    judge = CachedJudge(CountingBackend(by_character), ResultCache(tmp_path / "cache.sqlite"))
    cached = judge.key("loglik", "cached", MARKER)
    judge.loglikelihoods(["s"], {cached: ("i", "a b." + MARKER)})
    sample = Sample("t1", "d1", "source", "a b.")

    def planned(*requests: Request) -> list[PlannedPass]:
        return [PlannedPass(sample, "likelihood", ["s"], "a b.", list(requests))]

    planner = Planner(judge, judge, Probes(limit=0))
    evaluate, baselines = StageCost("evaluate"), StageCost("baselines")
    planner.count(evaluate, planned(Request("lik:a", "ended", "i")))
    planner.count(
        baselines,
        planned(
            Request("lik:a", "plain", "i", ended="ended"),  # an earlier stage asks its twin
            Request("lik:b", "plain-cached", "i", ended=cached),  # the cache holds its twin
            Request("lik:c", "plain-alone", "i", ended="never-asked"),
        ),
    )
    assert evaluate.calls["loglik"] == 1
    assert baselines.calls["loglik"] == 1 and baselines.cached == 2
