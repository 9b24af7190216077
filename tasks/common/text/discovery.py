"""Finding input files under configured folders or globs without leaving them.

Every entry that looks like an input (its name ends with one of the extensions, or a glob
names it) becomes either a content digest or a refusal ``"<reason>:<detail>"``, so a stage
can exclude it with a reason instead of skipping it silently:

- ``outside_source_root``: a symbolic link (or a path through one) whose target is outside
  the configured folder (``/etc/passwd`` linked as ``x.xml``); its target is never opened.
  ``follow_links_outside=True`` takes such targets;
- ``dangling_link``, ``symlink_loop``: a link that resolves to nothing;
- ``not_a_regular_file``: a folder, FIFO, socket or device with an input's name; a FIFO is
  never opened (opening one blocks until a writer comes);
- ``unreadable``: the OS refused to read it (the OS's reason).

Digests are blake2b-128 of the bytes, as :func:`irforge.fingerprint.digest_file`.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from irforge.errors import ConfigError
from tasks.common.text.document import InputRejected

_READ_BLOCK = 1 << 20
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO (named pipe); not opened",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def refusal(value: str) -> tuple[str, str] | None:
    """``(reason, detail)`` when a discovered value is a refusal, None when it is a digest."""
    if ":" not in value:
        return None
    reason, detail = value.split(":", 1)
    return reason, detail


def discover(
    patterns: tuple[str, ...],
    extensions: tuple[str, ...],
    base_dir: Path,
    field: str,
    *,
    follow_links_outside: bool = False,
) -> dict[str, str]:
    """Display path (relative to ``base_dir``) → digest or refusal, for folders or globs.

    ``field`` names the config entry in the error raised when a pattern matches nothing.
    """
    found: dict[str, str] = {}
    suffixes = tuple(e.lower() for e in extensions)
    for index, pattern in enumerate(patterns):
        path = (base_dir / pattern).resolve()
        matches: dict[Path, str] = {}
        if glob.has_magic(pattern):
            matches = _globbed(base_dir, pattern, suffixes, follow_links_outside)
        elif path.is_dir():
            matches = dict(_walk(path, str(path), suffixes, follow_links_outside, (str(path),)))
        elif os.path.lexists(base_dir / pattern):  # a file named in the config: its folder is the root
            root = (base_dir / pattern).parent.resolve()
            named = root / Path(pattern).name
            matches = {named: _classify(named, str(root), follow_links_outside)}
        if not matches:
            raise ConfigError(
                f"{field}[{index}]: no such folder, or no file matches: {pattern!r} (resolved against {base_dir})"
            )
        # Relative paths keep fingerprints and artifacts the same in every checkout of the config.
        found.update({os.path.relpath(p, base_dir.resolve()): v for p, v in matches.items()})
    return dict(sorted(found.items()))


def _walk(
    folder: Path, root: str, suffixes: tuple[str, ...], allow: bool, ancestors: tuple[str, ...]
) -> Iterator[tuple[Path, str]]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as err:
        yield folder, f"unreadable:folder: {err.strerror}"
        return
    for entry in entries:
        path = Path(entry.path)
        named = entry.name.lower().endswith(suffixes)
        if entry.is_symlink() and path.is_dir():
            real = os.path.realpath(path)
            if real in ancestors:
                yield path, f"symlink_loop:link to {str(path.readlink())!r}, a folder that contains it"
                continue
            if not allow and not _inside(real, root):
                yield path, _outside(path)
                continue
            if named:
                yield path, "not_a_regular_file:" + _KINDS[stat.S_IFDIR]
            yield from _walk(path, root, suffixes, allow, (*ancestors, real))
        elif entry.is_dir(follow_symlinks=False):
            if named:
                yield path, "not_a_regular_file:" + _KINDS[stat.S_IFDIR]
            yield from _walk(path, root, suffixes, allow, (*ancestors, os.path.realpath(path)))
        elif named:
            yield path, _classify(path, root, allow)


def _globbed(base_dir: Path, pattern: str, suffixes: tuple[str, ...], allow: bool) -> dict[Path, str]:
    """Matches of a glob; its root is the longest folder of the pattern without wildcards."""
    parts = Path(pattern).parts
    plain = parts[: next(i for i, p in enumerate(parts) if glob.has_magic(p))]
    start = Path(os.path.normpath((base_dir / Path(*plain)).absolute()))
    root = start.resolve()
    out: dict[Path, str] = {}
    # glob.glob, not Path.glob: patterns may be absolute or climb out with "..".
    for match in glob.glob(str(base_dir / pattern), recursive=True):  # noqa: PTH207
        path = Path(os.path.realpath(Path(match).parent)) / Path(match).name
        if path.is_dir() and not path.name.lower().endswith(suffixes):
            continue  # a folder the pattern also matches: not an input
        loop = _loop_through(Path(match), start)
        if loop is not None:  # glob's "**" follows links to folders, round a loop too
            out[loop] = f"symlink_loop:link to {str(loop.readlink())!r}, a folder that contains it"
            continue
        out[path] = _classify(path, str(root), allow)
    return out


def _loop_through(match: Path, start: Path) -> Path | None:
    """The first link to a folder that contains it on ``match``'s path below ``start``."""
    current = start
    for part in Path(os.path.relpath(os.path.normpath(match.absolute()), start)).parts[:-1]:
        parent, current = current, current / part
        if current.is_symlink() and current.is_dir():
            real = os.path.realpath(current)
            if _inside(os.path.realpath(parent), real):
                return current
    return None


