"""Counting a run's LLM work before it runs: the requests a stage's scorers plan
(:meth:`CriterionScorer.plan`) that the result cache does not hold, and the prompt tokens the
model will compute for them.

A request counted for an earlier stage is free for a later one, as in a real run, and so is one
read off its ended twin (:meth:`~hdeval.llm.judge.CachedJudge.loglikelihoods`). Prompt tokens
are what the model computes: a local judge keeps every shared prefix (a document, then a text)
while a stage scores it, so each prefix counts once per stage and then every request's own row,
in the backend's tokens; a server gets every whole prompt, counted at characters / 4.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hdeval.errors import HDEvalError, JudgeUnavailableError
from hdeval.llm.judge import CachedJudge
from hdeval.llm.types import ContextLimited
from hdeval.llm.validity import readable_likelihood
from hdeval.params import Params
from hdeval.scoring.requests import PlannedPass, cache_kind
from hdeval.tree.criteria import CriteriaTree, Criterion
from hdeval.tree.decompose import CACHE_KIND, decompose
from hdeval.tree.decomposition_prompt import TEMPLATE_VERSION

CHARS_PER_TOKEN = 4  # for a server, whose tokenizer hdeval cannot run
GENERATE = "generate"
KINDS = ("digits", "loglik", GENERATE)


@dataclass
class StageCost:
    """The LLM work one stage still has to do: calls and prompt tokens per kind, after the
    cache. ``rerun`` False: ``dvc repro`` would skip the stage, so it costs nothing."""

    stage: str
    rerun: bool = True
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    cached: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    #: Of ``tokens``, those a local judge computes as prefix levels (documents, texts).
    prefix_tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    notes: list[str] = field(default_factory=list)
    prefixes: set[tuple[str, ...]] = field(default_factory=set, repr=False)  # computed ones

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    @property
    def prompt_tokens(self) -> int:
        return sum(self.tokens.values())


@dataclass
class Probes:
    """The first pieces of work the run still has to do, per kind: what a calibration times
    (its results are cached, so the run does not repeat them)."""

    limit: int
    scoring: dict[str, list[tuple[CachedJudge, PlannedPass]]] = field(default_factory=dict)
    generate: list[tuple[CachedJudge, str]] = field(default_factory=list)
    _keys: set[str] = field(default_factory=set, repr=False)

    def add_pass(self, judge: CachedJudge, planned: PlannedPass) -> None:
        """Keep ``planned`` if its kind has fewer than ``limit`` passes and it fits the judge's
        context as it is (a longer one is cut by the stage, not here)."""
        passes = self.scoring.setdefault(cache_kind(planned.kind), [])
        first = planned.requests[0].key
        if len(passes) < self.limit and first not in self._keys and _fits(judge, planned):
            self._keys.add(first)
            passes.append((judge, planned))

    def add_generation(self, judge: CachedJudge, prompt: str) -> None:
        if not self.generate:
            self.generate.append((judge, prompt))


class _CacheOnly:
    """A backend that answers nothing: decomposing through it shows what the cache knows, and
    ``missing`` is the first prompt it had no reply for."""

    def __init__(self, backend) -> None:
        self.identity = backend.identity
        self.tokens = backend.tokens
        self.missing: str | None = None

    def generate(self, prompt: str, max_new_tokens: int = 512) -> str:
        self.missing = prompt
        raise JudgeUnavailableError("not in the cache")


def _fits(judge: CachedJudge, planned: PlannedPass) -> bool:
    backend = judge.backend
    if not (isinstance(backend, ContextLimited) and backend.max_context):
        return True
    longest = max((r.suffix for r in planned.requests), key=len)
    try:
        tokens = backend.prompt_tokens(planned.segments, longest, planned.continuation)
    except HDEvalError:  # a backend may refuse to count past its context
        return False
    return tokens <= backend.max_context


def shares_prefixes(judge: CachedJudge) -> bool:
    """Whether ``judge`` computes a shared prefix once for all requests on it (a local judge)."""
    backend = judge.backend
    return isinstance(backend, ContextLimited) and hasattr(backend, "frame_tokens")


class Planner:
    """Counts requests against the cache once each, across the stages of one run."""

    def __init__(
        self,
        judge: CachedJudge,
        decomposer: CachedJudge,
        probes: Probes,
        lengths: dict[tuple[str, str], int] | None = None,
    ) -> None:
        self.judge, self.decomposer, self.probes = judge, decomposer, probes
        self.seen: set[str] = set()
        self.lengths = {} if lengths is None else lengths  # (judge, text) -> tokens

    def count(self, cost: StageCost, planned: Sequence[PlannedPass]) -> None:
        """Count the requests of ``planned`` that are neither cached nor counted before."""
        for one in planned:
            new = [r for r in one.requests if r.key not in self.seen]
            kind = cache_kind(one.kind)
            usable = readable_likelihood if kind == "loglik" else None
            found = self.judge.cache.get_many([r.key for r in new], usable)
            twins = [r.ended for r in new if r.key not in found and r.ended]
            found.update(self.judge.cache.get_many(twins, usable, count=False))
            served = [r.key in found or r.ended in found or r.ended in self.seen for r in new]
            todo = [r for r, hit in zip(new, served, strict=True) if not hit]
            cost.cached += len(one.requests) - len(todo)
            self.seen.update(r.key for r in new)
            if todo:
                self.probes.add_pass(self.judge, one)
            for request in todo:
                cost.calls[kind] += 1
                self._add_tokens(
                    cost, kind, self.judge, one.segments, request.suffix, one.continuation
                )

    def grow(
        self, cost: StageCost, tree: CriteriaTree, node_ids: Sequence[str], params: Params
    ) -> tuple[CriteriaTree, bool]:
        """``tree`` decomposed at ``node_ids``, and whether that is the tree the run will have.
        A node whose replies are cached gets its real criteria; any other costs the reply it
        lacks (one call; a reply that does not parse is asked again, up to 6 times in all) and
        gets ``hierarchy.children`` stand-ins, as long as it is defined."""
        description, k = params.task.description, params.hierarchy.children
        writer = self.decomposer
        asked = _CacheOnly(writer.backend)
        cache_only = CachedJudge(asked, writer.cache)
        stand_ins: list[Criterion] = []
        for node_id in dict.fromkeys(node_ids):
            try:
                tree = decompose(tree, [node_id], cache_only, description, k)
            except JudgeUnavailableError:
                assert asked.missing is not None
                key = writer.key(CACHE_KIND, TEMPLATE_VERSION, asked.missing)
                if key not in self.seen:
                    self.seen.add(key)
                    self.probes.add_generation(writer, asked.missing)
                    cost.calls[GENERATE] += 1
                    self._add_tokens(cost, GENERATE, writer, [], asked.missing, "")
                node = tree.get(node_id)
                stand_ins += [
                    Criterion(
                        f"{node_id}.estimate_{i}", f"{node.name}, part {i}", node.definition,
                        node_id, node.layer + 1,
                    )
                    for i in range(1, k + 1)
                ]  # fmt: skip
            except HDEvalError:  # no usable reply in any attempt: it stays a leaf, as in the run
                continue
        return CriteriaTree([*tree, *stand_ins]), not stand_ins

    def _length(self, judge: CachedJudge, text: str) -> int:
        key = (judge.identity, text)
        if key not in self.lengths:
            self.lengths[key] = len(judge.backend.tokenize(text))
        return self.lengths[key]

    def _add_tokens(
        self,
        cost: StageCost,
        kind: str,
        judge: CachedJudge,
        segments: Sequence[str],
        suffix: str,
        cont: str,
    ) -> None:
        """Add to ``cost`` the tokens the model computes for one request: for a local judge
        its row, and the prefix levels of ``segments`` that ``cost``'s stage has not computed
        yet. A digit request's row is its suffix and the template's tail; a likelihood
        request's row is its text but the last token, after its instruction (suffix and tail),
        computed once per prefix."""
        if not shares_prefixes(judge):
            cost.tokens[kind] += len("".join([*segments, suffix, cont])) // CHARS_PER_TOKEN
            return
        head, tail = judge.backend.frame_tokens()
        row = self._length(judge, suffix) + tail
        if cont:
            instruction = (*segments, suffix)
            count = self._length(judge, cont) - 1 + (0 if instruction in cost.prefixes else row)
            cost.prefixes.add(instruction)
        else:
            count = row
        prefix = 0
        for depth in range(1, len(segments) + 1):
            level = tuple(segments[:depth])
            if level not in cost.prefixes:
                cost.prefixes.add(level)
                prefix += self._length(judge, segments[depth - 1]) + (head if depth == 1 else 0)
        cost.tokens[kind] += count + prefix
        cost.prefix_tokens[kind] += prefix
