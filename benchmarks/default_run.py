"""Wall time of the default `dvc repro` per stage from an empty LLM cache, and its cost per text.

In a temporary copy of the project (dvc.yaml, pipelines/, hdeval/, data/, a params file,
``dvc init --no-scm``) it runs ``dvc repro`` with a fresh result cache and prints, per stage:
wall seconds (from one "Running stage" line to the next), LLM calls and prompt tokens through
the model (the stages' own reports, gathered in ``metrics.json``), and seconds and prompt
tokens per text (layers: training texts; evaluate and baselines: held-out texts; dhp: the
perturbed and original texts it scored). The CPU line (``lscpu`` model, bf16/AVX flags) and the
judge's precision come first. Figures only; nothing is asserted.

``--isa avx2`` holds torch's kernels (ATen, oneDNN, MKL, fbgemm) to AVX2, so that a CPU with
AVX512 or AMX runs the code paths of an AVX2-only one (``dtype: auto`` then picks fp32 with int8
Linear layers). It is not that CPU: clock, caches and memory stay this machine's.

    python benchmarks/default_run.py [--params params.yaml] [--keep DIR] [--isa avx2]
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

from scoring import cpu_line

REPO = Path(__file__).resolve().parents[1]
STAGE = re.compile(r"Running stage '([^']+)'")
AVX2_ONLY = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
}


def repro(root: Path, env: dict) -> dict[str, float]:
    """``dvc repro`` in ``root``, echoing its output; wall seconds per stage that ran."""
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
    if process.returncode:
        raise SystemExit(f"dvc repro failed with exit code {process.returncode}")
    ends = [t for _, t in starts[1:]] + [time.perf_counter()]
    return {name: end - start for (name, start), end in zip(starts, ends, strict=True)}


def texts_per_stage(params_path: Path, metrics: dict) -> dict[str, int]:
    """The texts each LLM stage scored: training, held-out, or DHP's originals and copies."""
    from hdeval.data import load_labels
    from hdeval.dhp.runner import rule_perturbed_samples
    from hdeval.params import load_params

    params = load_params(params_path)
    labels = load_labels(params.data.path, params.data.aspects, params.data.score_range)
    combined = rule_perturbed_samples(labels, params.dhp)
    rows = metrics["rows"]
    counts = {f"layer@{n}": rows["train"] for n in range(1, 7)}
    counts.update(evaluate=rows["test"], baselines=rows["test"], dhp=len(combined))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--keep", type=Path, help="run in this (new) directory and keep it")
    parser.add_argument("--isa", choices=["native", "avx2"], default="native")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="hdeval-default-run-"))
    root.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", ".dvcignore", "pipelines", "hdeval", "data"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name)
    shutil.copy(args.params, root / "params.yaml")
    env = {
        **os.environ,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
        "HDEVAL_CACHE": str(root / "llm-cache.sqlite"),
        "PYTHONPATH": str(root),
        **(AVX2_ONLY if args.isa == "avx2" else {}),
    }
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=root, env=env, check=True)
    cpu = cpu_line() + ("; kernels held to AVX2 (--isa avx2)" if args.isa == "avx2" else "")
    print(cpu, flush=True)
    start = time.perf_counter()
    seconds = repro(root, env)
    total = time.perf_counter() - start
    metrics = json.loads((root / "metrics.json").read_text())
    stages = metrics["llm"]["stages"]
    os.chdir(root)  # params name their files relative to the project
    texts = texts_per_stage(root / "params.yaml", metrics)
    print(f"\n{cpu}\njudge: {metrics['llm']['identity']}")
    print(f"rows: {metrics['rows']['train']} training, {metrics['rows']['test']} held out")
    print(f"{'stage':<11} {'wall s':>7} {'LLM calls':>9} {'prompt tok':>10} {'texts':>6} "
          f"{'s/text':>7} {'tok/text':>8}")  # fmt: skip
    for name, wall in seconds.items():
        cost = stages.get(name, {})
        calls, tokens = cost.get("llm_calls", 0), cost.get("tokens", {}).get("prompt", 0)
        n = texts.get(name) if cost else None
        per_text = f"{wall / n:7.2f} {tokens / n:8.0f}" if n else f"{'':>7} {'':>8}"
        print(f"{name:<11} {wall:7.0f} {calls:>9} {tokens:>10} {n or '':>6} {per_text}")
    print(f"{'total':<11} {total:7.0f}  ({total / 60:.1f} min)")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
