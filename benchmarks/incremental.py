"""Cost of re-running the DVC pipeline as users retrain: wall time and LLM calls per scenario.

In a temporary copy of the project (dvc.yaml, pipelines/, hdeval/, a small SummEval label file, the
criteria of the chosen aspects, a shrunken params.yaml, ``dvc init --no-scm``) it runs
``dvc repro`` four times, in this order:

  full        - from an empty LLM result cache;
  no change   - again, with nothing changed;
  new labels  - new human scores for some training ids (a ``data.new_labels`` file);
  new texts   - ~10 % new rows: summaries of the same documents by SummEval systems not used
                before (a second ``data.new_labels`` file), training documents first.

Per scenario it prints the stages that ran, wall seconds, LLM calls and cache hits (the stages'
own cost reports, as gathered in ``metrics.json``), rows added to the result cache, whether the
final criteria tree changed, and time and calls relative to the full run. Figures only.

    python benchmarks/incremental.py [--docs 3] [--systems 4] [--aspects coherence relevance]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from hdeval.data.summeval import development_rows
from hdeval.llm.cache import ResultCache
from hdeval.report.summary import llm_totals
from hdeval.tree.criteria import CriteriaTree

REPO = Path(__file__).resolve().parents[1]
SUMMEVAL = REPO / "data" / "summeval" / "summeval.jsonl"
LLM_STAGES = ("layer@1", "layer@2", "layer@3", "evaluate", "baselines", "dhp")


@dataclass
class Outcome:
    """One ``dvc repro``: what ran, how long it took, and what it cost."""

    name: str
    seconds: float
    stages: list[str]
    costs: dict[str, dict] = field(default_factory=dict)
    new_cache_rows: int = 0
    tree: str = ""

    @property
    def calls(self) -> int:
        return llm_totals(self.costs)["llm_calls"] if self.costs else 0

    @property
    def hits(self) -> int:
        return llm_totals(self.costs)["cache_hits"] if self.costs else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=3, help="SummEval documents (>= 3)")
    parser.add_argument("--systems", type=int, default=4, help="summaries per document")
    parser.add_argument("--aspects", nargs="+", default=["coherence", "relevance"])
    parser.add_argument("--modes", nargs="+", default=["prompt"], choices=["prompt", "likelihood"])
    parser.add_argument("--relabel", type=float, default=0.25, help="share of training ids")
    parser.add_argument("--new-texts", type=float, default=0.10, help="new rows, share of rows")
    parser.add_argument("--keep", type=Path, help="run in this (new) folder and keep it")
    args = parser.parse_args(argv)
    if not 3 <= args.docs <= 100 or not 1 <= args.systems < 16:
        parser.error("--docs must be in 3..100 and --systems in 1..15")
    return args


# --------------------------------------------------------------------------- the project copy
def summeval_rows(docs: int, systems: int) -> tuple[list[dict], list[dict]]:
    """The first ``systems`` summaries of the first ``docs`` development documents, and the
    rest of theirs."""
    by_doc: dict[str, list[dict]] = {}
    for row in development_rows(REPO):
        if row["doc_id"] in by_doc or len(by_doc) < docs:
            by_doc.setdefault(row["doc_id"], []).append(row)
        elif len(by_doc) == docs:
            break
    base = [r for rows in by_doc.values() for r in rows[:systems]]
    spare = [r for rows in by_doc.values() for r in rows[systems:]]
    return base, spare


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def write_params(root: Path, params: dict) -> None:
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def build_project(root: Path, args: argparse.Namespace, base: list[dict], env: dict) -> dict:
    """Copy the pipeline into ``root`` with a small label file; return its params.

    The same steps as the project fixture of ``tests/test_pipeline.py`` (tests and benchmarks
    share no importable module), with the sizes of this benchmark.
    """
    for name in ("dvc.yaml", ".dvcignore", "pipelines", "hdeval"):
        source = REPO / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name)
    write_jsonl(root / "labels.jsonl", base)
    tree = CriteriaTree.from_yaml(REPO / "data" / "summeval" / "aspects.yaml")
    CriteriaTree([c for c in tree if c.id in args.aspects]).to_yaml(root / "aspects.yaml")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(
        path="labels.jsonl",
        criteria="aspects.yaml",
        aspects=list(args.aspects),
        documents=None,
        n_docs=None,
        test_fraction=0.25,
    )
    params["hierarchy"].update(modes=list(args.modes), cv_folds=2, importance_repeats=2)
    params["aggregator"].update(n_trials=2, cv_folds=2)
    params["evaluate"]["bootstrap"] = 20
    params["dhp"]["n_texts"] = 2
    params["acceptance"]["on_failure"] = "warn"
    write_params(root, params)
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=root, env=env, check=True)
    return params


# --------------------------------------------------------------------------- one repro
def cache_rows(path: Path) -> int:
    info = ResultCache(path).info()
    return sum(info["results"].values()) + info["failures"]


def repro(name: str, root: Path, env: dict) -> Outcome:
    """``dvc repro`` in ``root``: wall time, stages that ran and their LLM cost."""
    cache = Path(env["HDEVAL_CACHE"])
    before = cache_rows(cache)
    start = time.perf_counter()
    result = subprocess.run(
        ["dvc", "repro"], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    output = result.stdout + result.stderr
    if result.returncode != 0:
        sys.exit(f"dvc repro ({name}) failed:\n{output[-4000:]}")
    stages = [
        line.split("'")[1] for line in output.splitlines() if line.startswith("Running stage '")
    ]
    metrics = json.loads((root / "metrics.json").read_text())
    costs = {s: c for s, c in metrics["llm"]["stages"].items() if s in stages}
    tree = CriteriaTree.from_yaml(root / "work" / "layers" / "3" / "tree.yaml").fingerprint()
    outcome = Outcome(name, seconds, stages, costs, cache_rows(cache) - before, tree)
    print(f"  {name}: {seconds:.1f} s, {len(stages)} stages, {outcome.calls} LLM calls", flush=True)
    return outcome


def training_ids(root: Path) -> list[str]:
    lines = (root / "work" / "prepared" / "train.jsonl").read_text().splitlines()
    return [json.loads(line)["id"] for line in lines]


def relabelled(rows: list[dict], ids: list[str], share: float, low: float, high: float):
    """New scores (mirrored in the score range) for the first ``share`` of ``ids``."""
    chosen = set(ids[: max(1, round(share * len(ids)))])
    return [
        {**r, "scores": {a: low + high - v for a, v in r["scores"].items()}}
        for r in rows
        if r["id"] in chosen
    ]


def new_texts(spare: list[dict], root: Path, count: int) -> list[dict]:
    """``count`` unused summaries, one document at a time, training documents first."""
    split = json.loads((root / "work" / "prepared" / "split.json").read_text())
    order = split["train_documents"] + split["test_documents"]
    queues = {doc: [r for r in spare if r["doc_id"] == doc] for doc in order}
    chosen: list[dict] = []
    while len(chosen) < count and any(queues.values()):
        for doc in order:
            if queues[doc] and len(chosen) < count:
                chosen.append(queues[doc].pop(0))
    return chosen


# --------------------------------------------------------------------------- report
def table(outcomes: list[Outcome]) -> str:
    full = outcomes[0]
    lines = [
        "| scenario | stages run | wall s | vs full | LLM calls | vs full | cache hits "
        "| new cache rows | final tree |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    previous = ""
    for o in outcomes:
        tree = "same" if o.tree == previous else ("new" if not previous else "changed")
        previous = o.tree
        calls = o.calls / full.calls if full.calls else 0.0
        lines.append(
            f"| {o.name} | {len(o.stages)} | {o.seconds:.1f} | {o.seconds / full.seconds:.1%} "
            f"| {o.calls} | {calls:.1%} | {o.hits} | {o.new_cache_rows} | {tree} |"
        )
    return "\n".join(lines)


def stage_table(outcomes: list[Outcome]) -> str:
    lines = [
        "| stage | " + " | ".join(o.name for o in outcomes) + " |",
        "|---|" + "---:|" * len(outcomes),
    ]
    for stage in LLM_STAGES:
        cells = []
        for o in outcomes:
            cost = o.costs.get(stage)
            cells.append(f"{cost['llm_calls']} / {cost['cache_hits']}" if cost else "skipped")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base, spare = summeval_rows(args.docs, args.systems)
    if args.keep:
        args.keep.mkdir(parents=True)
        root = args.keep.resolve()
    else:
        scratch = tempfile.TemporaryDirectory(prefix="hdeval-incremental-")
        root = Path(scratch.name)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],
        "PYTHONPATH": str(REPO),
        "HDEVAL_CACHE": str(root / "llm-cache.sqlite"),
    }
    params = build_project(root, args, base, env)
    n_docs = len({r["doc_id"] for r in base})
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
        f"{len(base)} rows ({n_docs} documents x {args.systems} summaries), "
        f"aspects {', '.join(args.aspects)}, modes {', '.join(args.modes)}; project in {root}",
        flush=True,
    )

    outcomes = [repro("full", root, env), repro("no change", root, env)]

    low, high = params["data"]["score_range"]
    relabel = relabelled(base, training_ids(root), args.relabel, low, high)
    write_jsonl(root / "new_labels.jsonl", relabel)
    params["data"]["new_labels"] = ["new_labels.jsonl"]
    write_params(root, params)
    outcomes.append(repro("new labels", root, env))

    added = new_texts(spare, root, max(1, round(args.new_texts * len(base))))
    write_jsonl(root / "new_texts.jsonl", added)
    params["data"]["new_labels"].append("new_texts.jsonl")
    write_params(root, params)
    outcomes.append(repro("new texts", root, env))

    train_docs = set(json.loads((root / "work/prepared/split.json").read_text())["train_documents"])
    in_train = sum(r["doc_id"] in train_docs for r in added)
    print(
        f"\nnew labels: {len(relabel)} training ids re-scored; new texts: {len(added)} rows "
        f"({len(added) / len(base):.0%}), {in_train} in training documents\n"
    )
    print(table(outcomes))
    print("\nLLM calls / cache hits per stage (skipped: DVC did not run it)\n")
    print(stage_table(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
