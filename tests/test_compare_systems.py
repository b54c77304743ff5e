"""``hdeval compare-systems``: systems' means and paired differences with CIs that carry the
evaluator's error, Holm-corrected tests and a ranking with ties; on synthetic scored rows with a
known difference (model-free), its bad inputs, and on two real systems scored by the real
embedded judge."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hdeval.systems.statistics import compare, error_sd, holm
from hdeval.systems.system_error import system_error_sd
from tests.test_bad_inputs import refused, run

LEVEL = 0.9


def scored_rows(
    shifts: dict[str, float], n_docs: int = 40, seed: int = 0, width: float | None = 0.6
) -> list[dict]:
    """``hdeval score`` rows of one text per system and document: a document's base score plus
    the system's shift plus noise, with 90 % intervals of ``width`` (None: no intervals)."""
    rng = np.random.default_rng(seed)
    rows = []
    for d in range(n_docs):
        base = rng.uniform(2.0, 4.0)
        for system, shift in shifts.items():
            value = float(np.clip(base + shift + rng.normal(0, 0.25), 1, 5))
            row = {
                "id": f"doc{d}#{system}",
                "doc_id": f"doc{d}",
                "system_id": system,
                "scores": {"coherence": value, "fluency": float(np.clip(base, 1, 5))},
                "bundle": {"path": "bundle", "card_sha256": "abc"},
            }
            if width is not None:
                row["interval_level"] = LEVEL
                row["intervals"] = {
                    a: [max(1.0, v - width), min(5.0, v + width)] for a, v in row["scores"].items()
                }
            rows.append(row)
    return rows


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_holm_steps_down_and_keeps_the_order() -> None:
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    np.testing.assert_allclose(holm([0.5, 0.001]), [0.5, 0.002])
    assert holm([0.9, 0.8]).max() == 1.0


def _scores(rows: list[dict], systems: list[str]) -> np.ndarray:
    by = {(r["doc_id"], r["system_id"]): r["scores"]["coherence"] for r in rows}
    docs = sorted({r["doc_id"] for r in rows})
    return np.array([[by[d, s] for s in systems] for d in docs])


def test_a_known_difference_is_found_and_no_difference_ties() -> None:
    systems = ["new", "old", "same"]
    scores = _scores(scored_rows({"new": 0.5, "old": 0.0, "same": 0.0}), systems)
    found = compare("coherence", systems, scores, n_boot=1000)
    assert found.systems[0].system == "new"
    ranks = {s.system: s.rank for s in found.systems}
    assert ranks == {"new": 1, "old": 2, "same": 2}
    pairs = {(p.first, p.second): p for p in found.pairs}
    assert pairs["new", "old"].significant and pairs["new", "same"].significant
    assert pairs["new", "old"].low > 0.3 and pairs["new", "old"].high < 0.7
    tie = next(p for p in found.pairs if {p.first, p.second} == {"old", "same"})
    assert not tie.significant and tie.low < 0 < tie.high and tie.p_holm >= tie.p


def test_the_evaluators_error_widens_the_cis() -> None:
    systems = ["a", "b"]
    scores = _scores(scored_rows({"a": 0.1, "b": 0.0}), systems)
    plain = compare("coherence", systems, scores, None, n_boot=1000)
    sd = error_sd(np.full(scores.shape, 0.6), LEVEL)
    assert sd[0, 0] == pytest.approx(0.6 / 1.6449, rel=1e-3)
    with_error = compare("coherence", systems, scores, sd, n_boot=1000)
    assert with_error.propagated and not plain.propagated
    for a, b in zip(plain.systems, with_error.systems, strict=True):
        assert b.high - b.low > a.high - a.low
    assert with_error.pairs[0].high - with_error.pairs[0].low > (
        plain.pairs[0].high - plain.pairs[0].low
    )
    assert error_sd(np.full((2, 2), np.nan), LEVEL) is None


