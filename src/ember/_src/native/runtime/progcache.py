"""A program-level disk cache for the native backend: traced Program -> what a call needs.

Compiling a Program runs passes, schedule, loop lowering, memory planning and code generation
before the C compiler (whose output the compile cache in :mod:`.compiler` keeps on disk). For a
program seen before -- typically the first call of a jitted function in a new process -- this
module skips all of them: :func:`program_key` hashes a canonical text of the Program (variables
numbered by first appearance, literal bytes, primitive names and parameters), the backend
options, the compiler (identity, flags, native target) and a fingerprint of ember's own source
files, and ``$EMBER_CACHE_DIR/programs/<key>.json`` holds the generated C source with the few
facts the call setup needs (input/output shapes and dtypes, arena size).

Only plain programs are cached: no captured constants (before or after the passes), no loop-body
constants, no Python fallback steps, every output its own buffer, and parameters of known plain
types (numbers, strings, dtypes, tuples, nested Programs). Anything else returns no key and
takes the normal path. Entries are JSON (never pickle); a malformed or mismatching entry is
ignored. An entry holds C source that is compiled and run, so it is read under the compile cache's
trust rules: the cache directory passes :func:`.cache_files.distrust_reason` (else the private
directory that replaces it is used), ``programs/`` is this user's (or root's) and writable by no
one else, and the entry file is checked on its open descriptor (:func:`.cache_files._read_checked`:
a regular file of this user or root that no one else can write). Its digest covers the key, so
another valid entry copied over it is rejected too. Set ``$EMBER_PROGRAM_CACHE=0`` to disable.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ember._src.program import Literal, Program, Var

FORMAT = "progcache-v2"  # v2: the digest covers the key
ENV_VAR = "EMBER_PROGRAM_CACHE"


class Uncacheable(Exception):
    """Raised while writing the canonical text of a program that has no safe canonical form."""


def enabled() -> bool:
    """Whether the program cache is on (``$EMBER_PROGRAM_CACHE`` not ``0``/``false``/``off``)."""
    return os.environ.get(ENV_VAR, "").strip().lower() not in ("0", "false", "off", "no")


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """A hash over (relative path, size, mtime) of every ``.py`` file and every C resource
    (``.c``/``.h``: a cached source embeds their text and the runtime symbols named by their
    hashes) of the ember package and its version: any edit to ember's code changes every program
    key (computed once per process)."""
    import ember

    parts = [FORMAT, getattr(ember, "__version__", "")]

    def walk(directory: str, rel: str) -> None:
        with contextlib.suppress(OSError), os.scandir(directory) as it:
            for entry in sorted(it, key=lambda e: e.name):
                if entry.name.endswith((".py", ".c", ".h")):
                    with contextlib.suppress(OSError):
                        st = entry.stat()
                        parts.append(f"{rel}{entry.name}:{st.st_size}:{st.st_mtime_ns}")
                elif entry.name != "__pycache__" and entry.is_dir():
                    walk(entry.path, f"{rel}{entry.name}/")

    walk(os.path.dirname(os.path.abspath(ember.__file__)), "")
    h = hashlib.sha256("\n".join(parts).encode())
    return h.hexdigest()


def _aval(a: Any) -> str:
    return f"{np.dtype(a.dtype).str}{'w' if a.weak_type else ''}{tuple(a.shape)!r}"


def _param(v: Any, out: list[str]) -> None:
    """Append a canonical, type-tagged text of one parameter value; raise :class:`Uncacheable` for
    a value whose text might not determine it (arrays, callables, other objects)."""
    if type(v) is tuple and all(type(x) is int for x in v):  # the common case: a shape or axes
        out.append(f"ints{v!r}")
    elif v is None or isinstance(v, (bool, int, str)):
        out.append(f"{type(v).__name__}:{v!r}")
    elif isinstance(v, float):
        out.append(f"float:{v.hex()}")
    elif isinstance(v, np.dtype):
        out.append(f"dtype:{v.str}")
    elif isinstance(v, np.generic) and v.dtype.kind in "biuf":
        out.append(f"np:{v.dtype.str}:{v.tobytes().hex()}")
    elif isinstance(v, (tuple, list)):
        out.append(f"{type(v).__name__}(")
        for x in v:
            _param(x, out)
        out.append(")")
    elif isinstance(v, Program):
        out.append("program(")
        _program(v, out)
        out.append(")")
    else:
        raise Uncacheable(type(v).__name__)


def _program(p: Program, out: list[str]) -> None:
    if p.consts or p.constvars:
        raise Uncacheable("constants")
    names: dict[int, int] = {}

    def var(v: Var) -> str:
        n = names.get(v.id)
        if n is None:
            n = names[v.id] = len(names)
        return f"%{n}"

    def atom(a: Any) -> str:
        if isinstance(a, Literal):
            val = np.asarray(a.val)
            return f"lit:{_aval(a.aval)}:{val.dtype.str}{val.shape!r}:{val.tobytes().hex()}"
        return var(a)

    out.append("in " + " ".join(f"{var(v)}:{_aval(v.aval)}" for v in p.invars))
    for e in p.eqns:
        out.append(f"eqn {e.prim.name} " + " ".join(atom(a) for a in e.inputs) + " -> " +
                   " ".join(f"{var(v)}:{_aval(v.aval)}" for v in e.outvars))
        for k in sorted(e.params):
            out.append(f"  {k}=")
            _param(e.params[k], out)
    out.append("out " + " ".join(atom(a) for a in p.outvars))


def program_key(program: Program, options: Any, compiler_info: Any, mode: str) -> str | None:
    """The cache key of ``program`` compiled with backend ``options`` (a :class:`.options.NativeOptions`:
    every option, defaults included) by ``compiler_info`` under validation ``mode``, or None when the
    program has no safe canonical text."""
    from ember._src.native.runtime import bf16_isa, threadpool
    from ember._src.native.runtime import gemm_library as gemm_kernel

    # process state that changes the generated C: the GEMM kernel's symbol and its off switch, the
    # path of products with bfloat16 weights
    out = [FORMAT, source_fingerprint(), repr(compiler_info), f"mode={mode}",
           f"cpus={os.cpu_count()}", f"sgemm={gemm_kernel.kernel_symbol()}:{gemm_kernel.BLAS_ONLY}",
           f"pool={threadpool.symbol()}:{threadpool.POOL_OFF}", f"bf16={bf16_isa.bf16_path()}"]
    try:
        for k, v in options.items():
            out.append(f"opt {k}=")
            _param(v, out)
        _program(program, out)
    except Uncacheable:
        return None
    return hashlib.sha256("\n".join(out).encode()).hexdigest()


def _path(directory: Path, key: str) -> Path:
    return directory / "programs" / f"{key[:40]}.json"


def _digest(key: str, entry: dict) -> str:
    """SHA-256 over the key and the entry's canonical JSON: an entry verifies only under its key."""
    return hashlib.sha256(f"{FORMAT}\0{key}\0{json.dumps(entry, sort_keys=True)}".encode()).hexdigest()


