"""Control flow: ``scan``, ``while_loop``/``fori_loop``, ``cond``/``switch``, ``map`` and
``associative_scan``: primitives holding sub-Programs, with all their transformation rules.

Modules: :mod:`.common` (body tracing, program surgery, how loops run), :mod:`.scan`,
:mod:`.loops` (``while``), :mod:`.cond`, :mod:`.associative`. See ``docs/control_flow.md``.
"""

from ember._src.control_flow.associative import associative_scan
from ember._src.control_flow.common import (
    NATIVE_LOOP,
    REFERENCE_LOOP,
    NativeLoopError,
    report_loop_path,
    require_native_loops,
)
from ember._src.control_flow.cond import cond, cond_p, switch
from ember._src.control_flow.loops import fori_loop, while_loop, while_p
from ember._src.control_flow.scan import map, scan, scan_p, segments

__all__ = ["NATIVE_LOOP", "REFERENCE_LOOP", "NativeLoopError", "associative_scan", "cond", "cond_p",
           "fori_loop", "map", "report_loop_path", "require_native_loops", "scan", "scan_p", "segments",
           "switch", "while_loop", "while_p"]
