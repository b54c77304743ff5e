"""DHP's LLM-made perturbations, generated greedily by a cached judge (kind ``"perturb"``)."""

from __future__ import annotations

import re

from hdeval.dhp.perturbation import Perturbation, check_severity
from hdeval.dhp.text import Level, Perturbed, Severity, checked, split_sentences
from hdeval.errors import ConfigError, HDEvalError
from hdeval.llm.judge import CachedJudge
from hdeval.llm.truncation import ContextOverflow

PERTURB_TEMPLATE_VERSION = "hdeval-perturb-1"
CACHE_KIND = "perturb"


# --------------------------------------------------------------------------- LLM-based

_PROMPT_TAIL = (
    "Keep everything else exactly as it is. Return only the rewritten {noun}, with no title, "
    "explanation or notes.\n\n{Noun}:\n{text}"
)

LLM_TEMPLATES: dict[tuple[str, str], str] = {
    ("fictional_entities", "minor"): (
        "Rewrite the {noun} below, replacing exactly ONE named entity (a person, place, "
        "organisation, date or number) with a made-up one. "
    ),
    ("fictional_entities", "major"): (
        "Rewrite the {noun} below, replacing EVERY named entity (people, places, "
        "organisations, dates and numbers) with made-up ones. "
    ),
    ("grammar", "minor"): (
        "Rewrite the {noun} below with exactly {errors}, such as subject-verb "
        "disagreement, a wrong verb tense or a wrong preposition. "
    ),
    ("grammar", "major"): (
        "Rewrite the {noun} below with many grammatical errors, at least two in every "
        "sentence: subject-verb disagreement, wrong verb tenses, wrong prepositions, pronoun "
        "errors and sentence fragments. "
    ),
    ("rewrite_insert", "minor"): (
        "Rewrite the {noun} below: pick ONE sentence, write a reworded version of it that adds "
        "one detail not stated in the {noun}, and insert it right after the original sentence. "
    ),
    ("rewrite_insert", "major"): (
        "Rewrite the {noun} below: after EVERY sentence, insert a reworded version of that "
        "sentence that adds one detail not stated in the {noun}. "
    ),
}

_NUMBER_WORDS = ("one", "two", "three", "four", "five")

_LLM_LEVELS: dict[str, Level] = {
    "fictional_entities": "word",
    "grammar": "word",
    "rewrite_insert": "sentence",
}

_NOUNS = "summary|ending|answer|translation|text"
_CHATTER_START = re.compile(
    r"^(sure|certainly|okay|ok|of course|here is|here's|here are|below is|the (rewritten|revised|"
    rf"modified|new|adjusted) ({_NOUNS})|(rewritten|revised|modified|new|adjusted|updated|"
    rf"perturbed) ({_NOUNS})|{_NOUNS})\b.*:\s*$",
    re.IGNORECASE,
)
_LABEL_PREFIX = re.compile(
    rf"^\W*((rewritten|revised|modified|new|adjusted|updated)\s+)?({_NOUNS})\W*:\s*",
    re.IGNORECASE,
)
_NOTE = re.compile(r"^\W*(note|notes|explanation)\b", re.IGNORECASE)
_CHATTER_TAIL = re.compile(
    r"^\W*(note|notes|explanation|changes|changes made|"
    rf"in this (version|{_NOUNS})|i (have|'ve)|"
    r"the (changes|named entity was)|this (version|rewritten|revised))\b",
    re.IGNORECASE,
)


def strip_chatter(reply: str) -> str:
    """Remove lead-in lines ("Here is the summary:"), labels, code fences and trailing notes."""
    lines = [line.replace("**", "").strip() for line in reply.strip().splitlines()]
    lines = [line for line in lines if not line.startswith("```")]
    while lines and (not lines[0] or _CHATTER_START.match(lines[0]) or _NOTE.match(lines[0])):
        lines.pop(0)
    for i, line in enumerate(lines):
        if i > 0 and _CHATTER_TAIL.match(line):
            lines = lines[:i]
            break
    text = " ".join(line for line in lines if line)
    text = _LABEL_PREFIX.sub("", text).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


DROP_NO_NEW_ENTITY = "no new named entity"
DROP_TOO_LONG = "prompt longer than the perturber's context"
DROP_NO_INSERTION = "no sentence inserted"


#: Frequent sentence openers that are not names; any other capitalised opener counts as one.
_OPENERS = {"a", "an", "the", "this", "that", "these", "those", "there", "here", "it", "its",
    "he", "she", "they", "we", "i", "you", "his", "her", "their", "our", "my", "your", "and",
    "but", "or", "so", "then", "when", "while", "after", "before", "as", "if", "because",
    "although", "though", "however", "also", "yet", "in", "on", "at", "for", "from", "with",
    "by", "to", "of", "one", "some", "many", "most", "all", "every", "each", "no", "not",
    "during", "later", "meanwhile", "finally", "soon"
}  # fmt: skip


