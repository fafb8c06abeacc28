"""Driving the system C compiler: discovery, flags, and a content-addressed cache of shared objects.

Three cache tiers, checked in order:

1. loaded libraries (``load_library``): source key -> ``ctypes.CDLL``;
2. compiled paths in this process: (cache dir, key) -> path of the ``.so``;
3. the disk cache: ``<cache dir>/<key>.so`` next to the saved source ``<key>.c``.

The compiler probe (which flags the compiler accepts, whether OpenMP links and loads, what
``-march=native`` means) is a property of the machine and the compiler binary, not of a program: it
is remembered in the user cache directory (``$XDG_CACHE_HOME/ember/compilers``, else
``~/.cache/ember/compilers``) whatever ``$EMBER_CACHE_DIR`` says, so a new or emptied compile cache
does not repeat it. A probe that does run starts the compiler's cheap queries (version, family,
native target) concurrently with the one trial build that normally settles the flags.

The key hashes the source, the flags, the compiler identity and the CPU that ``-march=native``
resolves to, so a cache directory shared between machines never hands out code for the wrong CPU.
Writes are atomic (compile into a uniquely named temporary file in the cache directory, then
``os.replace``; no cache file is ever changed in place, so a process that loaded a library keeps
the pages it mapped) and serialized per key with ``fcntl.flock`` on ``<key>.lock``, so concurrent
processes do not clash; temporary files a killed process left are removed by the next build of
that key.

Trust (docs/SECURITY.md): the cache directory is used only when it and the directories above it
pass :func:`distrust_reason` (yours or root's, not writable by others; sticky parents such as
``/tmp`` allowed), else a private one replaces it with one warning; a full filesystem does the same.
Each entry is opened once without following links and checked on that descriptor (a regular file
of yours or root's that no one else can write, whose digest -- SHA-256 over key and bytes, so an
entry is valid only under its own key -- matches), and a library is loaded from that descriptor
(:func:`opened_library`). A directory in place of any cache file is removed and the entry rebuilt.
A build interrupted by Ctrl-C kills the compiler's whole process group (:func:`_run`) and removes
what it wrote of the entry (the temporary library, a digest without its library, the saved source),
so the next call builds it again from nothing.
:func:`build_library` is the disk tier alone, without the counters (per-machine libraries built in
the background); :func:`compile_shared` adds the in-memory tier and the counters.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import functools
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from ember.errors import CompileError

__all__ = [
    "CompileError",
    "CompilerInfo",
    "build_library",
    "cache_dir",
    "cache_key",
    "cache_stats",
    "clear_memory_cache",
    "compile_shared",
    "find_compiler",
    "load_library",
    "vectorization_report",
]

# libgomp reads OMP_WAIT_POLICY when the first OpenMP program is loaded. Its default lets idle
# threads spin, which on a busy or oversubscribed machine (BLAS threads, pytest-xdist workers, other
# processes) made a 1 ms MLP call take 27 ms; sleeping idle threads cost a few microseconds per
# parallel region instead. Set the variable before importing ember to choose otherwise.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# -fno-trapping-math lets the compiler if-convert NaN checks (selects) so loops vectorize; results
# stay IEEE (only FP-exception traps are assumed off). -fwrapv gives signed integer overflow the
# wrap-around NumPy has. -fopenmp-simd honours `#pragma omp simd` even without OpenMP threads.
# A call of an undeclared function is an error, not an implicit `int f()` (a header the emitters
# did not record would otherwise compile, with wrong types: emit/support.py).
BASE_FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-std=c11", "-fno-math-errno", "-fno-trapping-math",
              "-fwrapv", "-fopenmp-simd", "-Werror=implicit-function-declaration")
OPENMP_FLAG = "-fopenmp"
LINK_LIBS = ("-lm",)  # linked when a source includes math.h (or complex.h/tgmath.h): see source_libs
CANDIDATES = ("cc", "gcc", "clang")
PROBE_TIMEOUT_S = 60
COMPILE_TIMEOUT_S = 600

_PROBE_SOURCE = "int ember_probe(int x) { return x + 1; }\n"
_OPENMP_PROBE_SOURCE = """\
#include <omp.h>
int ember_omp_probe(int n) {
    int total = 0;
    #pragma omp parallel for reduction(+:total)
    for (int i = 0; i < n; ++i) total += 1;
    return total + 0 * omp_get_max_threads();
}
"""


@dataclasses.dataclass(frozen=True)
class CompilerInfo:
    """A usable C compiler and the flags ember compiles shared objects with.

    ``family`` is ``"gcc"``, ``"clang"`` or ``"unknown"`` (from the predefined macros);
    ``target`` fingerprints the CPU that ``-march=native`` selects ("" without it).
    """

    path: str
    identity: str
    flags: tuple[str, ...]
    family: str = "unknown"
    target: str = ""

    @property
    def has_openmp(self) -> bool:
        return OPENMP_FLAG in self.flags


# ----------------------------------------------------------------------------------------------
# Compiler discovery


BACKGROUND_NICE = 10  # the scheduling niceness of build_library's compiles (see _run)


def _run(cmd: list[str], timeout: float = PROBE_TIMEOUT_S, nice: int = 0) -> subprocess.CompletedProcess[str]:
    """Run a compiler command and capture its output. The compiler runs in its own process group
    (a new session), and when this call ends early -- Ctrl-C (``KeyboardInterrupt``), the timeout,
    any other exception -- the whole group is killed and reaped: the driver and the passes it
    started (``cc1``, ``as``, ``ld``), so no compiler process outlives an interrupted build.

    ``nice`` > 0 runs the command at that scheduling niceness (the passes it starts inherit it): a
    library built in the background then yields the CPU to a program the caller waits for (on one
    CPU, the GEMM kernel library's build took CPU time from the first call's compile). The command
    is started through ``nice -n <increment>`` (:func:`_nice_prefix`), which sets the priority and
    then execs it, so the priority is in force before the command's first instruction. Without a
    ``nice`` executable the group's priority is lowered right after the start instead (the driver
    may then run its first steps at the caller's priority)."""
    prefix = _nice_prefix(nice)
    with subprocess.Popen([*prefix, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        if nice > 0 and not prefix and _nice_executable() is None:  # the late fallback
            with contextlib.suppress(OSError, AttributeError):  # no such process, or not POSIX
                if os.getpriority(os.PRIO_PROCESS, 0) < nice:
                    os.setpriority(os.PRIO_PGRP, proc.pid, nice)
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            _kill_group(proc)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@functools.lru_cache(maxsize=1)
def _nice_executable() -> str | None:
    """The ``nice`` program (coreutils / busybox), or None."""
    return shutil.which("nice")


def _nice_prefix(nice: int) -> list[str]:
    """The words that start a command at niceness ``nice``: ``[<nice>, "-n", <increment>]`` where the
    increment raises this process's niceness to ``nice`` (``nice -n`` is relative); ``[]`` when
    no change is asked for or needed (already at or above it), or when there is no ``nice``."""
    if nice <= 0:
        return []
    try:
        increment = nice - os.getpriority(os.PRIO_PROCESS, 0)
    except (OSError, AttributeError):
        return []
    exe = _nice_executable()
    if increment <= 0 or exe is None:
        return []
    return [exe, "-n", str(increment)]


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group led by ``proc`` (started with ``start_new_session``) and wait
    for ``proc``; its other members, orphaned, are reaped by init."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _try_build(path: str, flags: list[str], source: str, *, load: bool = False) -> bool:
    """Compile ``source`` as a shared object with ``flags``; optionally check that it loads."""
    with tempfile.TemporaryDirectory(prefix="ember-probe-") as tmp:
        src = Path(tmp, "probe.c")
        out = Path(tmp, "probe.so")
        src.write_text(source)
        try:
            proc = _run([path, *flags, "-o", str(out), str(src), *LINK_LIBS])
        except (OSError, subprocess.SubprocessError):
            return False
        if proc.returncode != 0 or not out.exists():
            return False
        if load:
            try:
                ctypes.CDLL(str(out))
            except OSError:
                return False
        return True


def _first_line(path: str, *args: str) -> str:
    try:
        proc = _run([path, *args])
    except (OSError, subprocess.SubprocessError):
        return ""
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0].strip() if text else ""


def _family(path: str) -> str:
    try:
        macros = _run([path, "-dM", "-E", "-x", "c", os.devnull]).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if "__clang__" in macros:
        return "clang"
    if "__GNUC__" in macros:
        return "gcc"
    return "unknown"


def _native_target(path: str, flags: list[str]) -> str:
    """The ``-m...`` options (gcc) or target cpu/features (clang) that ``-march=native`` expands to."""
    if "-march=native" not in flags:
        return ""
    try:
        proc = _run([path, "-###", "-march=native", "-x", "c", "-c", os.devnull, "-o", os.devnull])
    except (OSError, subprocess.SubprocessError):
        return ""
    kept: list[str] = []
    for line in proc.stderr.splitlines():
        try:
            tokens = shlex.split(line)
        except ValueError:
            continue
        for prev, tok in zip([""] + tokens, tokens):
            if prev in ("-target-cpu", "-target-feature") or (tok.startswith("-m") and prev != "-o"):
                kept.append(tok)
    return " ".join(sorted(set(kept)))


def _probe_flags(path: str) -> list[str] | None:
    """The flag list this compiler accepts, or None when it cannot build a shared object.

    Optimistic order: one build of the OpenMP probe with every flag settles the usual case (it
    succeeding implies the flags without ``-fopenmp`` work too); the fallbacks -- no OpenMP,
    then no ``-march=native`` -- only run when it fails."""
    full = list(BASE_FLAGS)
    if _try_build(path, [*full, OPENMP_FLAG], _OPENMP_PROBE_SOURCE, load=True):
        return [*full, OPENMP_FLAG]
    if _try_build(path, full, _PROBE_SOURCE):
        return full
    flags = [f for f in full if f != "-march=native"]
    if not _try_build(path, flags, _PROBE_SOURCE):
        return None
    if _try_build(path, [*flags, OPENMP_FLAG], _OPENMP_PROBE_SOURCE, load=True):
        flags.append(OPENMP_FLAG)
    return flags


def _inspect(path: str) -> CompilerInfo | None:
    """Probe the compiler at ``path``: the version, family and native-target queries run in threads
    while the trial builds of :func:`_probe_flags` run here (each is a separate process)."""
    found: dict[str, str] = {}
    queries = {"identity": lambda: _first_line(path, "--version"),
               "family": lambda: _family(path),
               "target": lambda: _native_target(path, list(BASE_FLAGS))}

    def query(name: str) -> None:
        found[name] = queries[name]()

    threads = [threading.Thread(target=query, args=(name,), daemon=True) for name in queries]
    for t in threads:
        t.start()
    flags = _probe_flags(path)
    for t in threads:
        t.join()
    if flags is None:
        return None
    return CompilerInfo(
        path=path,
        identity=found.get("identity") or path,
        flags=tuple(flags),
        family=found.get("family", "unknown"),
        target=found.get("target", "") if "-march=native" in flags else "",
    )


def _cpu_fingerprint() -> str:
    try:
        lines: list[str] = []
        with open("/proc/cpuinfo") as fh:  # the first CPU's lines: stop there (many-core machines)
            for ln in fh:
                if ln.startswith(("model name", "flags")):
                    lines.append(ln)
                    if len(lines) == 2:
                        break
        return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]
    except OSError:
        import platform

        return platform.processor() or platform.machine()


