"""Our own rule-based tests of what a text says (not DHP's): the text cut to its first half
(an omission) and one sentence negated (a contradiction of the source). Seeded per (text,
seed), as every rule is."""

from __future__ import annotations

import random
import re

from hdeval.dhp.perturbation import Perturbation
from hdeval.dhp.text import Level, Perturbed, Severity, checked, split_sentences, text_seed
from hdeval.llm.judge import CachedJudge


class FirstHalf(Perturbation):
    """Our omission test (not DHP): the text cut to its first half of whole words, as a
    generation stopped mid-way. What it says is true, but half of it is missing: a judge of
    relevance or informativeness should score it lower."""

    level: Level = "sentence"
    severity: Severity = "major"
    description = "Keep only the first half of the words (a cut-off text)."

    def __init__(self) -> None:
        self.name = "first_half"

    def apply(self, text: str, seed: int, judge: CachedJudge | None = None) -> Perturbed:
        words = text.split()
        if len(words) < 4:
            return Perturbed(None, "fewer than 4 words")
        return checked(text, " ".join(words[: (len(words) + 1) // 2]))


#: Auxiliaries a negation follows ("was" -> "was not"), and the two written as one word.
_AUXILIARIES = re.compile(
    r"\b(is|are|was|were|has|have|had|will|would|should|could|can|does|do|did|must|may)\b"
)
_JOINED = {"can": "cannot"}


class Negation(Perturbation):
    """Our factual-error test (not DHP): one sentence negated, "not" after its first auxiliary
    ("The bridge was built" -> "The bridge was not built"). The text reads as well as before
    but says the opposite of the source: a judge of consistency should score it lower."""

    level: Level = "sentence"  # it changes what one sentence says, as DHP's sentence level does
    severity: Severity = "minor"
    description = "Negate one sentence: 'not' after its first auxiliary verb."

    def __init__(self) -> None:
        self.name = "negation"

    def apply(self, text: str, seed: int, judge: CachedJudge | None = None) -> Perturbed:
        sentences = split_sentences(text)
        negatable = [i for i, s in enumerate(sentences) if _AUXILIARIES.search(s)]
        if not negatable:
            return Perturbed(None, "no auxiliary verb to negate")
        i = random.Random(text_seed(text, seed, self.name)).choice(negatable)
        sentences[i] = _AUXILIARIES.sub(
            lambda m: _JOINED.get(m[1], f"{m[1]} not"), sentences[i], count=1
        )
        return checked(text, " ".join(sentences))
