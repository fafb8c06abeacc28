"""Page colouring: where large buffers start within a 4 KiB page.

A CPU compares a load's address with older, not yet retired stores on the low 12 bits first; a
load whose address matches a pending store's there waits until that store's full address is
known ("4K aliasing"). A kernel that streams an input while it writes an output whose page offset
is nearly the same therefore stalls on false dependencies on every vector: a 1024x1024 float32
softmax took 310-420 us instead of 233-250 us when its output started 0-256 bytes from its input
modulo 4096 (one core, AVX-512 host). Buffers of equal power-of-two sizes placed back to back, and
large blocks from a page-aligned allocator, all start at the same page offset, so they collide
by default.

The output pool (:mod:`.runtime.pool`) therefore puts each large output where its page offset is
farthest from the call's inputs (:func:`far_page_offset`). The arena planner does not colour its
buffers: placing each large arena buffer away from the large buffers live beside it measured no
difference on the transformer block, the MLP or chained softmaxes (one core, 2026-11-27).
"""

from __future__ import annotations

from collections.abc import Iterable

PAGE = 4096  # the address bits a load is first compared on against older stores
LINE = 64  # offsets stay 64-byte aligned
COLOR_MIN = 64 * 1024  # buffers of more than this many bytes get a chosen page offset


def far_page_offset(addresses: Iterable[int | None]) -> int:
    """A 64-byte aligned offset within a page, as far as possible (circularly, modulo
    :data:`PAGE`) from the page offsets of ``addresses`` (None, a null pointer from ctypes, is
    ignored): the middle of their widest gap; 0 when there are none."""
    offs = sorted({a & (PAGE - 1) for a in addresses if a is not None})
    if not offs:
        return 0
    gap, start = PAGE - offs[-1] + offs[0], offs[-1]  # the gap that wraps around the page
    for a, b in zip(offs, offs[1:]):
        if b - a > gap:
            gap, start = b - a, a
    return ((start + gap // 2) & (PAGE - 1)) & ~(LINE - 1)


