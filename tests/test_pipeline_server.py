"""`dvc repro` of the whole pipeline with an OpenAI-compatible judge: the real llama.cpp server
on 127.0.0.1, whose echo cannot give likelihoods. Every stage runs the scorers it can, and
metrics.json, results.md and the bundle say what was left out; no stage crashes. A
``hierarchy.min_mode_gain`` no mode can reach stops the tree after layer 1: layers 2 and 3 run
as DVC stages but neither decompose nor score, and say so. The API key the judge is sent is in
no file the run writes: dvc.lock, metrics.json, results.md, the bundle, the cache."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.dvc_project import DVC, make_project, run, summeval_rows
from tests.servers import MODEL_ALIAS

pytestmark = pytest.mark.server

KEY_ENV = "HDEVAL_PIPELINE_TEST_KEY"
SECRET = "sk-pipeline-0123456789SECRET"


def _short_documents(n: int) -> set[str]:
    """The ``n`` SummEval documents with the shortest articles (the server scores slowly)."""
    rows = summeval_rows(1600)
    length = {r["doc_id"]: len(r["source"]) for r in rows}
    return set(sorted(length, key=length.get)[:n])


def test_whole_pipeline_on_a_server_without_likelihoods(tmp_path, llama_server):
    docs = _short_documents(3)
    rows = [r for r in summeval_rows(1600, {"M0", "M8"}, 120) if r["doc_id"] in docs]
    root = tmp_path / "project"
    root.mkdir()
    env, _ = make_project(
        root,
        rows,
        {
            "data": {"test_fraction": 0.25},
            "llm": {
                "backend": "openai",
                "base_url": llama_server,
                "model": MODEL_ALIAS,
                "concurrency": 1,
                "timeout": 600.0,
                "max_retries": 1,
                "api_key_env": KEY_ENV,
            },
            "hierarchy": {
                "modes": ["prompt", "likelihood"],  # the likelihood mode is left out, and said so
                "children": 2,
                "top_k": 1,
                "cv_folds": 2,
                "importance_repeats": 1,
                "min_mode_gain": 1.0,
            },
            "aggregator": {"n_trials": 2, "cv_folds": 2},
            "evaluate": {"bootstrap": 5},
            "dhp": {"n_texts": 2, "probes": False, "baselines": ["direct-prompt", "likelihood"]},
        },
    )
    env[KEY_ENV] = SECRET
    run([DVC, "repro"], root, env)
    written = [p for p in root.rglob("*") if p.is_file() and "hdeval" not in p.parts]
    for name in ("dvc.lock", "metrics.json", "results.md", "llm-cache.sqlite"):
        assert root / name in written
    assert root / "models" / "evaluator" / "card.json" in written
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []

    metrics = json.loads((root / "metrics.json").read_text())
    left_out = metrics["left_out"]
    assert set(left_out) == {"likelihood features", "baseline likelihood", "DHP likelihood"}
    assert all("cannot score likelihoods" in why for why in left_out.values())
    assert "hdeval" in metrics["cross_fitted"]
    assert not {"likelihood_only", "unconditioned_likelihood_only"} & set(metrics["cross_fitted"])
    assert "direct-prompt" in metrics["baselines"]
    assert not [name for name in metrics["baselines"] if name.startswith("likelihood")]
    assert {"hdeval", "direct-prompt"} == set(metrics["dhp"])
    results = (root / "results.md").read_text()
    assert "Left out of this run" in results and "baseline likelihood" in results
    card = json.loads((root / "models/evaluator/card.json").read_text())
    assert card["modes"] == ["prompt"]
    assert card["llm_identity"].startswith("openai-compatible:http://127.0.0.1")
    assert card["feature_names"] == ["prompt:coherence"]  # layer 1 only: the tree stopped
    assert metrics["llm"]["llm_calls"] > 0
    layers = metrics["layers"]
    assert list(layers["1"]["mode_gains"]) == ["prompt"] and layers["1"]["modes_next"] == []
    assert "stops growing" in layers["1"]["stopped"] and "stops growing" in results
    assert layers["3"]["stopped"] == "the tree stopped growing earlier"
    report = json.loads((root / "work/layers/3/report.json").read_text())
    assert report["llm_calls"] == 0 and report["criteria"] == []  # nothing new to score
    # the prompt-mode bundle explains its scores: every aspect has a contribution per criterion,
    # adding up (on 4 training texts the fitted weight may be 0: then every contribution is 0)
    texts = root / "texts.jsonl"
    held_out = [json.loads(line) for line in (root / "work/prepared/test.jsonl").open()][:2]
    texts.write_text(
        "".join(json.dumps({k: r[k] for k in ("id", "source", "output")}) + "\n" for r in held_out)
    )
    out = root / "scores.jsonl"
    hdeval = str(Path(sys.executable).parent / "hdeval")
    run([hdeval, "score", "--model", "models/evaluator", str(texts), "--out", str(out),
         "--explain", "--params", "params.yaml"], root, env)  # fmt: skip
    assert SECRET.encode() not in out.read_bytes()
    for row in map(json.loads, out.read_text().splitlines()):
        assert set(row["explanation"]["aspects"]) == {"coherence"}
        for aspect, part in row["explanation"]["aspects"].items():
            assert set(part["contributions"]) == {"coherence"}, aspect
            moved = abs(part["prediction"] - part["base"]) > 1e-9
            assert moved == any(part["contributions"].values()), part
            total = part["base"] + sum(part["contributions"].values())
            assert abs(total - row["scores"][aspect]) < 1e-6
