"""HD-Eval end to end on the real embedded judge, tiny: grow, score, prune, train, export."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hdeval.bundle import split_precision
from hdeval.cache import ResultCache
from hdeval.criteria import CriteriaTree, Criterion
from hdeval.end_to_end import train_evaluator
from hdeval.errors import AcceptanceError, ModelIntegrityError
from hdeval.evaluator import Evaluator
from hdeval.judge import CachedJudge
from hdeval.params import (
    AggregatorParams,
    DataParams,
    EvaluateParams,
    HierarchyParams,
    Params,
)

REPO = Path(__file__).resolve().parents[1]

ASPECTS = ["coherence", "fluency"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """4 documents x 5 systems of SummEval and a 2-aspect layer-1 tree."""
    root = tmp_path_factory.mktemp("tiny")
    with open(REPO / "data" / "summeval" / "summeval.jsonl", encoding="utf-8") as handle:
        head = [json.loads(next(handle)) for _ in range(64)]
    rows = [r for r in head if r["system_id"] in {"M0", "M1", "M2", "M5", "M8"}]
    labels = root / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tree = CriteriaTree(
        [
            Criterion("coherence", "coherence", "the summary is well-structured and organized"),
            Criterion("fluency", "fluency", "the sentences are grammatical and easy to read"),
        ]
    )
    tree.to_yaml(root / "aspects.yaml")
    return root, labels, len(rows)


def _config(root, labels, kind: str) -> Params:
    return Params(
        data=DataParams(
            path=labels,
            aspects=ASPECTS,
            criteria=root / "aspects.yaml",
            n_docs=None,
            test_fraction=0.25,
            seed=0,
        ),
        hierarchy=HierarchyParams(
            layers=2,
            children=2,
            top_k=1,
            modes=["prompt"],
            cv_folds=2,
            importance_repeats=2,
            min_mode_gain=None,  # the tree grows whatever the prompt scores add
        ),
        aggregator=AggregatorParams(  # every kind ships here, whatever the rising check says
            kinds=[kind], feature_layers=[2], n_trials=2, cv_folds=2, max_rising_share=None
        ),
        evaluate=EvaluateParams(bootstrap=10),
    )


@pytest.mark.model
def test_train_every_aggregator_export_and_score_through_onnx(tiny, embedded_backend, tmp_path):
    root, labels, _ = tiny
    cache = ResultCache(root / "cache.sqlite")
    judge = CachedJudge(embedded_backend, cache)
    decompositions = []
    for kind in ("linear", "tree", "forest", "mlp"):
        bundle = tmp_path / kind
        metrics = train_evaluator(
            _config(root, labels, kind), judge, bundle, tmp_path / "work", False, gates=False
        )
        layers = metrics["layers"]
        assert [r["layer"] for r in layers] == [1, 2]
        assert len(layers[1]["criteria"]) >= 2  # layer 2 grew from the LLM's decomposition
        assert set(metrics["held_out"]) >= {"hdeval", "without_layers_2_3", "averaged_scores"}
        card = json.loads((bundle / "card.json").read_text())
        identity, precision = split_precision(embedded_backend.identity)
        assert (card["llm_identity"], card["llm_precision"]) == (identity, precision)
        assert precision in ("float32", "bfloat16") and precision not in identity
        assert len(card["feature_names"]) == len(CriteriaTree.from_yaml(bundle / "criteria.yaml"))

        evaluator = Evaluator.load(bundle, judge)
        result = evaluator.score(
            "The cat sat on the mat all day. It did not move.", "A cat sat on a mat."
        )
        assert set(result["aspects"]) == set(ASPECTS)
        assert all(v is not None and math.isfinite(v) for v in result["aspects"].values()), result
        assert set(result["criteria"]) == set(card["feature_names"])
        decompositions.append(cache.info()["results"]["decompose"])

    tree = CriteriaTree.from_yaml(tmp_path / "linear" / "criteria.yaml")
    assert tree.depth == 2 and all(c.decomposed for c in tree.layer(1))
    # each aspect decomposed once (a reply that did not parse is retried, and cached too),
    # then reused from the cache by the other three kinds
    assert decompositions[0] >= len(ASPECTS) and len(set(decompositions)) == 1, decompositions


@pytest.mark.model
def test_bundle_refuses_mismatched_criteria_and_judge(tiny, embedded_backend, tmp_path):
    root, labels, _ = tiny
    cache = ResultCache(root / "cache.sqlite")
    judge = CachedJudge(embedded_backend, cache)
    bundle = tmp_path / "b"
    train_evaluator(_config(root, labels, "linear"), judge, bundle, tmp_path, False, gates=False)

    class OtherBackend:
        identity = "openai-compatible:some-other-model"

    with pytest.raises(ModelIntegrityError, match="trained with judge"):
        Evaluator.load(bundle, CachedJudge(OtherBackend(), cache))

    text = (bundle / "criteria.yaml").read_text()
    edited = text.replace("well-structured and organized", "well-structured", 1)
    assert edited != text
    (bundle / "criteria.yaml").write_text(edited)
    with pytest.raises(ModelIntegrityError, match="criteria hash"):
        Evaluator.load(bundle, judge)


@pytest.mark.model
def test_cli_score_writes_jsonl_rows(tiny, embedded_backend, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hdeval.cli import app

    root, labels, _ = tiny
    monkeypatch.setenv("HDEVAL_CACHE", str(root / "cache.sqlite"))
    bundle = tmp_path / "b"
    judge = CachedJudge(embedded_backend, ResultCache(root / "cache.sqlite"))
    train_evaluator(_config(root, labels, "linear"), judge, bundle, tmp_path, False, gates=False)
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("".join(labels.read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "out.jsonl"
    monkeypatch.chdir(tmp_path)  # no params.yaml here: the embedded judge is the default
    result = CliRunner().invoke(
        app, ["score", str(inputs), "--model", str(bundle), "--out", str(out), "--explain"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert set(row["scores"]) == set(ASPECTS)
        assert all(isinstance(v, float) for v in row["scores"].values())
        assert len(row["criteria"]) >= 4 and row["failures"] == [] and row["truncated"] is False
        for aspect, explained in row["explanation"]["aspects"].items():
            total = explained["base"] + sum(explained["contributions"].values())
            assert total == pytest.approx(row["scores"][aspect], abs=1e-6)


def test_production_path_imports_no_training_libraries():
    code = (
        "import sys, hdeval.evaluator, hdeval.explain.runtime, hdeval.cli;"
        "bad = [m for m in ('sklearn', 'optuna', 'skl2onnx', 'shap') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


@pytest.mark.parametrize("module", ["hdeval.evaluator", "hdeval.explain.runtime"])
def test_production_scoring_imports_no_pandas(module):
    """Scoring with a bundle and explaining its scores need numpy and onnxruntime only."""
    code = f"import sys, {module}; assert 'pandas' not in sys.modules, 'pandas imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr


@pytest.mark.model
def test_cli_train_runs_baselines_dhp_and_the_gates(tiny, tmp_path, monkeypatch):
    """``hdeval train`` runs what the pipeline runs after training: baselines, DHP, both gates;
    a refusal with ``on_failure: fail`` is an error and keeps the bundle and the metrics."""
    from typer.testing import CliRunner

    from hdeval.cli import app

    root, labels, _ = tiny
    monkeypatch.setenv("HDEVAL_CACHE", str(root / "cache.sqlite"))
    config = _config(root, labels, "linear").model_dump(mode="json")
    config["dhp"].update(n_texts=2, probes=False)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(config))
    args = ["train", "--params", str(params), "--out", str(tmp_path / "b")]
    result = CliRunner().invoke(app, [*args, "--work", str(tmp_path / "w")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "w" / "metrics.json").read_text())
    assert set(metrics["acceptance"]) == {"dhp", "baselines"}
    assert {"direct-prompt", "likelihood", "rouge:rouge1"} <= set(metrics["baselines"])
    assert metrics["dhp"]["hdeval"]["n_texts"] == 2 and metrics["selection"]["kind"] == "linear"
    assert "same-judge baseline" in metrics["acceptance"]["baselines"]["message"]

    config["acceptance"].update(dhp_threshold=50.0, on_failure="fail")
    params.write_text(yaml.safe_dump(config))
    (tmp_path / "w" / "metrics.json").unlink()
    refused = CliRunner().invoke(app, [*args, "--work", str(tmp_path / "w")])
    assert isinstance(refused.exception, AcceptanceError)  # `hdeval` turns it into exit 2
    assert "DHP refused hdeval" in str(refused.exception)
    assert (tmp_path / "w" / "metrics.json").is_file() and (tmp_path / "b" / "card.json").is_file()


def test_the_public_api_loads_lazily():
    """``from hdeval import Evaluator, open_judge, LLMConfig`` (the README's example) works,
    and neither it nor ``import hdeval`` pulls in torch, scikit-learn or pandas."""
    code = (
        "import sys, hdeval; heavy = ('torch', 'sklearn', 'pandas', 'optuna');"
        "assert not [m for m in heavy if m in sys.modules];"
        "from hdeval import Evaluator, LLMConfig, open_judge; import hdeval.evaluator;"
        "assert Evaluator is hdeval.evaluator.Evaluator and LLMConfig().backend == 'embedded';"
        "assert callable(open_judge) and not [m for m in heavy if m in sys.modules]"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