def test_a_systems_offset_many_documents_cannot_average_away_ties_the_pair() -> None:
    """Two systems the humans score alike, one of them favoured by the evaluator by 0.15 on
    every text: on 200 documents the per-text error alone calls them different; with the
    bundle's error of a system's mean (0.15) they tie, and a pair ten times farther apart is
    still called different."""
    systems = ["favoured", "plain"]
    scores = _scores(scored_rows({"favoured": 0.15, "plain": 0.0}, n_docs=200), systems)
    sd = error_sd(np.full(scores.shape, 0.6), LEVEL)
    texts_only = compare("coherence", systems, scores, sd, n_boot=2000)
    assert texts_only.pairs[0].significant
    both = compare("coherence", systems, scores, sd, system_sd=0.15, n_boot=2000)
    assert not both.pairs[0].significant and both.system_sd == 0.15
    assert both.pairs[0].low < 0 < both.pairs[0].high
    apart = _scores(scored_rows({"favoured": 1.5, "plain": 0.0}, n_docs=200), systems)
    far = compare("coherence", systems, apart, sd, system_sd=0.15, n_boot=2000)
    assert far.pairs[0].significant


def test_the_system_error_is_the_spread_of_system_means_about_the_humans_line() -> None:
    """Systems whose mean predictions stray from the line through the humans' means by a known
    0.2 (on a scale compressed to half, which keeps the order and is no error), and systems
    that do not stray: the estimate finds about 0.2 and about 0, and nothing for 2 systems."""
    rng = np.random.default_rng(3)
    true_offsets = rng.normal(0, 0.2, 40)
    rows = []
    for k, offset in enumerate(true_offsets):
        quality = rng.normal(3, 0.5)
        for _ in range(30):
            human = quality + rng.normal(0, 0.6)
            rows.append((f"S{k}", human, 1.5 + 0.5 * human + offset + rng.normal(0, 0.3)))
    systems, human, predicted = (pd.Series(c) for c in zip(*rows, strict=True))
    found = system_error_sd(predicted, human, systems)
    assert abs(found - float(np.std(true_offsets, ddof=1))) < 0.05
    faithful = 1.5 + 0.5 * human + pd.Series(rng.normal(0, 0.3, len(human)))
    assert system_error_sd(faithful, human, systems) < 0.03
    two = systems.isin(["S0", "S1"])
    assert system_error_sd(predicted[two], human[two], systems[two]) is None


