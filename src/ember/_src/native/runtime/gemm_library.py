"""ember's GEMM kernel library, built once per machine: a register-blocked float32 matrix product
(AVX2/FMA or AVX-512), ``C = alpha * op(A) @ op(B) + beta * C``, row-major:
ember's own GEMM for the shapes where it beats BLAS (on AVX-512, all of them).

Why: OpenBLAS's ``sgemm`` packs both operands into its own buffers on every call; for a batch of
32 rows against a 512 x 512 weight that copy, and the cold caches of the buffers, cost about a
third of the call. This kernel packs only ``B``, one ``KC x W`` panel at a time into a small stack
buffer that stays in L1/L2 while every row block of ``A`` runs over it, so ``B`` is read exactly
once per call and never written back to memory. ``A`` is read in place (any row/column strides: a
transposed operand costs nothing extra).

Instruction sets (:class:`Isa`, :func:`isa`; ``EMBER_GEMM_ISA`` picks one): ``MR x W`` accumulator
tiles held in vector registers, ``W / vw`` vector loads of the packed panel and ``MR`` broadcasts
of ``A`` per step of the contraction. AVX2 (``vw`` = 8, 16 ``ymm``): 4 x 24 (12 accumulators),
6 x 16 (12) and 8 x 8 (8). AVX-512 (``vw`` = 16, 32 ``zmm``): 8 x 48 (24), 12 x 32 (24) and
16 x 16 (16). Both have a 1 x ``3 vw`` tile for a row block of one row on a full panel (a
generation step's product). The column count picks the widest panel that is not mostly padding
(:func:`panel_widths`). Rows past ``m`` in the last row block read row 0 again (results
discarded), so the inner loop has no edge branches; partial tiles go through a small buffer in the
epilogue. Large products (``em_sgemm_big``, in ``csrc/gemm_driver.h``) are blocked as GotoBLAS
does: ``A`` packed into slivers of ``MR`` rows per block of rows, ``B`` per block of panels. On
AVX-512 (``Isa.big_l2``) a block of panels is as many ``kc x 48`` panels as 1 MiB holds, or half the
L2 where that is less (L2 is 2 MiB on Sapphire Rapids, 1 MiB on Zen 4; ``sysconf``), cut evenly,
and each sliver of A (in L1) runs over every panel
of the block before the next sliver; all the panels make one block where they take at most 1.5 MiB
(then every sliver runs over one panel before the next panel, as AVX2 does always).

A product whose ``B`` is a program constant (weights captured by the jitted function) skips even
that: :func:`prepack_b` lays ``B`` out once, when the program is built, exactly as the kernel packs
it panel by panel, and the program calls the ``_packed`` entry on it. That entry runs four panels
at a time over each block of rows and takes contractions 512 deep (B is in L2, not rebuilt in L1),
so it is faster than the packing entry at every size and than OpenBLAS up to 512 rows
(:func:`use_prepacked`); up to k = 512 its sums are those of the packing entry, bit for bit. ONNX
Runtime does the same with a session's constant weights. A ``B`` passed as an argument gets the
same once the C dispatcher has seen the same ember Array twice (:func:`packed_argument`).

:func:`c_source` is the kernel's C. It is compiled once per machine into its own shared object
(cached next to the programs, outside their counters), in a background thread started by the first
program that wants it, and loaded ``RTLD_GLOBAL``. Generated programs look the exported symbol up
with ``dlsym`` on each call until it resolves and call BLAS until then, so the kernel adds nothing
to a program's compile time or first call (the library's build, ~1 s of gcc CPU time, overlaps
them). It needs GCC with AVX2 and FMA (``-march=native`` on such a CPU); elsewhere
:func:`kernel_symbol` is None and programs keep BLAS. :func:`use_small_sgemm` is the size rule.
The symbol hashes the source, so a program (and its disk cache entry) names the ISA whose packed
layout it was built for.

This module is the library and its facts (instruction sets, size rules, the C source, building and
loading it, eager products on it); what a program's C says to call it and its prepacked operands
are :mod:`ember._src.native.emit.gemm_kernel`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ember._src.native import csrc
from ember._src.native.runtime import pool
from ember._src.native.runtime.background import BackgroundLibrary
from ember._src.native.runtime.threadpool import DEFAULT_PARALLEL_THRESHOLD
from ember._src.prims import dot as dot_prims
from ember.errors import CompileError

__all__ = ["AVX2", "AVX512", "BLAS_ONLY", "EAGER_MIN_MNK", "ISAS", "KC", "PREPACKED_MIN_ROWS", "Isa",
           "c_size_rule", "c_source", "eager_dot_general", "eager_sgemm", "isa", "kernel_rows",
           "kernel_rows_for", "kernel_symbol", "load", "narrow_columns", "panel_count", "panel_widths",
           "row_limit", "row_variants", "use_prepacked", "use_small_sgemm"]

logger = logging.getLogger(__name__)

# contraction block: a 256 x 24 panel is 24 KiB, within a 32 KiB L1 data cache. A contraction of up
# to 2 KC runs as one block all the same (one pass over C, no read-back): measured 5-7% faster for
# 128-384 rows (k = 384, 512) and level (0.97-1.0x) for 16-64 rows, the L1 overflow notwithstanding.
# (AVX-512's 48-wide panels take 48 KiB per KC steps, from L2; its small path kept KC: it ran at
# 0.82-0.91x OpenBLAS's time for 32..512 x 256 x 256 and 0.63-0.89x for 32..512 x 1024 x 1024.)
KC = 256


@dataclass(frozen=True)
class Isa:
    """One instruction set the kernel is generated for: ``vw`` floats per vector register; the
    micro-kernels ``kernels`` as (rows, vectors per row), 3, 2 and 1 vectors wide (panels of ``3 vw``,
    ``2 vw`` and ``vw`` columns); ``guard`` the C condition that the compiler targets it; ``fma``
    the C of ``a * b + c`` fused; the blocking of large products (:c:func:`em_sgemm_big`): ``big_kc``
    deep blocks of ``big_mc`` packed rows of A and ``big_np`` panels of B, or with ``big_l2`` set
    (bytes) blocks of as many panels as that holds, each packed sliver of A run over all of them."""

    name: str
    vw: int
    kernels: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
    guard: str
    fma: str
    flags: frozenset[str]
    kc: int = KC
    big_kc: int = 512
    big_mc: int = 96
    big_np: int = 32
    big_min_m: int = 512
    big_min_k: int = 64
    big_always_m: int = 1024
    big_min_a: int = 7 << 17  # 3.5 MiB of A
    big_min_mnk: int = 1 << 30
    big_l2: int = 0

    def panel_width(self, left: int) -> int:
        """The width of the next column panel when ``left`` columns remain (``em_sk_panel_width``)."""
        vw = self.vw
        return 3 * vw if left > 4 * vw or 2 * vw < left <= 3 * vw else 2 * vw if left > vw else vw


# 8-wide ymm registers (16 of them): 4 x 24 (12 accumulators), 6 x 16 (12) and 8 x 8 (8)
AVX2 = Isa("avx2", 8, ((4, 3), (6, 2), (8, 1)), "defined(__AVX2__) && defined(__FMA__)",
           "__builtin_ia32_vfmaddps256((a), (b), (c))", frozenset({"-mavx2", "-mfma"}))
# 16-wide zmm registers (32 of them; Zen 4 runs a 512-bit FMA as two 256-bit halves, so the gain is
# fewer loads and broadcasts per FMA from the larger tiles): 8 x 48 (24 accumulators), 12 x 32 (24),
# 16 x 16 (16). Tiles and blocking measured on the AVX-512 host (Zen 4), see benchmarks/bench_gemm.py.
# Blocks of B panels for 1 MiB of L2 (big_l2), measured on Sapphire Rapids (2 MiB L2), one thread, by
# the calling thread's CPU time, interleaved with torch.matmul (MKL) in one process: the panels of
# a 1576 x 768 @ 768 x 3072 product in blocks of 32 (2.3 MiB at kc = 384) read each panel from L3
# once per block of 96 rows: 148-166 GFLOP/s over the runs where torch ran 173-193; blocks of 13-16
# panels with each sliver over the block 170-191 (torch 173-186 in the same runs). 512 KiB ran
# level, 1.5 MiB 5-8% slower; contraction blocks of 768 or 1024 steps level or slower, software
# prefetches of the panel rows ahead (4-16 steps) 3-5% slower.
AVX512 = Isa("avx512", 16, ((8, 3), (12, 2), (16, 1)), "defined(__AVX512F__) && defined(__FMA__)",
             "__builtin_ia32_vfmaddps512_mask((a), (b), (c), (short)-1, 4)",
             frozenset({"-mavx512f", "-mfma"}), big_l2=1 << 20)
ISAS = {isa.name: isa for isa in (AVX2, AVX512)}
# a single row (a generation step's product) on full widest panels: the widest tile's first row
_ROW_VECTORS = 3


# Size rule of the AVX2 kernel (float32, one thread), measured against OpenBLAS 0.3.30 (SciPy's) on
# AVX2 (Zen 3, 512 KiB L2) for m in 4..1000, n, k in 8..4096: the kernel wins by 10-50% while A,
# re-read once per 24-column panel, stays in L2 (m * k floats; the more panels the less A may take)
# and B, read once in strided 96-byte row pieces, is not so large that DRAM/TLB misses dominate (k *
# n floats); beyond, OpenBLAS's own blocking wins (64 x 2048 x 2048 ran 1.28x, 512 x 1024 x 256
# 1.18x slower). Past 512 rows the kernel was never reliably ahead (same-process A/B, medians of
# alternating blocks, m x k @ k x n: 768x128@128x128 1.03-1.07x, 1000x64@64x256 1.06x, 1024x64@64x64
# 1.03-1.09x the BLAS time; with a fused bias + ReLU 0.97-1.49x); for 256 < m <= 512 it ran
# 0.95-1.04x (0.94-0.99x fused). An A as large as the whole L2 does not stay there inside a program
# (its producer's output, B's panels and C share the cache, and a neighbour on the core shares it
# too): in the transformer block (4x128x256) the four 512 x 256 x 256 products ran as fast or up to
# 1.2x faster on OpenBLAS (bench_transformer.py, per-step timings, quiet and loaded machine), so A
# stops short of L2's size.
MAX_M = 512
MAX_A_FLOATS = 64 * 1024  # 256 KiB of A for any n ...
MAX_A_FLOATS_NARROW = 112 * 1024  # ... 448 KiB while n <= NARROW_N
NARROW_N = 512
MAX_B_FLOATS = 1024 * 1024  # 4 MiB of B
# A single row (a generation step) against a prepacked B goes to the kernel too (its 1 x 24 tile,
# a quarter of the 4 x 24 tile's FMAs; the same sums as that tile's first row), not to BLAS sgemv.
# Measured on the 2-vCPU AVX-512 host, loaded, same process (1 x k @ k x n, float32): one thread,
# B read in place (x @ W) 0.9-1.2x the sgemv time (768x2304, 3072x768, 768x3072, 768x20000: level
# within the noise), B read transposed (x @ W.T, torch's Linear and the tied LM head) 0.57-0.93x
# (768 x 50257: 10.0 vs 17.4 ms); two threads 0.26-0.41x for x @ W (OpenBLAS's threads hand over
# badly on a busy machine; ember's pool lets the caller take their chunks) and 0.66-0.92x for x @ W.T.
PREPACKED_MIN_ROWS = 1
# The AVX-512 kernel (16-wide tiles; em_sgemm_big with A packed for large products) takes every
# float32 product of 2 or more rows, with or without a prepacked B. Measured on the AVX-512 host (Zen
# 4, 1 MiB L2; load average 9.7-10.6 from other jobs, so by the CPU time of the calling thread, the
# minimum of 3 interleaved rounds): `python benchmarks/bench_gemm.py --sweep`, the kernel's faster
# path / OpenBLAS 0.3.30 (NumPy's), m x n x k: 32..512 x 256 x 256 0.82-0.91; 32..512 x 1024 x
# 1024 0.63-0.89; 32..128 x 4096 x 4096 0.68-0.89; 2 and 8 x 4096 x 4096 0.91, 0.87; 512 x 1024 x
# 4096 0.95; 1024 x 256 x 1024 0.96; 2048 x 256 x 256 0.91; 4096 x 256 x 256 1.00; 1024 x 4096 x 256
# 0.92; 1024^3 1.00; 2048 x 1024 x 1024 0.97; 2048^3 0.93. Inside the kernel the blocked path takes
# m >= 1024, or m >= 512 with m k >= 7 * 2^17 (3.5 MiB of A) or m n k >= 2^30 (em_sk_use_big). Since
# A is packed by 8 x 8 register transposes (0.6 -> 0.1 ms for a 1024 x 1024 A) and B in blocks of
# 32 panels (A packed once per 32 panels, not 16), a later contraction block adding into C from the
# accumulators: `--sweep --shapes ...` (load 5) big / small: 1000^3 0.95, 1024^3 0.83, 512 x 512 x
# 2048 0.96, 1024 x 256 x 1024 0.84, 768^3 1.01, 512 x 1024 x 1024 1.05, 512 x 2048 x 512 1.14.
WIDE_MAX_M = (1 << 31) - 1


def _wide() -> bool:
    """Whether the kernel here is the AVX-512 one (whose size rule is "every product")."""
    target = isa()
    return target is not None and target.vw == 16


def row_limit() -> int:
    """The most rows any product may have on the kernel (:data:`MAX_M` on AVX2)."""
    return WIDE_MAX_M if _wide() else MAX_M


def kernel_rows(n: int, k: int, prepacked: bool = False) -> int:
    """The most rows ``m`` for which a float32 product ``m x k @ k x n`` goes to the kernel (it takes
    ``2 <= m <=`` this; 0: no ``m``): the size rule of :func:`use_small_sgemm`, or with a prepacked
    ``B`` that of :func:`use_prepacked`. Programs whose ``m`` is a dynamic axis test it at run time."""
    if n < 2 or k < 1:
        return 0
    if _wide():
        return WIDE_MAX_M
    if prepacked:
        return MAX_M
    if k * n > MAX_B_FLOATS:
        return 0
    return min(MAX_M, (MAX_A_FLOATS_NARROW if n <= NARROW_N else MAX_A_FLOATS) // k)


def c_size_rule(m: str, n: str, k: str) -> str:
    """C condition that a product ``m x k @ k x n`` (sizes as C expressions, some of them dynamic
    axes) meets :func:`kernel_rows`'s rule (without a prepacked ``B``): the same rule as for static
    sizes, evaluated per call. ``m <= A // k`` is written ``m * k <= A`` (equal for positive k)."""
    if _wide():
        return f"({n}) >= 2 && ({k}) >= 1 && ({m}) >= 2"
    a = f"(({n}) <= {NARROW_N} ? {MAX_A_FLOATS_NARROW} : {MAX_A_FLOATS})"
    return (f"({n}) >= 2 && ({k}) >= 1 && ({k}) * ({n}) <= {MAX_B_FLOATS} && ({m}) >= 2 && "
            f"({m}) <= {MAX_M} && ({m}) * ({k}) <= {a}")


