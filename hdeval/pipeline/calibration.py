"""How fast the configured judge does the run's work, measured on the first pieces of work the
run still has to do (:class:`~hdeval.pipeline.request_count.Probes`); their results are cached,
so the run does not repeat them.

A local judge is timed in seconds per prompt token it computes, per kind of request (digit
prompts, likelihoods), and in seconds to load its weights, which every stage that computes
anything pays once. Tokens of prefix levels (a document, read once per stage in one long pass)
cost several times less than the rows read over them in batched passes, and the first pieces of
work hold most of a stage's prefixes, so the two are timed apart and each charged its own
rate. A server is timed in seconds per request at ``llm.concurrency`` requests in
flight, as a stage sends them. A decomposition is timed per call on the LLM that writes the
criteria.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from hdeval.llm.judge import CachedJudge
from hdeval.llm.types import PrefixWork
from hdeval.pipeline.request_count import GENERATE, Probes, StageCost, shares_prefixes
from hdeval.scoring.requests import PlannedPass, cache_kind
from hdeval.tree.decompose import CACHE_KIND
from hdeval.tree.decomposition_prompt import TEMPLATE_VERSION


@dataclass
class Rates:
    """Measured speeds of the judge: what turns counted work into seconds."""

    local: bool
    concurrency: int = 1
    per_token: dict[str, float] = field(default_factory=dict)  # local: s per row token
    per_prefix_token: float | None = None  # local: s per token of a prefix level
    per_request: dict[str, float] = field(default_factory=dict)  # server; decompositions
    load_seconds: float = 0.0  # the judge's weights, once per stage that computes
    decomposer_load_seconds: float = 0.0  # a separate LLM writing the criteria
    calls_made: int = 0

    def seconds(self, cost: StageCost) -> float | None:
        """``cost``'s time; None where a kind it calls was not measured."""
        if not cost.rerun or not cost.total_calls:
            return 0.0
        total = 0.0
        for kind, calls in cost.calls.items():
            if not calls:
                continue
            if kind != GENERATE and self.local and kind in self.per_token:
                prefix, rate = cost.prefix_tokens[kind], self.per_token[kind]
                prefix_rate = rate if self.per_prefix_token is None else self.per_prefix_token
                total += (cost.tokens[kind] - prefix) * rate + prefix * prefix_rate
            elif kind in self.per_request:
                total += calls * self.per_request[kind]
            else:
                return None
        scoring = any(n for kind, n in cost.calls.items() if kind != GENERATE)
        total += self.load_seconds if scoring else 0.0
        return total + (self.decomposer_load_seconds if cost.calls[GENERATE] else 0.0)

    def describe(self) -> str:
        """One line: the speeds measured."""
        names = {"digits": "digit prompts", "loglik": "likelihoods", GENERATE: "decompositions"}
        if self.local:
            parts = [
                f"{1 / s:,.0f} prompt tokens/s on {names[k]}" for k, s in self.per_token.items()
            ]
            if self.per_prefix_token:
                parts.append(f"{1 / self.per_prefix_token:,.0f} on prefixes (documents)")
            if self.load_seconds:
                parts.append(f"{self.load_seconds:.0f} s to load the weights (once per stage)")
        else:
            parts = [
                f"{1 / s:.1f} requests/s on {names[k]} at concurrency {self.concurrency}"
                for k, s in self.per_request.items()
                if k != GENERATE
            ]
        if GENERATE in self.per_request:
            parts.append(f"{self.per_request[GENERATE]:.0f} s per decomposition")
        return "; ".join(parts) or "nothing measured"


def calibrate(judge: CachedJudge, probes: Probes) -> Rates:
    """Time the work in ``probes`` on ``judge`` (and the decomposer the probes name)."""
    local = shares_prefixes(judge)
    rates = Rates(local, 1 if local else int(getattr(judge.backend, "concurrency", 1)))
    if any(probes.scoring.values()):  # nothing to score: nothing to load
        rates.load_seconds = _load(judge)
    work = getattr(judge.backend, "prefix_work", PrefixWork())  # the backend's running totals
    start = replace(work)
    for kind, passes in probes.scoring.items():
        if local:
            before = replace(work)
            seconds, computed, tokens = _time_passes(passes, 1)
            rows = tokens - (work.tokens - before.tokens)
            if rows > 0:
                rates.per_token[kind] = (seconds - (work.seconds - before.seconds)) / rows
            elif tokens:
                rates.per_token[kind] = seconds / tokens
        else:
            seconds, computed, _ = _time_passes(passes, rates.concurrency)
            if computed:
                rates.per_request[kind] = seconds / computed
        rates.calls_made += computed
    if work.tokens > start.tokens:
        rates.per_prefix_token = (work.seconds - start.seconds) / (work.tokens - start.tokens)
    for writer, prompt in probes.generate:
        if writer is not judge:
            rates.decomposer_load_seconds = _load(writer)
        start = time.perf_counter()
        writer.reply(CACHE_KIND, prompt, 512, TEMPLATE_VERSION)
        rates.per_request[GENERATE] = time.perf_counter() - start
        rates.calls_made += 1
    return rates


def _load(judge: CachedJudge) -> float:
    """Seconds to load a local judge's weights (0 for a server, or weights already loaded)."""
    backend = judge.backend
    if getattr(backend, "loaded", True):
        return 0.0
    start = time.perf_counter()
    backend.load()
    return time.perf_counter() - start


def _time_passes(
    passes: list[tuple[CachedJudge, PlannedPass]], workers: int
) -> tuple[float, int, int]:
    """Run ``passes`` as a stage does (``workers`` at a time): seconds, requests computed,
    prompt tokens computed."""
    judges = {id(judge): judge for judge, _ in passes}.values()
    tokens_before = sum(j.tokens.prompt for j in judges)

    def run(item: tuple[CachedJudge, PlannedPass]) -> int:
        judge, one = item
        if cache_kind(one.kind) == "digits":
            answers = judge.digit_scores(one.segments, {r.key: r.suffix for r in one.requests})
        else:
            items = {r.key: (r.suffix, one.continuation) for r in one.requests}
            answers = judge.loglikelihoods(one.segments, items)
        return answers.computed

    start = time.perf_counter()
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            computed = sum(pool.map(run, passes))
    else:
        computed = sum(run(p) for p in passes)
    seconds = time.perf_counter() - start
    return seconds, computed, sum(j.tokens.prompt for j in judges) - tokens_before
