"""report.html of synthetic run directories: the verdict with the peer, every section, and the
empty states (no DHP, no baselines, a refused bundle, a run that stopped after explain). The
real pipeline's page is opened in a real browser in tests/test_pipeline.py."""

from __future__ import annotations

import html as entities
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hdeval.cli import app
from hdeval.errors import HDEvalError
from hdeval.report.growth import tree_growth
from hdeval.report.record import RunRecord
from hdeval.report.render import write_report
from hdeval.tree.criteria import CriteriaTree, Criterion
from tests.code_deps import REPO
from tests.report_run import synthetic_run


def _page(tmp_path: Path, **options) -> str:
    return write_report(synthetic_run(tmp_path / "run", **options)).read_text(encoding="utf-8")


def _text(html: str) -> str:
    """The page's visible text, tags dropped and white space collapsed."""
    return re.sub(r"\s+", " ", entities.unescape(re.sub(r"<[^>]+>", " ", html)))


def _section(html: str, anchor: str) -> str:
    """The text of the section that starts at ``id="anchor"``, up to the next h2."""
    start = html.index(f'id="{anchor}"')
    end = html.find("<h2", start + 1)
    return _text(html[start : end if end > 0 else None])


def test_a_full_run_shows_the_verdict_every_section_and_nothing_external(tmp_path) -> None:
    html = _page(tmp_path)
    verdict = _section(html, "verdict")
    assert "ACCEPTED" in verdict and "cross-fitted dataset pearson 0.450 [0.37, 0.53]" in verdict
    assert "GPTScore likelihood, unconditioned 0.390 [0.31, 0.47]" in verdict
    assert "paired difference +0.060 [0.02, 0.11]" in verdict
    assert "published peer unieval 0.410 [0.33, 0.49], paired difference +0.040" in verdict
    assert "dhp accepted" in verdict and "baselines accepted" in verdict
    assert "Refused" not in html and "NOT RUN" not in html
    images = re.findall(r'<img [^>]*src="([^"]+)"', html)
    assert len(images) == 7 and all(src.startswith("data:image/") for src in images)
    assert not re.search(r'(src|href)="(?!data:|#)', html)  # no file, font or script fetched
    assert "<script" not in html
    assert "unieval (published peer)" in _section(html, "scorers")
    dhp = _section(html, "dhp")
    assert "Not discerned: reorder_minor: D^EW 0.80 < 1." in dhp  # the probe's scores fell
    assert "below 1 on an aspect: typo_minor on coherence (D 0.54)." in dhp
    assert "Shipped: linear on likelihood L1" in _section(html, "selection")
    cost = _section(html, "cost")
    assert "2.2 min" in cost and "transformers:hf:test:float32 on Test CPU (family 6" in cost


def test_the_texts_with_the_largest_errors_come_worst_first_with_their_explanation(
    tmp_path,
) -> None:
    worst = _section(_page(tmp_path), "worst")
    assert worst.count("mean error") == 10  # of the 12 texts
    errors = [float(e) for e in re.findall(r"mean error (\d+\.\d+)", worst)]
    assert errors == sorted(errors, reverse=True) and errors[0] > 2
    first = worst[worst.index("1. doc2#M1") : worst.index("2. ")]
    assert "summary text of doc2#M1" in first and "base 3.00" in first
    assert "Order" in first  # the criterion named as the tree names it


def test_the_tree_says_what_was_decomposed_pruned_and_where_it_stopped(tmp_path) -> None:
    tree = _section(_page(tmp_path), "tree")
    assert "The tree grew through every layer (hierarchy.layers = 3)" in tree
    assert "Order coherence.order well" not in tree  # a definition, not the id, follows a name
    assert "Flow coherence.flow flows +0.010 pruned: its CV gain is not among the 1" in tree
    assert "Order coherence.order ordered +0.090 decomposed at layer 3 into 1" in tree
    assert "Time order coherence.order.time in time +0.040 leaf: the last layer" in tree


