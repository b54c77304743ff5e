"""Reading what a source holds beyond its text: a data-to-text meaning representation's
slot-value pairs, a dialogue's history and knowledge fact, and a text's sentences.

Deterministic and dependency-free (the production path imports this).

* A **meaning representation** is ``act(slot=value;slot='quoted value';...)`` or several such
  acts joined by ``|`` (SFRES/SFHOT, Wen et al. 2015). Values ``dont_care``, ``yes``, ``no``,
  ``yes or no`` (a question's), ``none`` and empty ones are not realised as words, so they are
  not counted. A value is *realised* when its words appear in the text (lower-cased, ``_`` and
  punctuation as spaces), each whole or with an inflection's ending (:data:`INFLECTIONS`); a
  value inside another (``near=presidio`` in ``name='inn at the presidio'``) only outside it.
* A **dialogue source** is ``Conversation history:`` + turns + a blank line + ``Fact: ...``, as
  ``hdeval data convert --format topical-chat`` writes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from hdeval.errors import DataValidationError

#: Slot values that a sentence does not spell out.
UNSPOKEN = frozenset({"dont_care", "dontcare", "yes", "no", "yes or no", "none", "?", ""})
_ACT = re.compile(r"^\s*([a-z_?]+)\s*\((.*)\)\s*$", re.S)
_PAIR = re.compile(r"\s*([a-z_]+)\s*(?:=\s*('[^']*'|\"[^\"]*\"|[^;,]*))?\s*(?:[;,]|$)", re.I)
#: Endings a value's word may take in the text and still be that value: "hotel" in "hotels",
#: "moderate" in "moderately". A verbatim match counted 73 of SFHOT's 875 texts and 134 of
#: SFRES's 1,181 as leaving a value out; this counts 3 and 11, most of which do ("ave" for
#: "avenue" still counts as left out).
INFLECTIONS = ("s", "es", "ly", "d", "ed")
_INFLECTED = "(?:" + "|".join(INFLECTIONS) + ")?"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_DIALOGUE = re.compile(r"^Conversation history:\n(?P<history>.*)\n\nFact: (?P<fact>.*)$", re.S)


@dataclass(frozen=True)
class MeaningRepresentation:
    """The dialogue acts of a meaning representation and its (slot, value) pairs."""

    acts: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]

    def spoken_values(self) -> list[str]:
        """The values a sentence should realise (not dont_care, yes, no...), normalised."""
        return [normalise(v) for _, v in self.pairs if v.strip().lower() not in UNSPOKEN]


def parse_mr(text: str) -> MeaningRepresentation:
    """The acts and slot-value pairs of ``act(slot=value;...)`` (acts joined by ``|``).

    Raises :class:`~hdeval.errors.DataValidationError` saying what is malformed."""
    acts, pairs = [], []
    for part in text.split("|"):
        match = _ACT.match(part)
        if match is None:
            raise DataValidationError(
                f"not a meaning representation act(slot=value;...): {part.strip()[:80]!r}"
            )
        acts.append(match.group(1))
        body = match.group(2).strip()
        position = 0
        while position < len(body):
            pair = _PAIR.match(body, position)
            if pair is None or pair.end() == position:
                raise DataValidationError(
                    f"malformed slot-value pair at {body[position:][:40]!r} in {text[:80]!r}"
                )
            value = (pair.group(2) or "").strip().strip("'\"")
            pairs.append((pair.group(1).lower(), value))
            position = pair.end()
    return MeaningRepresentation(tuple(acts), tuple(pairs))


def normalise(text: str) -> str:
    """Lower-cased words, ``_`` and punctuation as spaces, single-spaced."""
    return " ".join(re.sub(r"[^\w\s]|_", " ", text.lower()).split())


def realised(value: str, text: str, others: Iterable[str] = ()) -> bool:
    """Whether ``value``'s words appear in ``text`` in order, each a whole word or that word with
    one of :data:`INFLECTIONS` (both normalised). Where ``value`` lies inside another value of
    ``others`` (near ``presidio``, name ``inn at the presidio``), only its words outside that
    value's occurrences count."""
    value, said = normalise(value), normalise(text)
    pattern = _value_pattern(value.split(), " ")
    for other in map(normalise, others):
        if other != value and re.search(pattern, other):
            said = re.sub(_value_pattern(other.split(), " "), " | ", said)
    return re.search(pattern, said) is not None


def value_spans(mr: MeaningRepresentation, text: str) -> list[tuple[int, int]]:
    """Character spans of ``text`` where the spoken values of ``mr`` are realised (every
    occurrence, matched as :func:`realised` matches: case, ``_`` and punctuation ignored)."""
    spans = []
    for value in mr.spoken_values():
        words = value.split()
        if not words:
            continue
        pattern = _value_pattern(words, r"[\W_]+")
        spans += [m.span() for m in re.finditer(pattern, text, re.IGNORECASE)]
    return sorted(spans)


def _value_pattern(words: list[str], between: str) -> str:
    """A regular expression of ``words`` in order, each whole or with one of
    :data:`INFLECTIONS`, separated by ``between``."""
    return r"\b" + between.join(re.escape(word) + _INFLECTED for word in words) + r"\b"


def dialogue_parts(source: str) -> tuple[str, str]:
    """The history and the knowledge fact of a dialogue source.

    Raises :class:`~hdeval.errors.DataValidationError` when ``source`` has not that form."""
    match = _DIALOGUE.match(source.strip())
    if match is None:
        raise DataValidationError(
            "not a dialogue source ('Conversation history:' + turns + a blank line + 'Fact: ...', "
            "as hdeval data convert --format topical-chat writes it)"
        )
    return match.group("history").strip(), match.group("fact").strip()


#: A dialogue source's fact where its context gives none, as Topical-Chat writes it.
NO_FACT = "_nofact"


def last_turn(history: str) -> str:
    """The last turn of a dialogue history (one turn per line): what the response answers
    ("" for an empty history, a conversation the response opens)."""
    turns = history.strip().splitlines()
    return turns[-1].strip() if turns else ""


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the sentences of ``text`` (split after ``.``, ``!`` or ``?`` followed
    by white space); a text without such an end is one sentence."""
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    if text[start:].strip():
        spans.append((start, len(text.rstrip())))
    return spans or [(0, len(text))]


def lead(source: str, words: int) -> str:
    """The first ``words`` words of ``source`` (its opening, what a summary most covers)."""
    return " ".join(source.split()[:words])