def use_small_sgemm(m: int, n: int, k: int) -> bool:
    """Whether a static-shape float32 product ``m x k @ k x n`` goes to :func:`c_source`'s kernel
    rather than BLAS ``sgemm`` (single rows/columns stay with BLAS ``sgemv``)."""
    return 2 <= m <= kernel_rows(n, k)


def use_prepacked(m: int, n: int, k: int) -> bool:
    """Whether a static-shape float32 product ``m x k @ k x n`` whose ``B`` is a program constant
    goes to the kernel's prepacked entry: on AVX2 up to :data:`MAX_M` rows whatever ``n`` and ``k``.
    Without packing ``B`` on each call, and with ``A`` re-read once per block of four panels, it ran
    level with OpenBLAS or faster on every such shape measured (e.g. 512 x 1024 x 256 0.94-1.0x,
    512 x 256 x 256 0.89-1.01x, 64 x 4096 x 4096 0.95x; the transformer block 4x128x256 with its
    six products on it 0.91-0.94x the same program on OpenBLAS), but not with more rows (1024 x
    1024 x 1024 1.08x, 2048 x 512 x 512 1.17x: A is then re-read from L3). On AVX-512 every product
    (large ones pack A: ``em_sgemm_big``)."""
    return PREPACKED_MIN_ROWS <= m <= kernel_rows(n, k, prepacked=True)