def _classify(path: Path, root: str, allow: bool) -> str:
    """The digest of a regular file inside ``root``, or why it is refused (never blocks)."""
    try:
        mode = path.stat().st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "symlink_loop:symbolic link loop (too many levels of symbolic links)"
        if err.errno == errno.ENOENT and path.is_symlink():
            return f"dangling_link:link to {str(path.readlink())!r}, which does not exist"
        return f"unreadable:{err.strerror}"
    if not allow and not _inside(os.path.realpath(path), root):
        return _outside(path)
    if not stat.S_ISREG(mode):
        return "not_a_regular_file:" + _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    try:
        return _digest(path)
    except InputRejected as err:
        return f"{err.reason}:{err.detail}"
    except OSError as err:
        return f"unreadable:{err.strerror}"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _outside(path: Path) -> str:
    where = str(path.readlink()) if path.is_symlink() else "a linked folder"
    return (
        f"outside_source_root:link to {where!r}, outside the source folder; "
        "set follow_links_outside: true in the stage config to take it"
    )


def _open_regular(path: Path) -> tuple[int, int]:
    """An fd and the size of a regular file; a FIFO is opened without blocking, then refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode, size = (st := os.fstat(fd)).st_mode, st.st_size
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputRejected("not_a_regular_file", _KINDS.get(stat.S_IFMT(mode), "not a regular file"))
    return fd, size


def _digest(path: Path) -> str:
    fd, _ = _open_regular(path)
    h = hashlib.blake2b(digest_size=16)
    with os.fdopen(fd, "rb") as fh:
        while block := fh.read(_READ_BLOCK):
            h.update(block)
    return h.hexdigest()


def read_input(path: Path, value: str, max_bytes: int) -> bytes:
    """The bytes of a discovered file; :class:`InputRejected` when it cannot or should not be read.

    The bytes must still have the digest that entered the fingerprint (a link swapped to
    point elsewhere since discovery is refused, not read).
    """
    refused = refusal(value)
    if refused is not None:
        raise InputRejected(*refused)
    try:
        fd, size = _open_regular(path)
        with os.fdopen(fd, "rb") as fh:
            if size > max_bytes:
                raise InputRejected("too_large", f"{size} bytes > max_bytes {max_bytes}")
            data = fh.read()
    except OSError as err:
        raise InputRejected("unreadable", str(err.strerror)) from None
    if hashlib.blake2b(data, digest_size=16).hexdigest() != value:
        raise InputRejected("changed_since_discovery", "the file changed while the stage ran: run it again")
    return data
