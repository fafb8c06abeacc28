"""What the native backend holds in memory, for ``ember.memory_stats()``: the arenas and recycled
output arrays of live executables, the shared output pool, and the compiled libraries loaded.

Executables register themselves with :func:`track` (a weak reference: an executable dropped from
every cache is forgotten and its arena freed); :func:`report` sums what they hold.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from ember._src.native.runtime import compiler
from ember._src.native.runtime.pool import POOL

_LIVE: weakref.WeakSet = weakref.WeakSet()


def track(executable: Any) -> None:
    """Count ``executable``'s arena (``_arena_raw``) and output slots (``_slots``) while it lives."""
    _LIVE.add(executable)


def _slot_bytes(slots: Any) -> int:
    return sum(ent[0].nbytes for slot in getattr(slots, "slots", ()) if slot for ent in slot)


def report() -> dict[str, int]:
    """Bytes held by the native backend (see the module docstring)."""
    arena = slots = 0
    live = list(_LIVE)
    for exe in live:
        raw = getattr(exe, "_arena_raw", None)
        if raw is not None:
            arena += raw.nbytes
        slots += _slot_bytes(getattr(exe, "_slots", None))
    paths = compiler.loaded_library_paths()
    size = 0
    for p in paths:
        try:
            size += os.path.getsize(p)
        except OSError:
            pass
    return {"native_executables": len(live), "arena_bytes": arena, "output_slot_bytes": slots,
            "output_pool_bytes": POOL.stats()["pool_bytes"], "loaded_libraries": len(paths),
            "loaded_library_bytes": size}