def _prefetch_offsets(w: int) -> list[int]:
    """Byte offsets whose cache lines cover ``4 * w`` bytes starting anywhere in a 64-byte line."""
    return [*range(0, 4 * w - 1, 64), 4 * w - 1]


def _broadcast(isa: Isa, x: str) -> str:
    """C initializer of a vector holding ``x`` in every lane."""
    return "{" + ", ".join([x] * isa.vw) + "}"


def _fma_steps(isa: Isa, mr: int, nv: int, a_of: Callable[[int], str]) -> list[str]:
    """One contraction step of an ``mr x nv``-vector tile: per row a broadcast of ``a_of(row)``
    and ``nv`` FMAs into the accumulators ``c{row}_{v}`` (panel vectors ``b{v}`` loaded before)."""
    lines = []
    for r in range(mr):
        lines.append(f"{{ const float x = {a_of(r)}; const em_vf a = {_broadcast(isa, 'x')};")
        lines.extend(f"  c{r}_{v} = EM_FMA(a, b{v}, c{r}_{v});" for v in range(nv))
        lines.append("}")
    return lines


# the micro-kernels' parameters
_KERNEL_ARGS = ("int64_t kc, const float *const *ar, int64_t csa, const float *restrict bp, "
                "float *restrict t, int64_t ldt, const char *pf, int64_t pfs, int64_t npf, "
                "const float *bsrc, int64_t rsb, const float *bias, int relu")
# the same, as the arguments of a call passing them on
_KERNEL_PARAMS = "kc, ar, csa, bp, t, ldt, pf, pfs, npf, bsrc, rsb, bias, relu"