def _programs_dir(directory: Path, writing: bool) -> Path | None:
    """``<cache dir>/programs`` for ``directory`` (or the private directory replacing it), or None when
    that directory cannot be used (another user's, or writable by others). Reading from a cache
    directory that exists and passes the trust checks skips the write probe of
    :func:`.cache_files._usable_cache_dir` (tens of microseconds on the first call of a program)."""
    from ember._src.native.runtime import cache_files, compiler

    cache = cache_files._replacement(Path(directory))
    if not writing and not cache.is_dir():
        return None
    try:
        if writing or cache_files.distrust_reason(cache) is not None:
            cache = cache_files._usable_cache_dir(cache)  # replaced by a private directory: one warning
    except (compiler.CompileError, OSError):  # the cache path is a file (the compile that follows
        return None  # says so), or no private directory could be made
    d = cache / "programs"
    if os.path.lexists(d) and not d.is_dir():
        cache_files._remove(d)
    if not d.exists():
        return d
    try:
        st = os.stat(d)
    except OSError:
        return None
    if st.st_uid not in (os.getuid(), 0) or st.st_mode & 0o022:
        if str(d) not in _warned:
            _warned.add(str(d))
            import logging
            logging.getLogger("ember").warning(
                "ember: the program cache %s is another user's or writable by others (owner uid %d, "
                "mode %s); it is not used", d, st.st_uid, oct(st.st_mode & 0o7777))
        return None
    return d


_warned: set[str] = set()


def load(directory: Path, key: str) -> dict | None:
    """The entry stored under ``key`` (a dict from JSON), or None when absent, unreadable, untrusted
    or failing verification (its recorded digest does not match its content and key: a damaged,
    hand-edited or swapped entry is logged and removed, so the program is built again)."""
    from ember._src.native.runtime import cache_files

    programs = _programs_dir(directory, writing=False)
    if programs is None:
        return None
    f = programs / f"{key[:40]}.json"
    try:
        entry = json.loads(cache_files._read_checked(f))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # unreadable, a directory, another user's, not JSON
        entry = None
    ok = isinstance(entry, dict) and entry.get("format") == FORMAT and entry.get("key") == key
    if ok:
        digest = entry.pop("digest", None)
        ok = digest == _digest(key, entry)
    if not ok:
        import logging
        logging.getLogger("ember").warning("ember: program cache entry %s failed verification; rebuilding", f)
        cache_files._remove(f)
        return None
    return entry


def store(directory: Path, key: str, entry: dict) -> None:
    """Write ``entry`` (JSON-able) under ``key`` atomically (a new file renamed into place); errors
    are ignored (a cache)."""
    from ember._src.native.runtime import cache_files

    programs = _programs_dir(directory, writing=True)
    if programs is None:
        return
    f = programs / f"{key[:40]}.json"
    with contextlib.suppress(OSError, TypeError, ValueError):
        programs.mkdir(mode=0o700, exist_ok=True)
        body = {"format": FORMAT, "key": key, **entry}
        cache_files._atomic_write_text(f, json.dumps({**body, "digest": _digest(key, body)}))
