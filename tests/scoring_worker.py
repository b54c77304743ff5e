"""Scores SummEval rows into a given cache; the kill -9 test runs it as a separate process."""

from __future__ import annotations

import sys

from hdeval.data import load_labels
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge
from hdeval.llm.local.backend import TransformersBackend
from hdeval.llm.local.embedded import pull
from hdeval.scoring.criterion_scorer import CriterionScorer
from tests.test_scoring import ASPECTS, TREE, labels_path


def main(cache_path: str, n_samples: int) -> None:
    data = load_labels(labels_path(), ASPECTS, (1.0, 5.0))
    samples = data.samples.iloc[:n_samples]
    scorer = CriterionScorer(CachedJudge(TransformersBackend(pull()), ResultCache(cache_path)))
    scorer.score(samples, TREE, progress=False)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
