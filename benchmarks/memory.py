"""Peak memory (RSS) of hdeval's scoring paths, each measured in a fresh Python process.

  interpreter - Python running this script, nothing imported (the floor);
  import      - ``import hdeval`` alone (the baseline);
  judge-load  - the embedded judge's weights loaded (``make_backend``, then ``load``: they otherwise
                load on first use), nothing scored;
  judge       - the embedded judge scoring N SummEval samples on the criteria of a tree with
                ``CriterionScorer`` (empty result cache, so every score is computed);
  bundle      - ``Evaluator.load`` of a trained bundle and its ONNX aggregator predicting N rows;
                the judge is a stand-in that only carries the bundle's identity, so this is the
                aggregator path alone;
  production  - ``Evaluator.load`` with the embedded judge, then ``score_samples`` of the N
                samples (what ``hdeval score`` does), empty result cache.

For each: peak RSS (``VmHWM``, else ``getrusage``), seconds, and which heavy libraries got
imported. Without ``--bundle`` a small bundle is fitted on synthetic criterion scores (memory
does not depend on where the features came from) on the layer-1 criteria of SummEval.

    python benchmarks/memory.py [--samples 4] [--bundle models/evaluator]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Keep module-level imports light: every measurement runs this file in a fresh process.
REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "sklearn", "optuna", "onnxruntime", "pandas")
KINDS = ("interpreter", "import", "judge-load", "judge", "bundle", "production")


# --------------------------------------------------------------------------- in the child
def samples(n: int):
    """The first ``n`` SummEval rows of the development documents as a samples table (index
    id; doc_id, source, output)."""
    import pandas as pd

    from hdeval.data.summeval import development_rows

    rows = development_rows(REPO)[:n]
    return pd.DataFrame(rows).set_index("id")[["doc_id", "source", "output"]]


class StandInJudge:
    """Carries a bundle's judge identity so it loads; any LLM request is an error."""

    def __init__(self, identity: str) -> None:
        self.identity = identity

    def __getattr__(self, name: str):
        raise RuntimeError(f"the stand-in judge was asked for {name!r}")


def judge_load(args: argparse.Namespace) -> dict:
    from hdeval.llm.factory import make_backend
    from hdeval.params import LLMConfig

    backend = make_backend(LLMConfig())
    backend.load()
    return {"identity": backend.identity}


def judge(args: argparse.Namespace) -> dict:
    from hdeval.llm.judge import open_judge
    from hdeval.params import LLMConfig
    from hdeval.scoring.criterion_scorer import CriterionScorer
    from hdeval.tree.criteria import CriteriaTree

    cached = open_judge(LLMConfig())
    tree = CriteriaTree.from_yaml(args.tree)
    scorer = CriterionScorer(cached, modes=args.modes)
    run = scorer.score(samples(args.samples), tree, progress=False)
    return {"identity": cached.identity, "computed": run.computed, "criteria": len(tree)}


def bundle(args: argparse.Namespace) -> dict:
    import numpy as np

    from hdeval.export.bundle import read_card
    from hdeval.export.evaluator import Evaluator

    evaluator = Evaluator.load(args.bundle, StandInJudge(read_card(args.bundle)["llm_identity"]))
    rng = np.random.default_rng(0)
    features = rng.uniform(1, 5, size=(args.samples, len(evaluator.feature_names)))
    predicted = evaluator.aggregator.predict(features)
    return {"features": features.shape[1], "predicted": list(predicted.shape)}


def production(args: argparse.Namespace) -> dict:
    from hdeval.export.evaluator import Evaluator
    from hdeval.llm.judge import open_judge
    from hdeval.params import LLMConfig

    cached = open_judge(LLMConfig())
    evaluator = Evaluator.load(args.bundle, cached)
    scores = evaluator.score_samples(samples(args.samples), progress=False)
    return {"computed": cached.cache.misses, "failures": len(scores.failures)}


