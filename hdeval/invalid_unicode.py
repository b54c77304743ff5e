"""Invalid Unicode in anything hdeval reads: data files, criteria files, params, LLM replies.

A lone surrogate (half of a character: JSON's and YAML's ``\\ud83d`` escapes can spell one, a
text cut inside an emoji holds one) can be neither written as UTF-8 nor hashed into a cache key.
:func:`surrogates` finds each, named by its place in a nested value; every reader refuses them
with :func:`described`, or, where ``data.invalid_unicode: replace`` allows, replaces them.
"""

from __future__ import annotations

import re
from typing import Any

#: A lone surrogate: a code point no encoding can write.
SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def surrogates(value: Any, where: str = "") -> list[tuple[str, re.Match[str]]]:
    """(place, match) of the first lone surrogate of each text in ``value`` (a text, or lists
    and mappings of them, keys included); a place reads ``criteria[0].definition``."""
    if isinstance(value, str):
        match = SURROGATE.search(value)
        return [(where, match)] if match else []
    found: list[tuple[str, re.Match[str]]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            place = f"{where}.{key}" if where else str(key)
            found += surrogates(key, place) + surrogates(item, place)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found += surrogates(item, f"{where}[{i}]")
    return found


def described(place: str, match: re.Match[str]) -> str:
    """One lone surrogate, for an error message."""
    return (
        f"field '{place}': invalid Unicode: lone surrogate U+{ord(match.group()):04X} at "
        f"character {match.start()} (a text cut inside an emoji or another character)"
    )


def unicode_problems(value: Any) -> str | None:
    """Every lone surrogate in ``value``, described on one line, or None."""
    found = surrogates(value)
    return "; ".join(described(place, match) for place, match in found) if found else None
