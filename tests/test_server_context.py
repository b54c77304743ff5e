"""A server judge's context: prompts cut to fit it, as the embedded judge's are, and a prompt
the server still refuses as too long counted as that item's problem, not the server's. Against
the scripted fault server of ``test_openai_faults`` on 127.0.0.1, which lends no tokenizer (so
texts are counted in UTF-8 bytes) and refuses a message longer than its context; the real vLLM
and llama.cpp servers are in ``test_vllm`` and ``test_openai_backend``."""

from __future__ import annotations

import math

from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.server.backend import OpenAICompatibleBackend
from hdeval.params import TaskSpec
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.run import Sample
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.test_openai_faults import FaultServer

TREE = CriteriaTree([Criterion("coherence", "coherence", "well organized", None, 1)])
CONTEXT = 600


def test_a_text_longer_than_the_servers_context_is_cut_to_fit_and_marked(tmp_path) -> None:
    """The server reports its context (vLLM's max_model_len): the long text's prompt is cut
    to fit, scored, and the row marked truncated; the short one is sent whole."""
    with FaultServer(reports={"max_model_len": CONTEXT}) as server:
        backend = OpenAICompatibleBackend(server.base_url, "fault", concurrency=1, timeout=5)
        judge = CachedJudge(backend, ResultCache(tmp_path / "cache.sqlite"))
        samples = [
            Sample("short", "d1", "A cat sat on a mat.", "A cat sat."),
            Sample("long", "d2", "The article. " * 200, "The summary goes on. " * 100),
        ]
        run = CriterionScorer(judge, TaskSpec(), ["prompt"]).score(samples, TREE, progress=False)
        longest = server.longest
    assert not run.failures, run.failures
    assert all(math.isfinite(v) for v in run.values.ravel())
    assert [(t.sample_id, t.mode) for t in run.truncations] == [("long", "prompt")]
    assert run.truncations[0].source_tokens_cut > 0
    assert CONTEXT - 200 < longest < CONTEXT  # cut to fit, not much further


def test_refusals_of_prompts_longer_than_the_context_do_not_trip_the_breaker() -> None:
    """Twenty-five items refused as too long (a server with no context to fit to): each is
    that item's failure, and the breaker, which trips at a failure share above one half after
    twenty items, stays closed: the server answered every one."""
    with FaultServer() as server:
        judge = OpenAICompatibleBackend(server.base_url, "fault", concurrency=4, timeout=5)
        results = judge.digit_scores(["Text:\n"], ["[[too-long]] Score 1-5:"] * 25)
        assert all("prompt longer than the server's context" in r.failure for r in results)
        assert not judge.breaker.tripped
        assert judge.digit_scores(["Text:\n"], ["[[ok-4]]"])[0].ok
