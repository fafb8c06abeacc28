"""Compiled GPU kernels on disk: ``<cache dir>/gpu/<kind>-<key>.json`` (the cache directory of
:func:`ember._src.cache_files.cache_dir`, ``$EMBER_CACHE_DIR`` or ``~/.cache/ember``).

Today one kind is kept: ``ptx``, NVRTC's output for a CUDA translation unit, keyed by the SHA-256
of the source, the virtual GPU architecture and NVRTC's version, so a second process compiling
the same program for the same GPU skips NVRTC. The files follow the native cache's rules
(:mod:`ember._src.cache_files`, ``docs/SECURITY.md``): the directory is used only when it is
trusted (else a private one, with a warning); a file is read through one descriptor opened without
following links and refused unless it is a regular file of this user (or root) that no other user
can write; a file is written as a new file renamed into place; and each entry records the key it
was stored under and the SHA-256 of its content, checked on load. An entry that fails any check is
logged, removed and compiled again. ``$EMBER_GPU_KERNEL_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path

from ember._src import cache_files
from ember.errors import CompileError

FORMAT = 1
ENV_VAR = "EMBER_GPU_KERNEL_CACHE"
STATS = {"hits": 0, "misses": 0, "stores": 0, "rejected": 0}
"""What the cache did since the process started (``rejected``: entries that failed a check)."""


def enabled() -> bool:
    """Whether the disk cache is on (``$EMBER_GPU_KERNEL_CACHE`` not ``0``/``false``/``off``/``no``)."""
    return os.environ.get(ENV_VAR, "").strip().lower() not in ("0", "false", "off", "no")


def key_of(*parts: str) -> str:
    """The SHA-256 (hex) of ``parts`` joined by NUL bytes (each part: a source, an architecture, a
    compiler version, ...)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _dir(writing: bool) -> Path | None:
    """``<cache dir>/gpu`` (created when ``writing``), or None when it cannot be used."""
    try:
        cache = cache_files.cache_dir()
        if not writing and not cache.is_dir():
            return None
        if writing or cache_files.distrust_reason(cache) is not None:
            cache = cache_files._usable_cache_dir(cache)  # an untrusted one is replaced, with a warning
        d = cache / "gpu"
        if writing:
            d.mkdir(mode=0o700, exist_ok=True)
        if os.path.lexists(d) and (not d.is_dir() or cache_files.distrust_reason(d) is not None):
            logging.getLogger("ember").warning("ember: the GPU kernel cache %s is not a directory of this "
                                               "user that only it can write; it is not used", d)
            return None
    except (OSError, CompileError):  # the cache path is a file, or no private directory
        return None
    return d


def _digest(kind: str, key: str, data: str) -> str:
    return hashlib.sha256(f"{FORMAT}\0{kind}\0{key}\0{data}".encode()).hexdigest()


def path_of(kind: str, key: str) -> Path | None:
    """Where the entry ``kind``/``key`` lives (None when the cache directory cannot be used)."""
    d = _dir(writing=False)
    return None if d is None else d / f"{kind}-{key[:40]}.json"


def load(kind: str, key: str) -> str | None:
    """The text stored under ``kind``/``key``, or None when absent, off, untrusted (another user's
    file, or one others can write) or failing verification (damaged, truncated, or stored under
    another key): such a file is logged and removed, and the caller compiles again."""
    if not enabled():
        return None
    f = path_of(kind, key)
    if f is None:
        STATS["misses"] += 1
        return None
    try:
        entry = json.loads(cache_files._read_checked(f))
    except FileNotFoundError:
        STATS["misses"] += 1
        return None
    except (OSError, ValueError) as e:  # untrusted (UntrustedEntry), unreadable, not JSON
        entry, why = None, str(e)
    else:
        why = "its key or content digest does not match"
    ok = (isinstance(entry, dict) and entry.get("format") == FORMAT and entry.get("kind") == kind
          and entry.get("key") == key and isinstance(entry.get("data"), str)
          and entry.get("digest") == _digest(kind, key, entry["data"]))
    if not ok:
        logging.getLogger("ember").warning("ember: GPU kernel cache entry %s is refused (%s); "
                                           "compiling again", f, why)
        STATS["rejected"] += 1
        STATS["misses"] += 1
        cache_files._remove(f)
        return None
    STATS["hits"] += 1
    return entry["data"]


def store(kind: str, key: str, data: str) -> None:
    """Keep ``data`` under ``kind``/``key`` (atomically: a new file renamed into place); errors are
    ignored (a cache)."""
    if not enabled():
        return
    d = _dir(writing=True)
    if d is None:
        return
    body = {"format": FORMAT, "kind": kind, "key": key, "data": data, "digest": _digest(kind, key, data)}
    with contextlib.suppress(OSError, ValueError):
        cache_files._atomic_write_text(d / f"{kind}-{key[:40]}.json", json.dumps(body))
        STATS["stores"] += 1
