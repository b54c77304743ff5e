"""The documents say what the code does: the configuration reference is generated from the
params models, and every key has a meaning."""

from __future__ import annotations

from pathlib import Path

from hdeval.params import Params
from hdeval.params.reference import configuration_markdown

REPO = Path(__file__).resolve().parents[1]


def test_configuration_reference_is_up_to_date() -> None:
    written = (REPO / "docs" / "configuration.md").read_text()
    assert written == configuration_markdown(), (
        "docs/configuration.md is out of date: python -m hdeval.params.reference > "
        "docs/configuration.md"
    )


def test_every_params_key_says_what_it_does() -> None:
    for name, section in Params.model_fields.items():
        model = section.default_factory().__class__
        undocumented = [k for k, f in model.model_fields.items() if not f.description]
        assert not undocumented, f"{name}: {undocumented} have no docstring"