def test_rows_carry_the_bundles_system_error_into_the_comparison(tmp_path) -> None:
    rows = [{**r, "system_error_sd": {"coherence": 2.0, "fluency": None}}
            for r in scored_rows({"new": 0.5, "old": 0.0})]  # fmt: skip
    done = run(["compare-systems", str(write(tmp_path / "s.jsonl", rows)), "--csv", "o.csv"],
               tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "error of a system's mean (sd 2" in " ".join(done.stdout.split())
    table = list(csv.DictReader((tmp_path / "o.csv").open()))
    pair = next(r for r in table if r["aspect"] == "coherence" and r["kind"] == "difference")
    assert pair["significant"] == "False"  # 0.5 apart, against an offset of sd 2 per system
    bad = [{**rows[0], "system_error_sd": {"coherence": -1}}, *rows[1:]]
    refused(run(["compare-systems", str(write(tmp_path / "bad.jsonl", bad))], tmp_path),
            "line 1", "system_error_sd")  # fmt: skip


def test_cli_prints_tables_and_writes_csv_and_chart(tmp_path) -> None:
    scored = write(tmp_path / "scored.jsonl", scored_rows({"new": 0.5, "old": 0.0}))
    done = run(["compare-systems", str(scored), "--csv", "out.csv", "--plot", "out.png"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = " ".join(done.stdout.split())
    assert "2 systems compared on the 40 of 40 documents" in out
    assert "new - old" in out and "higher" in out
    assert "drawn from its 90 % prediction interval" in out and "Holm" in out
    table = list(csv.DictReader((tmp_path / "out.csv").open()))
    kinds = [(r["aspect"], r["kind"]) for r in table]
    assert kinds.count(("coherence", "system")) == 2 and ("fluency", "difference") in kinds
    pair = next(r for r in table if r["aspect"] == "coherence" and r["kind"] == "difference")
    assert (pair["system"], pair["other"], pair["significant"]) == ("new", "old", "True")
    # fluency is the same for both systems: one rank
    assert {r["rank"] for r in table if r["aspect"] == "fluency" and r["kind"] == "system"} == {"1"}
    assert (tmp_path / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rows_without_intervals_say_the_error_is_not_propagated(tmp_path) -> None:
    scored = write(tmp_path / "s.jsonl", scored_rows({"a": 0.0, "b": 0.0}, width=None))
    done = run(["compare-systems", str(scored)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NOT propagated" in " ".join(done.stdout.split())


def test_systems_on_partly_different_documents_are_compared_on_the_shared_ones(tmp_path) -> None:
    rows = scored_rows({"a": 0.3, "b": 0.0}, n_docs=12)
    rows = [r for r in rows if not (r["system_id"] == "b" and r["doc_id"] in {"doc0", "doc1"})]
    done = run(["compare-systems", str(write(tmp_path / "s.jsonl", rows))], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = " ".join(done.stdout.split())
    assert "compared on the 10 of 12 documents" in out and "(2 texts of other documents" in out
    assert "coherence: 10 documents" in out


def test_bad_inputs_are_refused_in_one_line_naming_the_row(tmp_path) -> None:
    rows = scored_rows({"a": 0.0, "b": 0.1}, n_docs=3)
    no_system = [dict(r) for r in rows]
    del no_system[2]["system_id"]
    path = write(tmp_path / "no_system.jsonl", no_system)
    refused(run(["compare-systems", str(path)], tmp_path), "line 3 (id 'doc1#a')", "no system_id")

    single = write(tmp_path / "single.jsonl", [r for r in rows if r["system_id"] == "a"])
    refused(run(["compare-systems", str(single)], tmp_path), "every row is of system 'a'")

    apart = [
        {**r, "doc_id": r["doc_id"] + r["system_id"], "id": r["id"] + "x"} for r in rows
    ]  # no document scored for both
    path = write(tmp_path / "apart.jsonl", apart)
    refused(run(["compare-systems", str(path)], tmp_path), "no document is scored for every system")

    other = [dict(r) for r in rows]
    other[4] = {**other[4], "bundle": {"path": "b2", "card_sha256": "def"}}
    path = write(tmp_path / "other.jsonl", other)
    refused(run(["compare-systems", str(path)], tmp_path), "line 5", "one evaluator")

    path = write(tmp_path / "twice.jsonl", rows + rows[:1])
    refused(run(["compare-systems", str(path)], tmp_path), "duplicate id 'doc0#a'")

    path = write(tmp_path / "ok.jsonl", rows)
    refused(run(["compare-systems", str(path), "--aspects", "tone"], tmp_path), "tone: not scored")
    refused(run(["compare-systems", str(path), "--csv", str(path)], tmp_path), "is an input")


@pytest.mark.model
def test_two_real_systems_scored_by_the_embedded_judge_are_compared(tmp_path, embedded_dir):
    """Three development documents (their first 80 words) of Lead-3 (M0) and M23, scored with
    the real judge by a tiny bundle with intervals, then compared."""
    from tests.dvc_project import summeval_rows
    from tests.test_bad_inputs import make_bundle
    from tests.test_score_judges import auto_precision, embedded_identity

    rows = summeval_rows(48, systems={"M0", "M23"}, source_words=80)
    assert len(rows) == 6 and len({r["doc_id"] for r in rows}) == 3
    texts = [{k: r[k] for k in ("id", "doc_id", "system_id", "source", "output")} for r in rows]
    write(tmp_path / "texts.jsonl", texts)
    intervals = {
        "level": LEVEL,
        "method": "test",
        "aspects": {
            a: {"edges": [], "half_widths": [0.5], "rows": [100]} for a in ("coherence", "fluency")
        },
    }
    make_bundle(tmp_path / "bundle", embedded_identity(auto_precision()), intervals=intervals)
    done = run(
        ["score", "texts.jsonl", "--model", "bundle", "--out", "scored.jsonl"], tmp_path, 900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    scored = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert {(r["doc_id"], r["system_id"]) for r in scored} == {
        (r["doc_id"], r["system_id"]) for r in rows
    }
    for row in scored:
        assert row["interval_level"] == LEVEL
        for aspect, (low, high) in row["intervals"].items():
            assert low <= row["scores"][aspect] <= high
    done = run(["compare-systems", "scored.jsonl", "--csv", "out.csv"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = " ".join(done.stdout.split())
    assert "2 systems compared on the 3 of 3 documents" in out
    assert "drawn from its 90 % prediction interval" in out
    table = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert len(table) == 2 * 3  # per aspect: two systems, one pair
    for row in table:
        assert float(row["ci_low"]) <= float(row["value"]) <= float(row["ci_high"])
