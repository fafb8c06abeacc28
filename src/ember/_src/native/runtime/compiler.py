"""Compiling C into shared objects and loading them, through a content-addressed cache.

Three cache tiers, checked in order:

1. loaded libraries (``load_library``): source key -> ``ctypes.CDLL``;
2. compiled paths in this process: (cache dir, key) -> path of the ``.so``;
3. the disk cache: ``<cache dir>/<key>.so`` next to the saved source ``<key>.c``.

The key hashes the source, the flags, the compiler identity and the CPU that ``-march=native``
resolves to, so a cache directory shared between machines never hands out code for the wrong CPU.
Writes are atomic (compile into a uniquely named temporary file in the cache directory, then
``os.replace``; no cache file is ever changed in place, so a process that loaded a library keeps
the pages it mapped) and serialized per key with ``fcntl.flock`` on ``<key>.lock``, so concurrent
processes do not clash; temporary files a killed process left are removed by the next build of
that key. A build interrupted by Ctrl-C kills the compiler's whole process group
(:func:`.toolchain._run`) and removes what it wrote of the entry (the temporary library, a digest
without its library, the saved source), so the next call builds it again from nothing.
:func:`build_library` is the disk tier alone, without the counters (per-machine libraries built in
the background); :func:`compile_shared` adds the in-memory tier and the counters.

The parts it builds on, each in its own module: :mod:`.toolchain` finds the compiler and its flags
(the probe, remembered per machine); :mod:`.cache_files` chooses and checks the cache directory and
reads and writes its files safely (docs/SECURITY.md); :mod:`.library_check` verifies an entry's
digest on an open descriptor and loads the library from that descriptor.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import re
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from ember._src.native.runtime import cache_files, library_check, toolchain
from ember.errors import CompileError

__all__ = [
    "CompileError",
    "build_library",
    "cache_key",
    "cache_stats",
    "clear_memory_cache",
    "compile_shared",
    "load_library",
    "vectorization_report",
]

# libgomp reads OMP_WAIT_POLICY when the first OpenMP program is loaded. Its default lets idle
# threads spin, which on a busy or oversubscribed machine (BLAS threads, pytest-xdist workers, other
# processes) made a 1 ms MLP call take 27 ms; sleeping idle threads cost a few microseconds per
# parallel region instead. Set the variable before importing ember to choose otherwise.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class _Stats:
    def __init__(self) -> None:
        self.compiles = 0
        self.disk_hits = 0
        self.memory_hits = 0


_lock = threading.Lock()
_stats = _Stats()
_paths: dict[tuple[str, str], str] = {}
_libraries: dict[tuple[str, str], ctypes.CDLL] = {}


_COMMENT_RE = re.compile(r"/\*.*?\*/", re.S)


def cache_key(source: str, info: toolchain.CompilerInfo | None = None,
              extra_flags: tuple[str, ...] = ()) -> str:
    """sha256 over source (without its ``/* */`` comments, which name program variables by their
    process-wide ids, so the same program traced after other work keeps its key), flags,
    compiler identity and native target."""
    info = info or toolchain._require_compiler()
    h = hashlib.sha256()
    for part in (_COMMENT_RE.sub("", source), " ".join(toolchain.source_flags(source, info) + extra_flags),
                 " ".join(toolchain.source_libs(source)), info.identity, info.target):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_stats() -> dict[str, int]:
    """Counters since process start: ``compiles``, ``disk_hits``, ``memory_hits``."""
    with _lock:
        return {"compiles": _stats.compiles, "disk_hits": _stats.disk_hits, "memory_hits": _stats.memory_hits}


def clear_memory_cache() -> None:
    """Forget the in-memory tiers (paths and loaded libraries) and reset the counters."""
    global _stats
    with _lock:
        _paths.clear()
        _libraries.clear()
        _stats = _Stats()
    library_check.reset_rejected()


def _safe_hint(name_hint: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name_hint)[:40] or "kernel"


def _build(info: toolchain.CompilerInfo, src: Path, so: Path, name_hint: str, flags: tuple[str, ...],
           libs: tuple[str, ...] = toolchain.LINK_LIBS, nice: int = 0) -> None:
    """Compile ``src`` into a uniquely named temporary file next to ``so`` (``.<so stem>-<hint>-*.so.tmp``)
    and rename it into place (never written in place: a process that loaded the old library keeps
    it mapped intact); the temporary file is removed when the compile fails. A compiler that fails
    because the disk is full raises ``OSError(ENOSPC)`` (the caller moves to a private directory)."""
    fd, tmp = tempfile.mkstemp(dir=so.parent, prefix=f".{so.stem}-{_safe_hint(name_hint)}-", suffix=".so.tmp")
    os.close(fd)
    cmd = [info.path, *flags, "-o", tmp, str(src), *libs]
    try:
        try:
            proc = toolchain._run(cmd, timeout=toolchain.COMPILE_TIMEOUT_S, nice=nice)
        except subprocess.TimeoutExpired as exc:
            raise CompileError(f"compiling {name_hint!r} timed out after {exc.timeout}s; "
                               f"source: {src}") from None
        if proc.returncode != 0:
            if os.strerror(errno.ENOSPC) in proc.stderr or os.strerror(errno.EDQUOT) in proc.stderr:
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (the compiler's output)")
            raise CompileError(
                f"compiling {name_hint!r} failed (exit {proc.returncode})\n"
                f"source: {src}\ncommand: {shlex.join(cmd)}\n{proc.stderr.strip()}"
            )
        if not os.path.exists(tmp) or os.path.getsize(tmp) == 0:
            raise CompileError(f"compiling {name_hint!r}: the compiler exited 0 but wrote no output "
                               f"(nothing was cached)\nsource: {src}\ncommand: {shlex.join(cmd)}")
        os.chmod(tmp, 0o700)
        # the digest before the library: never an unverified library
        digest = library_check._file_digest(tmp, library_check._entry_key(so))
        cache_files._atomic_write_text(library_check._digest_path(so), digest)
        os.replace(tmp, so)
    except BaseException:
        if not so.exists():  # interrupted between the two writes: no digest without its library
            cache_files._remove(library_check._digest_path(so))
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _remove_stale_temporaries(directory: Path, key: str) -> None:
    """Delete the temporary files of ``key``'s source and library (``.<key>*.tmp``) that a process
    killed while building left behind. Called under the key's file lock: no live build owns them."""
    for stale in directory.glob(f".{key}*.tmp"):
        cache_files._remove(stale)


