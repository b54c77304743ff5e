"""The documents say what the code does: the configuration reference is generated from the
params models, and every key has a meaning."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hdeval.params import Params
from hdeval.params.reference import configuration_markdown

REPO = Path(__file__).resolve().parents[1]
#: The pages a user reads: docs/ and the README.
PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]


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
    named = re.compile(
        r"(no )?`((?:docs|benchmarks|params|hdeval|pipelines|tests|scripts)/[\w./-]+"
        r"\.(?:json|py|yaml|md|csv|png|txt))`"
    )
    missing = [
        f"{page.relative_to(REPO)}: {match[2]}"
        for page in PAGES
        for match in named.finditer(page.read_text())
        if not match[1] and not (REPO / match[2]).exists()
    ]
    assert not missing, f"named but not in the repository: {missing}"


#: A figure quoted from a committed record: ``[0.559](runs/x.json#held_out.hdeval.average.
#: dataset.pearson)``, or with its interval, ``[0.559 [0.50, 0.63]](...)``, whose bounds are the
#: key's ``_ci`` sibling (a correlation), its ``_low`` and ``_high`` siblings (``headline.json``)
#: or its parent's ``ci_low`` and ``ci_high`` (a paired difference). The link goes to the
#: record; the fragment names the value in it.
QUOTED = re.compile(
    r"\[(?P<value>[-+]?\d+\.\d+)(?: \[(?P<low>[-+]?\d+\.\d+), (?P<high>[-+]?\d+\.\d+)\])?\]"
    r"\((?P<record>[\w./-]+\.json)#(?P<key>[\w.]+)\)"
)


def _at(record: object, key: str) -> object:
    for part in key.split("."):
        record = record[int(part)] if isinstance(record, list) else record[part]
    return record


def _interval(record: object, key: str) -> tuple[float, float]:
    parent, _, name = key.rpartition(".")
    siblings = _at(record, parent) if parent else record
    if f"{name}_ci" in siblings:
        return tuple(siblings[f"{name}_ci"])
    if f"{name}_low" in siblings:
        return siblings[f"{name}_low"], siblings[f"{name}_high"]
    return siblings["ci_low"], siblings["ci_high"]


def _as_written(value: float, written: str) -> str:
    digits = len(written.split(".")[1])
    return f"{value:+.{digits}f}" if written[0] in "+-" else f"{value:.{digits}f}"


def quoted_figures_that_differ(page: Path, root: Path = REPO) -> list[str]:
    """Each figure of ``page`` linked to a record whose value there, at the digits written,
    is not the figure (or whose record or key does not exist)."""
    wrong = []
    for match in QUOTED.finditer(page.read_text()):
        where = f"{page.relative_to(root)}: {match[0]}"
        path = (page.parent / match["record"]).resolve()
        try:
            record = json.loads(path.read_text())
            found = [(_at(record, match["key"]), match["value"])]
            if match["low"]:
                low, high = _interval(record, match["key"])
                found += [(low, match["low"]), (high, match["high"])]
        except (OSError, KeyError, IndexError, ValueError, TypeError) as error:
            wrong.append(f"{where}: {type(error).__name__} {error}")
            continue
        if any(_as_written(float(v), written) != written for v, written in found):
            wrong.append(f"{where}: the record holds {[v for v, _ in found]}")
    return wrong


def test_figures_quoted_from_records_are_the_records() -> None:
    wrong = [line for page in PAGES for line in quoted_figures_that_differ(page)]
    assert not wrong, "\n".join(wrong)


def test_a_quoted_figure_that_is_not_the_record_s_is_found(tmp_path: Path) -> None:
    record = {
        "held_out": {"r": 0.5594, "r_ci": [0.4997, 0.6271]},
        "folds": [{"cv": -0.0123}],
        "peer": {"difference": 0.0539, "ci_low": -0.0218, "ci_high": 0.1419},
    }
    (tmp_path / "run.json").write_text(json.dumps(record))
    page = tmp_path / "page.md"
    right = (
        "[0.559 [0.50, 0.63]](run.json#held_out.r), [-0.012](run.json#folds.0.cv), "
        "[+0.054 [-0.02, 0.14]](run.json#peer.difference)"
    )
    for text, wrong in [
        (right, 0),
        ("[0.560](run.json#held_out.r)", 1),
        ("[0.559 [0.49, 0.63]](run.json#held_out.r)", 1),
        ("[+0.012](run.json#folds.0.cv)", 1),
        ("[+0.054 [0.02, 0.14]](run.json#peer.difference)", 1),
        ("[0.559](run.json#held_out.nothing)", 1),
        ("[0.559](gone.json#held_out.r)", 1),
    ]:
        page.write_text(text)
        found = quoted_figures_that_differ(page, root=tmp_path)
        assert len(found) == wrong, (text, found)


#: A figure to three decimals (a correlation, a gain, a difference): in the written pages it is
#: quoted from a record. benchmarks.md is the exception: its figures are what the benchmark
#: scripts named beside them print (seconds, nats, ratios), not records' numbers.
THREE_DECIMALS = re.compile(r"(?<![\w.\[])[-+]?\d?\.\d{3}(?!\d)")
UNQUOTED_PAGES = {"benchmarks.md", "results.md", "configuration.md"}  # the last two: generated


def unquoted_figures(text: str) -> list[str]:
    """The three-decimal figures of a page's prose that link to no record (code blocks, inline
    code and generated sections aside)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!-- (\w+): generated -->.*?<!-- end of \1 -->", "", text, flags=re.S)
    text = re.sub(r"`[^`]*`", "", QUOTED.sub("", text))
    return THREE_DECIMALS.findall(text)


def test_every_figure_of_the_written_pages_is_quoted_from_a_record() -> None:
    written = [page for page in PAGES if page.name not in UNQUOTED_PAGES]
    unquoted = {p.name: found for p in written if (found := unquoted_figures(p.read_text()))}
    assert not unquoted, f"figures that link to no record: {unquoted}"


def test_an_unquoted_figure_is_found() -> None:
    assert unquoted_figures("holds out 0.407 where [0.351](runs/x.json#a.b) did") == ["0.407"]
    assert unquoted_figures("```\nr 0.454\n```\nand `0.101`, 0.30 [0.27, 0.37]") == []
