"""Which precision a local judge runs in (``llm.dtype``, ``llm.quantize``), decided by the CPU,
and the fingerprint of its weights (part of its identity)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import torch

from hdeval.errors import ConfigError
from hdeval.llm.local.embedded import MANIFEST
from hdeval.paths import sha256_file, write_text_atomic

SIDECAR = ".hdeval-fingerprint.json"


def cpu_flags() -> list[str]:
    """This CPU's ``/proc/cpuinfo`` flags (and the file's other words); none where it cannot
    be read."""
    try:
        return Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return []


def cpu_supports_bf16() -> bool:
    """True where bf16 matmuls beat the alternatives on this CPU: it has AMX tiles (``amx_bf16``)
    and torch's kernels may use AVX512.

    AVX512-BF16 alone is not enough: on a 2-core Xeon with AVX512-BF16 and AVX512-VNNI but no
    AMX, the 0.5B judge prefilled 190 tokens/s in bf16, 300 in fp32 and 806 with int8 Linear
    layers (``benchmarks/scoring.py``), so such a CPU runs fp32 with int8
    (:func:`resolve_quantize`). An AMD EPYC with AVX512-BF16 and AVX-VNNI but no AMX runs bf16
    faster than fp32 (640 against 256 tokens/s) but int8 faster still (964), so the rule holds
    there too.
    Also false where torch's kernels are held below AVX512 (``ATEN_CPU_CAPABILITY=avx2``), or
    oneDNN's below AMX (``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``), so that a CPU capped that way
    picks what an AVX2-only CPU, or an AVX512 one without AMX, does.
    """
    return bf16_is_fast(
        cpu_flags(),
        torch.backends.cpu.get_cpu_capability(),
        onednn_cap(),
    )


def onednn_cap(isa: str | None = None) -> str:
    """oneDNN's ISA cap, ``isa`` or else this process's ``ONEDNN_MAX_CPU_ISA``, in upper case;
    ``ALL`` where none is set (oneDNN reads an empty cap as none)."""
    if isa is None:
        isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    return isa.strip().upper() or "ALL"


def bf16_is_fast(cpu_flags: Sequence[str], capability: str, onednn_isa: str = "ALL") -> bool:
    """Whether ``dtype: auto`` picks bf16 on a CPU with these ``/proc/cpuinfo`` flags, torch
    CPU ``capability`` and oneDNN ISA cap ``onednn_isa`` (see :func:`cpu_supports_bf16`)."""
    isa = onednn_cap(onednn_isa)
    amx_allowed = isa in ("ALL", "DEFAULT") or "AMX" in isa
    return capability == "AVX512" and "amx_bf16" in cpu_flags and amx_allowed


def resolve_dtype(name: str) -> torch.dtype:
    if name == "auto":
        if torch.cuda.is_available() or cpu_supports_bf16():
            return torch.bfloat16
        return torch.float32
    try:
        return {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[
            name
        ]
    except KeyError as exc:
        raise ConfigError(
            f"llm.dtype must be auto, bfloat16, float16 or float32, got {name!r}"
        ) from exc


def weights_fingerprint(path: Path) -> str:
    """sha256 identifying a model's weights: the source GGUF hash or the weight files' hashes.

    The hash of a directory's weight files is kept in a side file (:data:`SIDECAR`) with their
    names, sizes and modification times, so it is computed once; the side file is written
    atomically and read with a guard: one that does not match, or cannot be read whole, is
    computed again and rewritten."""
    if path.is_file():
        return sha256_file(path)
    manifest = path / MANIFEST
    if manifest.is_file():
        return json.loads(manifest.read_text())["source_sha256"]
    files = sorted(p for p in path.iterdir() if p.suffix in {".safetensors", ".bin", ".gguf"})
    if not files:
        raise ConfigError(f"no weight files (*.safetensors, *.bin, *.gguf) in {path}")
    sidecar = path / SIDECAR
    stamp = [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    known = _read_sidecar(sidecar, stamp)
    if known is not None:
        return known
    digest = hashlib.sha256("".join(sha256_file(p) for p in files).encode()).hexdigest()
    with contextlib.suppress(OSError):  # a read-only directory: hashed again next time
        write_text_atomic(sidecar, json.dumps({"stamp": stamp, "sha256": digest}))
    return digest


def _read_sidecar(sidecar: Path, stamp: list) -> str | None:
    """The hash the side file records for weight files of ``stamp``, or None where it is
    missing, for other files, or not a whole, well-formed record."""
    try:
        cached = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("stamp") != stamp:
        return None
    digest = cached.get("sha256")
    return digest if isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest) else None


QUANTIZATIONS = ("none", "int8", "int8_fbgemm", "auto")


#: oneDNN ISA caps (``ONEDNN_MAX_CPU_ISA``) below every VNNI level: int8 products run without it.
BELOW_VNNI = ("SSE41", "AVX", "AVX2", "AVX512_CORE")


def int8_is_fast(cpu_flags: Sequence[str], onednn_isa: str = "ALL") -> bool:
    """Whether int8 matrix products beat fp32 on a CPU with these ``/proc/cpuinfo`` flags: it
    has VNNI (``avx512_vnni`` or ``avx_vnni``) and oneDNN is not held below it. Without VNNI
    ``torch._int_mm`` is the slower one: on an AVX2-only AMD EPYC (family 23) a 64 x 896 x 4864
    product took 0.70 s in int8 against 0.05 s in fp32, and on a Xeon held to
    ``ONEDNN_MAX_CPU_ISA=AVX2`` 4.0 ms against 2.3 (``benchmarks/quantization.py`` times the
    judge both ways)."""
    vnni = "avx512_vnni" in cpu_flags or "avx_vnni" in cpu_flags
    return vnni and onednn_cap(onednn_isa) not in BELOW_VNNI


def fbgemm_is_fast(cpu_flags: Sequence[str], engines: Sequence[str]) -> bool:
    """Whether fbgemm's int8 products (``int8_fbgemm``) beat fp32 on a CPU with these flags and
    torch quantised ``engines``: it has AVX2 (fbgemm's least ISA) and torch was built with
    fbgemm. On an AVX2-only AMD EPYC (family 25) they ran the 0.5B judge's likelihoods 3.1 times
    as fast as fp32 (``benchmarks/quantization.py``)."""
    return "avx2" in cpu_flags and "fbgemm" in engines


def resolve_quantize(name: str, dtype: str, device: str) -> str:
    """``auto``, where ``dtype: auto`` runs fp32 on the CPU (no AMX): ``int8`` where the CPU has
    VNNI that oneDNN may use (:func:`int8_is_fast`), else ``int8_fbgemm`` where fbgemm runs
    (:func:`fbgemm_is_fast`), else none."""
    if name != "auto":
        return name
    fp32_cpu = dtype == "auto" and device == "cpu" and resolve_dtype("auto") == torch.float32
    if not fp32_cpu:
        return "none"
    flags = cpu_flags()
    if int8_is_fast(flags, onednn_cap()):
        return "int8"
    engines = torch.backends.quantized.supported_engines
    return "int8_fbgemm" if fbgemm_is_fast(flags, engines) else "none"