def _cached_build(info: toolchain.CompilerInfo, source: str, key: str, name_hint: str,
                  extra_flags: tuple[str, ...], nice: int = 0) -> tuple[str, bool]:
    """The disk tier: ``(path of <cache dir>/<key>.so, whether it was compiled now)``. A full
    filesystem (``ENOSPC``/``EDQUOT`` from any write, the compiler's included) moves the cache to a
    private temporary directory for the rest of the process, with one warning, and builds there."""
    directory = cache_files._usable_cache_dir()
    try:
        return _cached_build_in(directory, info, source, key, name_hint, extra_flags, nice)
    except OSError as e:
        if e.errno not in cache_files._FULL:
            raise
        full = e
    try:
        cache_files._fall_back(directory, f"is on a full filesystem ({full.strerror or full})")
        private = cache_files._usable_cache_dir()
        return _cached_build_in(private, info, source, key, name_hint, extra_flags, nice)
    except OSError as e:
        if e.errno not in cache_files._FULL:
            raise
        raise CompileError(f"no space left for compiling {name_hint!r}: neither the compile cache "
                           f"{directory} nor a private directory could be written "
                           f"({e.strerror or e})") from None


def _cached_build_in(directory: Path, info: toolchain.CompilerInfo, source: str, key: str, name_hint: str,
                     extra_flags: tuple[str, ...], nice: int = 0) -> tuple[str, bool]:
    """:func:`_cached_build` in ``directory``. An existing ``.so`` that passes
    :func:`.library_check._verified` is reused without locking (it was put in place by an atomic
    rename, so present means complete); otherwise it is built under the key's file lock unless
    another process did meanwhile."""
    so = directory / f"{key}.so"
    if library_check._verified(so, report=False):  # a bad entry is reported once, under the lock
        return str(so), False
    with cache_files._file_lock(directory / f"{key}.lock"):
        if library_check._verified(so):
            return str(so), False
        library_check._discard(so)
        _remove_stale_temporaries(directory, key)
        src = directory / f"{key}.c"
        try:
            same = cache_files._read_checked(src).decode() == source
        except (OSError, ValueError):  # absent, a directory, another user's, not text
            same = False
        if not same:
            cache_files._remove(src)
            cache_files._atomic_write_text(src, source)
        flags = toolchain.source_flags(source, info) + tuple(extra_flags)
        try:
            _build(info, src, so, name_hint, flags, toolchain.source_libs(source), nice)
        except Exception:
            raise  # a failed compile keeps its source: CompileError names it
        except BaseException:  # Ctrl-C (or exit) during the build: leave no part of the entry behind
            if not so.exists():
                with contextlib.suppress(OSError):
                    src.unlink()
            raise
    return str(so), True


def _forget_path(path: str) -> None:
    with _lock:
        for memo in [m for m, p in _paths.items() if p == path]:
            del _paths[memo]


