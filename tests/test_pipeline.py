"""`dvc repro` of the real pipeline on a tiny params override, with the real embedded judge."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.batching import batch_tolerance
from tests.dvc_project import summeval_rows

pytestmark = pytest.mark.model
REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], cwd: Path, env: dict) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory, embedded_dir):
    """A copy of the pipeline with 3 documents x 3 summaries (each article's first 120 words)
    and one aspect, 3 layers of one criterion each (test_decomposer.py covers wider trees)."""
    root = tmp_path_factory.mktemp("project")
    for name in ("dvc.yaml", ".dvcignore", "pipelines", "hdeval"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name)
    rows = summeval_rows(48, {"M0", "M8", "M22"}, source_words=120)
    (root / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tree = yaml.safe_load((REPO / "data" / "summeval" / "aspects.yaml").read_text())
    tree["criteria"] = [c for c in tree["criteria"] if c["id"] == "coherence"]
    (root / "aspects.yaml").write_text(yaml.safe_dump(tree))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(
        path="labels.jsonl",
        documents=None,
        criteria="aspects.yaml",
        aspects=["coherence"],
        n_docs=None,
        test_fraction=0.25,
    )
    # top_k covers every layer-2 criterion, so new labels cannot change what is decomposed
    params["hierarchy"].update(
        children=1, top_k=1, cv_folds=2, importance_repeats=2, min_mode_gain=None
    )  # every layer grows (test_pipeline_server.py covers a stopped tree)
    params["aggregator"].update(n_trials=2, cv_folds=2)
    # likelihood, as the default: prompt mode's pipeline is test_pipeline_server.py's
    params["hierarchy"]["modes"] = ["likelihood"]
    # the sentences family needs no LLM call of its own (coverage: test_family_judge.py)
    params["hierarchy"].update(families=["sentences"], min_family_gain=None)
    params["evaluate"].update(bootstrap=10, folds=3)  # one document per outer fold
    params["dhp"].update(n_texts=2)
    params["acceptance"].update(on_failure="warn")
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],
        "HDEVAL_CACHE": str(root / "llm-cache.sqlite"),
        "PYTHONPATH": str(root),
    }
    _run([f"{bin_dir}/dvc", "init", "--no-scm", "-q"], root, env)
    return root, env, rows, params


def _reports(root: Path) -> list[dict]:
    return [json.loads((root / f"work/layers/{n}/report.json").read_text()) for n in (1, 2, 3)]


def test_repro_then_noop_then_new_labels_cost_no_llm_call(project):
    root, env, rows, params = project
    dvc = str(Path(sys.executable).parent / "dvc")

    _run([dvc, "repro"], root, env)
    assert (root / "models/evaluator/aggregator.onnx").is_file()
    metrics = json.loads((root / "metrics.json").read_text())
    crossed = metrics["cross_fitted"]
    assert set(crossed) >= {"hdeval", "without_layer_3", "without_layers_2_3"}
    assert {"unconditioned_likelihood_only", "without_sentences"} <= set(crossed)
    assert metrics["rows"]["all"] == len(rows) and len(metrics["folds"]) == 3
    # the families come with the text's own signals, which selection may leave out on 9 texts
    expected = ["sentences"] if metrics["selection"]["unconditioned"] else []
    assert metrics["selection"]["families"] == expected
    assert "first_half" in metrics["dhp"]["hdeval"]["lower"]
    headline = json.loads((root / "headline.json").read_text())
    assert len(headline) <= 25 and headline["rows"] == metrics["rows"]["all"]
    assert "pearson" in crossed["hdeval"]["coherence"]["dataset"]
    assert sum(r["llm_calls"] for r in _reports(root)) > 0
    assert all(r["tokens"]["prompt"] > 0 for r in _reports(root))
    stages = metrics["llm"]["stages"]
    assert metrics["llm"]["tokens"]["prompt"] == sum(s["tokens"]["prompt"] for s in stages.values())
    assert "cpu" in metrics["machine"] and all(s["seconds"] >= 0 for s in stages.values())
    assert metrics["llm"]["seconds"] == pytest.approx(sum(s["seconds"] for s in stages.values()))
    assert metrics["llm"]["seconds"] > 0
    assert set(metrics["dhp"]) == {"hdeval", "likelihood"}  # dhp.baselines: prompts on demand
    assert metrics["dhp"]["hdeval"]["n_texts"] == 2
    assert {"hdeval", "direct-prompt", "likelihood:unconditioned", "rouge:rouge1"} <= set(
        metrics["baselines"]
    )
    results = (root / "results.md").read_text()
    assert "HD-Eval without layer 3" in results
    selection = metrics["selection"]
    kinds = params["aggregator"]["kinds"]  # every kind x feature set, on training documents
    assert len(selection["cv_table"]) == len(kinds) * 6  # likelihood x 3 depths x text or not
    # the simplest candidate within prefer_simpler_within of the CV-best that does not rise
    # when worse ships; tuning only helps
    within = params["aggregator"]["prefer_simpler_within"]
    allowed = [r for r in selection["cv_table"] if r["rising_share"] == 0]
    assert selection["cv_pearson"] >= allowed[0]["cv_pearson"] - within
    shipped = [
        r
        for r in allowed
        if (r["features"], r["kind"]) == (selection["features"], selection["kind"])
    ]
    assert shipped, "the shipped candidate rises when worse"
    card = json.loads((root / "models/evaluator/card.json").read_text())
    assert card["metrics"]["selection"]["features"] == selection["features"]
    assert card["metrics"]["training_rows"] == len(rows)  # the bundle is fit on every document
    assert (
        card["modes"] == selection["modes"] and "Model selection by document-grouped CV" in results
    )
    assert set(metrics["acceptance"]) == {"dhp", "baselines"}
    assert "same-judge baseline" in metrics["acceptance"]["baselines"]["message"]
    assert list((root / "plots/explain").glob("*.png"))
    assert (root / "work/dhp/hdeval.png").is_file()
    shown = _run([dvc, "metrics", "show", "--json"], root, env)
    assert "headline.json" in shown and "cross_fitted" not in shown  # the few numbers only
    assert "predicted_vs_human" in _run([dvc, "plots", "show", "--json"], root, env)

    # only the label manifest stage, which runs every time, is listed
    assert set(json.loads(_run([dvc, "status", "--json"], root, env).splitlines()[-1])) == {
        "labels"
    }
    prompts = root / "hdeval" / "scoring" / "prompts.py"
    original = prompts.read_text()
    prompts.write_text(original + "\n# an edited template\n")
    try:
        changed = set(json.loads(_run([dvc, "status", "--json"], root, env).splitlines()[-1]))
    finally:
        prompts.write_text(original)
    layers = {"layer@1", "layer@2", "layer@3"}
    # the stages that import hdeval/scoring re-run; acceptance and report do not read it
    assert changed == layers | {"labels", "train", "evaluate", "explain", "baselines", "dhp"}
    # model selection alone reads the family gain: the layers stay
    written = (root / "params.yaml").read_text()
    gain = yaml.safe_load(written)["hierarchy"]["min_family_gain"]
    changed_gain = yaml.safe_load(written)
    changed_gain["hierarchy"]["min_family_gain"] = (gain or 0.0) + 0.01
    (root / "params.yaml").write_text(yaml.safe_dump(changed_gain, sort_keys=False))
    try:
        changed = set(json.loads(_run([dvc, "status", "--json"], root, env).splitlines()[-1]))
    finally:
        (root / "params.yaml").write_text(written)
    assert {"evaluate", "train"} <= changed and not changed & layers
    again = _run([dvc, "repro"], root, env)
    assert "didn't change, skipping" in again
    assert re.findall(r"Running stage '([^']+)'", again) == ["labels"]

    train_ids = {
        json.loads(line)["id"]
        for line in (root / "work/prepared/train.jsonl").read_text().splitlines()
    }
    new = [{**r, "scores": {**r["scores"], "coherence": 5.0}} for r in rows if r["id"] in train_ids]
    new = new[:3]
    (root / "new_labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in new))
    params["data"]["new_labels"] = ["new_labels.jsonl"]
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    before = json.loads((root / "models/evaluator/card.json").read_text())["feature_names"]
    third = _run([dvc, "repro"], root, env)
    assert "Running stage 'prepare'" in third and "Running stage 'layer@1'" in third
    assert [r["llm_calls"] for r in _reports(root)] == [0, 0, 0]
    assert [r["tokens"]["prompt"] for r in _reports(root)] == [0, 0, 0]
    stages = json.loads((root / "metrics.json").read_text())["llm"]["stages"]
    # every text was scored before: no stage calls the judge, except that DHP's perturbed texts
    # are scored on any criterion which model selection newly picked for the refit bundle
    after = json.loads((root / "models/evaluator/card.json").read_text())["feature_names"]
    calls = {name: cost["llm_calls"] for name, cost in stages.items()}
    assert all(n == 0 for name, n in calls.items() if name != "dhp"), calls
    assert calls["dhp"] == 0 or set(after) - set(before), (calls, before, after)


def _estimate(root: Path, env: dict, *extra: str) -> dict:
    """``hdeval estimate --json`` in ``root``: its figures."""
    hdeval = str(Path(sys.executable).parent / "hdeval")
    done = subprocess.run(
        [hdeval, "estimate", "--json", *extra], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout)


def test_estimate_counts_only_what_dvc_repro_would_re_run(project, tmp_path):
    """After a finished run `hdeval estimate` charges nothing; after a changed param, only the
    stage it re-runs, with exactly the calls that stage then makes; after new labels for known
    texts, every stage they re-run costs nothing (the answers are cached)."""
    root, env, _, _ = project
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, symlinks=True)
    env = {**env, "PYTHONPATH": str(copy), "HDEVAL_CACHE": str(copy / "llm-cache.sqlite")}
    dvc = str(Path(sys.executable).parent / "dvc")
    _run([dvc, "repro"], copy, env)  # finished (a no-op after the first test of this module)

    finished = _estimate(copy, env)
    assert finished["rerun"] == ["labels"]  # the label manifest runs every time, costs nothing
    for stage in finished["stages"]:
        assert (stage["calls"], stage["seconds"], stage["at_most"]["calls"]) == (0, 0.0, 0)
    assert finished["total"]["seconds"] == 0.0 and finished["calibration"]["calls_made"] == 0

    params = yaml.safe_load((copy / "params.yaml").read_text())
    params["dhp"]["n_texts"] = 3
    (copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    before = _estimate(copy, env)  # calibrated on the dhp stage's own first texts
    assert before["rerun"] == ["labels", "dhp", "acceptance", "report"]
    stages = {s["stage"]: s for s in before["stages"]}
    assert [n for n, s in stages.items() if s["rerun"]] == ["dhp"]
    assert all(s["calls"] == s["seconds"] == 0 for n, s in stages.items() if n != "dhp")
    assert stages["dhp"]["seconds"] > 0 and stages["dhp"]["calls"] > 0
    made = before["calibration"]["calls_made"]
    left = {s["stage"]: s for s in _estimate(copy, env, "--no-calibrate")["stages"]}["dhp"]
    assert left["calls"] == stages["dhp"]["calls"] - made
    again = _run([dvc, "repro"], copy, env)
    assert re.findall(r"Running stage '([^']+)'", again) == before["rerun"]
    spent = json.loads((copy / "work/dhp/summary.json").read_text())["llm"]
    assert spent["llm_calls"] == left["calls"]
    assert abs(spent["tokens"]["prompt"] - left["prompt_tokens"]) <= 0.1 * left["prompt_tokens"]

    known = [json.loads(line) for line in (copy / "work/prepared/train.jsonl").open()][:2]
    relabelled = [{**r, "scores": {**r["scores"], "coherence": 1.0}} for r in known]
    (copy / "relabelled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in relabelled))
    params["data"]["new_labels"] = [*params["data"]["new_labels"], "relabelled.jsonl"]
    (copy / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    relabel = _estimate(copy, env, "--no-calibrate")
    assert {"prepare", "layer@1", "train", "evaluate", "dhp"} <= set(relabel["rerun"])
    assert [s["calls"] for s in relabel["stages"]] == [0] * len(relabel["stages"])


def test_the_report_page_renders_in_a_real_browser(project, tmp_path):
    """The report stage's report.html of the real run, opened in headless Chromium: its charts
    load from data URIs, nothing else is requested, the console shows no error and the page is
    laid out (a screenshot is saved); ``hdeval report`` renders the same page again."""
    from matplotlib.image import imread

    from tests.browser import Browser

    root, env, _, _ = project
    _run([str(Path(sys.executable).parent / "dvc"), "repro"], root, env)  # done: a no-op
    page = root / "report.html"
    assert 100_000 < page.stat().st_size < 20 * 2**20
    with Browser(tmp_path / "profile", width=1280) as browser:
        browser.open(page.as_uri())
        loaded = browser.evaluate(
            "Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0"
            " && i.src.startsWith('data:image/')).length"
        )
        assert loaded >= 4  # predicted vs human, every scorer, SHAP bar and beeswarm, DHP
        assert browser.console_errors() == []
        assert {u for u in browser.requested() if not u.startswith("data:")} == {page.as_uri()}
        width, height = browser.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
        )
        assert width <= 1280 and height > 3000  # no sideways scrolling; every section below
        shot = browser.screenshot(tmp_path / "report.png")
    pixels = imread(shot)
    assert pixels.shape[:2] == (height, 1280)
    assert pixels[..., :3].std() > 0.05  # not a blank page
    # the explain stage's explanations, which the page shows, add up to the bundle's scores
    predicted = pd.read_csv(root / "work/explain/bundle_scores.csv", index_col=0)
    lines = (root / "work/explain/explanations.jsonl").read_text().splitlines()
    assert len(lines) == len(predicted)
    for row in map(json.loads, lines):
        for aspect, part in row["explanation"]["aspects"].items():
            total = part["base"] + sum(part["contributions"].values())
            assert total == pytest.approx(predicted.at[row["id"], aspect], abs=1e-6)
    again = tmp_path / "again.html"
    _run([str(Path(sys.executable).parent / "hdeval"), "report", ".", "--out", str(again)],
         root, env)  # fmt: skip
    assert again.read_bytes() == page.read_bytes()


def _score(root: Path, env: dict, texts: Path, out: Path, *extra: str) -> list[dict]:
    hdeval = str(Path(sys.executable).parent / "hdeval")
    _run([hdeval, "score", "--model", "models/evaluator", str(texts), "--out", str(out), *extra],
         root, env)  # fmt: skip
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_hdeval_score_in_a_new_process_gives_the_pipelines_scores(project, tmp_path):
    """No training/serving skew: the run's texts, as production rows (id, source, output:
    no document id, no labels), scored by ``hdeval score`` in fresh processes with an empty
    result cache, all at once and one text per call, get exactly the scores the ``explain``
    stage's bundle gave them (bf16 on AMX: within :data:`~tests.batching.BF16_TOLERANCE`, its
    kernels round a row by its batch's size); ``--explain`` gives every aspect contributions
    that add up to them."""
    root, env, _, _ = project
    fresh = {**env, "HDEVAL_CACHE": str(tmp_path / "empty-cache.sqlite")}
    expected = pd.read_csv(root / "work/explain/bundle_scores.csv", index_col=0)
    expected.index = expected.index.astype(str)
    every = [json.loads(line) for line in (root / "work/prepared/rows.jsonl").open()]
    texts = [{k: r[k] for k in ("id", "source", "output")} for r in every]
    batch = tmp_path / "texts.jsonl"
    batch.write_text("".join(json.dumps(t) + "\n" for t in texts))
    scored = {r["id"]: r for r in _score(root, fresh, batch, tmp_path / "all.jsonl", "--explain")}
    tol = batch_tolerance(next(iter(scored.values()))["judge"])  # other batches, other rounding
    for i, text in enumerate(texts[:2]):
        single = tmp_path / f"text{i}.jsonl"
        single.write_text(json.dumps(text) + "\n")
        fresh_one = {**env, "HDEVAL_CACHE": str(tmp_path / f"cache{i}.sqlite")}
        [alone] = _score(root, fresh_one, single, tmp_path / f"one{i}.jsonl")
        assert alone["scores"] == pytest.approx(scored[text["id"]]["scores"], abs=tol)
    assert set(scored) == set(expected.index)
    for sample_id, row in scored.items():
        for aspect, value in row["scores"].items():
            assert value == pytest.approx(expected.loc[sample_id, aspect], abs=tol)
            part = row["explanation"]["aspects"][aspect]
            assert part["contributions"] and any(part["contributions"].values())
            total = part["base"] + sum(part["contributions"].values())
            assert total == pytest.approx(value, abs=1e-6)


def test_hdeval_train_runs_dvc_yamls_stages_without_dvc(project, tmp_path):
    """``hdeval train --params`` in a copy of the project without DVC's state runs dvc.yaml's
    stages in its order and writes what ``dvc repro`` wrote (the same held-out scores, from the
    cache); the stricter acceptance that file names refuses the bundle: exit 2, and what
    finished stays."""
    root, env, _, params = project
    outputs = {".dvc", "dvc.lock", "work", "models", "plots", "metrics.json", "results.md",
               "headline.json", "report.html"}  # fmt: skip
    copy = tmp_path / "copy"

    def ignore(folder: str, names: list[str]):
        return outputs & set(names) if folder == str(root) else ()

    shutil.copytree(root, copy, ignore=ignore)
    env = {**env, "PYTHONPATH": str(copy), "HDEVAL_CACHE": str(tmp_path / "cache.sqlite")}
    shutil.copy(root / "llm-cache.sqlite", tmp_path / "cache.sqlite")
    hdeval = str(Path(sys.executable).parent / "hdeval")
    strict = {**params, "acceptance": {**params["acceptance"], "dhp_threshold": 50.0,
                                       "on_failure": "fail"}}  # fmt: skip
    (copy / "strict.yaml").write_text(yaml.safe_dump(strict, sort_keys=False))
    refused = subprocess.run(
        [hdeval, "train", "--params", "strict.yaml"], cwd=copy, env=env, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    said = refused.stdout + refused.stderr
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    expected = [n for n in stages if n not in ("layer", "report")]  # stopped by the DHP gate
    expected[2:2] = ["layer@1", "layer@2", "layer@3"]
    assert re.findall(r"Running stage '([^']+)'", said) == expected
    assert refused.returncode == 2 and "DHP refused hdeval" in said
    assert (copy / "models/evaluator/card.json").is_file()  # what finished stays
    ours = json.loads((copy / "work/evaluate/metrics.json").read_text())["cross_fitted"]["hdeval"]
    theirs = json.loads((root / "metrics.json").read_text())["cross_fitted"]["hdeval"]
    for key in ("pearson", "spearman", "kendall"):
        mine, shipped = ours["average"]["dataset"][key], theirs["average"]["dataset"][key]
        assert mine == pytest.approx(shipped, nan_ok=True)


def _repro_acceptance(root: Path, env: dict, params: dict, gates: dict):
    """``dvc repro acceptance`` with ``gates`` in the acceptance section; params restored."""
    strict = {**params, "acceptance": {**params["acceptance"], **gates}}
    (root / "params.yaml").write_text(yaml.safe_dump(strict, sort_keys=False))
    try:
        return subprocess.run(
            [str(Path(sys.executable).parent / "dvc"), "repro", "acceptance"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def test_dhp_gate_fails_the_pipeline_naming_the_perturbations(project):
    root, env, _, params = project
    result = _repro_acceptance(root, env, params, {"dhp_threshold": 50.0, "on_failure": "fail"})
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert "DHP refused hdeval" in message and "deletion_minor" in message
    assert "Running stage 'dhp'" not in message  # a new threshold re-runs only the gate


def test_baseline_gate_refuses_a_bundle_below_a_same_judge_baseline(project):
    root, env, _, params = project
    table = pd.read_csv(root / "work/baselines/compare.csv")
    average = table[
        (table["aspect"] == "average")
        & (table["level"] == "dataset")
        & (table["correlation"] == "pearson")
    ].set_index("scorer")["value"]
    own = average["hdeval"]
    gates = {"dhp_threshold": -100.0, "on_failure": "fail", "baseline_margin": 0.0}
    if pd.isna(own):  # constant predictions on this tiny split (seen on a bf16 AMX CPU)
        result = _repro_acceptance(root, env, params, gates)
        assert result.returncode != 0
        assert "it has no cross-fitted dataset pearson" in result.stdout + result.stderr
        return
    better = [
        s
        for s in ("direct-prompt", "likelihood", "likelihood:unconditioned", *average.index)
        if average.get(s, -2) > own
    ]
    if not better:  # the bundle beats every entry: the gate passes and says so
        result = _repro_acceptance(root, env, params, gates)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "baselines accepted hdeval" in result.stdout + result.stderr
        return
    result = _repro_acceptance(root, env, params, {**gates, "baselines": [better[0]]})
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert f"baselines refused hdeval: cross-fitted dataset pearson {own:.3f}" in message
    assert f"{better[0]!r}" in message and f"{average[better[0]]:.3f} [" in message