def peak_rss_mib() -> float:
    """This process's peak resident set size.

    ``VmHWM`` where Linux has it: ``ru_maxrss`` survives ``exec`` and so starts at the RSS of the
    parent that forked this process.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20


def child(args: argparse.Namespace) -> None:
    """Run one measurement and print its result as one JSON line."""
    start = time.perf_counter()
    detail: dict = {}
    if args.child == "import":
        import hdeval  # noqa: F401
    elif args.child != "interpreter":
        run = {"judge-load": judge_load, "judge": judge, "bundle": bundle, "production": production}
        detail = run[args.child](args)
    print(
        json.dumps(
            {
                "kind": args.child,
                "peak_mib": peak_rss_mib(),
                "seconds": time.perf_counter() - start,
                "imported": [m for m in HEAVY if m in sys.modules],
                **detail,
            }
        )
    )


# --------------------------------------------------------------------------- in the parent
def synthetic_bundle(path: Path, tree_path: Path, identity: str, modes: list[str]) -> Path:
    """A linear aggregator fitted on random criterion scores of the tree's criteria."""
    import numpy as np

    from hdeval.export.bundle import export_bundle
    from hdeval.params import TaskSpec
    from hdeval.scoring.columns import feature_columns
    from hdeval.training.aggregators import make_aggregator
    from hdeval.tree.criteria import CriteriaTree

    tree = CriteriaTree.from_yaml(tree_path)
    names = feature_columns([c.id for c in tree], modes)
    aspects = [c.id for c in tree]
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 5, size=(64, len(names)))
    Y = X[:, : len(aspects)] + rng.normal(scale=0.3, size=(64, len(aspects)))
    model = make_aggregator("linear").fit(X, Y)
    return export_bundle(
        path,
        model,
        tree,
        names,
        aspects,
        llm_identity=identity,
        task=TaskSpec(),
        modes=modes,
        unconditioned=True,
        training_data="synthetic",
        sample=X,
    )


def measure(kind: str, args: argparse.Namespace, scratch: Path) -> dict:
    """Run this script in a fresh process for one measurement, with an empty result cache."""
    cache = scratch / f"{kind}.sqlite"
    env = {**os.environ, "HDEVAL_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    command = [sys.executable, __file__, "--child", kind, "--samples", str(args.samples)]
    command += ["--tree", str(args.tree), "--modes", *args.modes]
    if args.bundle:
        command += ["--bundle", str(args.bundle)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"measurement {kind!r} failed:\n{result.stderr[-4000:]}")
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"  {kind}: {outcome['peak_mib']:.0f} MiB, {outcome['seconds']:.1f} s", flush=True)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4, help="SummEval samples scored")
    parser.add_argument("--bundle", type=Path, help="a trained bundle (default: a synthetic one)")
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["prompt", "likelihood"],
        choices=["prompt", "likelihood"],
        help="scoring modes without --bundle (with it: the bundle's)",
    )
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0

    if args.bundle:
        from hdeval.export.bundle import CRITERIA, read_card

        args.tree, args.modes = args.bundle / CRITERIA, read_card(args.bundle)["modes"]
    else:
        args.tree = REPO / "data" / "summeval" / "aspects.yaml"
    with tempfile.TemporaryDirectory(prefix="hdeval-memory-") as tmp:
        scratch = Path(tmp)
        results = {k: measure(k, args, scratch) for k in ("interpreter", "import", "judge-load")}
        results["judge"] = measure("judge", args, scratch)
        if args.bundle is None:
            identity = results["judge"]["identity"]
            args.bundle = synthetic_bundle(scratch / "bundle", args.tree, identity, args.modes)
        results["bundle"] = measure("bundle", args, scratch)
        results["production"] = measure("production", args, scratch)
    report(results, args)
    return 0


def report(results: dict[str, dict], args: argparse.Namespace) -> None:
    judged = results["judge"]
    print(
        f"\n{args.samples} samples; tree of {judged['criteria']} criteria, "
        f"{judged['computed']} LLM scores per judge run; judge {judged['identity']}\n"
    )
    base = results["import"]["peak_mib"]
    print("| measurement | peak RSS MiB | above `import hdeval` | seconds | heavy imports |")
    print("|---|---:|---:|---:|---|")
    for kind, r in results.items():
        imported = ", ".join(r["imported"]) or "none"
        above = round(r["peak_mib"] - base)
        print(f"| {kind} | {r['peak_mib']:.0f} | {above:+d} | {r['seconds']:.1f} | {imported} |")


if __name__ == "__main__":
    sys.exit(main())
