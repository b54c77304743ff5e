"""int8 vs fp32 judge on the same texts: speed and agreement (``llm.quantize``: ``int8``, whose
products need VNNI to be fast, and ``int8_fbgemm``, fbgemm's kernels, fast on AVX2 too).

The embedded judge is loaded once in float32; the summaries of one SummEval document are scored
on the 4 SummEval aspects (prompt mode: expected 1-5 score; likelihood mode: mean token
log-likelihood, criterion-conditioned and unconditioned), then the same model is quantised
(:mod:`hdeval.llm.local.int8`, a copy per kind) and scored again. Prints seconds per text per
mode, prompt tokens per text, and the agreement: expected-score differences, per-token
log-likelihood differences, and the Pearson/Spearman correlation of each likelihood feature
over the texts. Figures only, no asserts.

    python benchmarks/quantization.py [--texts 16] [--kinds int8 int8_fbgemm]
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr
from scoring import cpu_line

from hdeval.llm.local.backend import TransformersBackend
from hdeval.llm.local.embedded import pull
from hdeval.llm.local.int8 import INT8_LAYERS, quantize_int8
from hdeval.params import TaskSpec
from hdeval.scoring.prompts import (
    criterion_prompt,
    likelihood_instruction,
    prompt_segments,
    source_segment,
)
from hdeval.tree.criteria import Criterion

REPO = Path(__file__).resolve().parents[1]
TASK = TaskSpec()
ASPECTS = [
    Criterion(a, a, f"the overall {a} of the summary", None, 1)
    for a in ("coherence", "consistency", "fluency", "relevance")
]


def token_logprobs(backend: TransformersBackend, segments, items) -> list[np.ndarray]:
    """Per-token log-probabilities of each continuation, as ``loglikelihoods`` computes them."""
    return [lp.double().cpu().numpy() for lp in backend.token_logprobs(segments, items)]


def score_all(backend: TransformersBackend, rows: list[dict]) -> dict:
    """Expected scores, per-token log-probs and seconds per text of both modes."""
    backend.forget()
    suffixes = [criterion_prompt(TASK, [c]) for c in ASPECTS]
    instructions = [likelihood_instruction(TASK, [c]) for c in ASPECTS]
    instructions.append(likelihood_instruction(TASK))
    start = time.perf_counter()
    expected = [
        [
            s.expected if s.ok else np.nan
            for s in backend.digit_scores(prompt_segments(TASK, r["source"], r["output"]), suffixes)
        ]
        for r in rows
    ]
    prompt_s = (time.perf_counter() - start) / len(rows)
    start = time.perf_counter()
    tokens = [
        token_logprobs(
            backend,
            [source_segment(TASK, r["source"])],
            [(i, r["output"].strip()) for i in instructions],
        )
        for r in rows
    ]
    lik_s = (time.perf_counter() - start) / len(rows)
    return {"expected": np.array(expected), "tokens": tokens, "prompt_s": prompt_s, "lik_s": lik_s}


def compare(name: str, base: dict, other: dict, columns: list[str]) -> None:
    d_exp = np.abs(other["expected"] - base["expected"])
    r_exp = pearsonr(base["expected"].ravel(), other["expected"].ravel())[0]
    print(f"\n[{name} vs fp32]")
    print(
        f"  seconds per text: prompt {other['prompt_s']:.2f} (fp32 {base['prompt_s']:.2f}, "
        f"{base['prompt_s'] / other['prompt_s']:.2f}x), likelihood {other['lik_s']:.2f} "
        f"(fp32 {base['lik_s']:.2f}, {base['lik_s'] / other['lik_s']:.2f}x)"
    )
    print(
        f"  prompt mode |expected score diff| over {d_exp.size} scores: mean {d_exp.mean():.3f}, "
        f"max {d_exp.max():.3f}; Pearson r of the scores {r_exp:.3f}"
    )
    per_token = np.abs(
        np.concatenate(
            [
                a - b
                for ra, rb in zip(other["tokens"], base["tokens"], strict=True)
                for a, b in zip(ra, rb, strict=True)
            ]
        )
    )
    print(
        f"  per-token |log-prob diff| over {per_token.size} tokens: mean {per_token.mean():.4f}, "
        f"p95 {np.percentile(per_token, 95):.4f}, max {per_token.max():.4f} nats"
    )
    for j, column in enumerate(columns):
        a = np.array([row[j].mean() for row in base["tokens"]])
        b = np.array([row[j].mean() for row in other["tokens"]])
        print(
            f"  likelihood feature {column:<14} |mean diff| {np.abs(a - b).mean():.4f} "
            f"(max {np.abs(a - b).max():.4f}, fp32 spread sd {a.std():.3f}); "
            f"Pearson {pearsonr(a, b)[0]:.4f}, Spearman {spearmanr(a, b)[0]:.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=16, help="summaries of the first document")
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=sorted(INT8_LAYERS),
        default=sorted(INT8_LAYERS),
        help="int8 layers to compare with fp32 (int8 is very slow without VNNI)",
    )
    args = parser.parse_args()
    with open(REPO / "data" / "summeval" / "summeval.jsonl", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    rows = [r for r in rows if r["doc_id"] == rows[0]["doc_id"]][: args.texts]
    print(cpu_line())
    backend = TransformersBackend(pull(), dtype="float32")
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"{len(rows)} texts of one document"
    )
    columns = [f"lik:{c.id}" for c in ASPECTS] + ["lik:_text"]
    backend.digit_scores(
        prompt_segments(TASK, rows[0]["source"], rows[0]["output"]), ["x"]
    )  # warm-up
    base = score_all(backend, rows)
    fp32 = backend.model
    for kind in args.kinds:
        backend.model = quantize_int8(copy.deepcopy(fp32), kind)
        compare(kind, base, score_all(backend, rows), columns)


if __name__ == "__main__":
    main()
