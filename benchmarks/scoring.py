"""Scoring cost on the embedded judge: naive full prompts vs the shared-prefix path.

For one SummEval sample and 20 criteria, in each precision ``dtype: auto`` / ``quantize: auto``
can pick (int8 Linear layers on a CPU without AMX: ``int8`` with VNNI, ``int8_fbgemm`` without;
bfloat16 with AMX; ``--precision`` picks one), it prints seconds per criterion of
  naive  - every criterion prompt run whole, nothing shared;
  shared - the sample's KV cache computed once, then the criterion suffixes as the rows of
           batched passes over it (what the backend does: no row sees another, so an item's
           answer does not depend on what else is asked);
the same for likelihood mode (instruction + text; the instructions are computed with a
document's first text and kept for its later texts), and the speed-ups; then seconds and
prompt tokens per text (one sample on all 20 criteria), and the CPU (``lscpu`` model and the
flags that decide the dtype). Figures only, no asserts.

    python benchmarks/scoring.py [--naive-criteria 5] [--precision NAME (int8, int8_fbgemm, ...)]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import torch

from hdeval.llm.local.backend import TransformersBackend
from hdeval.llm.local.embedded import pull
from hdeval.params import TaskSpec
from hdeval.scoring.prompts import (
    criterion_prompt,
    likelihood_instruction,
    prompt_segments,
)
from hdeval.tree.criteria import CriteriaTree, Criterion

REPO = Path(__file__).resolve().parents[1]
TASK = TaskSpec()
ASPECTS = {
    "coherence": ["sentence order", "discourse markers", "topic focus", "no repetition", "flow"],
    "consistency": ["entity facts", "numbers", "no invented claims", "causal claims", "quotes"],
    "fluency": ["grammar", "spelling", "punctuation", "word choice", "readability"],
    "relevance": ["main point", "key details", "no trivia", "coverage", "conciseness"],
}


def twenty_criteria() -> CriteriaTree:
    nodes = []
    for aspect, children in ASPECTS.items():
        nodes.append(Criterion(aspect, aspect, f"the overall {aspect} of the summary", None, 1))
        nodes += [
            Criterion(f"{aspect}.{i}", name, f"how well the summary does on {name}", aspect, 2)
            for i, name in enumerate(children)
        ]
    return CriteriaTree(nodes)


def cpu_line() -> str:
    """``lscpu`` model name and the flags that decide the judge's dtype and speed."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return f"cpu: {platform.processor() or platform.machine()} (no lscpu)"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    flags = set(fields.get("Flags", "").split())
    shown = ["avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16"]
    marks = " ".join(f"{f}:{'yes' if f in flags else 'no'}" for f in shown)
    return f"cpu: {fields.get('Model name', '?').strip()}, {os.cpu_count()} cpus, {marks}"


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


#: Precision name -> (llm.dtype, llm.quantize).
PRECISIONS = {
    "int8": ("auto", "int8"),
    "int8_fbgemm": ("auto", "int8_fbgemm"),
    "bfloat16": ("bfloat16", "none"),
    "float32": ("float32", "none"),
}


