"""Wall time of the default `dvc repro` per stage from an empty LLM cache, its cost per text,
and what ``hdeval estimate`` said it would cost.

In a temporary copy of the project (dvc.yaml, pipelines/, hdeval/, data/, a params file, ``dvc init
--no-scm``) it first runs ``hdeval estimate --json`` on a result cache of its own (so the run stays
cold), then ``dvc repro`` with a fresh result cache, and prints, per stage: wall seconds (from one
"Running stage" line to the next), LLM calls and prompt tokens through the model (the stages' own
reports, gathered in ``metrics.json``), seconds and prompt tokens per text (layers: the texts the
tree was grown on; evaluate: the run's other texts; baselines: every text; dhp: the perturbed and
original texts it scored), and the estimate's calls, tokens and minutes beside them (its expected
case; the most it allows where that differs), with estimate / measured for the LLM stages together.
The CPU line (``lscpu`` model, bf16/AVX flags) and the judge's precision come first. The estimate is
printed, and kept in the run's directory as ``estimate.json``, before the run starts, so a run
stopped part-way still has it. Figures only; nothing is asserted.

``--isa avx2`` holds torch's kernels (ATen, oneDNN, MKL, fbgemm) to AVX2, so that a CPU with
AVX512 or AMX runs the code paths of an AVX2-only one (``dtype: auto`` then picks plain fp32, as
there). ``--isa avx512`` holds oneDNN below AMX (``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``),
so that a CPU with AMX runs the code path of an AVX512-VNNI one without (fp32 with int8 Linear
layers). Neither is that CPU: clock, caches and memory stay this machine's.

``--resume DIR`` continues a run kept with ``--keep DIR`` that stopped part-way (on a slow CPU
the default run outlasts a sitting): ``dvc repro`` goes on from the finished stages and the
cached answers, and the stages finished before are shown with the seconds their records give.

    python benchmarks/default_run.py [--params params.yaml] [--keep DIR] [--isa avx2|avx512]
    python benchmarks/default_run.py --resume DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from floor import Shape, measured_rates, stage_table
from scoring import cpu_line

REPO = Path(__file__).resolve().parents[1]
STAGE = re.compile(r"Running stage '([^']+)'")
AVX2_ONLY = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
}
#: ``--isa`` choice -> (environment that holds the kernels back, what the CPU line then says).
CAPS = {
    "native": ({}, ""),
    "avx2": (AVX2_ONLY, "kernels held to AVX2"),
    "avx512": ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, "AMX held off"),
}


def repro(root: Path, env: dict) -> tuple[dict[str, float], float]:
    """``dvc repro`` in ``root``, echoing its output; wall seconds per stage that ran, and the
    peak RSS in MiB of the largest single process it ran (dvc or a stage)."""
    starts: list[tuple[str, float]] = []
    with subprocess.Popen(
        [str(Path(sys.executable).parent / "dvc"), "repro"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            match = STAGE.search(line)
            if match:
                starts.append((match.group(1), time.perf_counter()))
        # wait4's usage covers dvc and every process it waited for: ru_maxrss is the largest
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"dvc repro failed with exit code {process.returncode}")
    ends = [t for _, t in starts[1:]] + [time.perf_counter()]
    seconds = {name: end - start for (name, start), end in zip(starts, ends, strict=True)}
    return seconds, usage.ru_maxrss / 1024


def estimate(root: Path, env: dict) -> dict:
    """``hdeval estimate --json`` in ``root`` on an empty result cache of its own."""
    env = {**env, "HDEVAL_CACHE": str(root / "estimate-cache.sqlite")}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "hdeval"), "estimate", "--json"],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"hdeval estimate failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def ratio(estimated: float | None, measured: float) -> str:
    return "?" if estimated is None or not measured else f"{estimated / measured:.2f}"


def print_comparison(seconds: dict[str, float], stages: dict, predicted: dict) -> None:
    """Per LLM stage and in total: measured calls, tokens and minutes beside the estimate's."""
    print(f"\n{'stage':<11} {'calls':>6} {'est.':>6} {'tokens':>8} {'est.':>8} "
          f"{'min':>5} {'est.':>5}  at most (calls, tokens, min)")  # fmt: skip
    total = {"calls": 0, "tokens": 0, "seconds": 0.0}
    for row in predicted["stages"]:
        name, upper = row["stage"], row["at_most"]
        cost = stages.get(name, {})
        calls, tokens = cost.get("llm_calls", 0), cost.get("tokens", {}).get("prompt", 0)
        wall = seconds.get(name, 0.0)
        total["calls"] += calls
        total["tokens"] += tokens
        total["seconds"] += wall
        bound = ""
        if (upper["calls"], upper["prompt_tokens"]) != (row["calls"], row["prompt_tokens"]):
            bound = f"{upper['calls']}, {upper['prompt_tokens']}, {minutes(upper['seconds'])}"
        print(f"{name:<11} {calls:>6} {row['calls']:>6} {tokens:>8} {row['prompt_tokens']:>8} "
              f"{wall / 60:>5.1f} {minutes(row['seconds']):>5}  {bound}")  # fmt: skip
    est = predicted["total"]
    print(
        f"{'LLM stages':<11} {total['calls']:>6} {est['calls']:>6} {total['tokens']:>8} "
        f"{est['prompt_tokens']:>8} {total['seconds'] / 60:>5.1f} {minutes(est['seconds']):>5}"
    )
    print(f"estimate / measured: calls {ratio(est['calls'], total['calls'])}, tokens "
          f"{ratio(est['prompt_tokens'], total['tokens'])}, minutes "
          f"{ratio(est['seconds'], total['seconds'])} (LLM stages' wall time)")  # fmt: skip
    for line in predicted["assumptions"]:
        print(f"expected case: {line}")
    if predicted["calibration"]:
        print(f"calibration: {predicted['calibration']['speeds']}")


def minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 60:.1f}"


def texts_per_stage(params_path: Path, metrics: dict) -> dict[str, int]:
    """The texts each LLM stage scored: the tree's share (layers), the rest of the run's rows
    (evaluate), every row (baselines), or DHP's originals and copies."""
    from hdeval.data.splitting import load_run_labels
    from hdeval.dhp.runner import rule_perturbed_samples
    from hdeval.params import load_params

    params = load_params(params_path)
    combined = rule_perturbed_samples(load_run_labels(params.data), params.dhp)
    rows = metrics["rows"]
    counts = {f"layer@{n}": rows["tree_rows"] for n in range(1, 7)}
    counts.update(
        evaluate=rows["all"] - rows["tree_rows"], baselines=rows["all"], dhp=len(combined)
    )
    return counts


def print_floor(seconds: dict[str, float], stages: dict) -> None:
    """Each LLM stage against the matrix products its prompt tokens need at this CPU's peak
    (:mod:`floor`), in fp32 and in the judge's precision."""
    from hdeval.llm.local.embedded import model_dir

    shape = Shape.of(json.loads((model_dir() / "hf" / "config.json").read_text()))
    rates = measured_rates(shape)
    peaks = ", ".join(f"{p} {r / 1e9:.0f} GFLOP/s" for p, r in rates.items())
    print(f"\nfloor: {shape.flops_per_token / 1e9:.2f} GFLOP per prompt token; peak {peaks}")
    print("\n".join(stage_table(stages, seconds, shape, rates)))


def start_run(root: Path, params: Path, env: dict) -> dict:
    """Copy the project into ``root`` (new), estimate it there, keep the estimate and print it."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", ".dvcignore", "pipelines", "hdeval", "data"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name)
    shutil.copy(params, root / "params.yaml")
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=root, env=env, check=True)
    start = time.perf_counter()
    predicted = estimate(root, env)
    (root / "estimate.json").write_text(json.dumps(predicted, indent=2))
    print(f"hdeval estimate took {time.perf_counter() - start:.0f} s (kept in "
          f"{root / 'estimate.json'})")  # fmt: skip
    for row in predicted["stages"]:
        print(f"  estimate {row['stage']}: {row['calls']} calls, {row['prompt_tokens']} prompt "
              f"tokens, {minutes(row['seconds'])} min", flush=True)  # fmt: skip
    return predicted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--keep", type=Path, help="run in this (new) directory and keep it")
    parser.add_argument("--isa", choices=list(CAPS), default="native")
    parser.add_argument("--resume", type=Path, help="continue a run kept with --keep")
    args = parser.parse_args()
    root = args.resume or args.keep or Path(tempfile.mkdtemp(prefix="hdeval-default-run-"))
    env = {
        **os.environ,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
        "HDEVAL_CACHE": str(root / "llm-cache.sqlite"),
        "PYTHONPATH": str(root),
        **CAPS[args.isa][0],
    }
    held = CAPS[args.isa][1]
    cpu = cpu_line() + (f"; {held} (--isa {args.isa})" if held else "")
    print(cpu, flush=True)
    if args.resume:
        kept = root / "estimate.json"
        if not kept.is_file():
            raise SystemExit(f"{kept} is missing: --resume continues a run started with --keep")
        predicted = json.loads(kept.read_text())
        print(f"continuing the run in {root}: a stage stopped part-way counts only its "
              "continued part (its cached answers are free)", flush=True)  # fmt: skip
    else:
        predicted = start_run(root, args.params, env)
    start = time.perf_counter()
    ran, peak_mib = repro(root, env)
    total = time.perf_counter() - start
    metrics = json.loads((root / "metrics.json").read_text())
    stages = metrics["llm"]["stages"]
    earlier = {n: float(c["seconds"]) for n, c in stages.items() if n not in ran and "seconds" in c}
    seconds = {**earlier, **ran}  # stages run before --resume: the seconds their record gives
    os.chdir(root)  # params name their files relative to the project
    texts = texts_per_stage(root / "params.yaml", metrics)
    print(f"\n{cpu}\njudge: {metrics['llm']['identity']}")
    rows = metrics["rows"]
    print(f"rows: {rows['all']} of {rows['documents']} documents, cross-fitted; the tree grown "
          f"on {rows['tree_rows']}")  # fmt: skip
    print(f"{'stage':<11} {'wall s':>7} {'LLM calls':>9} {'prompt tok':>10} {'texts':>6} "
          f"{'s/text':>7} {'tok/text':>8}")  # fmt: skip
    for name, wall in seconds.items():
        cost = stages.get(name, {})
        calls, tokens = cost.get("llm_calls", 0), cost.get("tokens", {}).get("prompt", 0)
        n = texts.get(name) if cost else None
        per_text = f"{wall / n:7.2f} {tokens / n:8.0f}" if n else f"{'':>7} {'':>8}"
        print(f"{name:<11} {wall:7.0f} {calls:>9} {tokens:>10} {n or '':>6} {per_text}")
    since = " since resuming" if earlier else ""
    print(f"{'total':<11} {total:7.0f}  ({total / 60:.1f} min{since})")
    print(f"peak RSS of any one process of dvc repro{since}: {peak_mib:.0f} MiB")
    print_comparison(seconds, stages, predicted)
    print_floor(seconds, stages)
    if not (args.keep or args.resume):
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