def _register_epilogue(isa: Isa, acc: list[list[str]]) -> list[str]:
    """C applied to the accumulators ``acc`` before they are stored: ``+ bias[j]`` (``bias`` non-null)
    and the ReLU that keeps NaN (``relu``; ``v > 0 || v != v ? v : 0``, as ``em_sk_store``), in
    registers, so a whole tile with a fused epilogue goes straight to C (not through ``t`` and
    ``em_sk_store``: 1.2% of the MLP 512's time at batch 128, its three products all with a bias).
    ``relu`` holds flags: bit 0 the ReLU, bit 1 ``C +=`` (the tile first adds what ``t`` holds, the
    product's accumulator C when ``t`` is C itself: ``beta == 1`` in one contraction block, a residual
    the passes gave the product, so it too skips ``em_sk_store``'s pass over the tile)."""
    nv = len(acc[0])
    vw = isa.vw
    lines = ["    if (relu & 2) {",
             *(f"        {x} = {x} + *(const em_vfu *)(t + {r} * ldt + {vw * v});"
               for r, row in enumerate(acc) for v, x in enumerate(row)),
             "    }",
             "    if (bias) {",
             *(f"        const em_vf bb{v} = *(const em_vfu *)(bias + {isa.vw * v});" for v in range(nv)),
             *(f"        {x} = {x} + bb{v};" for row in acc for v, x in enumerate(row)),
             "    }",
             "    if (relu & 1) {",
             "        const em_vf z = {0};"]
    lines += [f"        {x} = (em_vf)((em_vi){x} & (({x} > z) | ({x} != {x})));" for row in acc for x in row]
    return lines + ["    }"]


def _micro_kernel(isa: Isa, mr: int, nv: int, name: str) -> str:
    """C of the ``mr x vw nv`` micro-kernel ``name``: an always-inline body and a noinline entry that
    calls it with ``csa == 1`` and ``bsrc`` null as constants where they are (so each of the four
    copies has branch-free inner loops: the first ``npf`` steps also prefetch the next panel, the
    rest do not). The tile goes to ``t`` (row stride ``ldt``) after :func:`_register_epilogue`
    (``bias`` null and ``relu`` 0 where the caller applies the epilogue itself)."""
    vw = isa.vw
    w = vw * nv
    acc = [[f"c{r}_{v}" for v in range(nv)] for r in range(mr)]
    bvars = ", ".join(f"b{v}" for v in range(nv))
    load_src = " ".join(f"b{v} = *(const em_vfu *)(bsrc + p * rsb + {vw * v});"
                        f" *(em_vf *)(bp + p * {w} + {vw * v}) = b{v};" for v in range(nv))
    load_bp = " ".join(f"b{v} = *(const em_vf *)(bp + p * {w} + {vw * v});" for v in range(nv))
    fmas = _fma_steps(isa, mr, nv, lambda r: f"a{r}[p * csa]")
    prefetch = " ".join(f"__builtin_prefetch(pf + p * pfs + {off}, 0, 2);" for off in _prefetch_offsets(w))

    def step(with_prefetch: bool) -> list[str]:
        body = [f"em_vf {bvars};",
                # bsrc set (the first row block of a full panel): read B's row in place, pack it as we go
                f"if (bsrc) {{ {load_src} }} else {{ {load_bp} }}"]
        if with_prefetch:  # the next panel's row p (4 * w bytes from any alignment: every line it touches)
            body.append(prefetch)
        return ["        " + line for line in body + fmas]

    args = _KERNEL_ARGS
    lines = [
        f"static inline __attribute__((always_inline)) void {name}_body({args}) {{",
        "    em_vf " + ", ".join(f"{x} = {{0}}" for row in acc for x in row) + ";",
        *(f"    const float *a{r} = ar[{r}];" for r in range(mr)),
        "    int64_t p = 0;",
        "    #pragma GCC unroll 2",
        "    for (; p < npf; ++p) {", *step(True), "    }",
        "    #pragma GCC unroll 2",
        "    for (; p < kc; ++p) {", *step(False), "    }",
    ]
    lines += _register_epilogue(isa, acc)
    lines.extend(f"    *(em_vfu *)(t + {r} * ldt + {vw * v}) = {acc[r][v]};"
                 for r in range(mr) for v in range(nv))
    lines += [
        "}",
        f"static __attribute__((noinline)) void {name}({args}) {{",
        "    if (csa == 1) {",
        f"        if (bsrc) {name}_body(kc, ar, 1, bp, t, ldt, pf, pfs, npf, bsrc, rsb, bias, relu);",
        f"        else {name}_body(kc, ar, 1, bp, t, ldt, pf, pfs, npf, 0, rsb, bias, relu);",
        f"    }} else if (bsrc) {name}_body(kc, ar, csa, bp, t, ldt, pf, pfs, npf, bsrc, rsb, bias, relu);",
        f"    else {name}_body(kc, ar, csa, bp, t, ldt, pf, pfs, npf, 0, rsb, bias, relu);",
        "}",
    ]
    return "\n".join(lines) + "\n"


def row_variants(mr: int) -> list[int]:
    """The shorter tiles generated beside an ``mr``-row micro-kernel for a product's last row block
    (``m % mr`` rows): every second row count below ``mr`` (every fourth from 16 rows). The last
    block takes the shortest of them that covers its rows, so it computes at most one row (three
    for 16-row tiles) it does not store instead of up to ``mr - 1``: 64 x 64 x 64 on the 12 x 32
    tile was 72 rows' work for 64 (about 5.5 -> 5.0 us of kernel time, AVX-512 host, one thread)."""
    step = 2 if mr <= 12 else 4
    return list(range(step, mr, step))


def kernel_rows_for(mr: int, rows: int) -> int:
    """The rows the micro-kernel for a block of ``rows`` rows (``1 <= rows <= mr``) of an ``mr``-row
    tile computes: the shortest :func:`row_variants` entry at least ``rows``, else ``mr``."""
    return next((r for r in row_variants(mr) if r >= rows), mr)