def _probe_cache_file(path: str) -> Path | None:
    try:
        st = os.stat(os.path.realpath(path))
    except OSError:
        return None
    key = "\0".join([os.path.realpath(path), str(st.st_size), str(st.st_mtime_ns), " ".join(BASE_FLAGS),
                     OPENMP_FLAG, _cpu_fingerprint(), "probe-v1"])
    return user_cache_dir() / "compilers" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


def _inspect_cached(path: str) -> CompilerInfo | None:
    """:func:`_inspect`, remembered on disk per compiler binary (path, size, mtime) and CPU in the
    user cache directory, so a new process -- also one with a new, empty ``$EMBER_CACHE_DIR`` --
    starts without running the compiler. The remembered facts name the executable to run: they are
    read only from a directory that passes :func:`distrust_reason`, through :func:`_read_checked`."""
    f = _probe_cache_file(path)
    trusted = f is not None and f.parent.is_dir() and distrust_reason(f.parent) is None
    if f is not None and trusted:
        try:
            fields = json.loads(_read_checked(f))
            return CompilerInfo(**{k: tuple(v) if k == "flags" else v for k, v in fields.items()})
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError):  # damaged, a directory, another user's: probe again
            _remove(f)
    info = _inspect(path)
    if info is not None and f is not None:
        with contextlib.suppress(OSError):
            f.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the user cache directory
            f.parent.mkdir(mode=0o700, exist_ok=True)
            if trusted or distrust_reason(f.parent) is None:
                _atomic_write_text(f, json.dumps(dataclasses.asdict(info)))
    return info


