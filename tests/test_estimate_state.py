"""What `hdeval estimate` takes from DVC and from its calibration, without a model: which stages
`dvc repro` would re-run (real DVC on a small project), and how measured speeds become time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hdeval import workspace as ws
from hdeval.pipeline.calibration import Rates
from hdeval.pipeline.estimate import Estimate
from hdeval.pipeline.estimate_table import figures, render
from hdeval.pipeline.project_state import dvc_state, every_stage, labels_settled
from hdeval.pipeline.request_count import Probes, StageCost

DVC = str(Path(sys.executable).parent / "dvc")
# a manifest stage that runs every time, a stage reading it and a param, two reading that
PIPELINE = """\
stages:
  manifest:
    cmd: cp labels.txt manifest.txt
    always_changed: true
    outs: [{manifest.txt: {cache: false}}]
  prepare:
    cmd: cat manifest.txt > prepared.txt
    deps: [manifest.txt]
    params: [x]
    outs: [prepared.txt]
  layer:
    foreach: ["1", "2"]
    do:
      cmd: cat prepared.txt > "layer${item}.txt"
      deps: [prepared.txt]
      outs: ["layer${item}.txt"]
  report:
    cmd: cat layer1.txt layer2.txt > report.txt
    deps: [layer1.txt, layer2.txt]
    params: [y]
    outs: [report.txt]
"""


def _dvc(root: Path, *args: str) -> None:
    subprocess.run([DVC, *args], cwd=root, check=True, capture_output=True, text=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "dvc.yaml").write_text(PIPELINE)
    (tmp_path / "params.yaml").write_text("x: 1\ny: 1\n")
    (tmp_path / "labels.txt").write_text("a\n")
    _dvc(tmp_path, "init", "--no-scm", "-q")
    _dvc(tmp_path, "repro", "-q")
    return tmp_path


def test_a_finished_run_re_runs_only_the_stage_that_runs_every_time(project: Path) -> None:
    assert dvc_state(project, {"manifest"}).rerun == ("manifest",)
    # a stage that runs every time and may write new outs re-runs everything after it
    assert dvc_state(project).rerun == ("manifest", "prepare", "layer@1", "layer@2", "report")


def test_a_changed_param_re_runs_its_stage_and_everything_after_it(project: Path) -> None:
    (project / "params.yaml").write_text("x: 1\ny: 2\n")
    assert dvc_state(project, {"manifest"}).rerun == ("manifest", "report")
    (project / "params.yaml").write_text("x: 2\ny: 1\n")
    state = dvc_state(project, {"manifest"})
    assert state.rerun == ("manifest", "prepare", "layer@1", "layer@2", "report")
    assert state.reruns("layer@2") and not state.reruns("train")


def test_deleted_outs_re_run_their_stage(project: Path) -> None:
    (project / "layer2.txt").unlink()
    assert dvc_state(project, {"manifest"}).rerun == ("manifest", "layer@2", "report")


def test_outside_a_dvc_project_every_stage_runs(tmp_path: Path) -> None:
    state = dvc_state(tmp_path)
    assert state.rerun is None and state.reruns("anything")
    assert "not a DVC project" in state.why


def test_the_label_manifest_settles_only_when_no_label_file_changed(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "work").mkdir()
    files = [Path("a.jsonl")]
    assert labels_settled(tmp_path, files) == set()  # no manifest yet
    manifest = ws.label_manifest([tmp_path / "a.jsonl"])
    manifest["files"][0]["path"] = "a.jsonl"  # as the stage writes it, relative to the project
    (tmp_path / ws.LABELS).write_text(json.dumps(manifest))
    assert labels_settled(tmp_path, files) == {"labels"}
    (tmp_path / "b.jsonl").write_text("{}\n")
    assert labels_settled(tmp_path, [*files, Path("b.jsonl")]) == set()  # a new label file
    (tmp_path / "a.jsonl").write_text('{"edited": 1}\n')
    assert labels_settled(tmp_path, files) == set()


def _cost(stage: str, rerun: bool = True, **calls: int) -> StageCost:
    cost = StageCost(stage, rerun)
    for kind, n in calls.items():
        cost.calls[kind], cost.tokens[kind] = n, 100 * n
    return cost


def test_a_local_judges_time_is_its_tokens_at_the_measured_speed_plus_one_load() -> None:
    rates = Rates(local=True, per_token={"loglik": 0.01, "digits": 0.02}, load_seconds=12.0)
    rates.per_request["generate"] = 30.0
    assert rates.seconds(_cost("a", loglik=3, digits=1)) == pytest.approx(3 + 2 + 12)
    assert rates.seconds(_cost("a", generate=2)) == pytest.approx(60)  # writes, loads nothing
    assert rates.seconds(_cost("a", rerun=False, loglik=3)) == 0.0
    assert rates.seconds(_cost("a")) == 0.0
    assert Rates(local=True).seconds(_cost("a", loglik=1)) is None  # not measured


def test_a_local_judges_prefix_tokens_are_charged_the_prefix_rate() -> None:
    rates = Rates(local=True, per_token={"loglik": 0.01, "digits": 0.02})
    cost = _cost("a", loglik=3, digits=1)  # 300 likelihood tokens, 100 digit tokens
    cost.prefix_tokens.update(loglik=200, digits=50)
    assert rates.seconds(cost) == pytest.approx(3 + 2)  # unmeasured: the rows' rate
    rates.per_prefix_token = 0.001
    assert rates.seconds(cost) == pytest.approx(100 * 0.01 + 50 * 0.02 + 250 * 0.001)
    assert "1,000 on prefixes" in rates.describe()


def test_a_servers_time_is_its_requests_at_the_measured_rate() -> None:
    rates = Rates(local=False, concurrency=4, per_request={"loglik": 0.25})
    assert rates.seconds(_cost("a", loglik=40)) == pytest.approx(10.0)
    assert "4.0 requests/s on likelihoods at concurrency 4" in rates.describe()


def test_the_table_shows_the_upper_bound_only_where_it_differs(tmp_path: Path) -> None:
    expected = [_cost("layer@1", loglik=10), _cost("layer@2"), _cost("dhp", rerun=False)]
    upper = [_cost("layer@1", loglik=10), _cost("layer@2", loglik=20), _cost("dhp", False)]
    estimate = Estimate(expected, upper, ["layer@2: grows only if ..."], Probes(1))
    rates = Rates(local=True, per_token={"loglik": 0.06})
    data = figures(estimate, rates, every_stage(tmp_path, "every stage counted"))
    assert [s["seconds"] for s in data["stages"]] == pytest.approx([60.0, 0.0, 0.0])
    assert data["total"]["at_most"] == {"calls": 30, "prompt_tokens": 3000, "seconds": 180.0}
    table = render(data, "judge")
    assert "at most: calls" in table and "expected case: layer@2: grows only if" in table
    assert "dvc repro skips it" in table.splitlines()[5]  # dhp
    same = Estimate(expected, expected, [], Probes(1))
    plain = render(figures(same, None, every_stage(tmp_path, "")), "judge")
    assert "at most" not in plain and "1.0 min" not in plain and "?" in plain
