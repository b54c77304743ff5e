"""`dvc repro` of the whole pipeline with a real vLLM server as the judge, on the SFRES
data-to-text preset (short texts: the CPU build scores slowly), the likelihood mode with every
likelihood signal (a server's digit scores: test_vllm_backend.py and, for a whole pipeline,
test_pipeline_server.py); then ``hdeval score`` with the bundle against the same server, in a new
process with an empty cache, gives the ``evaluate`` stage's scores."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.dvc_project import DVC, REPO, make_project, run
from tests.servers import MODEL_ALIAS

pytestmark = pytest.mark.server


def _sfres_rows(n_docs: int) -> list[dict]:
    """The rows of the first ``n_docs`` SFRES meaning representations that have two outputs."""
    with open(REPO / "data" / "data_to_text" / "sfres.jsonl", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    pairs = [group for group in by_doc.values() if len(group) == 2][:n_docs]
    return [row for group in pairs for row in group]


def test_whole_pipeline_on_vllm_with_likelihoods(tmp_path, vllm_server, embedded_dir):
    root = tmp_path / "project"
    root.mkdir()
    server = {"backend": "openai", "base_url": vllm_server, "model": MODEL_ALIAS,
              "quantize": "auto", "concurrency": 1, "timeout": 300.0, "max_retries": 1}  # fmt: skip
    env, _ = make_project(
        root,
        _sfres_rows(6),
        {
            "data": {"test_fraction": 0.25},
            "llm": server,
            "hierarchy": {
                "modes": ["likelihood"],
                "cv_folds": 2,
                "importance_repeats": 1,
                "min_mode_gain": 1.0,  # layer 1 only: a CPU server writes criteria slowly
                "families": ["slots", "sentences"],  # no request of their own
                "min_family_gain": None,
            },
            "aggregator": {"n_trials": 2, "cv_folds": 2},
            "evaluate": {"bootstrap": 5, "peer": None},
            "dhp": {"n_texts": 2, "probes": False},
        },
        aspect="naturalness",
        preset=REPO / "params" / "sfres.yaml",
    )
    run([DVC, "repro"], root, env)

    metrics = json.loads((root / "metrics.json").read_text())
    assert metrics["left_out"] == {}  # vLLM gives likelihoods: nothing was left out
    variants = set(metrics["held_out"])
    assert {"hdeval", "unconditioned_likelihood_only", "text_signals_only"} <= variants
    assert {"likelihood", "likelihood:source_free", "likelihood:pmi"} <= set(metrics["baselines"])
    assert {"hdeval", "likelihood"} == set(metrics["dhp"])
    features = pd.read_csv(root / "work/layers/1/features.csv", index_col=0)
    signals = ["lik:naturalness", "lik.p10:naturalness", "lik:_text", "lik:_free", "pmi:_text"]
    families = ["slots.realised:_text", "spmi.min:_text", "len.sents:_text"]
    assert features[[*signals, *families, "len.words:_text"]].notna().all().all()
    card = json.loads((root / "models/evaluator/card.json").read_text())
    reported = {"max_model_len": 2048, "root": str(embedded_dir)}
    assert card["llm_identity"] == f"openai-compatible:{vllm_server}:{MODEL_ALIAS}" + json.dumps(
        reported, sort_keys=True, separators=(",", ":")
    )
    assert card["llm_precision"] is None and card["source_free"] and card["length"]
    assert metrics["llm"]["llm_calls"] > 0

    held_out = [json.loads(line) for line in (root / "work/prepared/test.jsonl").open()]
    texts = tmp_path / "texts.jsonl"
    texts.write_text(
        "".join(json.dumps({k: r[k] for k in ("id", "source", "output")}) + "\n" for r in held_out)
    )
    fresh = {**env, "HDEVAL_CACHE": str(tmp_path / "fresh-cache.sqlite")}
    out = tmp_path / "scores.jsonl"
    hdeval = str(Path(sys.executable).parent / "hdeval")
    run(
        [hdeval, "score", "--model", "models/evaluator", str(texts), "--out", str(out)], root, fresh
    )
    expected = pd.read_csv(root / "work/evaluate/predictions/hdeval.csv", index_col=0)
    scored = {r["id"]: r["scores"] for r in map(json.loads, out.read_text().splitlines())}
    assert set(scored) == set(expected.index.astype(str))
    for sample_id, scores in scored.items():
        assert scores["naturalness"] == pytest.approx(
            expected.loc[sample_id, "naturalness"], abs=1e-6
        )