def _kernel_family(isa: Isa, mr: int, nv: int, name: str) -> str:
    """C of the ``mr x nv vw`` micro-kernel ``name``, its shorter variants ``name_r<rows>``
    (:func:`row_variants`), the table ``name_rows`` of the rows the kernel for a block of ``0 ..
    mr`` rows computes, and ``name_short``, which runs a block whose table entry is below ``mr`` on
    that variant. (Direct calls: calling the kernels through a table of their addresses measured up
    to 30% slower on small products, 48^3 3.4 -> 4.4 us.)"""
    src = "".join(_micro_kernel(isa, r, nv, f"{name}_r{r}") for r in row_variants(mr))
    src += _micro_kernel(isa, mr, nv, name)
    rows = [kernel_rows_for(mr, max(want, 1)) for want in range(mr + 1)]
    cases = " ".join(f"case {r}: {name}_r{r}({_KERNEL_PARAMS}); break;"
                     for r in row_variants(mr))
    return (src + f"static const unsigned char {name}_rows[{mr + 1}] = {{{', '.join(map(str, rows))}}};\n"
            f"static __attribute__((noinline)) void {name}_short(int64_t mk, {_KERNEL_ARGS}) {{\n"
            f"    switch (mk) {{ {cases} default: break; }}\n}}\n")


def _packed_a_kernel(isa: Isa, nv: int) -> str:
    """C of ``em_sk_pa{nv}``: an ``MR3 x nv vw`` tile over a packed sliver of ``A`` (``kc`` steps of
    ``MR3`` contiguous floats, :c:func:`em_sk_pack_a`) and a packed panel of ``B``, stored to ``t``
    (row stride ``ldt``) or, with ``add``, added to what ``t`` holds (a later contraction block
    accumulating in C itself), then ``bias`` and ``relu`` as :func:`_register_epilogue` applies them
    (the last block of a whole tile): one pointer for all rows; both stream sequentially (software
    prefetches here measured slower: 3.19 vs 2.87 ms at 512^3, 24.2 vs 24.0 ms at 1024^3)."""
    mr = isa.kernels[0][0]
    vw, w = isa.vw, isa.vw * nv
    acc = [[f"c{r}_{v}" for v in range(nv)] for r in range(mr)]
    lines = [
        f"static __attribute__((noinline)) void em_sk_pa{nv}(int64_t kc, const float *restrict ap, "
        "const float *restrict bp, float *restrict t, int64_t ldt, int add, const float *bias, int relu) {",
        "    em_vf " + ", ".join(f"{x} = {{0}}" for row in acc for x in row) + ";",
        "    #pragma GCC unroll 4",
        "    for (int64_t p = 0; p < kc; ++p) {",
        *(f"        const em_vf b{v} = *(const em_vf *)(bp + p * {w} + {vw * v});" for v in range(nv)),
        *("        " + ln for ln in _fma_steps(isa, mr, nv, lambda r: f"ap[p * {mr} + {r}]")),
        "    }",
        # C read after the loop (its lines prefetched by the caller meanwhile), added as em_sk_store does
        "    if (add) {",
        *(f"        {acc[r][v]} = *(const em_vfu *)(t + {r} * ldt + {vw * v}) + {acc[r][v]};"
          for r in range(mr) for v in range(nv)),
        "    }",
        *_register_epilogue(isa, acc),
        *(f"    *(em_vfu *)(t + {r} * ldt + {vw * v}) = {acc[r][v]};" for r in range(mr) for v in range(nv)),
        "}",
    ]
    return "\n".join(lines) + "\n"


# Narrow panels (``em_sk_narrow``): at most this many columns (``EM_SK_NARROW``) run on the dot-product
# kernels below, vectorised along the contraction, instead of a ``vw``-wide tile with most lanes
# padding. 128 x 10 x 512 (the MLP's last layer) took 26-27 us on the 16 x 16 tile (42-44% of one
# core's peak, AVX-512 host), which wastes 6 of 16 lanes and runs one broadcast per FMA.
NARROW_COLUMNS = {8: 8, 16: 12}
# accumulator registers the dot kernels use (of 16 ymm / 32 zmm): rows x columns at most this
_DOT_BUDGET = {8: 12, 16: 24}
_DOT_MAX_ROWS = 4


def narrow_columns(target: Isa | None = None) -> int:
    """The most columns a product may have to run on the dot kernels (``em_sk_narrow``; with a
    contiguous row of ``A`` and ``vw <= k <= 1024``) on ``target`` (default :func:`isa`; 0 without
    a kernel). Their sums add ``vw`` lane-wise partial sums at the end, so they differ from the
    tiles' contraction-order sums in rounding."""
    target = target or isa()
    return 0 if target is None else NARROW_COLUMNS[target.vw]


