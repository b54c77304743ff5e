"""Parsing a decomposition reply into (name, definition) pairs.

Replies are read leniently: numbered or bulleted lists, markdown bold, headings, "name -
definition", definitions on the next (or a nested) line, chatter before and after. Sentences of
chatter are told apart from criterion names by length and first word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hdeval.errors import HDEvalError

MAX_NAME_WORDS = 24  # small models name criteria with whole questions
MAX_NAME_CHARS = 160
MAX_INLINE_NAME_WORDS = 12  # before a ":" or dash on the same line as the definition

# Names that mark chatter lines, never criteria ("Note: ...", "In summary: ...").
_NOT_NAMES = frozenset(
    [
        *("note", "notes", "nb", "summary", "conclusion", "overall", "example", "examples"),
        *("explanation", "definition", "definitions", "description", "criteria", "criterion"),
        *("sub-criteria", "subcriteria", "answer", "output", "response", "reply", "important"),
        *("tip", "tips", "remember", "warning", "total", "score", "scores", "scoring", "rating"),
        *("weight", "weights", "evaluation", "in summary", "in conclusion"),
        *("fine-grained criteria", "evaluation criteria"),
    ]
)
# First words of chatter ("Here are the criteria: ...", "Sure, these are ...: ...").
_CHATTER_STARTS = frozenset(
    [
        *("here", "sure", "certainly", "okay", "ok", "below", "following", "these", "this"),
        *("i", "we", "you", "let", "hope", "feel", "of"),
    ]
)
_DASHES = "-\u2013\u2014"  # hyphen, en dash, em dash
_QUOTES = "\"'`\u2018\u2019\u201c\u201d"

_MARKER = re.compile(r"^(?:[-*•+·‣◦]|\(?\d{1,2}[.):]|\(?[a-zA-Z][.)]|#{1,6})\s+")
_HEADING = re.compile(r"^#{1,6}\s+")
_BOLD = re.compile(r"^(\*\*|__)(.+?)\1(.*)$")
_LABEL = re.compile(r"^(?:sub-?)?criteri(?:on|a)\s*\d+\s*[:.)\-\u2013\u2014]\s*", re.I)
_DEF_LABEL = re.compile(
    r"^[*_]*(?:definition|description|meaning)[*_]*\s*[:\-\u2013\u2014]\s*", re.I
)
_SEPARATORS = (":", " -- ", *(f" {dash} " for dash in _DASHES))


def _indent(line: str) -> int:
    prefix = line[: len(line) - len(line.lstrip())]
    return len(prefix.expandtabs(4))


def _strip_marker(text: str) -> tuple[str, bool]:
    """Remove list markers, heading marks and "Criterion 2:" labels; say whether there were any."""
    body = text
    for _ in range(3):  # "### 1. Name" carries two markers
        body = _MARKER.sub("", body, count=1).strip()
    body = _LABEL.sub("", body, count=1).strip()
    return body, body != text


def _clean(text: str) -> str:
    """Drop emphasis marks, quotes, backticks and one pair of angle brackets around a piece of
    text (a judge that copies the answer format writes "<Accuracy>: <definition>")."""
    text = text.strip().strip("*_" + _QUOTES).strip()
    if text.startswith("<") and text.endswith(">") and not re.search(r"[<>]", text[1:-1]):
        text = text[1:-1].strip()
    return re.sub(r"\s+", " ", text)


def _split(text: str) -> tuple[str, str | None]:
    """Split "name: definition" (or bold / dash variants); definition None if no separator."""
    bold = _BOLD.match(text)
    if bold:
        name, rest = bold.group(2), bold.group(3).strip()
        if name.rstrip().endswith(":"):
            return _clean(name.rstrip()[:-1]), _clean(rest)
        if rest[:1] and rest[:1] in ":" + _DASHES:
            return _clean(name), _clean(rest.lstrip(": " + _DASHES))
        return _clean(name), (_clean(rest) if rest else None)
    for separator in _SEPARATORS:
        if separator in text:
            name, definition = text.split(separator, 1)
            if _is_name(_clean(name), MAX_INLINE_NAME_WORDS):
                return _clean(name), _clean(definition)
    return _clean(text), None


def _is_name(name: str, max_words: int = MAX_NAME_WORDS) -> bool:
    """Whether ``name`` looks like a criterion name rather than a sentence of chatter."""
    words = name.split()
    return (
        0 < len(name) <= MAX_NAME_CHARS
        and len(words) <= max_words
        and any(ch.isalpha() for ch in name)
        and "!" not in name
        and name.lower().rstrip(".") not in _NOT_NAMES
        and words[0].lower().strip(",.") not in _CHATTER_STARTS
    )


def _definition(text: str) -> str:
    """A definition line, minus a leading "Definition:" label."""
    return _clean(_DEF_LABEL.sub("", text.strip(), count=1))


def _pairs(reply: str) -> Iterable[tuple[str, str]]:
    """(name, definition) pairs in reply order, before validation and de-duplication."""
    lines = [(_indent(raw), raw.strip()) for raw in reply.splitlines() if raw.strip()]
    item_indents = [i for i, text in lines if _strip_marker(text)[1]]
    top = min(item_indents, default=min((i for i, _ in lines), default=0))
    pending: str | None = None  # a name still waiting for its definition on the next line
    for indent, text in lines:
        body, marked = _strip_marker(text)
        nested = indent > top and not _HEADING.match(text)
        if pending is not None and (nested or not marked or _DEF_LABEL.match(body)):
            yield pending, _definition(body)
            pending = None
            continue
        if nested:
            continue  # sub-bullets of an item that already has its definition
        name, definition = _split(body)
        if definition:
            yield name, definition
            pending = None
        elif _is_name(name) and (marked or _BOLD.match(body)) and not name.endswith((":", ".")):
            pending = name
        else:
            pending = None


def parse_criteria_list(reply: str, k: int, node_id: str | None = None) -> list[tuple[str, str]]:
    """At most ``k`` (name, definition) pairs from an LLM reply, names unique ignoring case.

    Raises :class:`~hdeval.errors.HDEvalError` naming ``node_id`` when nothing usable is found.
    """
    seen: set[str] = set()
    found: list[tuple[str, str]] = []
    for name, definition in _pairs(reply or ""):
        key = name.casefold()
        if not _is_name(name) or len(definition) < 3 or key in seen:
            continue
        seen.add(key)
        found.append((name, definition))
    if not found:
        where = f" for criterion {node_id!r}" if node_id else ""
        snippet = re.sub(r"\s+", " ", (reply or "").strip())[:200]
        raise HDEvalError(
            f"no 'name: definition' criteria found in the decomposition reply{where}: {snippet!r}"
        )
    return found[:k]
