"""A folder built once per host and then shared by every process that needs it.

The first caller builds it under an exclusive lock (``fcntl.flock``, https://man7.org/linux/man-pages/man2/flock.2.html)
into a temporary folder renamed into place when complete; callers arriving meanwhile wait on
the lock and then read what it built. A build that fails or is killed leaves no folder, so the
next caller builds it again.
"""

from __future__ import annotations

import fcntl
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

DONE = ".complete"


def built_once(folder: Path, build: Callable[[Path], None]) -> Path:
    """``folder``, built by ``build(tmp)`` (writing under ``tmp``) unless a process did already."""
    if (folder / DONE).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f".{folder.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (folder / DONE).is_file():  # built while this process waited
                return folder
            tmp = folder.parent / f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}"
            try:
                tmp.mkdir()
                build(tmp)
                (tmp / DONE).touch()
                shutil.rmtree(folder, ignore_errors=True)  # a copy without its marker
                tmp.rename(folder)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return folder
