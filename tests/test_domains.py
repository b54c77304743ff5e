"""The dialogue (Topical-Chat) and data-to-text (SFRES, SFHOT) domains: loaders on the real
files, per-aspect scales, presets, DHP on each domain's references, the embedded judge.

The published files are read from ``shared/data`` beside the repository (CI keeps them there;
``HDEVAL_SHARED_DATA`` points elsewhere). Topical-Chat is never copied into the repository.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from hdeval.data import load_labels
from hdeval.data.convert import (
    DATA_TO_TEXT_RANGES,
    TOPICAL_CHAT_RANGES,
    convert,
    convert_rows,
)
from hdeval.dhp.catalogue import perturb_all, perturbations_for
from hdeval.dhp.originals import reference_samples
from hdeval.errors import ConfigError, DataValidationError
from hdeval.params import Params, load_params
from hdeval.scales import clip_to_ranges
from hdeval.scoring.prompts import prompt_segments
from hdeval.tree.criteria import CriteriaTree, aspects_tree
from tests.code_deps import REPO

SHARED = Path(os.environ.get("HDEVAL_SHARED_DATA", REPO.parent / "shared" / "data"))
TOPICAL_CHAT = SHARED / "topical_chat" / "topical_chat.json"
MEDIANS = SHARED / "novikova2017" / "emnlp_data_medians.csv"
PRESETS = {
    "topical-chat": REPO / "params" / "topical_chat.yaml",
    "sfres": REPO / "params" / "sfres.yaml",
    "sfhot": REPO / "params" / "sfhot.yaml",
}


def _published(name: str) -> Path:
    path = TOPICAL_CHAT if name == "topical-chat" else SHARED / name / f"{name}.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: these tests need the published rating files")
    return path


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Each domain converted from the published file by the real converter."""
    out = tmp_path_factory.mktemp("domains")
    paths = {}
    for name in PRESETS:
        paths[name] = out / f"{name}.jsonl"
        systems = None if name == "topical-chat" else MEDIANS
        result = convert(name, _published(name), paths[name], systems)
        assert result.refused == []
    return paths


def _preset_labels(name: str, path: Path):
    data = load_params(PRESETS[name]).data
    return load_labels(path, data.aspects, data.ranges())


# --------------------------------------------------------------------------- loaders


def test_topical_chat_rows(converted) -> None:
    rows = [json.loads(line) for line in converted["topical-chat"].read_text().splitlines()]
    assert len(rows) == 360
    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    assert len(by_doc) == 60 and {len(v) for v in by_doc.values()} == {6}
    raw = json.loads(TOPICAL_CHAT.read_text())
    first = rows[0]
    assert first["source"].startswith("Conversation history:\n")
    assert f"Fact: {raw[0]['context'].strip()}" in first["source"]  # the judge reads the fact
    for group in by_doc.values():
        truth = [r["output"] for r in group if r["system_id"] == "Original Ground Truth"]
        assert all(r["references"] == truth for r in group)
    for aspect, (low, high) in TOPICAL_CHAT_RANGES.items():
        values = [r["scores"][aspect] for r in rows]
        assert min(values) == low and max(values) == high  # the observed ranges are the scales


@pytest.mark.parametrize("name, n_rows, n_docs", [("sfres", 1181, 580), ("sfhot", 875, 398)])
def test_data_to_text_rows_and_the_shipped_files(converted, name, n_rows, n_docs) -> None:
    data = _preset_labels(name, converted[name])
    assert len(data) == n_rows and data.samples["doc_id"].nunique() == n_docs
    assert set(data.samples["system_id"]) == {"WEN", "LOLS"}
    assert data.samples["references"].map(len).eq(1).all()
    for aspect in DATA_TO_TEXT_RANGES:
        assert data.targets[aspect].between(1, 6).all()
    shipped = REPO / "data" / "data_to_text" / f"{name}.jsonl"
    assert shipped.read_bytes() == converted[name].read_bytes()


