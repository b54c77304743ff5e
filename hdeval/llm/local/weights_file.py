"""The tensors of a safetensors checkpoint read a block of rows at a time with plain reads.

transformers maps the weights file into memory; every page of it that is read stays resident
(and counts in the process's RSS) until the last tensor of the file is freed. A judge whose
Linear layers are quantised as it loads therefore read its 16-bit weights from here instead:
each block of rows lives only while it is quantised, so loading peaks near what the quantised
judge keeps rather than at the weights file plus it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import torch

#: safetensors dtype names of the types read here (the 16-bit ones a quantised judge widens).
_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
#: Rows read at a time: 4096 rows of the 0.5B judge's vocabulary projection are 7 MB in bf16.
BLOCK_ROWS = 4096


class WeightsFile:
    """The tensors of a checkpoint directory's ``model.safetensors`` (or of the shards its
    ``model.safetensors.index.json`` names), by name."""

    def __init__(self, directory: Path) -> None:
        index = directory / "model.safetensors.index.json"
        files = (
            sorted({directory / f for f in json.loads(index.read_text())["weight_map"].values()})
            if index.exists()
            else [directory / "model.safetensors"]
        )
        self._entries: dict[str, tuple[Path, torch.dtype, tuple[int, ...], int]] = {}
        for path in files:
            with path.open("rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(size))
            for name, entry in header.items():
                if name != "__metadata__" and entry["dtype"] in _DTYPES:
                    begin = 8 + size + entry["data_offsets"][0]
                    dtype, shape = _DTYPES[entry["dtype"]], tuple(entry["shape"])
                    self._entries[name] = (path, dtype, shape, begin)

    @classmethod
    def of(cls, directory: Path) -> WeightsFile | None:
        """The checkpoint in ``directory``, or None where it holds no safetensors file."""
        names = ("model.safetensors", "model.safetensors.index.json")
        return cls(directory) if any((directory / n).exists() for n in names) else None

    def holds(self, name: str, like: torch.Tensor) -> bool:
        """Whether the file has tensor ``name`` with ``like``'s shape and type."""
        entry = self._entries.get(name)
        return entry is not None and entry[1] == like.dtype and entry[2] == tuple(like.shape)

    def row_blocks(self, name: str, rows: int = BLOCK_ROWS) -> Iterator[torch.Tensor]:
        """Tensor ``name`` as consecutive blocks of at most ``rows`` rows (its first dimension)."""
        path, dtype, shape, begin = self._entries[name]
        row_elements = 1
        for n in shape[1:]:
            row_elements *= n
        row_bytes = row_elements * torch.empty((), dtype=dtype).element_size()
        with path.open("rb") as f:
            f.seek(begin)
            for start in range(0, shape[0], rows):
                count = min(rows, shape[0] - start)
                block = bytearray(f.read(count * row_bytes))
                yield torch.frombuffer(block, dtype=dtype).reshape(count, *shape[1:])