@functools.lru_cache(maxsize=1)
def find_compiler() -> CompilerInfo | None:
    """The C compiler ember uses: ``$EMBER_CC`` if set, else the first working of cc, gcc, clang.

    ``$EMBER_CC`` names one executable (a name on PATH or a path). Setting it to something
    that is missing or cannot build a shared object raises :class:`CompileError` rather than
    silently falling back. Returns None when no candidate on PATH works. Cached per process
    (``find_compiler.cache_clear()`` re-probes).
    """
    explicit = os.environ.get("EMBER_CC", "").strip()
    if explicit:
        path = shutil.which(explicit)
        if path is None:
            raise CompileError(f"EMBER_CC={explicit!r} is not an executable on PATH")
        info = _inspect_cached(path)
        if info is None:
            raise CompileError(f"EMBER_CC={explicit!r} ({path}) cannot build a shared object")
        return info
    for name in CANDIDATES:
        path = shutil.which(name)
        if path is not None and (info := _inspect_cached(path)) is not None:
            return info
    return None


def _require_compiler() -> CompilerInfo:
    info = find_compiler()
    if info is None:
        raise CompileError("no working C compiler found (tried $EMBER_CC, " + ", ".join(CANDIDATES) + ")")
    return info


# ----------------------------------------------------------------------------------------------
# Cache