def entity_tokens(text: str) -> set[str]:
    """Entity-like tokens: capitalised words, and anything with a digit.

    A sentence's first word counts only when it is not a common opener (:data:`_OPENERS`), so
    "Tom" in a one-sentence story ending is an entity and "The" or "She" is not.
    """
    found = set()
    for sentence in split_sentences(text):
        for i, word in enumerate(sentence.split()):
            token = re.sub(r"(['\u2019]s)?\W*$", "", word.strip("\"'([{"))
            if not token:
                continue
            capitalised = token[0].isupper() and (i > 0 or token.lower() not in _OPENERS)
            if capitalised or any(ch.isdigit() for ch in token):
                found.add(token)
    return found


class LLMPerturbation(Perturbation):
    """DHP's LLM-based perturbations, generated greedily by the cached judge.

    ``kind`` is ``fictional_entities`` or ``grammar`` (word level) or ``rewrite_insert``
    (sentence level: reworded copies of sentences, with unsupported details, inserted after them).

    Besides empty and unchanged replies, a reply that visibly did not do the job is dropped: for
    fictional entities, one without any entity-like token the original lacks
    (:func:`entity_tokens`); for rewriting and insertion, one with no more sentences than the
    original. Grammar errors have no cheap check.

    ``noun`` is what the prompt calls the text (summary, ending, answer, translation);
    ``errors`` is how many grammatical errors the minor grammar prompt asks for (DHP: two in
    summaries and translations, one in story endings and answers).
    """

    method = "llm"

    def __init__(
        self, kind: str, severity: Severity = "minor", noun: str = "summary", errors: int = 2
    ) -> None:
        self.severity = check_severity(severity)
        if kind not in _LLM_LEVELS:
            raise ConfigError(f"unknown LLM perturbation {kind!r}; choose from {list(_LLM_LEVELS)}")
        if not 1 <= errors <= len(_NUMBER_WORDS):
            raise ConfigError(f"errors must be between 1 and {len(_NUMBER_WORDS)}, got {errors}")
        self.kind = kind
        self.level = _LLM_LEVELS[kind]
        self.name = f"{kind}_{severity}"
        self.noun = noun
        self.errors = errors

    def _render(self, template: str, text: str = "") -> str:
        errors = f"{_NUMBER_WORDS[self.errors - 1]} grammatical error" + "s" * (self.errors > 1)
        return template.format(
            noun=self.noun, Noun=self.noun.capitalize(), errors=errors, text=text.strip()
        )

    @property
    def description(self) -> str:  # type: ignore[override]
        return self._render(LLM_TEMPLATES[(self.kind, self.severity)]).strip()

    def prompt(self, text: str) -> str:
        return self._render(LLM_TEMPLATES[(self.kind, self.severity)] + _PROMPT_TAIL, text)

    def max_new_tokens(self, text: str) -> int:
        """Room for the rewritten text: about 2x its token count (3x for insertions), + 64."""
        factor = 3 if self.kind == "rewrite_insert" else 2
        return min(1024, factor * (len(text) // 3) + 64)

    def apply(
        self,
        text: str,
        seed: int,
        judge: CachedJudge | None = None,
    ) -> Perturbed:
        if judge is None:
            raise ConfigError(f"perturbation {self.name!r} needs an LLM judge")
        prompt = self.prompt(text)
        try:
            reply = judge.reply(
                CACHE_KIND, prompt, self.max_new_tokens(text), PERTURB_TEMPLATE_VERSION
            )
        except ContextOverflow:
            return Perturbed(None, DROP_TOO_LONG)
        except HDEvalError:
            raise
        except Exception as exc:
            raise HDEvalError(
                f"perturbation {self.name!r} failed: {type(exc).__name__}: {exc}; "
                "every reply received before it is kept in the cache"
            ) from exc
        result = checked(text, strip_chatter(reply))
        if result.ok:
            reason = self.failed_check(text, result.text)
            if reason is not None:
                return Perturbed(None, reason)
        return result

    def failed_check(self, original: str, perturbed: str) -> str | None:
        """Why ``perturbed`` is not a valid perturbation of this kind, or None."""
        if self.kind == "fictional_entities" and not entity_tokens(perturbed) - entity_tokens(
            original
        ):
            return DROP_NO_NEW_ENTITY
        if self.kind == "rewrite_insert" and len(split_sentences(perturbed)) <= len(
            split_sentences(original)
        ):
            return DROP_NO_INSERTION
        return None