def test_without_a_published_peer_the_verdict_says_so(tmp_path) -> None:
    verdict = _section(_page(tmp_path, peer=False), "verdict")
    assert "no published peer for this data" in verdict


def test_a_run_without_dhp_says_not_run_and_what_runs_it(tmp_path) -> None:
    html = _page(tmp_path, dhp=False)
    dhp = _section(html, "dhp")
    assert "NOT RUN" in dhp and "hdeval train --no-gates skips it" in dhp
    assert "GATES NOT RUN" in _section(html, "verdict")


def test_a_dhp_without_baselines_names_the_setting(tmp_path) -> None:
    dhp = _section(_page(tmp_path, dhp_baselines=False), "dhp")
    assert "No same-judge baseline was benchmarked beside the bundle: dhp.baselines" in dhp


def test_a_run_without_baselines_says_not_run_and_what_runs_it(tmp_path) -> None:
    html = _page(tmp_path, baselines=False)
    scorers = _section(html, "scorers")
    assert "NOT RUN" in scorers and "The baselines were not run" in scorers
    assert "dvc repro, or hdeval train with its default --gates, runs it" in scorers
    assert "acceptance gates not run" in _section(html, "verdict")


def test_a_refused_bundle_shows_why_at_the_top(tmp_path) -> None:
    html = _page(tmp_path, refused=True)
    top = _text(html[: html.index("<nav")])  # above every section
    assert "Refused: this bundle did not pass its acceptance gates" in top
    assert "dhp refused DHP refused hdeval: D_min^EW 0.800 < threshold 1.0" in top
    assert "REFUSED" in top and "ACCEPTED" not in top
    accepted = _page(tmp_path / "accepted")
    assert "Refused" not in _text(accepted[: accepted.index("<nav")])


def test_hdeval_report_renders_a_run_that_stopped_after_explain(tmp_path) -> None:
    """``hdeval train --no-gates`` writes no metrics.json: the page comes from the evaluate
    stage's metrics and says which stages did not run."""
    root = synthetic_run(tmp_path / "run", report_stage=False)
    out = tmp_path / "page.html"
    result = CliRunner().invoke(app, ["report", str(root), "--out", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "GATES NOT RUN" in _section(html, "verdict")
    assert "NOT RUN" in _section(html, "scorers") and "NOT RUN" in _section(html, "dhp")
    assert "mean error" in _section(html, "worst") and not (root / "report.html").exists()


def test_a_directory_without_a_run_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(HDEvalError, match=r"holds no run: it has neither metrics\.json"):
        write_report(tmp_path)


def test_a_tree_that_stopped_says_where_and_why() -> None:
    stopped = "no scoring mode adds hierarchy.min_mode_gain=0.02 to the CV Pearson at layer 1"
    reports = [
        {"layer": 1, "criteria": ["coherence"], "n_features": 3, "cv_pearson": 0.3,
         "importances": {"coherence": 0.1}, "modes_next": [], "stopped": stopped},
        {"layer": 2, "criteria": [], "n_features": 3, "cv_pearson": 0.3, "importances": {},
         "modes_next": [], "stopped": "the tree stopped growing earlier"},
    ]  # fmt: skip
    tree = CriteriaTree([Criterion("coherence", "Coherence", "well structured")])
    record = RunRecord(Path("."), {"cross_fitted": {"hdeval": {}}}, layers=reports, tree=tree)
    growth = tree_growth(record)
    assert growth is not None
    assert growth["stopped"] == f"Growth stopped at layer 1: {stopped}."
    [node] = growth["nodes"]
    assert node["status"] == "not decomposed: the tree stopped growing at layer 1"
    assert node["gain"] == "+0.100"


def test_the_template_ships_in_the_wheel(tmp_path) -> None:
    """The page's template is package data: an installed hdeval renders reports too."""
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".*", "work", "models", "data"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "wheel"), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    [wheel] = (tmp_path / "wheel").glob("hdeval-*.whl")
    assert "hdeval/report/templates/report.html.j2" in zipfile.ZipFile(wheel).namelist()