class _Stats:
    def __init__(self) -> None:
        self.compiles = 0
        self.disk_hits = 0
        self.memory_hits = 0
        self.rejected = 0  # cached libraries that failed verification and were rebuilt


_lock = threading.Lock()
_stats = _Stats()
_paths: dict[tuple[str, str], str] = {}
_libraries: dict[tuple[str, str], ctypes.CDLL] = {}


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


def source_flags(source: str, info: CompilerInfo) -> tuple[str, ...]:
    """The flags for ``source``: the compiler's flags, without ``-fopenmp`` when the source uses
    no OpenMP threading (no ``omp parallel``, no ``omp_*`` call) -- linking the OpenMP runtime is
    a measurable part of compiling a small program, and ``-fopenmp-simd`` keeps ``omp simd``."""
    if OPENMP_FLAG in info.flags and "omp parallel" not in source and "omp_" not in source:
        return tuple(f for f in info.flags if f != OPENMP_FLAG)
    return info.flags


_LIBM_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<(?:math|complex|tgmath)\.h>", re.M)


def source_libs(source: str) -> tuple[str, ...]:
    """The libraries to link ``source`` with: :data:`LINK_LIBS` (libm) when it includes math.h,
    complex.h or tgmath.h, else none -- reading libm's linker script is a measurable part of
    linking a small program, and code that declares no libm function calls none."""
    return LINK_LIBS if _LIBM_INCLUDE_RE.search(source) else ()


_COMMENT_RE = re.compile(r"/\*.*?\*/", re.S)


def cache_key(source: str, info: CompilerInfo | None = None, extra_flags: tuple[str, ...] = ()) -> str:
    """sha256 over source (without its ``/* */`` comments, which name program variables by their
    process-wide ids, so the same program traced after other work keeps its key), flags,
    compiler identity and native target."""
    info = info or _require_compiler()
    h = hashlib.sha256()
    for part in (_COMMENT_RE.sub("", source), " ".join(source_flags(source, info) + extra_flags),
                 " ".join(source_libs(source)), info.identity, info.target):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def cache_stats() -> dict[str, int]:
    """Counters since process start: ``compiles``, ``disk_hits``, ``memory_hits``."""
    with _lock:
        return {"compiles": _stats.compiles, "disk_hits": _stats.disk_hits, "memory_hits": _stats.memory_hits}


