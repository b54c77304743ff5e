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


def test_every_file_the_documents_name_exists() -> None:
    """A record, benchmark or module named in docs/ or the README is in the repository (unless
    the sentence says there is none: "no `docs/learning_curve.csv`")."""
    import re

    named = re.compile(
        r"(no )?`((?:docs|benchmarks|params|hdeval|pipelines|tests|scripts)/[\w./-]+"
        r"\.(?:json|py|yaml|md|csv|png|txt))`"
    )
    missing = [
        f"{page.relative_to(REPO)}: {match[2]}"
        for page in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
        for match in named.finditer(page.read_text())
        if not match[1] and not (REPO / match[2]).exists()
    ]
    assert not missing, f"named but not in the repository: {missing}"