def test_refused_rows_are_named_and_the_rest_written(tmp_path) -> None:
    items = json.loads(_published("sfres").read_text())[:4]
    items[1]["scores"]["naturalness"] = 7.0
    del items[2]["reference"]
    src = tmp_path / "sfres.json"
    src.write_text(json.dumps(items))
    medians = tmp_path / "medians.csv"
    with open(MEDIANS, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        table = [r for r in reader if r["dataset"] == "SFRES"][:4]
        fields = reader.fieldnames
    table[3]["mr"] = "inform(name='somewhere else')"
    with open(medians, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        writer.writerows(table)

    result = convert_rows("sfres", src, medians)
    assert [r["id"] for r in result.rows] == ["sfres-0"]
    reasons = dict(result.refused)
    assert "scores.naturalness': 7.0 is outside [1, 6]" in reasons["item 2"]
    assert "'reference'" in reasons["item 3"]
    assert "MR differs" in reasons["item 4"]

    cli = [sys.executable, "-c", "from hdeval.cli import run_cli; run_cli()", "data", "convert"]
    args = ["--format", "sfres", str(src), "--systems", str(medians)]
    out = tmp_path / "out.jsonl"
    strict = subprocess.run([*cli, *args, "--out", str(out), "--strict"], capture_output=True)
    assert strict.returncode == 2 and not out.exists()
    done = subprocess.run([*cli, *args, "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "item 2" in done.stderr and "item 3" in done.stderr and "1 rows" in done.stderr
    assert len(out.read_text().splitlines()) == 1

    with pytest.raises(DataValidationError, match="has 4 SFRES rows, the ratings file 3"):
        src.write_text(json.dumps(items[:3]))
        convert_rows("sfres", src, medians)


def test_topical_chat_never_enters_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "data/topical_chat"], cwd=REPO, capture_output=True, text=True
    ).stdout.split()
    assert sorted(tracked) == ["data/topical_chat/README.md", "data/topical_chat/aspects.yaml"]
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "data/topical_chat/topical_chat.jsonl"], cwd=REPO
    )
    assert ignored.returncode == 0


# --------------------------------------------------------------------------- scales


def test_per_aspect_score_range_in_params(tmp_path) -> None:
    params = load_params(PRESETS["topical-chat"])
    assert params.data.ranges()["groundedness"] == (0.0, 1.0)
    assert Params().data.ranges() == dict.fromkeys(Params().data.aspects, (1.0, 5.0))
    broken = yaml.safe_load(PRESETS["topical-chat"].read_text())
    del broken["data"]["score_range"]["coherence"]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(broken))
    with pytest.raises(ConfigError, match="no range for aspects \\['coherence'\\]"):
        load_params(path)


def test_a_score_outside_its_aspects_own_scale_names_the_row(converted, tmp_path) -> None:
    lines = converted["topical-chat"].read_text().splitlines()
    row = json.loads(lines[3])
    row["scores"]["groundedness"] = 2.0  # fine on 1-3, not on groundedness' 0-1
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([*lines[:3], json.dumps(row)]) + "\n")
    with pytest.raises(DataValidationError) as err:
        _preset_labels("topical-chat", path)
    message = str(err.value)
    assert "line 4" in message and row["id"] in message and "[0, 1]" in message


def test_clip_to_ranges() -> None:
    values = np.array([[3.4, -0.2, np.nan], [0.5, 0.4, 7.0]])
    ranges = {"naturalness": (1, 3), "groundedness": (0, 1)}
    clipped = clip_to_ranges(values, ["naturalness", "groundedness", "other"], ranges)
    np.testing.assert_array_equal(clipped, [[3.0, 0.0, np.nan], [1.0, 0.4, 7.0]])
    np.testing.assert_array_equal(clip_to_ranges(values, ["a", "b", "c"], None), values)


