"""Baselines HD-Eval is compared with, and the comparison table.

The LLM baselines use the same cached judge as HD-Eval, through
``CriterionScorer``, so a comparison measures the method, not the judge:

* :class:`DirectPromptScorer`: G-Eval style, one 1-5 prompt per human aspect (the layer-1
  criteria, with the hierarchy-aware template of a root node); the expected score over the digit
  probabilities per aspect, plus their ``average``. These prompts are exactly HD-Eval's layer-1
  prompts, so they share cache entries with HD-Eval's features.
* :class:`OverallPromptScorer`: one prompt for a single overall 1-5 score, the aspects listed
  with their definitions (:func:`overall_prompt`; its own :data:`OVERALL_TEMPLATE_VERSION` is
  part of the cache key).
* :class:`LikelihoodScorer`: GPTScore style, mean token log-likelihood of the text as the reply
  to "write a <text> of the <source> above" after the source (``unconditioned``), and the same
  with the instruction naming each aspect, plus their ``average``.
* :class:`RougeScorer`: ROUGE-1/2/L F1 against the references (best over several references),
  with the ``rouge-score`` package (Porter stemming; its tokenizer keeps ASCII letters and
  digits only).

:func:`compare` correlates every scorer with the human scores (:func:`hdeval.metrics.agreement`:
Pearson, Spearman and Kendall at dataset, summary and system level, bootstrap CIs over
documents). A scorer's columns named like a human aspect are matched to it; each other column is
a single score (``overall``, ``rouge1``, ``average``...) and is correlated with every aspect.
:func:`render_markdown` and :func:`render_rich` draw the result as one table.
"""

from hdeval.baselines.compare import LEVELS, compare, entries, render_markdown, render_rich
from hdeval.baselines.llm import (
    OVERALL_TEMPLATE_VERSION,
    DirectPromptScorer,
    LikelihoodScorer,
    OverallPromptScorer,
    overall_prompt,
)
from hdeval.baselines.rouge import RougeScorer

__all__ = [
    "LEVELS",
    "OVERALL_TEMPLATE_VERSION",
    "DirectPromptScorer",
    "LikelihoodScorer",
    "OverallPromptScorer",
    "RougeScorer",
    "compare",
    "entries",
    "overall_prompt",
    "render_markdown",
    "render_rich",
]
