"""Checks of a label row's texts that need no schema: blank or NUL-holding fields, fields over
the length limit, and lone surrogates (refused, or replaced with U+FFFD)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Literal

from hdeval.data.table import OPTIONAL_COLUMNS
from hdeval.invalid_unicode import REPLACEMENT, SURROGATE, described, surrogates

_TEXT_FIELDS = ("id", "doc_id", "system_id", "source", "output", "reference", *OPTIONAL_COLUMNS)
#: What to do with invalid Unicode in a text (``data.invalid_unicode``).
InvalidUnicode = Literal["refuse", "replace"]


def _invisible(char: str) -> bool:
    """Whether ``char`` shows nothing: white space, a control or a format character (a
    zero-width space, a joiner, a byte-order mark, a soft hyphen)."""
    return char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zs", "Zl", "Zp")


def blank_errors(raw: Mapping[str, Any]) -> list[str]:
    """Texts that are empty or show nothing (white space, zero-width characters), and texts
    holding a NUL character (checked even when other fields have type errors)."""
    errors = []
    blank = {"id", "doc_id", "source", "output", *OPTIONAL_COLUMNS}
    for field, value in _text_fields(raw):
        if (field in blank or field.startswith("references[")) and all(map(_invisible, value)):
            errors.append(
                f"field '{field}': must not be empty or whitespace only (invisible characters "
                "such as U+200B count)"
            )
        elif "\0" in value:
            errors.append(
                f"field '{field}': holds a NUL character (U+0000) at character "
                f"{value.index(chr(0))}: not text"
            )
    return errors


def length_errors(raw: Mapping[str, Any], max_chars: int) -> list[str]:
    """Text fields longer than ``max_chars`` characters."""
    return [
        f"field '{name}': {len(value):,} characters, more than the limit of {max_chars:,} "
        "(data.max_field_chars in params, --max-field-chars on the command line)"
        for name, value in _text_fields(raw)
        if len(value) > max_chars
    ]


def _text_fields(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field name, text) of every text field of a row that holds text, references one by
    one."""
    fields = [(f, raw.get(f)) for f in _TEXT_FIELDS]
    references = raw.get("references")
    if isinstance(references, list):
        fields += [(f"references[{i}]", ref) for i, ref in enumerate(references)]
    return [(name, value) for name, value in fields if isinstance(value, str)]


def unicode_problems(
    raw: dict[str, Any], invalid_unicode: InvalidUnicode
) -> tuple[dict[str, Any], list[str], list[str]]:
    """(row, errors, fields replaced): lone surrogates in the row's texts are errors
    (``refuse``) or replaced with U+FFFD (``replace``)."""
    bad = [(name, found[0][1]) for name, text in _text_fields(raw) if (found := surrogates(text))]
    if not bad:
        return raw, [], []
    if invalid_unicode == "refuse":
        return raw, [_unicode_error(name, match) for name, match in bad], []
    fixed = {k: _replaced(v) if isinstance(v, str) else v for k, v in raw.items()}
    if isinstance(raw.get("references"), list):
        fixed["references"] = [_replaced(r) if isinstance(r, str) else r for r in raw["references"]]
    return fixed, [], [name for name, _ in bad]


def _replaced(text: str) -> str:
    return SURROGATE.sub(REPLACEMENT, text)


def _unicode_error(field: str, match: re.Match[str]) -> str:
    return (
        f"{described(field, match)}; fix the text, or replace such code points with U+FFFD and "
        "mark the row (data.invalid_unicode: replace; hdeval score --invalid-unicode replace)"
    )
