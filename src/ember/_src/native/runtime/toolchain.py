"""Finding the system C compiler and the flags ember compiles shared objects with.

``$EMBER_CC``, else the first of ``cc``, ``gcc``, ``clang`` that builds a shared object
(:func:`find_compiler`). The probe (which flags the compiler accepts, whether OpenMP links and loads,
what ``-march=native`` means) is a property of the machine and the compiler binary, not of a
program: it is remembered in the user cache directory (``$XDG_CACHE_HOME/ember/compilers``, else
``~/.cache/ember/compilers``) whatever ``$EMBER_CACHE_DIR`` says, so a new or emptied compile cache
does not repeat it. A probe that does run starts the compiler's cheap queries (version, family,
native target) concurrently with the one trial build that normally settles the flags. Every
compiler command runs through :func:`_run`, in its own process group, killed whole on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from ember._src.native.runtime import cache_files
from ember.errors import CompileError

__all__ = ["BASE_FLAGS", "BACKGROUND_NICE", "CompilerInfo", "OPENMP_FLAG", "find_compiler", "source_flags",
           "source_libs"]

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
    name = hashlib.sha256(key.encode()).hexdigest()[:32] + ".json"
    return cache_files.user_cache_dir() / "compilers" / name


def _inspect_cached(path: str) -> CompilerInfo | None:
    """:func:`_inspect`, remembered on disk per compiler binary (path, size, mtime) and CPU in the
    user cache directory, so a new process -- also one with a new, empty ``$EMBER_CACHE_DIR`` --
    starts without running the compiler. The remembered facts name the executable to run: they are
    read only from a directory that passes :func:`.cache_files.distrust_reason`, through
    :func:`.cache_files._read_checked`."""
    f = _probe_cache_file(path)
    trusted = f is not None and f.parent.is_dir() and cache_files.distrust_reason(f.parent) is None
    if f is not None and trusted:
        try:
            fields = json.loads(cache_files._read_checked(f))
            return CompilerInfo(**{k: tuple(v) if k == "flags" else v for k, v in fields.items()})
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError):  # damaged, a directory, another user's: probe again
            cache_files._remove(f)
    info = _inspect(path)
    if info is not None and f is not None:
        with contextlib.suppress(OSError):
            f.parent.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the user cache directory
            f.parent.mkdir(mode=0o700, exist_ok=True)
            if trusted or cache_files.distrust_reason(f.parent) is None:
                cache_files._atomic_write_text(f, json.dumps(dataclasses.asdict(info)))
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
