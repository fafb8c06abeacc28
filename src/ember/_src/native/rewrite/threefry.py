"""Threefry as fusible elementwise ops: ``threefry2x32`` (two results) split into its halves.

The pass ``split_threefry`` (in :mod:`.passes`) rewrites each ``threefry2x32`` equation into
``native_threefry_lo`` / ``native_threefry_hi``, backend-internal single-result elementwise
primitives with the C renderers ``em_threefrylo`` / ``em_threefryhi`` (the 20 rounds inlined with
constant rotations). They fuse like any elementwise op, so ``random.bits`` / ``uniform`` /
``normal`` run as one kernel from the counters (iotas) and the broadcast key words to the final
values, without materializing the hash inputs or outputs. A half whose sibling is used in the same
kernel shares the computation after inlining (the C compiler eliminates the common rounds); an
unused half is dropped by ``dce``. Results are bit-identical to
``prims.random_bits.threefry2x32_np``.
"""

from __future__ import annotations

from ember._src import core
from ember._src import dtypes as dt
from ember._src.core import Primitive, ShapedArray
from ember._src.native import opinfo
from ember._src.prims.random_bits import threefry2x32_np
from ember.errors import DTypeError

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry_c(name: str, which: int) -> str:
    """C source of ``uint32_t name(k0, k1, x0, x1)``: half ``which`` of Threefry-2x32."""
    body = []
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            body.append(f"    a += b; b = ((b << {r}) | (b >> {32 - r})) ^ a;")
        body.append(f"    a += ks{(i + 1) % 3}; b += ks{(i + 2) % 3} + {i + 1}u;")
    return (f"/* Threefry-2x32 (Salmon et al. 2011), 20 rounds; result word {which}. */\n"
            f"static inline uint32_t {name}(uint32_t ks0, uint32_t ks1, uint32_t x0, uint32_t x1) {{\n"
            "    const uint32_t ks2 = ks0 ^ ks1 ^ 0x1BD11BDAu;\n"
            "    uint32_t a = x0 + ks0, b = x1 + ks1;\n" + "\n".join(body) +
            f"\n    return {'a' if which == 0 else 'b'};\n}}\n")


def _make(which: int) -> Primitive:
    name = ("native_threefry_lo", "native_threefry_hi")[which]
    p = Primitive(name)

    def abstract(*avals: ShapedArray) -> ShapedArray:
        for a in avals:
            if a.dtype != dt.uint32:
                raise DTypeError(f"{name} requires uint32 operands, got {a.dtype}")
        return ShapedArray(core.check_same_shapes(name, list(avals)), dt.uint32)

    p.impl = lambda *xs: threefry2x32_np(*xs)[which]
    p.abstract_eval = abstract
    for kind in ("jvp", "transpose", "batch"):
        p.na(kind, f"{name} is created by the native backend's passes after all transformations ran")
    return p


threefry_lo_p, threefry_hi_p = _make(0), _make(1)
NAMES = (threefry_lo_p.name, threefry_hi_p.name)


for _p in (threefry_lo_p, threefry_hi_p):
    opinfo.set_cost(_p, 100)  # never recomputed by fusion (renderers: emit/c_ops.py)
