"""Which code path the products with bfloat16 weights (``csrc/gemm_bf16.h``) take on this machine.

The path is the best one the compiler's target (``-march=native``, so the CPU the program is
compiled on) has: ``amx`` (AMX-BF16 tiles, ``tdpbf16ps``; ``avx512bf16`` where the process may not
use the tile state), ``avx512bf16`` (``vdpbf16ps``: activations rounded to bfloat16, float32 sums),
``avx512`` or ``avx2`` (the weights widened to float32 on the fly, float32 FMAs), else ``c`` (plain
C). ``EMBER_BF16_ISA`` names one (tests run every path on one machine); a named path the target
lacks is an error. The path is written into the program's C as ``EM_BF16_PATH``, so the compile
cache keys on it, and it is part of the program cache key (``progcache.program_key``).
"""

from __future__ import annotations

import os

from ember.errors import CompileError

# name -> (EM_BF16_PATH, the -m flags the compiler target must have)
PATHS: dict[str, tuple[int, frozenset[str]]] = {
    "amx": (4, frozenset({"-mamx-tile", "-mamx-bf16", "-mavx512bf16", "-mavx512f"})),
    "avx512bf16": (3, frozenset({"-mavx512bf16", "-mavx512f"})),
    "avx512": (2, frozenset({"-mavx512f"})),
    "avx2": (1, frozenset({"-mavx2"})),
    "c": (0, frozenset()),
}
ENV = "EMBER_BF16_ISA"


def bf16_path() -> str:
    """The path's name for programs compiled now: ``$EMBER_BF16_ISA`` when set (read on each call),
    else the best of :data:`PATHS` the compiler's target has. Raises ValueError for a name that is
    not a path or a path the target cannot run."""
    from ember._src.native.runtime import toolchain

    want = os.environ.get(ENV, "").strip().lower()
    if want and want not in PATHS:
        raise ValueError(f"{ENV}={want!r}: expected one of {sorted(PATHS)}")
    try:
        info = toolchain.find_compiler()
    except CompileError:
        info = None
    flags = set(info.target.split()) if info is not None and info.family == "gcc" else set()
    if want:
        if not PATHS[want][1] <= flags:
            raise ValueError(f"{ENV}={want!r}: the compiler's target lacks {sorted(PATHS[want][1] - flags)}")
        return want
    return next(name for name, (_, need) in PATHS.items() if need <= flags)


def path_number(name: str) -> int:
    """``EM_BF16_PATH`` of the path ``name``."""
    return PATHS[name][0]
