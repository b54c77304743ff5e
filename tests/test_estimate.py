"""`hdeval estimate`: its LLM call counts and tokens against a real run's on the embedded judge,
its calibration, and the expected and largest cost where the tree's growth is unknown."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hdeval.data import load_labels
from hdeval.data.splitting import load_split
from hdeval.dhp.runner import rule_perturbed_samples
from hdeval.llm.cache import ResultCache
from hdeval.llm.judge import CachedJudge, open_judge
from hdeval.params import LLMConfig, Params
from hdeval.pipeline.calibration import calibrate
from hdeval.pipeline.estimate import Estimate, estimate
from hdeval.pipeline.estimate_table import figures, render
from hdeval.pipeline.project_state import every_stage
from hdeval.training.hierarchy import run_layer
from hdeval.tree.criteria import CriteriaTree
from hdeval.tree.decompose import decompose
from tests.conftest import REPO
from tests.dvc_project import summeval_rows, write_jsonl
from tests.servers import MODEL_ALIAS


def _tiny_params(
    tmp_path: Path, systems: tuple[str, ...] = ("M0", "M8"), families: tuple[str, ...] = ()
) -> Params:
    """Three SummEval documents (their first 120 words) x a summary per system, coherence only,
    two layers; ``families``: hierarchy.families (default: params' own)."""
    rows = summeval_rows(48, set(systems), source_words=120)
    write_jsonl(tmp_path / "labels.jsonl", rows)
    shipped = CriteriaTree.from_yaml(REPO / "data/summeval/aspects.yaml")
    CriteriaTree([shipped.get("coherence")]).to_yaml(tmp_path / "aspects.yaml")
    params = Params.model_validate(
        {
            "data": {
                "path": str(tmp_path / "labels.jsonl"),
                "criteria": str(tmp_path / "aspects.yaml"),
                "aspects": ["coherence"],
                "n_docs": None,
                "test_fraction": 0.25,
            },
            "hierarchy": {
                "layers": 2, "children": 2, "top_k": 1, "cv_folds": 2, "importance_repeats": 1,
                "min_mode_gain": None, **({"families": list(families)} if families else {}),
            },
            "dhp": {"n_texts": 2},
        }
    )  # fmt: skip
    return params


def _estimate(params: Params, judge: CachedJudge, root: Path) -> Estimate:
    """The estimate of a run outside a DVC project: every stage runs, cached answers free."""
    return estimate(params, judge, judge, every_stage(root, "a test: every stage runs"))


@pytest.mark.model
def test_estimated_calls_match_the_real_run(embedded_backend, tmp_path):
    # 8 training texts; with the references family a text's passes read five prefixes
    families = ("coverage", "sentences", "repetition", "references")
    params = _tiny_params(tmp_path, ("M0", "M1", "M8", "M22"), families)
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))

    before = _estimate(params, judge, tmp_path)
    names = ["layer@1", "layer@2", "evaluate", "baselines", "dhp"]
    assert [s.stage for s in before.expected] == names
    # min_mode_gain is null: the tree always grows, so nothing is left to chance
    assert [s.total_calls for s in before.upper] == [s.total_calls for s in before.expected]
    assert not before.assumptions
    rates = calibrate(judge, before.probes)
    assert set(rates.per_token) == {"digits", "loglik"}  # a local judge: seconds per token
    assert rates.per_prefix_token and rates.per_prefix_token > 0  # documents timed apart
    assert set(rates.per_request) == {"generate"}  # one decomposition
    assert all(rates.seconds(s) > 0 for s in before.expected if s.total_calls)
    table = render(figures(before, rates, every_stage(tmp_path, "")), judge.identity)
    assert "?" not in table and "times from the calibration: " in table

    # what the calibration computed is the run's own work, cached: it is not asked again
    after = _estimate(params, judge, tmp_path)
    stages = {s.stage: s for s in after.expected}
    old = {s.stage: s for s in before.expected}
    scored = sum(old[n].total_calls - stages[n].total_calls for n in ("layer@1", "baselines"))
    assert scored == rates.calls_made - 1 > 0
    assert old["layer@2"].calls["generate"] == 1
    if stages["layer@2"].notes:  # the first reply did not parse: the next attempt is counted
        assert stages["layer@2"].calls["generate"] == 1
        assert after.probes.generate[0][1] != before.probes.generate[0][1]
    else:
        assert stages["layer@2"].calls["generate"] == 0

    # with the criteria written (as layer@2 writes them first), the count is the run's
    tree = CriteriaTree.from_yaml(tmp_path / "aspects.yaml")
    decompose(tree, ["coherence"], judge, params.task.description, params.hierarchy.children)
    stages = {s.stage: s for s in _estimate(params, judge, tmp_path).expected}
    assert not stages["layer@2"].notes and stages["layer@2"].calls["generate"] == 0
    train, _ = load_split(params.data)
    selected: list[str] = []
    for number in (1, 2):
        embedded_backend.forget()  # each stage is a fresh process
        computed, prefixes = judge.tokens.prompt, embedded_backend.prefix_work.tokens
        layer = run_layer(
            number, tree, selected, train, judge, params.task, params.hierarchy, progress=False
        )
        computed = judge.tokens.prompt - computed
        prefixes = embedded_backend.prefix_work.tokens - prefixes
        tree, selected = layer.tree, layer.report.selected
        stage = stages[f"layer@{number}"]
        expected = stage.total_calls
        assert abs(layer.run.computed - expected) <= 0.1 * max(expected, 1), (number, expected)
        assert expected > 0
        # the tokens the model computes: each shared prefix once, then every request's row
        assert abs(computed - stage.prompt_tokens) <= 0.1 * stage.prompt_tokens, (number, computed)
        # of them, the prefix levels, which the calibration times apart
        counted = sum(stage.prefix_tokens.values())
        assert 0 < counted < stage.prompt_tokens
        assert abs(prefixes - counted) <= 0.1 * counted, (number, prefixes)


