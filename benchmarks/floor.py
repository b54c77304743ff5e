"""The limit a stage's judge time is measured against: the matrix products its prompt tokens
need, at the peak rate this CPU reaches on the judge's own layer shapes.

A decoder token costs ``2 x`` the weights of its Linear layers in FLOPs (attention's own
products, the norms and the vocabulary projection are left out, so the floor is a lower bound).
The peak rate is the best of a few timed products of the judge's widest layer (hidden x
intermediate) on a block of 256 tokens, in fp32 and in the precision the judge runs: int8 by
``torch._int_mm`` (``llm.quantize: int8``), int8 by fbgemm (``int8_fbgemm``: the
dynamic-quantised product on fp32 activations, per-token scaling included) or bf16. Run alone it
prints the rates; with ``--metrics`` it prints a record's per-stage floor beside its measured
seconds (only meaningful on the CPU the record was made on, which it names).

    python benchmarks/floor.py [--model DIR] [--metrics metrics.json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

TOKENS = 256  # rows of the timed product: a prefix pass's block of text positions


@dataclass(frozen=True)
class Shape:
    """The sizes of a decoder that fix its Linear layers' weights."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int

    @classmethod
    def of(cls, config: dict) -> Shape:
        return cls(
            config["hidden_size"],
            config["intermediate_size"],
            config["num_hidden_layers"],
            config["num_attention_heads"],
            config.get("num_key_value_heads", config["num_attention_heads"]),
        )

    @property
    def linear_weights(self) -> int:
        """Weights of every decoder layer's Linear layers: q, k, v, o and the gated MLP."""
        head = self.hidden // self.heads
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * head
        return self.layers * (attention + 3 * self.hidden * self.intermediate)

    @property
    def flops_per_token(self) -> int:
        return 2 * self.linear_weights


def _best_seconds(product, repeats: int = 7) -> float:
    product()  # first call: kernel selection, caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        times.append(time.perf_counter() - start)
    return min(times)


def peak_rate(shape: Shape, precision: str) -> float:
    """FLOP/s of the best timed (TOKENS x hidden) @ (hidden x intermediate) product in
    ``precision`` (fp32, bf16, int8 or int8_fbgemm)."""
    m, k, n = TOKENS, shape.hidden, shape.intermediate
    if precision == "int8_fbgemm":
        from hdeval.llm.local.int8 import FbgemmInt8Linear

        layer = FbgemmInt8Linear(torch.nn.Linear(k, n, bias=False))
        a = torch.randn(m, k)
        with torch.inference_mode():
            seconds = _best_seconds(lambda: layer(a))
    elif precision == "int8":
        a = torch.randint(-127, 128, (m, k), dtype=torch.int8)
        b = torch.randint(-127, 128, (k, n), dtype=torch.int8)
        seconds = _best_seconds(lambda: torch._int_mm(a, b))
    else:
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        seconds = _best_seconds(lambda: a @ b)
    return 2 * m * k * n / seconds


def judge_precision() -> str:
    """The precision ``dtype: auto`` and ``quantize: auto`` give the local judge on this CPU."""
    from hdeval.llm.local.precision import resolve_dtype, resolve_quantize

    quantize = resolve_quantize("auto", "auto", "cpu")
    if quantize != "none":
        return quantize
    return "bf16" if resolve_dtype("auto") == torch.bfloat16 else "fp32"


def floor_seconds(tokens: int, shape: Shape, rate: float) -> float:
    return tokens * shape.flops_per_token / rate


def stage_table(stages: dict, seconds: dict[str, float], shape: Shape, rates: dict) -> list[str]:
    """Lines of a table: per stage, prompt tokens, measured seconds, tokens/s and the floor in
    fp32 and in the judge's precision, with measured / floor."""
    precision = next(p for p in rates if p != "fp32") if len(rates) > 1 else "fp32"
    lines = [
        f"{'stage':<11} {'prompt tok':>10} {'s':>7} {'tok/s':>7} {'floor fp32':>10} "
        f"{'floor ' + precision:>10} {'x floor':>7}"
    ]
    for name, cost in stages.items():
        tokens = cost.get("tokens", {}).get("prompt", 0)
        wall = seconds.get(name, float(cost.get("seconds", 0.0)))
        if not tokens or not wall:
            continue
        fp32 = floor_seconds(tokens, shape, rates["fp32"])
        used = floor_seconds(tokens, shape, rates[precision])
        lines.append(
            f"{name:<11} {tokens:>10} {wall:>7.0f} {tokens / wall:>7.0f} {fp32:>10.0f} "
            f"{used:>10.0f} {wall / used:>7.1f}"
        )
    return lines


def measured_rates(shape: Shape) -> dict[str, float]:
    """FLOP/s in fp32 and, where it differs, in the judge's precision on this CPU."""
    rates = {"fp32": peak_rate(shape, "fp32")}
    precision = judge_precision()
    if precision != "fp32":
        rates[precision] = peak_rate(shape, precision)
    return rates


def main() -> None:
    from hdeval.llm.local.embedded import model_dir
    from hdeval.report.summary import machine

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory")
    parser.add_argument("--metrics", type=Path, help="a run's metrics.json")
    args = parser.parse_args()
    directory = args.model or model_dir() / "hf"
    shape = Shape.of(json.loads((directory / "config.json").read_text()))
    print(f"{machine()['cpu']}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"judge {directory.name}: {shape.flops_per_token / 1e9:.2f} GFLOP per token (Linear)")
    rates = measured_rates(shape)
    for precision, rate in rates.items():
        product = f"{TOKENS} x {shape.hidden} x {shape.intermediate}"
        at_most = rate / shape.flops_per_token
        print(f"peak {precision}: {rate / 1e9:.0f} GFLOP/s ({product}); {at_most:.0f} tokens/s")
    if args.metrics:
        record = json.loads(args.metrics.read_text())
        print(f"record made on: {record.get('machine', {}).get('cpu', 'an unnamed CPU')}")
        print("\n".join(stage_table(record["llm"]["stages"], {}, shape, rates)))


if __name__ == "__main__":
    main()