def rejected_entries() -> int:
    """Cached libraries found corrupted (failed verification) and rebuilt since process start."""
    with _lock:
        return _stats.rejected


def clear_memory_cache() -> None:
    """Forget the in-memory tiers (paths and loaded libraries) and reset the counters."""
    global _stats
    with _lock:
        _paths.clear()
        _libraries.clear()
        _stats = _Stats()


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


def _safe_hint(name_hint: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name_hint)[:40] or "kernel"


def _build(info: CompilerInfo, src: Path, so: Path, name_hint: str, flags: tuple[str, ...],
           libs: tuple[str, ...] = LINK_LIBS, nice: int = 0) -> None:
    """Compile ``src`` into a uniquely named temporary file next to ``so`` (``.<so stem>-<hint>-*.so.tmp``)
    and rename it into place (never written in place: a process that loaded the old library keeps
    it mapped intact); the temporary file is removed when the compile fails. A compiler that fails
    because the disk is full raises ``OSError(ENOSPC)`` (the caller moves to a private directory)."""
    fd, tmp = tempfile.mkstemp(dir=so.parent, prefix=f".{so.stem}-{_safe_hint(name_hint)}-", suffix=".so.tmp")
    os.close(fd)
    cmd = [info.path, *flags, "-o", tmp, str(src), *libs]
    try:
        try:
            proc = _run(cmd, timeout=COMPILE_TIMEOUT_S, nice=nice)
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
        _atomic_write_text(_digest_path(so), _file_digest(tmp, _entry_key(so)))
        os.replace(tmp, so)
    except BaseException:
        if not so.exists():  # interrupted between the two writes: no digest without its library
            _remove(_digest_path(so))
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _remove_stale_temporaries(directory: Path, key: str) -> None:
    """Delete the temporary files of ``key``'s source and library (``.<key>*.tmp``) that a process
    killed while building left behind. Called under the key's file lock: no live build owns them."""
    for stale in directory.glob(f".{key}*.tmp"):
        _remove(stale)


def _cached_build(info: CompilerInfo, source: str, key: str, name_hint: str,
                  extra_flags: tuple[str, ...], nice: int = 0) -> tuple[str, bool]:
    """The disk tier: ``(path of <cache dir>/<key>.so, whether it was compiled now)``. A full
    filesystem (``ENOSPC``/``EDQUOT`` from any write, the compiler's included) moves the cache to a
    private temporary directory for the rest of the process, with one warning, and builds there."""
    directory = _usable_cache_dir()
    try:
        return _cached_build_in(directory, info, source, key, name_hint, extra_flags, nice)
    except OSError as e:
        if e.errno not in _FULL:
            raise
        full = e
    try:
        _fall_back(directory, f"is on a full filesystem ({full.strerror or full})")
        private = _usable_cache_dir()
        return _cached_build_in(private, info, source, key, name_hint, extra_flags, nice)
    except OSError as e:
        if e.errno not in _FULL:
            raise
        raise CompileError(f"no space left for compiling {name_hint!r}: neither the compile cache "
                           f"{directory} nor a private directory could be written "
                           f"({e.strerror or e})") from None


