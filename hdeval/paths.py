"""Where hdeval keeps user data, and the file hash every integrity check uses."""

from __future__ import annotations

import hashlib
import os
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