@pytest.mark.model
def test_growth_decided_by_mode_gains_is_given_as_expected_and_at_most(embedded_backend, tmp_path):
    params = _tiny_params(tmp_path)
    params.hierarchy.min_mode_gain = 0.02
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))
    found = _estimate(params, judge, tmp_path)
    expected = {s.stage: s for s in found.expected}
    upper = {s.stage: s for s in found.upper}
    # expected: layer 1's modes add too little and the tree stops; layer 2 rescored from cache
    assert expected["layer@2"].total_calls == 0 and expected["layer@2"].cached > 0
    assert upper["layer@2"].calls["generate"] == 1 and upper["layer@2"].calls["loglik"] > 0
    assert upper["evaluate"].total_calls > expected["evaluate"].total_calls > 0
    assert upper["layer@1"].total_calls == expected["layer@1"].total_calls
    assert any(a.startswith("layer@2:") and "layer@1 adds >= 0.02" in a for a in found.assumptions)


@pytest.mark.model
def test_estimate_command_prints_every_stage(embedded_dir, tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(_tiny_params(tmp_path).model_dump(mode="json")))
    hdeval = str(Path(sys.executable).parent / "hdeval")
    done = subprocess.run(
        [hdeval, "estimate", "--params", str(path), "--no-calibrate"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for stage in ("layer@1", "layer@2", "evaluate", "baselines", "dhp", "total"):
        assert re.search(rf"^{re.escape(stage)}\s+\d+", done.stdout, re.M), done.stdout
    assert "is not a DVC project: every stage counted" in done.stdout


@pytest.mark.model
def test_dhp_estimate_counts_only_the_baselines_it_is_given(embedded_backend, tmp_path):
    params = _tiny_params(tmp_path)
    judge = CachedJudge(embedded_backend, ResultCache(tmp_path / "cache.sqlite"))

    def dhp_calls(baselines: list[str]) -> int:
        params.dhp.baselines = baselines
        return {s.stage: s for s in _estimate(params, judge, tmp_path).expected}["dhp"].total_calls

    bundle_alone = dhp_calls([])
    assert bundle_alone > 0
    assert dhp_calls(["likelihood"]) == bundle_alone  # it reads what the bundle reads
    texts = rule_perturbed_samples(
        load_labels(params.data.path, params.data.aspects, params.data.score_range), params.dhp
    )
    prompts = texts["output"].nunique() * len(params.data.aspects)  # one digit prompt each
    assert dhp_calls(["direct-prompt", "likelihood"]) == bundle_alone + prompts


@pytest.mark.server
def test_a_server_judge_is_timed_by_its_requests_per_second(llama_server, tmp_path):
    """A server is timed at the configured concurrency, per request: llama.cpp's server (prompt
    scores only) on 127.0.0.1, the tree stopping at layer 1 in the expected case."""
    params = _tiny_params(tmp_path)
    params = params.model_copy(
        update={
            "llm": LLMConfig(
                backend="openai", base_url=llama_server, model=MODEL_ALIAS, concurrency=2,
                timeout=600.0, max_retries=1,
            ),
            "hierarchy": params.hierarchy.model_copy(
                update={"modes": ["prompt"], "min_mode_gain": 0.02}
            ),
        }
    )  # fmt: skip
    judge = open_judge(params.llm, ResultCache(tmp_path / "cache.sqlite"))
    found = _estimate(params, judge, tmp_path)
    rates = calibrate(judge, found.probes)
    assert not rates.local and rates.concurrency == 2
    assert set(rates.per_request) == {"digits", "generate"} and not rates.per_token
    assert rates.calls_made > len(found.probes.scoring["digits"])  # and a decomposition
    for stage in found.expected + found.upper:
        calls = stage.calls
        assert calls["loglik"] == 0  # the server gives no likelihoods: none is planned
        seconds = calls["digits"] * rates.per_request["digits"]
        seconds += calls["generate"] * rates.per_request["generate"]
        assert rates.seconds(stage) == pytest.approx(seconds)
    first = found.expected[0]
    assert first.calls["digits"] > 0 and first.prompt_tokens > 0
    assert "requests/s on digit prompts at concurrency 2" in rates.describe()