def _cached_build_in(directory: Path, info: CompilerInfo, source: str, key: str, name_hint: str,
                     extra_flags: tuple[str, ...], nice: int = 0) -> tuple[str, bool]:
    """:func:`_cached_build` in ``directory``. An existing ``.so`` that passes :func:`_verified` is
    reused without locking (it was put in place by an atomic rename, so present means complete);
    otherwise it is built under the key's file lock unless another process did meanwhile."""
    so = directory / f"{key}.so"
    if _verified(so, report=False):  # a bad entry is reported once, under the lock
        return str(so), False
    with _file_lock(directory / f"{key}.lock"):
        if _verified(so):
            return str(so), False
        _discard(so)
        _remove_stale_temporaries(directory, key)
        src = directory / f"{key}.c"
        try:
            same = _read_checked(src).decode() == source
        except (OSError, ValueError):  # absent, a directory, another user's, not text
            same = False
        if not same:
            _remove(src)
            _atomic_write_text(src, source)
        flags = source_flags(source, info) + tuple(extra_flags)
        try:
            _build(info, src, so, name_hint, flags, source_libs(source), nice)
        except Exception:
            raise  # a failed compile keeps its source: CompileError names it
        except BaseException:  # Ctrl-C (or exit) during the build: leave no part of the entry behind
            if not so.exists():
                with contextlib.suppress(OSError):
                    src.unlink()
            raise
    return str(so), True


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
    other user can write (:func:`_open_checked`), whose SHA-256 over key and bytes matches the
    checked digest file. Nothing of it is loaded or run before this check passes. A present but
    bad entry is logged and counted (:func:`rejected_entries`; not with ``report=False``), and later
    removed and rebuilt."""
    if not os.path.lexists(so):
        return None
    fd = None
    why = "truncated, corrupted or replaced"
    try:
        fd = _open_checked(so)
        recorded = _read_checked(_digest_path(so)).decode("ascii").strip()
        if os.fstat(fd).st_size > 0 and recorded == _fd_digest(fd, _entry_key(so)):
            return fd
        if recorded == _fd_digest_v1(fd):  # an intact entry of an older ember: rebuilt quietly
            report = False
    except UntrustedEntry as e:
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
    with _lock:
        _stats.rejected += 1
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
    _remove(so)
    _remove(_digest_path(so))


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


def _forget_path(path: str) -> None:
    with _lock:
        for memo in [m for m, p in _paths.items() if p == path]:
            del _paths[memo]


def load_verified(get_path: Callable[[], str], mode: int = ctypes.DEFAULT_MODE) -> ctypes.CDLL:
    """``ctypes.CDLL`` of the library ``get_path()`` builds or finds, loaded through
    :func:`opened_library`; when the file changed between the build and the load (it fails the
    check), the path is asked for again once -- which rebuilds the entry."""
    for attempt in (0, 1):
        path = get_path()
        try:
            with opened_library(path) as name:
                lib = ctypes.CDLL(name, mode=mode)
        except RejectedLibrary:
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
    :data:`BACKGROUND_NICE`, so it does not slow the compiles a caller waits for. Load the result
    with :func:`opened_library` (or :func:`load_global`).
    """
    info = _require_compiler()
    return _cached_build(info, source, cache_key(source, info, extra_flags), name_hint, extra_flags,
                         BACKGROUND_NICE)[0]


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
    info = _require_compiler()
    key = cache_key(source, info, extra_flags)
    memo = (str(cache_dir()), key)
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
        _paths[(str(cache_dir()), key)] = path
    return path


def load_library(source: str, *, name_hint: str = "kernel") -> ctypes.CDLL:
    """Compile (or fetch from cache) ``source`` and return the loaded library (opened, checked
    and loaded from one descriptor: :func:`load_verified`)."""
    memo = (str(cache_dir()), cache_key(source))
    with _lock:
        lib = _libraries.get(memo)
        if lib is not None:
            _stats.memory_hits += 1
            return lib
    lib = load_verified(lambda: compile_shared(source, name_hint=name_hint))
    with _lock:
        return _libraries.setdefault((str(cache_dir()), cache_key(source)), lib)


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
    info = _require_compiler()
    report_flag = "-Rpass=loop-vectorize" if info.family == "clang" else "-fopt-info-vec-optimized"
    with tempfile.TemporaryDirectory(prefix="ember-vec-") as tmp:
        src = Path(tmp, "report.c")
        src.write_text(source)
        cmd = [info.path, *info.flags, report_flag, "-o", str(Path(tmp, "report.so")), str(src), *LINK_LIBS]
        proc = _run(cmd, timeout=COMPILE_TIMEOUT_S)
        if proc.returncode != 0:
            raise CompileError(f"vectorization report compile failed\n{proc.stderr.strip()}")
        return (proc.stdout + proc.stderr).strip()
