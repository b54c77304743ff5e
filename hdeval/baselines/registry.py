"""Anything that turns texts into metric scores, and the one registry of them by name.

A :class:`TextScorer` takes a table of samples (indexed by id, with columns ``doc_id``,
``source``, ``output`` and, where a metric needs them, ``references``) and returns one column per
metric, higher meaning better. Failed scores are NaN. DHP, ``hdeval compare`` and the pipeline's
``baselines`` stage all build their scorers with :func:`make_scorers`, so HD-Eval and every
baseline are measured the same way on the same judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from hdeval.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from hdeval.export.evaluator import Evaluator
    from hdeval.llm.judge import CachedJudge
    from hdeval.params import TaskSpec
    from hdeval.tree.criteria import CriteriaTree

HDEVAL = "hdeval"
BASELINES = ("direct-prompt", "overall-prompt", "likelihood", "rouge")
#: Baselines that need the judge's log-likelihoods (not every server gives them).
LIKELIHOOD_BASELINES = frozenset({"likelihood"})


def without_likelihood(names: Sequence[str], problem: str | None) -> tuple[list[str], dict]:
    """``names`` less the scorers that need likelihoods when ``problem`` says the judge has none,
    and ``{left-out name: why}``."""
    if problem is None:
        return list(names), {}
    kept = [n for n in names if n not in LIKELIHOOD_BASELINES]
    return kept, {
        n: f"the judge cannot score likelihoods: {problem}" for n in names if n not in kept
    }


@runtime_checkable
class TextScorer(Protocol):
    name: str
    metrics: list[str]

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        """Scores, indexed like ``samples``, one column per name in ``metrics``."""
        ...


class BundleScorer:
    """A trained HD-Eval bundle: predicted human scores per aspect."""

    def __init__(self, evaluator: Evaluator, name: str = HDEVAL, progress: bool = False) -> None:
        self.evaluator = evaluator
        self.name = name
        self.metrics = evaluator.aspects
        self.progress = progress

    def score(self, samples: pd.DataFrame) -> pd.DataFrame:
        return self.evaluator.score_samples(samples, progress=self.progress).aspects


def make_scorers(
    names: Sequence[str],
    judge: CachedJudge,
    task: TaskSpec,
    aspects_tree: CriteriaTree,
    aspects: Sequence[str],
    evaluator: Evaluator | None = None,
    progress: bool = False,
) -> list[TextScorer]:
    """The named scorers (``hdeval`` and :data:`BASELINES`), all on one cached judge; with
    ``progress``, the bundle and the judge's scorers show a progress bar while they score.

    When both prompt baselines are named, each asks both kinds of prompt in one pass over a
    text: the first computes them, the second reads them from the cache.
    """
    from hdeval.baselines.llm import DirectPromptScorer, LikelihoodScorer, OverallPromptScorer
    from hdeval.baselines.rouge import RougeScorer

    both = {"direct-prompt", "overall-prompt"} <= set(names)
    makers = {
        "direct-prompt": lambda: DirectPromptScorer(
            judge, task, aspects_tree, aspects=aspects, with_overall=both, progress=progress
        ),
        "overall-prompt": lambda: OverallPromptScorer(
            judge, task, aspects_tree, aspects=aspects, with_direct=both, progress=progress
        ),
        "likelihood": lambda: LikelihoodScorer(
            judge, task, aspects_tree, aspects=aspects, progress=progress
        ),
        "rouge": RougeScorer,
    }
    scorers: list[TextScorer] = []
    for name in names:
        if name == HDEVAL:
            if evaluator is None:
                raise ConfigError("scorer 'hdeval' needs a trained bundle (--model DIR)")
            scorers.append(BundleScorer(evaluator, progress=progress))
        elif name in makers:
            scorers.append(makers[name]())
        else:
            raise ConfigError(f"unknown scorer {name!r}; choose from {HDEVAL}, {', '.join(makers)}")
    return scorers
