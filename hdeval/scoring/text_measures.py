"""Measures a signal family reads from a text's words alone, without the judge: the text
repeating its own trigrams (repetition), echoing a dialogue's history (dialogue), and ROUGE
against the references (references)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from hdeval.errors import DataValidationError


def repeated_trigrams(text: str) -> float:
    """The share of ``text``'s word trigrams (lower-cased, split at whitespace) that repeat an
    earlier one: 0 for a text that never repeats itself (or has under 3 words), towards 1 for
    one that loops."""
    words = text.lower().split()
    trigrams = list(zip(words, words[1:], words[2:], strict=False))
    return 1 - len(set(trigrams)) / len(trigrams) if trigrams else 0.0


def said_before(text: str, history: str) -> float:
    """The share of ``text``'s word pairs (lower-cased, split at whitespace) that ``history``
    already holds: 0 for a response in its own words (or of under 2 words), towards 1 for one
    that echoes the conversation or says only what it has said before."""
    words = text.lower().split()
    pairs = list(pairwise(words))
    if not pairs:
        return 0.0
    heard = history.lower().split()
    said = set(pairwise(heard))
    return sum(pair in said for pair in pairs) / len(pairs)


def rouge_values(text: str, references: Sequence[str]) -> dict[str, float]:
    """ROUGE-1/2/L F1 of ``text``, best over ``references`` (the ``rouge-score`` package)."""
    from rouge_score import rouge_scorer

    if not references:
        raise DataValidationError("no references: ROUGE needs them")
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    best = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for reference in references:
        for name, score in scorer.score(reference, text).items():
            best[name] = max(best[name], score.fmeasure)
    return {"rouge.1:_text": best["rouge1"], "rouge.2:_text": best["rouge2"],
            "rouge.l:_text": best["rougeL"]}  # fmt: skip
