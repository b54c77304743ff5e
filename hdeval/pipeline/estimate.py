"""What a pipeline run will cost before it runs: LLM calls and prompt tokens per stage that the
cache does not hold yet, and the time they take on the configured judge.

Every stage's requests are listed the way the stage makes them (:meth:`CriterionScorer.plan`) and
looked up in the cache; a request counted for an earlier stage is free for a later one, as in a
real run. Layers beyond 1 decompose criteria: where the decomposition replies are cached the new
criteria are known and the count is exact, otherwise each decomposed node is assumed to get
``hierarchy.children`` criteria (layer 3 onwards: ``top_k`` nodes), and the row says it is an
estimate. Prompt tokens are what the model computes: for a local judge, which keeps every shared
prefix (a document, then a text) while a stage scores it, each prefix once per stage plus every
request's own row, in the backend's tokens; for a server, every whole prompt at characters / 4.
The time comes from a calibration that does the first real piece of work (one training text on
the layer-1 criteria, one decomposition) and keeps its results in the cache: seconds per
computed token of each scoring mode for a local judge, seconds per call for a server.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hdeval.data import load_labels
from hdeval.data.splitting import load_split
from hdeval.errors import JudgeUnavailableError
from hdeval.llm.judge import CachedJudge
from hdeval.llm.types import ContextLimited, LogLikelihood
from hdeval.params import Params
from hdeval.scoring.columns import Profile
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.prompts import TEMPLATE_VERSION
from hdeval.training.hierarchy import criteria_to_expand, usable_modes
from hdeval.tree.criteria import CriteriaTree, Criterion, apply_overrides, aspects_tree, pinned
from hdeval.tree.decompose import CACHE_KIND, decompose
from hdeval.tree.decomposition_prompt import decomposition_prompt

CHARS_PER_TOKEN = 4  # for a server, whose tokenizer hdeval cannot run
KINDS = ("digits", "loglik", "generate")


@dataclass
class StageCost:
    """LLM work one stage still has to do after the cache."""

    stage: str
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    cached: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    exact: bool = True
    note: str = ""
    prefixes: set[tuple[str, ...]] = field(default_factory=set, repr=False)  # computed ones

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    @property
    def prompt_tokens(self) -> int:
        return sum(self.tokens.values())

    def seconds(
        self, per_call: dict[str, float], per_token: dict[str, float] | None = None
    ) -> float | None:
        """Expected time from the calibration: seconds per token of a kind where it has them,
        else seconds per call; None when a kind with calls has neither."""
        total = 0.0
        for kind, n in self.calls.items():
            if n and kind in (per_token or {}):
                total += self.tokens[kind] * per_token[kind]
            elif n and kind in per_call:
                total += n * per_call[kind]
            elif n:
                return None
        return total


class _CacheOnly:
    """A backend that answers nothing: decomposing through it shows what the cache knows."""

    def __init__(self, backend) -> None:
        self.identity = backend.identity
        self.tokens = backend.tokens

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        raise JudgeUnavailableError("not in the cache")


class Planner:
    """Counts requests against the cache once each, across the stages of one run."""

    def __init__(self, judge: CachedJudge) -> None:
        self.judge = judge
        self.seen: set[str] = set()
        self.shares_prefixes = shares_prefixes(judge)

    def _tokens(self, cost: StageCost, segments: Sequence[str], suffix: str, cont: str) -> int:
        """Tokens the model computes for one request (local judge): its row, and the prefix
        levels of ``segments`` that ``cost``'s stage has not computed yet. A digit request's row
        is its suffix and the template's tail; a likelihood request's row is its text but the
        last token, after its instruction (suffix and tail), computed once per prefix."""
        if not self.shares_prefixes:
            return len("".join([*segments, suffix, cont])) // CHARS_PER_TOKEN
        backend = self.judge.backend
        head, tail = backend.frame_tokens()
        row = len(backend.tokenize(suffix)) + tail
        if cont:
            instruction = (*segments, suffix)
            count = len(backend.tokenize(cont)) - 1 + (0 if instruction in cost.prefixes else row)
            cost.prefixes.add(instruction)
        else:
            count = row
        for depth in range(1, len(segments) + 1):
            level = tuple(segments[:depth])
            if level not in cost.prefixes:
                cost.prefixes.add(level)
                count += len(backend.tokenize(segments[depth - 1])) + (head if depth == 1 else 0)
        return count

    def scoring(self, cost: StageCost, planned: list) -> None:
        """Count ``planned`` requests (:meth:`CriterionScorer.plan`) not cached nor seen yet."""
        for mode, segments, continuation, requests in planned:
            new = [r for r in requests if r.key not in self.seen]
            kind = "digits" if mode == "prompt" else "loglik"
            usable = LogLikelihood.readable if kind == "loglik" else None
            found = self.judge.cache.get_many([r.key for r in new], usable)
            cost.cached += len(requests) - len(new) + len(found)
            for request in new:
                self.seen.add(request.key)
                if request.key not in found:
                    cost.calls[kind] += 1
                    cost.tokens[kind] += self._tokens(cost, segments, request.suffix, continuation)

    def grow(
        self, cost: StageCost, tree: CriteriaTree, node_ids: Sequence[str], params: Params
    ) -> CriteriaTree:
        """``tree`` decomposed at ``node_ids``: from cached replies where every one is cached,
        else with ``children`` stand-in criteria per node (and the row marked an estimate)."""
        description, k = params.task.description, params.hierarchy.children
        try:
            cache_only = CachedJudge(_CacheOnly(self.judge.backend), self.judge.cache)
            return decompose(tree, node_ids, cache_only, description, k)
        except JudgeUnavailableError:
            pass
        cost.exact = False
        nodes = list(tree)
        for node_id in node_ids:
            node = tree.get(node_id)
            if node.decomposed or tree.children(node_id):
                continue
            prompt = decomposition_prompt(description, node, tree.parent(node), k)
            key = self.judge.key(CACHE_KIND, TEMPLATE_VERSION, prompt)
            if key not in self.seen and self.judge.cache.get(key) is None:
                self.seen.add(key)
                cost.calls["generate"] += 1
                cost.tokens["generate"] += self._tokens(cost, [], prompt, "")
            nodes += [
                Criterion(
                    f"{node_id}.estimate_{i}",
                    f"criterion {i} of {node.name}",
                    f"a part of {node.name} to be decomposed",
                    node_id,
                    node.layer + 1,
                )
                for i in range(1, k + 1)
            ]
        return CriteriaTree(nodes)


def shares_prefixes(judge: CachedJudge) -> bool:
    """Whether ``judge`` computes a shared prefix once for all requests on it (a local judge)."""
    backend = judge.backend
    return isinstance(backend, ContextLimited) and hasattr(backend, "frame_tokens")


def calibrate(judge: CachedJudge, params: Params) -> dict:
    """Seconds per LLM call of each kind, and for a local judge seconds per computed prompt
    token of each scoring mode, measured on the first real work of the pipeline (kept in the
    cache): one training text on the layer-1 criteria, then one decomposition.

    Both modes are timed where the judge has them, whatever ``hierarchy.modes`` says: the
    baselines and DHP score prompts and likelihoods too. A local judge's weights are loaded
    before the clock starts.
    """
    train, _ = load_split(params.data)
    tree = aspects_tree(params.data)
    per_call: dict[str, float] = {}
    per_token: dict[str, float] = {}
    done = 0
    if not getattr(judge.backend, "loaded", True):  # a local judge loads on first use
        judge.backend.load()
    modes = ["prompt"] + (["likelihood"] if judge.likelihood_problem() is None else [])
    for mode in modes:
        unconditioned = params.hierarchy.unconditioned and mode == "likelihood"
        profile = Profile.of(params.hierarchy)
        scorer = CriterionScorer(judge, params.task, [mode], unconditioned, profile)
        tokens_before, start = judge.tokens.prompt, time.perf_counter()
        run = scorer.score(train.samples.iloc[:1], tree, progress=False)
        seconds, tokens = time.perf_counter() - start, judge.tokens.prompt - tokens_before
        if run.computed:
            kind = "digits" if mode == "prompt" else "loglik"
            per_call[kind] = seconds / run.computed
            if tokens and shares_prefixes(judge):
                per_token[kind] = seconds / tokens
            done += run.computed
    if params.hierarchy.layers > 1:
        first = tree.layer(1)[0]
        prompt = decomposition_prompt(
            params.task.description, first, None, params.hierarchy.children
        )
        if judge.cache.get(judge.key(CACHE_KIND, TEMPLATE_VERSION, prompt)) is None:
            start = time.perf_counter()
            decompose(
                CriteriaTree([first]), [first.id], judge, params.task.description,
                params.hierarchy.children,
            )  # fmt: skip
            per_call["generate"] = time.perf_counter() - start
            done += 1
    return {"seconds_per_call": per_call, "seconds_per_token": per_token, "calls_done": done}


def estimate(params: Params, judge: CachedJudge) -> list[StageCost]:
    """The LLM work of every pipeline stage still to do after the cache."""
    from hdeval.baselines.registry import BASELINES, make_scorers, without_likelihood
    from hdeval.dhp.runner import rule_perturbed_samples

    problem = judge.likelihood_problem()
    hierarchy, _ = usable_modes(params.hierarchy, problem)
    planner = Planner(judge)
    train, test = load_split(params.data)
    aspects = aspects_tree(params.data)
    unconditioned = hierarchy.unconditioned and "likelihood" in hierarchy.modes
    profile = Profile.of(hierarchy)
    scorer = CriterionScorer(judge, params.task, hierarchy.modes, unconditioned, profile)
    stages: list[StageCost] = []
    tree, selected = aspects, []
    for number in range(1, hierarchy.layers + 1):
        cost = StageCost(f"layer@{number}")
        if number > 1:
            expand = criteria_to_expand(tree, number, selected, pinned(hierarchy.overrides))
            tree = planner.grow(cost, tree, expand, params)
            if cost.exact:
                tree = apply_overrides(tree, hierarchy.overrides, expand)
            if not stages[-1].exact:
                cost.exact = False
        planner.scoring(cost, scorer.plan(train.samples, tree))
        newest = [c.id for c in tree.layer(number) if c.id not in pinned(hierarchy.overrides)]
        selected = newest[: hierarchy.top_k]  # stand-ins for what pruning will pick
        if number > 1 and not cost.exact:
            cost.note = "estimate: decompositions not made yet"
        elif number > 1 and hierarchy.min_mode_gain is not None:
            cost.exact, cost.note = False, "upper bound: mode pruning may skip or shrink it"
        elif number >= 3:
            cost.exact, cost.note = False, "estimate: pruning picks the nodes to decompose"
        stages.append(cost)
    exact = all(s.exact for s in stages)
    note = "" if exact else "estimate: the final criteria are not known yet"
    evaluate = StageCost("evaluate", exact=exact, note=note)
    planner.scoring(evaluate, scorer.plan(test.samples, tree))
    stages.append(evaluate)

    baselines = StageCost("baselines")  # the stage's scorers, less ROUGE (no LLM call)
    task, names = params.task, params.data.aspects
    kept, _ = without_likelihood([n for n in BASELINES if n != "rouge"], problem)
    for baseline in make_scorers(kept, judge, task, aspects, names):
        planner.scoring(baselines, baseline.plan(test.samples))
    stages.append(baselines)

    dhp = StageCost("dhp", exact=exact, note=note)
    labels = load_labels(params.data.path, params.data.aspects, params.data.score_range)
    combined = rule_perturbed_samples(labels, params.dhp)
    planner.scoring(dhp, scorer.plan(combined, tree))
    kept, _ = without_likelihood(params.dhp.baselines, problem)
    for baseline in make_scorers(kept, judge, task, aspects, names):
        planner.scoring(dhp, baseline.plan(combined))
    if params.dhp.llm_perturbations:
        dhp.exact = False
        dhp.note = "estimate: LLM-made perturbations are not counted"
    stages.append(dhp)
    return stages


def render(stages: Sequence[StageCost], calibration: dict | None, identity: str) -> str:
    """The table ``hdeval estimate`` prints."""
    per_call = (calibration or {}).get("seconds_per_call", {})
    per_token = (calibration or {}).get("seconds_per_token", {})
    lines = [
        f"judge: {identity}",
        f"{'stage':<10} {'LLM calls':>9} {'cached':>7} {'prompt tokens':>13} {'time':>9}  note",
    ]
    total_seconds: float | None = 0.0
    for s in stages:
        seconds = s.seconds(per_call, per_token) if calibration else None
        shown = "?" if seconds is None else f"{seconds / 60:.1f} min"
        if seconds is None or total_seconds is None:
            total_seconds = None
        else:
            total_seconds += seconds
        lines.append(
            f"{s.stage:<10} {s.total_calls:>9} {s.cached:>7} {s.prompt_tokens:>13} {shown:>9}  "
            f"{s.note}"
        )
    total = sum(s.total_calls for s in stages)
    tokens = sum(s.prompt_tokens for s in stages)
    shown = "?" if total_seconds is None else f"{total_seconds / 60:.1f} min"
    lines.append(f"{'total':<10} {total:>9} {'':>7} {tokens:>13} {shown:>9}")
    if calibration:
        rates = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(per_call.items())) or "none"
        lines.append(
            f"calibration: {calibration['calls_done']} calls made and cached (not counted above); "
            f"seconds per call: {rates}"
        )
        if per_token:
            speeds = ", ".join(f"{k} {1 / v:.0f}" for k, v in sorted(per_token.items()))
            lines.append(f"prompt tokens computed per second (times above): {speeds}")
    return "\n".join(lines)
