"""Where hdeval keeps user data, the file hash every integrity check uses, and an atomic file
write."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path


def hdeval_home() -> Path:
    """Root of hdeval's user data (models, score cache); ``HDEVAL_HOME`` overrides it."""
    env = os.environ.get("HDEVAL_HOME")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("hdeval"))


def sha256_file(path: str | Path, block: int = 1 << 20) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary sibling of ``path``, then rename it over ``path`` in one
    step: a reader, or a process killed meanwhile, sees the old file or the new one, never a
    part of it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