def load_verified(get_path: Callable[[], str], mode: int = ctypes.DEFAULT_MODE) -> ctypes.CDLL:
    """``ctypes.CDLL`` of the library ``get_path()`` builds or finds, loaded through
    :func:`.library_check.opened_library`; when the file changed between the build and the load (it fails the
    check), the path is asked for again once -- which rebuilds the entry."""
    for attempt in (0, 1):
        path = get_path()
        try:
            with library_check.opened_library(path) as name:
                lib = ctypes.CDLL(name, mode=mode)
        except library_check.RejectedLibrary:
            _forget_path(path)
            if attempt:
                raise
            continue
        lib._name = path  # the file's name, not the descriptor's (which is closed now)
        return lib
    raise AssertionError("unreachable")  # pragma: no cover


def build_library(source: str, *, name_hint: str = "library", extra_flags: tuple[str, ...] = ()) -> str:
    """Compile C ``source`` into a shared object in the disk cache, or reuse the one there, and
    return its path -- without touching :func:`cache_stats` or the in-memory tier.

    For per-machine libraries built in the background (the call dispatcher, the GEMM kernel): a
    jitted function counts the compiles its own build causes by :func:`cache_stats` deltas, so a
    library landing in that window must not move the counters. Same key, file lock, atomic write
    and errors (:class:`CompileError`) as :func:`compile_shared`; the compiler runs at niceness
    :data:`.toolchain.BACKGROUND_NICE`, so it does not slow the compiles a caller waits for. Load the result
    with :func:`.library_check.opened_library` (or :func:`load_global`).
    """
    info = toolchain._require_compiler()
    return _cached_build(info, source, cache_key(source, info, extra_flags), name_hint, extra_flags,
                         toolchain.BACKGROUND_NICE)[0]


def load_global(source: str, *, name_hint: str) -> ctypes.CDLL:
    """:func:`build_library` ``source`` and load it with its symbols global (``RTLD_GLOBAL``), so
    generated programs find them with ``dlsym``: the per-machine runtime libraries."""
    return load_verified(lambda: build_library(source, name_hint=name_hint), ctypes.RTLD_GLOBAL)


def compile_shared(source: str, *, name_hint: str = "kernel", extra_flags: tuple[str, ...] = ()) -> str:
    """Compile C ``source`` into a shared object and return its path (cached by content;
    ``extra_flags``, e.g. include directories, are added to the command line and the key).

    The in-memory tier answers repeated requests in this process; otherwise the disk tier
    (:func:`build_library`'s) does, and the ``compiles`` or ``disk_hits`` counter is bumped.
    Raises :class:`CompileError` (holding the compiler output and the saved source path) when
    compilation fails or no compiler is available.
    """
    info = toolchain._require_compiler()
    key = cache_key(source, info, extra_flags)
    memo = (str(cache_files.cache_dir()), key)
    with _lock:
        path = _paths.get(memo)
        if path is not None and os.path.exists(path):
            _stats.memory_hits += 1
            return path
    path, compiled = _cached_build(info, source, key, name_hint, extra_flags)
    with _lock:
        if compiled:
            _stats.compiles += 1
        else:
            _stats.disk_hits += 1
        _paths[(str(cache_files.cache_dir()), key)] = path
    return path


def load_library(source: str, *, name_hint: str = "kernel") -> ctypes.CDLL:
    """Compile (or fetch from cache) ``source`` and return the loaded library (opened, checked
    and loaded from one descriptor: :func:`load_verified`)."""
    memo = (str(cache_files.cache_dir()), cache_key(source))
    with _lock:
        lib = _libraries.get(memo)
        if lib is not None:
            _stats.memory_hits += 1
            return lib
    lib = load_verified(lambda: compile_shared(source, name_hint=name_hint))
    with _lock:
        return _libraries.setdefault((str(cache_files.cache_dir()), cache_key(source)), lib)


def loaded_library_paths() -> list[str]:
    """The files of the libraries :func:`load_library` has loaded into this process."""
    with _lock:
        return [lib._name for lib in _libraries.values()]


# ----------------------------------------------------------------------------------------------
# Diagnostics


def vectorization_report(source: str) -> str:
    """Compile ``source`` (uncached) and return the compiler's report of vectorized loops.

    gcc: ``-fopt-info-vec-optimized``; clang: ``-Rpass=loop-vectorize``. Each line names a
    loop that was vectorized (gcc: "loop vectorized using 32 byte vectors").
    """
    info = toolchain._require_compiler()
    report_flag = "-Rpass=loop-vectorize" if info.family == "clang" else "-fopt-info-vec-optimized"
    with tempfile.TemporaryDirectory(prefix="ember-vec-") as tmp:
        src = Path(tmp, "report.c")
        src.write_text(source)
        cmd = [info.path, *info.flags, report_flag, "-o", str(Path(tmp, "report.so")), str(src),
               *toolchain.LINK_LIBS]
        proc = toolchain._run(cmd, timeout=toolchain.COMPILE_TIMEOUT_S)
        if proc.returncode != 0:
            raise CompileError(f"vectorization report compile failed\n{proc.stderr.strip()}")
        return (proc.stdout + proc.stderr).strip()
