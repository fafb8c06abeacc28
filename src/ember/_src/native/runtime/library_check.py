"""Verifying a cached library and loading it from the descriptor that was verified.

Beside each library ``<key>.so`` the cache keeps ``<key>.so.sha256``: SHA-256 over the key and the
library's bytes, so an entry is valid only under its own key. A library is opened once, checked on
that descriptor (:func:`.cache_files._open_checked`, then the digest: :func:`_open_verified`), and
handed to ``dlopen`` by a name of that same open file (:func:`opened_library`), so the check and the
load see one file. Entries that fail are counted (:func:`rejected_entries`), removed and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from ember._src.native.runtime import cache_files
from ember.errors import CompileError

__all__ = ["RejectedLibrary", "opened_library", "rejected_entries"]

_rejected_lock = threading.Lock()
_rejected = [0]  # cached libraries that failed verification and were rebuilt


def rejected_entries() -> int:
    """Cached libraries found corrupted (failed verification) and rebuilt since process start (or the
    last :func:`.compiler.clear_memory_cache`)."""
    with _rejected_lock:
        return _rejected[0]


def reset_rejected() -> None:
    """Set the :func:`rejected_entries` counter back to zero."""
    with _rejected_lock:
        _rejected[0] = 0


# the digest covers the key: a library and digest pair is valid only under the key it was built for
_DIGEST_FORMAT = b"ember-library-v2\0"


def _entry_key(so: Path | str) -> str:
    """The cache key of the library ``<key>.so``."""
    name = os.path.basename(so)
    return name[:-3] if name.endswith(".so") else name


def _digest_path(so: Path | str) -> Path:
    return Path(str(so) + ".sha256")


def _digest_start(key: str) -> hashlib._Hash:
    h = hashlib.sha256(_DIGEST_FORMAT)
    h.update(key.encode())
    h.update(b"\0")
    return h


def _file_digest(path: Path | str, key: str) -> str:
    """SHA-256 over the library's key and its bytes (what ``<key>.so.sha256`` records)."""
    h = _digest_start(key)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fd_hash(h: hashlib._Hash, fd: int) -> str:
    """``h`` updated with the bytes of the open file ``fd`` (read from its start with ``pread``)."""
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        h.update(chunk)
        offset += len(chunk)
    return h.hexdigest()


def _fd_digest(fd: int, key: str) -> str:
    """:func:`_file_digest` of the open file ``fd``."""
    return _fd_hash(_digest_start(key), fd)


def _fd_digest_v1(fd: int) -> str:
    """The digest older embers recorded: SHA-256 of the library's bytes alone. An entry that
    matches it is intact but of the old format; it is rebuilt without a warning (nothing of it is
    loaded)."""
    return _fd_hash(hashlib.sha256(), fd)


def _open_verified(so: Path, report: bool = True) -> int | None:
    """An open descriptor of the cached library ``so`` when it is exactly what was built for its key,
    else None. Checked on the descriptor: a regular, non-empty file of this user (or root) that no
    other user can write (:func:`.cache_files._open_checked`), whose SHA-256 over key and bytes matches the
    checked digest file. Nothing of it is loaded or run before this check passes. A present but
    bad entry is logged and counted (:func:`rejected_entries`; not with ``report=False``), and later
    removed and rebuilt."""
    if not os.path.lexists(so):
        return None
    fd = None
    why = "truncated, corrupted or replaced"
    try:
        fd = cache_files._open_checked(so)
        recorded = cache_files._read_checked(_digest_path(so)).decode("ascii").strip()
        if os.fstat(fd).st_size > 0 and recorded == _fd_digest(fd, _entry_key(so)):
            return fd
        if recorded == _fd_digest_v1(fd):  # an intact entry of an older ember: rebuilt quietly
            report = False
    except cache_files.UntrustedEntry as e:
        why = str(e)
    except (OSError, ValueError):  # unreadable, a directory, or a digest file that is not text
        pass
    if fd is not None:
        os.close(fd)
    if not report:
        return None
    import logging
    logging.getLogger("ember").warning("ember: the cached library %s failed verification (%s); rebuilding it",
                                       so, why)
    with _rejected_lock:
        _rejected[0] += 1
    return None


def _verified(so: Path, report: bool = True) -> bool:
    """Whether the cached library ``so`` passes :func:`_open_verified`."""
    fd = _open_verified(so, report)
    if fd is None:
        return False
    os.close(fd)
    return True


def _discard(so: Path) -> None:
    """Remove a bad cache entry (a file, or a directory someone put in its place) and its digest."""
    cache_files._remove(so)
    cache_files._remove(_digest_path(so))


_PROC_FD = os.path.isdir("/proc/self/fd")  # Linux: a descriptor can be opened again by name
_loads = itertools.count(1)


def _descriptor_name(fd: int) -> str:
    """A name of the open file ``fd`` for ``dlopen``: ``/proc/self/fd/<fd>``, spelled differently
    for every load of the process. glibc's ``dlopen`` returns an already loaded library whose name
    is the same string without opening anything, and descriptor numbers are reused once closed: a
    second library opened as ``/proc/self/fd/7`` would be handed the first. The spelling adds
    empty (``//``) and current-directory (``/./``) steps in the pattern of the load's binary
    number, which the kernel resolves to the same descriptor."""
    steps = "".join("./" if bit == "1" else "/" for bit in bin(next(_loads))[2:])
    return f"/proc/self/{steps}fd/{fd}"


class RejectedLibrary(CompileError):
    """The cached library failed its check when it was opened for loading."""


@contextlib.contextmanager
def opened_library(path: str) -> Iterator[str]:
    """Open the cached library ``path`` once, check it on that descriptor (:func:`_open_verified`)
    and yield the name to ``dlopen`` that refers to the same open file (:func:`_descriptor_name` on
    Linux; ``path`` itself where there is no ``/proc``), so the check and the load see one file.
    Raises :class:`RejectedLibrary` when the check fails."""
    fd = _open_verified(Path(path))
    if fd is None:
        raise RejectedLibrary(f"the cached library {path} failed verification when opened for loading")
    try:
        yield _descriptor_name(fd) if _PROC_FD else path
    finally:
        os.close(fd)
