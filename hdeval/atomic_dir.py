"""Writing a directory atomically: build it in a temporary sibling, then swap it into place.

The temporary sibling of ``<parent>/<name>`` is ``<parent>/.<name>.tmp-<pid>``. A finished one
replaces ``<name>`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so a reader, or a process
killed at any moment, sees the previous directory or the new one, never a mix and never neither.
Where the exchange is not available (other systems, some file systems) the previous directory is
first renamed to ``.<name>.old-<pid>``; a replacement cut off between its two renames is rolled
back by the next write. Siblings left by killed writers (their pid is gone) are removed by the next
write to the same path.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _sibling(path: Path, kind: str, pid: int | None = None) -> Path:
    return path.with_name(f".{path.name}.{kind}-{os.getpid() if pid is None else pid}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _remove_stale(path: Path) -> None:
    """Delete temporary siblings of dead writers; restore a previous directory they moved away."""
    for kind in ("old", "tmp"):  # "old" first: a restored directory makes "tmp" ones garbage
        for stale in sorted(path.parent.glob(f".{path.name}.{kind}-*")):
            pid = stale.name.rsplit("-", 1)[1]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            if kind == "old" and not path.exists():
                stale.rename(path)
            else:
                shutil.rmtree(stale, ignore_errors=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step; False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    int_, path_ = ctypes.c_int, ctypes.c_char_p
    renameat2.argtypes = [int_, path_, int_, path_, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _put_in_place(new: Path, path: Path) -> None:
    """Move directory ``new`` to ``path``; a previous ``path`` ends up at ``new`` or is removed."""
    if not path.exists():
        new.rename(path)
    elif not _exchange(new, path):
        old = _sibling(path, "old")
        path.rename(old)
        new.rename(path)
        shutil.rmtree(old)


@contextlib.contextmanager
def staged_dir(path: str | Path) -> Iterator[Path]:
    """Yield an empty temporary directory; when the block succeeds it replaces ``path`` atomically.

    If the block raises, ``path`` is left as it was and the temporary directory is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    tmp = _sibling(path, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        _put_in_place(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
