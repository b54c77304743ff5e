"""docs/configuration.md, generated from the params models: every key, its type, default and
meaning. ``python -m hdeval.params.reference > docs/configuration.md`` rewrites it; a test fails
when the file is out of date."""

from __future__ import annotations

import json
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from hdeval.params import Params

INTRO = """# Configuration

Every key of `params.yaml`, section by section: its type, its default (the value
`params.yaml` ships with) and what it does. An unknown key is an error naming it. This page is
generated from the params models (`python -m hdeval.params.reference > docs/configuration.md`);
a test fails when it is out of date.
"""


def _type(annotation: object) -> str:
    """A type as a reader writes it (``list[str]``, ``int | null``, ``a | b``)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join("null" if a is type(None) else _type(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type(a) for a in args)}]"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _default(field) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, Path):
        value = str(value)
    return f"`{json.dumps(value, default=str)}`"


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def configuration_markdown() -> str:
    """The whole page: an intro, then one table per section of :class:`~hdeval.params.Params`."""
    parts = [INTRO]
    for name, section in Params.model_fields.items():
        model = typing.get_args(section.annotation) or (section.annotation,)
        model = next(m for m in model if isinstance(m, type))
        parts.append(f"\n## `{name}`\n\n{_cell(model.__doc__)}\n")
        parts.append("| key | type | default | meaning |\n|---|---|---|---|")
        for key, field in model.model_fields.items():
            parts.append(
                f"| `{name}.{key}` | {_type(field.annotation)} | {_default(field)} | "
                f"{_cell(field.description)} |"
            )
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(configuration_markdown(), end="")
