"""docs/results.md and the README's results table are generated from the committed run records,
so no figure is typed twice."""

from __future__ import annotations

import json

from hdeval.report.results_page import BLOCKS, block, results_page
from tests.code_deps import REPO


def test_docs_results_is_generated_from_the_run_records() -> None:
    written = (REPO / "docs" / "results.md").read_text()
    assert written == results_page(REPO), (
        "docs/results.md is out of date: python -m hdeval.report.results_page > docs/results.md"
    )


def test_the_readme_and_cost_tables_are_generated_from_the_run_records() -> None:
    for name, opening, closing, make in BLOCKS:
        text = (REPO / name).read_text()
        assert block(text, opening, closing) == make(REPO), (
            f"{name}'s generated table is out of date: python -m hdeval.report.results_page"
        )


def test_a_record_without_its_cpu_and_time_says_so(tmp_path) -> None:
    """A record written before runs recorded their CPU and time is shown as "not recorded",
    never as 0 minutes on some CPU."""
    from hdeval.report.results_page import run_section, summary_table
    from hdeval.report.run_cost import cost_table

    metrics = json.loads((REPO / "metrics.json").read_text())
    metrics.pop("machine", None)
    metrics["llm"].pop("seconds", None)
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    assert "not recorded" in run_section("t", "s", metrics)
    assert summary_table(tmp_path).splitlines()[-1].endswith("| not recorded |")
    assert "| **all** |" in cost_table(tmp_path) and "not recorded |" in cost_table(tmp_path)
    metrics["machine"] = {"cpu": "Some CPU (family 6 model 1; avx2; 2 cores)"}
    metrics["llm"]["seconds"] = 600.0
    assert "10.0 min in the stages that call the judge, on Some CPU" in run_section(
        "t", "s", metrics
    )
    metrics["llm"].update(llm_calls=0, cache_hits=5000)  # re-run on an earlier run's answers
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    assert "5,000 answers read from the result cache" in run_section("t", "s", metrics)
    assert summary_table(tmp_path).splitlines()[-1].endswith("| 10.0 (answers cached) |")
    assert "a cold run's calls, tokens and minutes" in cost_table(tmp_path)
    # a run that read its training texts' answers from an earlier run and computed the rest
    metrics["llm"].update(llm_calls=1216)
    metrics["llm"]["stages"]["layer@1"].update(llm_calls=0, cache_hits=2529)
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    assert "1,216 computed, the rest read from the result cache" in run_section("t", "s", metrics)
    assert summary_table(tmp_path).splitlines()[-1].endswith("| 10.0 (partly cached) |")
    metrics["llm"]["stages"]["layer@1"].update(llm_calls=2176, cache_hits=0)  # a cold run
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    assert "result cache" not in run_section("t", "s", metrics)
    assert summary_table(tmp_path).splitlines()[-1].endswith("| 10.0 |")


def test_the_headline_is_a_few_numbers_of_the_full_record() -> None:
    """headline.json (the DVC metrics file) holds at most 25 numbers, all from metrics.json."""
    from hdeval.report.summary import headline

    metrics = json.loads((REPO / "metrics.json").read_text())
    numbers = headline(metrics)
    assert len(numbers) <= 25
    assert all(isinstance(v, int | float) or v is None for v in numbers.values())
    average = metrics["cross_fitted"]["hdeval"]["average"]
    assert numbers["r"] == round(average["dataset"]["pearson"], 4)
    assert numbers["rows"] == metrics["rows"]["all"]
    written = json.loads((REPO / "headline.json").read_text())
    assert written == numbers  # the committed file is the committed record's headline


def test_a_run_is_ahead_behind_or_tied_by_its_paired_ci_alone() -> None:
    """ "Ahead" of the best same-judge baseline or the peer only where the paired CI excludes 0,
    "behind" where it lies below 0, "tied" otherwise; no verdict on a point estimate."""
    from hdeval.report.results_page import run_section
    from hdeval.report.summary import standing

    assert standing({"difference": 0.05, "ci_low": 0.001, "ci_high": 0.1}) == "ahead"
    assert standing({"difference": 0.05, "ci_low": -0.001, "ci_high": 0.1}) == "tied"
    assert standing({"difference": -0.05, "ci_low": -0.1, "ci_high": -0.01}) == "behind"
    assert standing(None) == "-"
    metrics = json.loads((REPO / "metrics.json").read_text())
    gate = metrics["acceptance"]["baselines"]
    paired = next(p for p in gate["paired"] if p["against"] == gate["best"])
    paired.update(difference=0.041, ci_low=-0.047, ci_high=0.133)
    assert "paired: +0.041 [-0.05, 0.13]: **tied**." in run_section("t", "s", metrics)
    paired.update(ci_low=0.003)
    assert "paired: +0.041 [0.00, 0.13]: **ahead**." in run_section("t", "s", metrics)
    metrics["peer"] = {
        "name": "UniEval",
        "value": 0.454,
        "low": 0.4,
        "high": 0.5,
        "paired": {"difference": -0.06, "ci_low": -0.1, "ci_high": -0.02},
    }
    assert "Bundle minus UniEval, paired: -0.060 [-0.10, -0.02]: **behind**." in run_section(
        "t", "s", metrics
    )
    assert "met" not in run_section("t", "s", metrics).replace("metric", "")


def test_a_rewarded_probe_is_not_called_a_perturbation_it_missed() -> None:
    """The injection probe fails by being scored higher; the page says that, not 'not discerned'."""
    from hdeval.report.results_page import run_section

    metrics = json.loads((REPO / "metrics.json").read_text())
    metrics["dhp"]["hdeval"]["failed"] = ["typo_minor", "instruction_injection"]
    section = run_section("t", "s", metrics)
    assert "- DHP did not discern: typo_minor." in section
    assert "injection probe (a sentence asking for top marks) was scored significantly" in section
    metrics["dhp"]["hdeval"]["failed"] = ["instruction_injection"]
    assert "did not discern" not in run_section("t", "s", metrics)