# --------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_are_complete_and_consistent(name) -> None:
    params = load_params(PRESETS[name])
    assert set(yaml.safe_load(PRESETS[name].read_text())) == set(Params.model_fields)
    tree = aspects_tree(params.data)  # a layer-1 criterion with a definition for every aspect
    assert [c.id for c in tree] == params.data.aspects  # only the aspects the preset scores
    assert all(c.definition for c in tree.layer(1))
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["layer"]["foreach"]
    assert params.hierarchy.layers == len(dvc)
    assert params.dhp.task == ("dialogue" if name == "topical-chat" else "data_to_text")
    if name != "topical-chat":
        assert (REPO / params.data.path).is_file()
    # every document (docs/data.md): Topical-Chat's 60 contexts, SFRES's 580 and SFHOT's 398
    # meaning representations
    assert params.data.n_docs is None
    assert params.evaluate.peer is not None and params.evaluate.peer.name == "unieval"
    domain = {"dialogue"} if name == "topical-chat" else {"slots"}
    assert domain <= set(params.hierarchy.families)  # the family that reads this kind of source
    if "prompt" in params.hierarchy.modes:  # int8 blurs prompt scores (README, Other domains)
        assert params.llm.quantize == "none"


# --------------------------------------------------------------------------- DHP


@pytest.mark.parametrize("name", list(PRESETS))
def test_rule_perturbations_run_on_the_domains_references(converted, name) -> None:
    params = load_params(PRESETS[name])
    data = _preset_labels(name, converted[name])
    samples = reference_samples(data, 8, seed=0)
    rules = perturbations_for(params.dhp.task, llm=False, probes=True)
    tables, drops = perturb_all(samples, rules, None, seed=0)
    for rule in rules:
        kept = tables[rule.name]
        assert len(kept) + sum(drops[rule.name].values()) == len(samples)
        assert len(kept) >= 5, (rule.name, drops[rule.name])  # enough pairs for p < 0.05
        changed = kept["output"] != samples.loc[kept.index, "output"]
        assert changed.all(), rule.name
    # every aspect the preset scores is weighted by some perturbation of its task
    from hdeval.dhp.weights import EXPERT_WEIGHTS

    weighted = {a for w in EXPERT_WEIGHTS[params.dhp.task].values() for a in w}
    assert set(params.data.aspects) <= weighted


# --------------------------------------------------------------------------- the real judge


@pytest.mark.model
@pytest.mark.parametrize("name", list(PRESETS))
def test_embedded_judge_scores_each_domain_on_layer_1(embedded_backend, converted, name, tmp_path):
    from hdeval.baselines.registry import make_scorers
    from hdeval.llm.cache import ResultCache
    from hdeval.llm.judge import CachedJudge
    from hdeval.scoring.criterion_scorer import CriterionScorer

    params = load_params(PRESETS[name])
    data = _preset_labels(name, converted[name])
    two = data.samples.iloc[:2]
    segments = "".join(prompt_segments(params.task, two.iloc[0]["source"], two.iloc[0]["output"]))
    assert params.task.source_label in segments and two.iloc[0]["source"].strip() in segments
    tree: CriteriaTree = aspects_tree(params.data)
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))
    scorer = CriterionScorer(judge, params.task, ("prompt", "likelihood"))
    run = scorer.score(two, tree, progress=False)
    values = run.features
    assert values.shape == (2, 2 * len(tree) + 1)
    assert int(values.notna().sum().sum()) + len(run.failures) == values.size
    prompt = values[[c for c in values.columns if c.startswith("prompt:")]]
    assert ((prompt.stack() >= 1) & (prompt.stack() <= 5)).all()  # the judge's fixed 1-5 scale
    likelihood = values[[c for c in values.columns if c.startswith("lik:")]]
    assert (likelihood.stack() < 0).all()
    # DHP on two of the domain's references with the same judge: every rule perturbation is
    # scored and tested (two texts cannot reach p < 0.05; the acceptance run uses more)
    from hdeval.dhp.benchmark import run_dhp
    from hdeval.dhp.weights import EXPERT_WEIGHTS

    (direct,) = make_scorers(["direct-prompt"], judge, params.task, tree, params.data.aspects)
    rules = perturbations_for(params.dhp.task, llm=False, probes=False)
    refs = reference_samples(data, 2, seed=0)
    result = run_dhp(direct, refs, rules, None, 0, EXPERT_WEIGHTS[params.dhp.task])
    assert list(result.table.index) == [r.name for r in rules]
    assert (result.table["weights_source"] == "expert").all()
    assert np.isfinite(result.table["p_ew"].astype(float)).all()