def dot_rows(isa: Isa, nr: int) -> int:
    """Rows of ``A`` per block of the dot kernel for ``nr`` columns (its tile is rows x ``nr``)."""
    return max(1, min(_DOT_MAX_ROWS, _DOT_BUDGET[isa.vw] // nr))


def _dot_kernel(isa: Isa, nr: int) -> str:
    """C of ``em_sk_dot{nr}``: ``t[r * nr + j] = sum_p ar[r][p] * bt[j * ldbt + p]`` for a block of
    :func:`dot_rows` rows (``ar``: their contiguous rows of ``A``) and ``nr`` columns (``bt``:
    ``op(B)`` transposed, rows of ``ldbt`` floats zero-padded to a multiple of ``vw`` past ``kc``):
    one accumulator vector per element, ``vw`` contraction steps per FMA, summed across its lanes
    at the end (the last partial vector of ``A`` read through a zero-padded copy)."""
    vw, rows = isa.vw, dot_rows(isa, nr)
    acc = [[f"s{r}_{j}" for j in range(nr)] for r in range(rows)]
    tail = " ".join(f"xt[{r}][q - p] = a{r}[q];" for r in range(rows))

    def step(src: str) -> list[str]:
        out = [f"const em_vf x{r} = {src.format(r=r)};" for r in range(rows)]
        for j in range(nr):
            # one load into a register for all rows (GCC otherwise folds it into each FMA: a load
            # per FMA, which bounds the loop at about 58% of the FMA peak)
            out.append(f"{{ em_vf y = *(const em_vf *)(bt + {j} * ldbt + p); __asm__(\"\" : \"+v\"(y));")
            out.extend(f"  {acc[r][j]} = EM_FMA(x{r}, y, {acc[r][j]});" for r in range(rows))
            out.append("}")
        return out

    lines = [
        f"static __attribute__((noinline)) void em_sk_dot{nr}(int64_t kc, const float *const *ar, "
        "const float *restrict bt, int64_t ldbt, float *restrict t) {",
        "    em_vf " + ", ".join(f"{x} = {{0}}" for row in acc for x in row) + ";",
        *(f"    const float *a{r} = ar[{r}];" for r in range(rows)),
        "    int64_t p = 0;",
        f"    for (; p + {vw} <= kc; p += {vw}) {{",
        *("        " + ln for ln in step("*(const em_vfu *)(a{r} + p)")),
        "    }",
        "    if (p < kc) {",
        f"        float xt[{rows}][{vw}] __attribute__((aligned(64))) = {{{{0}}}};",
        f"        for (int64_t q = p; q < kc; ++q) {{ {tail} }}",
        *("        " + ln for ln in step("*(const em_vf *)xt[{r}]")),
        "    }",
        *(f"    t[{r * nr + j}] = em_sk_hsum({acc[r][j]});" for r in range(rows) for j in range(nr)),
        "}",
    ]
    return "\n".join(lines) + "\n"


def _dot_kernels(isa: Isa) -> str:
    """C of the dot kernels for 1 .. :data:`NARROW_COLUMNS` columns, ``em_sk_dot_rows[nr]`` (their
    row counts) and ``em_sk_dot`` (a switch on ``nr``: direct calls, as ``em_sk_t*_short``)."""
    narrow = NARROW_COLUMNS[isa.vw]
    vw = isa.vw
    halves = []
    h = vw // 2
    while h >= 1:
        halves.append("{" + ", ".join(str((i + h) % vw) for i in range(vw)) + "}")
        h //= 2
    src = ("/* the sum of a vector's lanes (a fixed order: halves folded onto each other) */\n"
           "static inline float em_sk_hsum(em_vf v) {\n"
           + "".join(f"    v = v + __builtin_shuffle(v, (em_vi){m});\n" for m in halves)
           + "    return v[0];\n}\n")
    src += "".join(_dot_kernel(isa, nr) for nr in range(1, narrow + 1))
    rows = ", ".join(["0"] + [str(dot_rows(isa, nr)) for nr in range(1, narrow + 1)])
    cases = " ".join(f"case {nr}: em_sk_dot{nr}(kc, ar, bt, ldbt, t); break;" for nr in range(1, narrow + 1))
    return (src + f"#define EM_SK_NARROW {narrow}\n#define EM_SK_DOT_MAXROWS {_DOT_MAX_ROWS}\n"
            f"static const unsigned char em_sk_dot_rows[{narrow + 1}] = {{{rows}}};\n"
            "static void em_sk_dot(int64_t nr, int64_t kc, const float *const *ar, const float *bt, "
            "int64_t ldbt, float *t) {\n"
            f"    switch (nr) {{ {cases} default: break; }}\n}}\n")


def _head(isa: Isa) -> str:
    """The ``#if`` that enables the kernel for ``isa`` and its types, FMA and tile-shape macros."""
    (mr3, _), (mr2, _), (mr1, _) = isa.kernels
    vw = isa.vw
    tile = max(mr * nv * vw for mr, nv in isa.kernels)
    # the two halves of a zip of two MR3-float rows (a0 b0 a1 b1 ..., then the upper halves):
    # log2(MR3) rounds of zips of rows i and i + MR3 / 2 transpose an MR3 x MR3 block (em_sk_pack_a)
    half = mr3 // 2
    zip_lo = ", ".join(str(x) for i in range(half) for x in (i, mr3 + i))
    zip_hi = ", ".join(str(x) for i in range(half, mr3) for x in (i, mr3 + i))
    return f"""\
#if defined(__GNUC__) && !defined(__clang__) && {isa.guard}
#define EM_SGEMM_SMALL 1
#pragma GCC optimize ("O2")  /* as fast here as -O3 (explicit vector code), half the build time */
/* ISA {isa.name}: vectors of {vw} floats; tiles MR x W: {mr3} x {3 * vw}, {mr2} x {2 * vw}, {mr1} x {vw} */
#define EM_SK_KC {isa.kc}
#define EM_SK_VW {vw}
#define EM_SK_W3 {3 * vw}
#define EM_SK_W2 {2 * vw}
#define EM_SK_W1 {vw}
#define EM_SK_MR3 {mr3}
#define EM_SK_MRW(w) ((w) == EM_SK_W3 ? {mr3} : (w) == EM_SK_W2 ? {mr2} : {mr1})
#define EM_SK_MRMAX {max(mr3, mr2, mr1)}
#define EM_SK_TILE {tile}
#define EM_SK_BIG_KC {isa.big_kc}
#define EM_SK_BIG_MC {isa.big_mc}
#define EM_SK_BIG_NP {isa.big_np}
#define EM_SK_BIG_L2 {isa.big_l2}
#define EM_SK_BIG_MIN_M {isa.big_min_m}
#define EM_SK_BIG_MIN_K {isa.big_min_k}
#define EM_SK_BIG_ALWAYS_M {isa.big_always_m}
#define EM_SK_BIG_MIN_A {isa.big_min_a}
#define EM_SK_BIG_MIN_MNK {isa.big_min_mnk}
/* GCC vector extensions and builtins (no <immintrin.h>: parsing it costs more than this code) */
typedef float em_vf __attribute__((vector_size({4 * vw})));
typedef float em_vfu __attribute__((vector_size({4 * vw}), aligned(4)));
typedef int em_vi __attribute__((vector_size({4 * vw})));
#define EM_FMA(a, b, c) {isa.fma}
/* MR3 floats: a row of an MR3 x MR3 block of A being transposed into its packed sliver */
typedef float em_vr __attribute__((vector_size({4 * mr3})));
typedef float em_vru __attribute__((vector_size({4 * mr3}), aligned(4)));
typedef int em_vri __attribute__((vector_size({4 * mr3})));
#define EM_SK_ZIP_LO {{{zip_lo}}}
#define EM_SK_ZIP_HI {{{zip_hi}}}
"""




_ENTRY = """
/* the exported entry points (names carry a hash of this source: a changed kernel is a new symbol) */
int SYMBOL_ok(void) { return EM_SGEMM_SMALL; }
void SYMBOL(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa,
            const float *b, int64_t rsb, int64_t csb, float beta, float *c, int64_t ldc, const float *bias,
            int relu, int nthreads) {
#if EM_SGEMM_SMALL
    em_sgemm_small(m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc, bias, relu, nthreads);
#else
    (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)rsa; (void)csa; (void)b; (void)rsb;
    (void)csb; (void)beta; (void)c; (void)ldc; (void)bias; (void)relu; (void)nthreads;
#endif
}
/* the same product with B prepacked by gemm_kernel.prepack_b (k >= 1) */
void SYMBOL_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa,
                   const float *bpk, float beta, float *c, int64_t ldc, const float *bias, int relu,
                   int nthreads) {
#if EM_SGEMM_SMALL
    em_sgemm_packed(m, n, k, alpha, a, rsa, csa, bpk, beta, c, ldc, bias, relu, nthreads);
#else
    (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)rsa; (void)csa; (void)bpk; (void)beta; (void)c;
    (void)ldc; (void)bias; (void)relu; (void)nthreads;
#endif
}
"""


# The kernel's instruction set: the widest the compiler targets (``-march=native``), or the one
# ``EMBER_GEMM_ISA`` names ("avx2", "avx512"; tests run both on an AVX-512 machine). A named ISA
# the target lacks leaves the kernel out (BLAS runs).
ISA_REQUEST = os.environ.get("EMBER_GEMM_ISA", "").strip().lower()


@functools.cache
def isa() -> Isa | None:
    """The :class:`Isa` the kernel library is built for on this machine (None: no kernel here, also
    where ``$EMBER_CC`` names a missing or broken compiler: eager products then run on NumPy, and
    ``jit`` reports the compiler itself). Raises ValueError for an ``EMBER_GEMM_ISA`` that names no
    ISA."""
    from ember._src.native.runtime import toolchain

    if ISA_REQUEST and ISA_REQUEST not in ISAS:
        raise ValueError(f"EMBER_GEMM_ISA={ISA_REQUEST!r}: expected one of {sorted(ISAS)}")
    try:
        info = toolchain.find_compiler()
    except CompileError:
        return None
    if info is None or info.family != "gcc":
        return None
    flags = set(info.target.split())
    for cand in ([ISAS[ISA_REQUEST]] if ISA_REQUEST else [AVX512, AVX2]):
        if cand.flags <= flags:
            return cand
    return None


def c_source(target: Isa | None = None) -> str:
    """The C helpers defining ``static em_sgemm_small`` and ``em_sgemm_packed`` for ``target``
    (default :func:`isa`, else AVX2), inside an ``#if`` on the compiler targeting it, with
    ``EM_SGEMM_SMALL`` defined to 1 there, to 0 otherwise."""
    from ember._src.native.runtime import threadpool

    target = target or isa() or AVX2
    (mr3, nv3), (mr2, nv2), (mr1, nv1) = target.kernels
    kernels = (_kernel_family(target, mr3, nv3, "em_sk_t3") + _kernel_family(target, mr2, nv2, "em_sk_t2")
               + _kernel_family(target, mr1, nv1, "em_sk_t1")
               + _micro_kernel(target, 1, _ROW_VECTORS, "em_sk_row")
               + "".join(_packed_a_kernel(target, nv) for nv in (3, 2, 1)) + _dot_kernels(target))
    return ("#include <stdlib.h>\n#include <unistd.h>\n" + _head(target) + kernels
            + f'#define EM_SK_POOL_SYMBOL "{threadpool.symbol()}"\n' + csrc.load("zip_transpose.h")
            + csrc.load("gemm_driver.h")
            + "#else\n#define EM_SGEMM_SMALL 0\n#endif\n")


@functools.cache
def _library_symbol(name: str) -> str:
    """The kernel library's exported symbol for the ISA ``name``: a hash of ember's source
    fingerprint (every ``.py``/``.c``/``.h`` file of the package, which is all the generated source
    depends on), the ISA and the thread pool's symbol. Not a hash of the generated text: a process
    whose programs come from the disk cache needs the name (it is part of every program key) but not
    the 100 KB of kernel source, which took ~2 ms of a warm first call to generate."""
    from ember._src.native.runtime import progcache, threadpool

    key = f"{progcache.source_fingerprint()}:{name}:{threadpool.symbol()}"
    return "ember_sgemm_small_" + hashlib.sha256(key.encode()).hexdigest()[:12]


@functools.cache
def _library_source(name: str) -> tuple[str, str]:
    """(the kernel library's C source for the ISA ``name``, its exported symbol)."""
    body = "#include <stdint.h>\n#ifdef _OPENMP\n#include <omp.h>\n#endif\n" + c_source(ISAS[name])
    symbol = _library_symbol(name)
    return body + _ENTRY.replace("SYMBOL", symbol), symbol


def kernel_symbol() -> str | None:
    """The kernel's exported name where this machine can run it (a GCC whose ``-march=native``
    has AVX2 and FMA; AVX-512 picks the 16-wide kernel, :func:`isa`), else None. Pure: the library
    may not be built or loaded yet (:func:`load`). The name carries a hash of ember's sources, so
    program caches keyed by it follow the ISA and the packed layout."""
    target = isa()
    return None if target is None else _library_symbol(target.name)


def _build_and_load() -> ctypes.CDLL:
    """Build (or take from the disk cache, outside the compile counters) and load the library with
    its symbols global; raises when it cannot or when the loaded library has no kernel."""
    from ember._src.native.runtime import compiler

    target = isa()
    assert target is not None
    source, symbol = _library_source(target.name)
    lib = compiler.load_global(source, name_hint="gemm_kernel")
    if not getattr(lib, symbol + "_ok")():
        raise RuntimeError(f"{symbol} was compiled without the {target.name} kernel")
    return lib


# keeps the library (and its global symbols) alive once loaded
_library: BackgroundLibrary[ctypes.CDLL] = BackgroundLibrary(
    "ember-gemm-kernel", _build_and_load,
    on_failure=lambda reason: logger.warning(
        "ember: building the float32 GEMM kernel library failed (BLAS is used): %s", reason))


def load(wait: bool = False) -> bool | None:
    """Start building and loading the kernel library (once per process, in a background thread);
    with ``wait``, block until done. True once loaded, False when it failed or is unavailable here,
    None while the build runs."""
    if kernel_symbol() is None:
        return False
    return _library.state(wait)


# Programs generated while this is set never call the kernel (their ``em_sk_fn`` is null): the BLAS
# fallback, with a fused epilogue as a loop after it, runs instead (tests; ``EMBER_SGEMM_KERNEL=0``).
BLAS_ONLY = os.environ.get("EMBER_SGEMM_KERNEL", "1") == "0"


def panel_widths(n: int, target: Isa | None = None) -> list[int]:
    """Widths of the kernel's column panels over ``[0, n)`` (``em_sk_panel_width``) for ``target``
    (default :func:`isa`): ``3 vw`` while more than ``4 vw`` columns remain, a remainder of ``3 vw +
    1 .. 4 vw`` columns as two of ``2 vw``, else one of ``3 vw``, ``2 vw`` or ``vw`` (``vw`` = 8 on
    AVX2: 24, 16, 8; 16 on AVX-512: 48, 32, 16)."""
    target = target or isa() or AVX2
    widths, left = [], n
    while left > 0:
        w = target.panel_width(left)
        widths.append(w)
        left -= min(w, left)
    return widths


def panel_count(n: int) -> int:
    """How many column panels the kernel splits ``n`` columns into (the unit its threads share)."""
    return len(panel_widths(n))


# Eager products (no jit): a float32 2-D ``dot_general`` (``matmul``, ``@``, ``dot``) of at least this
# many multiply-adds runs on the kernel, as a jitted product does (the same entry, so the same
# sums); smaller ones, other dtypes and batched products keep NumPy's ``matmul``. Eager n^3 on one
# thread (AVX-512 host, loaded; best of 7 by CPU time), kernel vs NumPy impl: n = 64 53 vs 51 us,
# 100 59 vs 60 us (the eager call's Python dominates: NumPy alone 6 and 20 us), 128 70 vs 92 us,
# 160 124 vs 138 us, 256 401 vs 610 us; 1000^3 20.9-22.4 ms vs NumPy's 21.5-22.3 ms (medians of
# three runs, benchmarks/results/gemm.md).
EAGER_MIN_MNK = 1 << 21
_EAGER_ARGTYPES = ([ctypes.c_int64] * 3 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                            ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_float,
                                            ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int,
                                            ctypes.c_int])


_eager_fn: list[Callable] = []  # the entry, once the library has loaded


def _eager_entry() -> Callable | None:
    """The kernel's packing entry as a ctypes function (the library loaded), else None (not
    remembered: a later call finds the library once its build is done)."""
    if not _eager_fn:
        lib, symbol = _library.get(), kernel_symbol()
        if lib is None or symbol is None:
            return None
        fn = getattr(lib, symbol)
        fn.restype, fn.argtypes = None, _EAGER_ARGTYPES
        _eager_fn.append(fn)
    return _eager_fn[0]


def _strides(x: np.ndarray, transposed: bool) -> tuple[int, int] | None:
    """(row, column) strides in floats of ``x`` (``x.T`` when ``transposed``), or None when a
    stride is not a positive multiple of 4 bytes."""
    rs, cs = x.strides[::-1] if transposed else x.strides
    if rs <= 0 or cs <= 0 or rs % 4 or cs % 4:
        return None
    return rs // 4, cs // 4


def eager_sgemm(a: np.ndarray, b: np.ndarray, trans_a: bool = False,
                trans_b: bool = False) -> np.ndarray | None:
    """``op(a) @ op(b)`` of float32 matrices (``op(x)`` is ``x.T`` when its flag is set) on the
    kernel, into a read-only 64-byte aligned array from the native output pool: the entry a jitted
    product calls, with the thread count a jitted product of this size gets by default. None where
    the kernel does not take it: not built here (or still building: the first call starts the
    build in the background), fewer than :data:`EAGER_MIN_MNK` multiply-adds, a single row or
    column, outside :func:`use_small_sgemm`'s rule (AVX2: what a jitted product leaves to BLAS),
    not float32, a stride that is not a positive multiple of 4 bytes."""
    if a.dtype != np.float32 or b.dtype != np.float32 or a.ndim != 2 or b.ndim != 2:
        return None
    m, k = a.shape[::-1] if trans_a else a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    if n < 2 or m * n * k < EAGER_MIN_MNK or not use_small_sgemm(m, n, k) or BLAS_ONLY or not load():
        return None
    sa, sb = _strides(a, trans_a), _strides(b, trans_b)
    fn = _eager_entry()
    if sa is None or sb is None or fn is None:
        return None
    # from the output pool jitted programs use: a block whose Arrays have all died is reused, so a
    # loop of products does not fault in fresh pages for each result (1 ms of 21 at 1000^3)
    out, addr = pool.POOL.array((m, n), np.dtype(np.float32), 4 * m * n, (a.ctypes.data, b.ctypes.data))
    nthreads = 0 if m * n * k >= DEFAULT_PARALLEL_THRESHOLD else 1
    fn(m, n, k, 1.0, a.ctypes.data, *sa, b.ctypes.data, *sb, 0.0, addr, n, None, 0, nthreads)
    out.flags.writeable = False  # an eager Array takes it over as it is (array.aligned_copy)
    return out


def eager_dot_general(x: np.ndarray, y: np.ndarray, *, dimension_numbers: tuple,
                      preferred_element_type: object = None, precision: object = None) -> np.ndarray:
    """``dot_general_p.eager_impl`` (set by the native backend): a float32 matrix product (one
    contraction axis, no batch axes) through :func:`eager_sgemm`; everything else, and whatever
    that declines, through the primitive's NumPy ``impl``."""
    (xc, yc), (xb, yb) = dimension_numbers
    if (not xb and not yb and x.ndim == 2 and y.ndim == 2 and len(xc) == 1 and len(yc) == 1
            and (preferred_element_type is None or np.dtype(preferred_element_type) == np.float32)):
        out = eager_sgemm(x, y, trans_a=xc[0] == 0, trans_b=yc[0] == 1)
        if out is not None:
            return out
    return dot_prims.dot_general_p.impl(x, y, dimension_numbers=dimension_numbers,
                                        preferred_element_type=preferred_element_type)
