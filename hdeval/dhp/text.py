"""Text utilities and result types every DHP perturbation shares: sentences, seeds, checks."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

Level = Literal["character", "word", "sentence"]
Severity = Literal["minor", "major"]
Task = Literal["summarization", "story", "qa", "translation", "dialogue", "data_to_text"]
LEVELS: tuple[Level, ...] = ("character", "word", "sentence")
TASKS: tuple[Task, ...] = (
    "summarization",
    "story",
    "qa",
    "translation",
    "dialogue",
    "data_to_text",
)
#: What the perturbed text of each task is called in LLM prompts and the injection probe.
TEXT_NOUNS: dict[str, str] = {
    "summarization": "summary",
    "story": "ending",
    "qa": "answer",
    "translation": "translation",
    "dialogue": "response",
    "data_to_text": "sentence",
}

DROP_EMPTY = "empty result"
DROP_UNCHANGED = "unchanged after perturbation"


@dataclass(frozen=True)
class Perturbed:
    """A perturbed text, or ``text=None`` and the ``reason`` it was dropped."""

    text: str | None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.text is not None


def normalise_whitespace(text: str) -> str:
    """``text`` with all whitespace removed: texts that differ only in spacing compare equal.

    This also treats a detokenised copy ("Burnley." for "Burnley .", "Spurs's" for "Spurs 's")
    as unchanged, which is what an LLM often returns when it fails to perturb a tokenised text.
    """
    return "".join(text.split())


def checked(original: str, candidate: str | None) -> Perturbed:
    """Drop an empty candidate or one equal to ``original`` up to whitespace."""
    if candidate is None or not candidate.strip():
        return Perturbed(None, DROP_EMPTY)
    if normalise_whitespace(candidate) == normalise_whitespace(original):
        return Perturbed(None, DROP_UNCHANGED)
    return Perturbed(candidate)


def text_seed(text: str, seed: int, name: str) -> int:
    """A 64-bit seed that depends only on the text, the run seed and the perturbation name."""
    digest = hashlib.sha256(f"{seed}\x00{name}\x00{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


# --------------------------------------------------------------------------- sentences

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "no", "mt", "gen", "gov", "sen",
    "rep", "lt", "col", "sgt", "capt", "inc", "ltd", "co", "corp", "jan", "feb", "aug", "sept",
    "oct", "nov", "dec", "e.g", "i.e", "etc", "u.s", "u.k", "u.n",
}  # fmt: skip
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ANY_CASE_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Za-z0-9])")


def split_sentences(text: str, any_case: bool = False) -> list[str]:
    """Split on ., ! or ? followed by space and a capital or digit; common abbreviations kept.

    Handles tokenised text such as SummEval's ("... Burnley . He was ..."). ``any_case`` also
    splits before a lower-case letter, for lower-cased text such as Topical-Chat's.
    """
    text = text.strip()
    sentences: list[str] = []
    start = 0
    for match in (_ANY_CASE_BOUNDARY if any_case else _BOUNDARY).finditer(text):
        head = text[start : match.start()].rstrip()
        last_word = head.split()[-1] if head.split() else ""
        stem = last_word.rstrip(".!?\"')]").lower()
        if last_word.endswith(".") and (stem in _ABBREVIATIONS or re.fullmatch(r"[a-z]", stem)):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


_DETOKENIZE = (
    (re.compile(r"\s+([.,!?;:%)\]])"), r"\1"),
    (re.compile(r"([(\[])\s+"), r"\1"),
    (re.compile(r"\s+(n't|'s|'re|'ve|'ll|'d|'m)\b", re.IGNORECASE), r"\1"),
)


def detokenize(text: str) -> str:
    """Undo word tokenisation as in SummEval references ("Spurs 's draw ." -> "Spurs's draw.").

    Judges and LLM perturbers see natural text, so a perturbed text does not differ from its
    original merely by being detokenised.
    """
    text = " ".join(text.split())
    for pattern, replacement in _DETOKENIZE:
        text = pattern.sub(replacement, text)
    return text
