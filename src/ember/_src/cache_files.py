"""The compile caches' directory and its files, used only when they can be trusted (docs/SECURITY.md).

The cache directory is used only when it and the directories above it pass :func:`distrust_reason`
(yours or root's, not writable by others; sticky parents such as ``/tmp`` allowed), else a private
one replaces it with one warning; a full filesystem does the same (:func:`_usable_cache_dir`). Each
file is opened once without following links and checked on that descriptor (:func:`_open_checked`:
a regular file of yours or root's that no one else can write); a file is written as a new file
renamed into place, never changed in place (:func:`_atomic_write_text`); a directory in place of a
cache file is removed (:func:`_remove`). The program cache (``progcache``) and the compiler probe
(``toolchain``) keep their files the same way, and so does the GPU kernel cache
(:mod:`ember._src.gpu.kernel_cache`). ``ember._src.native.runtime.cache_files`` is this module.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from ember.errors import CompileError

__all__ = ["UntrustedEntry", "cache_dir", "distrust_reason", "user_cache_dir"]

def cache_dir() -> Path:
    """``$EMBER_CACHE_DIR``, else ``$XDG_CACHE_HOME/ember``, else ``~/.cache/ember`` (read per call).

    When that directory cannot be used -- it cannot be written (read-only, no permission), it fails
    the trust checks (:func:`distrust_reason`), or its filesystem is full -- a private directory is
    used for the rest of the process instead, after one warning."""
    explicit = os.environ.get("EMBER_CACHE_DIR")
    configured = Path(explicit).expanduser() if explicit else user_cache_dir()
    return _replacement(configured)


_fallback_dirs: dict[str, Path] = {}  # cache dir -> the private directory used instead (see cache_dir)


def _replacement(directory: Path) -> Path:
    """``directory``, or the private directory that replaces it in this process (followed through
    replacements of replacements: a private directory whose filesystem filled up)."""
    seen = 0
    while str(directory) in _fallback_dirs and seen < 8:
        directory, seen = _fallback_dirs[str(directory)], seen + 1
    return directory


class UntrustedEntry(OSError):
    """A cache file that must not be used: not a regular file, or writable by another user, or
    owned by one (see :func:`_open_checked`)."""


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (os.getuid(), 0)


def _mode_text(st: os.stat_result) -> str:
    return oct(stat.S_IMODE(st.st_mode))


def distrust_reason(directory: Path | str) -> str | None:
    """Why the cache ``directory`` must not be trusted, or None when it passes the checks (the model
    of OpenSSH's ``StrictModes``): the directory is owned by this user (or root) and no other user
    can write it; every directory above it (of its real path) is owned by this user or root and is
    not writable by others unless its sticky bit is set (``/tmp``: others cannot rename or remove
    the entries they do not own there, so our cache directory in it cannot be swapped)."""
    path = os.path.realpath(directory)
    first = True
    while True:
        try:
            st = os.stat(path)
        except OSError as e:
            return f"{path} cannot be examined ({e.strerror or e})"
        if not stat.S_ISDIR(st.st_mode):
            return f"{path} is not a directory"
        if not _owner_ok(st):
            return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()}) or root"
        if st.st_mode & 0o022 and (first or not st.st_mode & stat.S_ISVTX):
            who = "group- and world" if st.st_mode & 0o022 == 0o022 else \
                "world" if st.st_mode & 0o002 else "group"
            return f"{path} is {who}-writable (mode {_mode_text(st)})"
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path, first = parent, False


def _warn(msg: str) -> None:
    import logging
    import warnings
    logging.getLogger("ember").warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=4)


def _fall_back(directory: Path, why: str, *, user_dir: bool = False) -> Path:
    """Replace ``directory`` for the rest of the process (one warning naming it and ``why``): by the
    user cache directory when ``user_dir`` and that one is a different, trusted directory, else by
    a new private temporary directory (mode 0700). Threads that find the same directory unusable
    at once share one replacement and one warning."""
    with _fallback_lock:
        if str(directory) in _fallback_dirs:
            return _replacement(directory)
        return _fall_back_locked(directory, why, user_dir)


_fallback_lock = threading.Lock()


def _fall_back_locked(directory: Path, why: str, user_dir: bool) -> Path:
    private: Path | None = None
    if user_dir:
        candidate = _replacement(user_cache_dir())
        if os.path.realpath(candidate) != os.path.realpath(directory):
            with contextlib.suppress(OSError):
                candidate.mkdir(mode=0o700, parents=True, exist_ok=True)
                if distrust_reason(candidate) is None:
                    private = candidate
    if private is None:
        private = Path(tempfile.mkdtemp(prefix="ember-cache-"))
    _fallback_dirs[str(directory)] = private
    _warn(f"ember: the compile cache {directory} {why}; using the private directory {private} for this "
          "process (set EMBER_CACHE_DIR to a directory of your own that only you can write)")
    return private


def _usable_cache_dir(directory: Path | None = None) -> Path:
    """``directory`` (default :func:`cache_dir`), created (mode 0700) and checked; a directory
    that cannot be written or fails :func:`distrust_reason` is replaced (once, with a warning) by a
    private one; a path that is a file raises naming ``EMBER_CACHE_DIR``."""
    directory = _replacement(directory) if directory is not None else cache_dir()
    if directory.exists() and not directory.is_dir():
        raise CompileError(f"the ember cache path {directory} is a file, not a directory: set "
                           "EMBER_CACHE_DIR to a directory (or remove the file)")
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        reason = distrust_reason(directory)  # before anything is read or written there
        if reason is not None:
            return _fall_back(directory, f"is not safe to use: {reason}", user_dir=True)
        # a probe file of its own per call: threads of one process check at once (a background
        # library build beside a program's compile), and a shared name let one thread remove the
        # other's probe -- ENOENT read as "not writable"
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except NotADirectoryError:
        raise CompileError(f"the ember cache path {directory} is inside a file: set EMBER_CACHE_DIR to a "
                           "directory") from None
    except OSError as e:
        if e.errno in _FULL:
            return _fall_back(directory, f"is on a full filesystem ({e.strerror or e})")
        return _fall_back(directory, f"is not writable ({e.strerror or e})")
    return directory


_FULL = (errno.ENOSPC, errno.EDQUOT)  # "no space left", "disk quota exceeded"


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/ember``, else ``~/.cache/ember``: where per-machine facts (the compiler
    probe) live, independent of ``$EMBER_CACHE_DIR`` (read per call)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "ember"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except IsADirectoryError:  # a directory in the lock's place: remove it, then lock
        _remove(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as a new file (mode 0600): a uniquely named temporary file beside
    it, renamed into place. A file never changes in place: a process that has it open or mapped
    keeps the old contents. A directory in ``path``'s place is removed first."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600)
        if path.is_dir() and not path.is_symlink():
            _remove(path)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _remove(path: Path | str) -> None:
    """Remove a cache file, or a directory (tree) someone put in its place; errors are ignored."""
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _entry_reason(st: os.stat_result) -> str | None:
    """Why an opened cache file must not be used (None when it may): not a regular file, owned by
    another user (not root), or writable by the group or others."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if not _owner_ok(st):
        return f"owned by uid {st.st_uid}, not by this user (uid {os.getuid()}) or root"
    if st.st_mode & 0o022:
        return f"writable by other users (mode {_mode_text(st)})"
    return None


def _open_checked(path: Path | str) -> int:
    """Open the cache file ``path`` read-only, without following a symbolic link and without
    blocking on a FIFO, and check the file opened (``fstat``, :func:`_entry_reason`). Returns the
    descriptor (the caller closes it); raises :class:`UntrustedEntry` (or the ``OSError`` of the
    open) otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        reason = _entry_reason(os.fstat(fd))
        if reason is not None:
            raise UntrustedEntry(f"{path} is {reason}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_checked(path: Path | str) -> bytes:
    """The bytes of the cache file ``path``, read through :func:`_open_checked`."""
    fd = _open_checked(path)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