def measure(name: str, row: dict, naive_criteria: int) -> None:
    dtype, quantize = PRECISIONS[name]
    backend = TransformersBackend(pull(), dtype=dtype, quantize=quantize)
    tree = twenty_criteria()
    leaves = tree.layer(2)
    suffixes = [criterion_prompt(TASK, tree.lineage(c)) for c in leaves]
    segments = prompt_segments(TASK, row["source"], row["output"])
    n = len(suffixes)
    print(f"\n===== {name}: dtype {backend.dtype}, quantize {backend.quantize}")
    print(
        f"prompt tokens: prefix {len(backend._encode(backend.render(segments, '')))}, "
        f"suffix ~{len(backend._encode(suffixes[0]))}"
    )
    backend.digit_scores(segments, suffixes[:1])  # warm-up
    k = min(naive_criteria, n)
    naive = timed(lambda: backend.digit_scores_full(segments, suffixes[:k])) / k
    backend.forget()
    computed = backend.tokens.prompt
    shared_total = timed(lambda: backend.digit_scores(segments, suffixes))
    shared_tokens = backend.tokens.prompt - computed
    marginal = timed(lambda: backend.digit_scores(segments, suffixes)) / n
    shared = shared_total / n
    print("[prompt mode] seconds per criterion (20 criteria, one sample)")
    print(f"  naive full prompt        {naive:7.3f}   (timed on {k} criteria)")
    print(f"  shared prefix            {shared:7.3f}   speed-up {naive / shared:5.1f}x")
    print(f"  marginal criterion (prefix already cached) {marginal:7.3f}")
    full_tokens = len(backend._encode(backend.render(segments, suffixes[0])))
    suffix_tokens = sum(len(backend._encode(s)) for s in suffixes)
    print(
        f"  prefill rate: naive {full_tokens / naive:6.0f} tokens/s (one {full_tokens}-token "
        f"prompt); suffixes {suffix_tokens / (marginal * n):6.0f} tokens/s"
    )

    instructions = [likelihood_instruction(TASK, tree.lineage(c)) for c in leaves]
    items = [(text, row["output"]) for text in instructions]
    source = segments[:1]
    naive_lik = timed(lambda: backend.loglikelihoods_full(source, items[:k])) / k
    backend.forget()
    computed = backend.tokens.prompt
    first_total = timed(lambda: backend.loglikelihoods(source, items))
    first_tokens = backend.tokens.prompt - computed
    computed = backend.tokens.prompt
    marginal_lik = timed(lambda: backend.loglikelihoods(source, items)) / n
    later_tokens = backend.tokens.prompt - computed
    print("[likelihood mode] seconds per criterion (20 criteria, one sample)")
    print(f"  naive full prompt        {naive_lik:7.3f}   (timed on {k} criteria)")
    print(
        f"  first text               {first_total / n:7.3f}   "
        f"speed-up {naive_lik * n / first_total:5.1f}x   (document and instructions computed)"
    )
    print(
        f"  later text               {marginal_lik:7.3f}   "
        f"speed-up {naive_lik / marginal_lik:5.1f}x   (document and instructions kept)"
    )
    prompt_prefix = len(backend._head_ids) + sum(len(backend._encode(s)) for s in segments)
    prompt_rows = suffix_tokens + n * len(backend._tail_ids)
    print("[per text] one sample on all 20 criteria (prefix computed for it)")
    print(
        f"  prompt     {shared_total:6.2f} s per text (naive {naive * n:6.2f}); prompt tokens per "
        f"text {prompt_prefix + prompt_rows} = prefix {prompt_prefix} + suffixes {prompt_rows}, "
        f"of which {shared_tokens} computed (a parent's lines once for its children)"
    )
    print(
        f"  likelihood {first_total:6.2f} s per text (naive {naive_lik * n:6.2f}), prompt "
        f"tokens {first_tokens} for a document's first text (document, instructions, text), "
        f"{marginal_lik * n:.2f} s and {later_tokens} tokens for a later one (its own tokens)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--naive-criteria", type=int, default=5, help="criteria timed naively")
    parser.add_argument(
        "--precision", choices=list(PRECISIONS), action="append",
        help="default: int8, int8_fbgemm and bfloat16, the three that dtype/quantize auto can pick",
    )  # fmt: skip
    args = parser.parse_args()
    with open(REPO / "data" / "summeval" / "summeval.jsonl", encoding="utf-8") as handle:
        row = json.loads(handle.readline())
    print(cpu_line())
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    for name in args.precision or ["int8", "int8_fbgemm", "bfloat16"]:
        measure(name, row, args.naive_criteria)


if __name__ == "__main__":
    main()
