"""The requests one sample's scoring passes make on the criteria of a tree: each pass's shared
segments and continuation (its layout), and per criterion the suffix and the cache key. What
:class:`~hdeval.scoring.criterion_scorer.CriterionScorer` asks the judge, and what
``hdeval estimate`` counts before it does."""

from __future__ import annotations

from collections.abc import Sequence

from hdeval.llm.judge import DIGITS, LOGLIK, CachedJudge
from hdeval.params import Mode, TaskSpec
from hdeval.scoring.columns import SOURCE_FREE, UNCONDITIONED, Profile, column
from hdeval.scoring.prompts import (
    TEMPLATE_VERSION,
    likelihood_for,
    likelihood_instruction,
    prompt_for,
    prompt_segments,
    source_free_instruction,
    source_free_segment,
    source_segment,
)
from hdeval.scoring.requests import Layout, Pass, Request
from hdeval.tree.criteria import CriteriaTree, Criterion


class CriterionRequests:
    """The requests of a scorer with a ``judge``, a ``task``, scoring ``modes``, whether the
    text's own likelihood is scored (``unconditioned``) and a ``profile`` of columns."""

    judge: CachedJudge
    task: TaskSpec
    modes: tuple[Mode, ...]
    unconditioned: bool
    profile: Profile

    # ----------------------------------------------------------------- requests per sample
    def prompt_requests(
        self, tree: CriteriaTree, criteria: Sequence[Criterion], segments: list[str]
    ) -> list[Request]:
        requests = []
        for c in criteria:
            suffix = prompt_for(tree, c, self.task)
            key = self.judge.key(DIGITS, TEMPLATE_VERSION, segments, suffix)
            requests.append(Request(column("prompt", c.id), key, suffix))
        return requests

    def likelihood_requests(
        self, tree: CriteriaTree, criteria: Sequence[Criterion], segments: list[str], output: str
    ) -> list[Request]:
        pairs = [(column("likelihood", c.id), likelihood_for(tree, c, self.task)) for c in criteria]
        if self.unconditioned:
            pairs.append((UNCONDITIONED, likelihood_instruction(self.task)))
        return [self._likelihood_request(name, segments, text, output) for name, text in pairs]

    def _likelihood_request(
        self, column: str, segments: list[str], instruction: str, continuation: str
    ) -> Request:
        """One likelihood request. A text read without the judge's end-of-reply marker (not
        ``profile.end_of_text``) names the same request with the marker as its ``ended`` twin."""
        key = self.judge.key(LOGLIK, TEMPLATE_VERSION, segments, instruction, continuation)
        marker = "" if self.profile.end_of_text else self.judge.reply_end
        if not marker:
            return Request(column, key, instruction)
        ended = self.judge.key(
            LOGLIK, TEMPLATE_VERSION, segments, instruction, continuation + marker
        )
        return Request(column, key, instruction, ended)

    def _passes(self, criteria: list[Criterion]) -> list[tuple[Pass, list[Criterion]]]:
        """The scoring passes over one sample: each mode on ``criteria``, a likelihood pass for
        :data:`UNCONDITIONED` alone when it is scored without the likelihood mode, and the
        source-free likelihood of the text when the profile asks for it."""
        passes: list[tuple[Pass, list[Criterion]]] = [(mode, criteria) for mode in self.modes]
        if self.unconditioned and "likelihood" not in self.modes:
            passes.append(("likelihood", []))
        if self.unconditioned and self.profile.source_free:
            passes.append(("source_free", []))
        return passes

    def _layout(self, kind: Pass, source: str, output: str, whole: bool = True) -> Layout:
        """Shared segments of a sample's requests, and the continuation (likelihood: the text,
        with the judge's end-of-reply marker where ``profile.end_of_text`` and it is ``whole``)."""
        if kind == "prompt":
            return prompt_segments(self.task, source, output), ""
        ended = self.profile.end_of_text and whole
        text = output.strip() + (self.judge.end_of_reply if ended else "")
        if kind == "source_free":
            return [source_free_segment(self.task)], text
        return [source_segment(self.task, source)], text

    def _requests(
        self,
        kind: Pass,
        tree: CriteriaTree,
        criteria: Sequence[Criterion],
        segments: list[str],
        continuation: str,
    ) -> list[Request]:
        if kind == "prompt":
            return self.prompt_requests(tree, criteria, segments)
        if kind == "source_free":
            text = source_free_instruction(self.task)
            return [self._likelihood_request(SOURCE_FREE, segments, text, continuation)]
        return self.likelihood_requests(tree, criteria, segments, continuation)
