"""LLM baselines on the same cached judge as HD-Eval: direct per-aspect prompts, one overall
prompt, and GPTScore likelihood (see :mod:`hdeval.baselines`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from hdeval.errors import ConfigError
from hdeval.llm.judge import DIGITS, CachedJudge
from hdeval.params import TaskSpec
from hdeval.scoring.columns import PMI_MEAN, SOURCE_FREE, UNCONDITIONED, Profile
from hdeval.scoring.columns import column as feature_column
from hdeval.scoring.criterion_scorer import CriterionScorer
from hdeval.scoring.requests import Request
from hdeval.scoring.run import ScoringRun
from hdeval.tree.criteria import CriteriaTree, Criterion

#: Part of the cache key of every overall-quality prompt; bump it when the template changes.
OVERALL_TEMPLATE_VERSION = "hdeval-overall-1"
AVERAGE = "average"


def _aspects(tree: CriteriaTree, aspects: Sequence[str] | None) -> list[Criterion]:
    """The layer-1 criteria of ``tree`` (those named in ``aspects``, in that order)."""
    roots = tree.layer(1)
    if aspects is None:
        if not roots:
            raise ConfigError("the aspects tree has no layer-1 criteria")
        return roots
    by_id = {c.id: c for c in roots}
    missing = [a for a in aspects if a not in by_id]
    if missing:
        raise ConfigError(f"no layer-1 criterion for aspects {missing}")
    return [by_id[a] for a in aspects]


# ====================================================================== LLM baselines
class _LLMBaseline:
    """Shared plumbing: a CriterionScorer on a flat tree, the last run kept for inspection."""

    name: str
    metrics: list[str]

    def __init__(self, scorer: CriterionScorer, tree: CriteriaTree, progress: bool) -> None:
        self._scorer = scorer
        self._tree = tree
        self.progress = progress
        self.last_run: ScoringRun | None = None

    def plan(self, samples: pd.DataFrame) -> list:
        """The requests scoring ``samples`` makes (see :meth:`CriterionScorer.plan`)."""
        return self._scorer.plan(samples, self._tree)

    def _features(self, samples: pd.DataFrame) -> pd.DataFrame:
        self.last_run = self._scorer.score(samples, self._tree, progress=self.progress)
        return self.last_run.features


#: The single node of the overall-quality prompt; its id cannot clash with an aspect's.
OVERALL = Criterion("_overall", "overall quality", "how good the text is as a whole")


def overall_prompt(task: TaskSpec, aspects: Sequence[Criterion] = ()) -> str:
    """One instruction for a single overall 1-5 score, listing ``aspects`` with definitions."""
    text = (
        f"## Instructions\nWe would like to evaluate the overall quality of the "
        f"{task.output_noun} above."
    )
    if aspects:
        listed = "\n".join(f"- {c.name}: {c.definition}" for c in aspects)
        text += f" Take all of the following aspects into account.\n{listed}"
    return (
        text + f"\nScore the overall quality of the {task.output_noun} on a scale of 1 to 5, "
        "with 1 being the lowest and 5 the highest. Reply with the score only, a single digit."
    )


class _PromptBaselineScorer(CriterionScorer):
    """Prompt mode where :data:`OVERALL` is asked with :func:`overall_prompt` (keyed by its
    own version) and every other node with its layer-1 prompt: the direct and the overall
    prompts of a text can then share one pass over its source and text."""

    def __init__(self, judge: CachedJudge, task: TaskSpec | None, aspects: list) -> None:
        super().__init__(judge, task, ("prompt",))
        self.aspects = aspects

    def prompt_requests(
        self, tree: CriteriaTree, criteria: Sequence[Criterion], segments: list[str]
    ) -> list[Request]:
        direct = [c for c in criteria if c.id != OVERALL.id]
        requests = super().prompt_requests(tree, direct, segments)
        if len(direct) < len(criteria):
            suffix = overall_prompt(self.task, self.aspects)
            key = self.judge.key(DIGITS, OVERALL_TEMPLATE_VERSION, segments, suffix)
            requests.append(Request(feature_column("prompt", OVERALL.id), key, suffix))
        return requests


def _prompt_tree(aspects: list[Criterion], direct: bool, overall: bool) -> CriteriaTree:
    """The flat tree a prompt baseline scores: the aspects and/or :data:`OVERALL`."""
    return CriteriaTree([*(aspects if direct else []), *([OVERALL] if overall else [])])


class DirectPromptScorer(_LLMBaseline):
    """One 1-5 prompt per layer-1 aspect (expected score from digit probabilities) + average.

    ``with_overall`` also asks the overall prompt in the same pass over each text (what
    :func:`~hdeval.baselines.registry.make_scorers` does when both baselines are named), so an
    :class:`OverallPromptScorer` then finds its scores in the cache.
    """

    def __init__(
        self,
        judge: CachedJudge,
        task: TaskSpec | None,
        aspects_tree: CriteriaTree,
        *,
        aspects: Sequence[str] | None = None,
        name: str = "direct-prompt",
        progress: bool = False,
        with_overall: bool = False,
    ) -> None:
        roots = _aspects(aspects_tree, aspects)
        self.aspects = [c.id for c in roots]
        scorer = _PromptBaselineScorer(judge, task, roots)
        super().__init__(scorer, _prompt_tree(roots, True, with_overall), progress)
        self.name = name
        self.metrics = [*self.aspects, AVERAGE]

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        features = self._features(samples)
        out = pd.DataFrame(
            {a: features[feature_column("prompt", a)] for a in self.aspects}, index=samples.index
        )
        out[AVERAGE] = out[self.aspects].mean(axis=1, skipna=False)
        return out


class OverallPromptScorer(_LLMBaseline):
    """A single prompt for an overall quality score (expected 1-5 score): column ``overall``.

    ``with_direct`` asks the direct per-aspect prompts in the same pass (see
    :class:`DirectPromptScorer`).
    """

    COLUMN = "overall"

    def __init__(
        self,
        judge: CachedJudge,
        task: TaskSpec | None = None,
        aspects_tree: CriteriaTree | None = None,
        *,
        aspects: Sequence[str] | None = None,
        name: str = "overall-prompt",
        progress: bool = False,
        with_direct: bool = False,
    ) -> None:
        listed = [] if aspects_tree is None else _aspects(aspects_tree, aspects)
        scorer = _PromptBaselineScorer(judge, task, listed)
        super().__init__(scorer, _prompt_tree(listed, with_direct, True), progress)
        self.name = name
        self.metrics = [self.COLUMN]

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        features = self._features(samples)
        overall = features[feature_column("prompt", OVERALL.id)]
        return pd.DataFrame({self.COLUMN: overall}, index=samples.index)


class LikelihoodScorer(_LLMBaseline):
    """GPTScore: mean token log-likelihood (nats, higher = better) of the text given the source,
    and the two single signals of the text's own likelihoods.

    Columns: ``unconditioned`` (plain "write a summary" instruction), ``source_free`` (the same
    without the source: the judge's prior, fluency), ``pmi`` (the first minus the second per
    token: how much the source explains the text, grounding), one per aspect of
    ``aspects_tree`` (the instruction names the aspect) and their ``average``.
    """

    UNCONDITIONED_COLUMN = "unconditioned"
    SOURCE_FREE_COLUMN = "source_free"
    PMI_COLUMN = "pmi"

    def __init__(
        self,
        judge: CachedJudge,
        task: TaskSpec | None = None,
        aspects_tree: CriteriaTree | None = None,
        *,
        aspects: Sequence[str] | None = None,
        name: str = "likelihood",
        progress: bool = False,
    ) -> None:
        roots = [] if aspects_tree is None else _aspects(aspects_tree, aspects)
        profile = Profile(source_free=True)
        scorer = CriterionScorer(judge, task, ("likelihood",), True, profile)
        super().__init__(scorer, CriteriaTree(roots), progress)
        self.aspects = [c.id for c in roots]
        self.name = name
        self.metrics = [
            self.UNCONDITIONED_COLUMN,
            self.SOURCE_FREE_COLUMN,
            self.PMI_COLUMN,
            *self.aspects,
        ]
        if self.aspects:
            self.metrics.append(AVERAGE)

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        features = self._features(samples)
        out = pd.DataFrame(
            {
                self.UNCONDITIONED_COLUMN: features[UNCONDITIONED],
                self.SOURCE_FREE_COLUMN: features[SOURCE_FREE],
                self.PMI_COLUMN: features[PMI_MEAN],
            },
            index=samples.index,
        )
        for a in self.aspects:
            out[a] = features[feature_column("likelihood", a)]
        if self.aspects:
            out[AVERAGE] = out[self.aspects].mean(axis=1, skipna=False)
        return out
