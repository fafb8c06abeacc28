"""The ``fft`` call step: complex and real FFTs over trailing axes, in C, inside ``ember_main``.

ember carries its own FFT rather than calling a library: every length works, nothing is allocated
at run time, and no library has to be found at build time (line buffers come from the step's arena
workspace; twiddle tables from static storage, see below).

* **One kernel** (``fft_lanes.h``, on the Stockham passes of ``fft_passes.h``, which the
  ``fft_conv`` step below and the 2-D convolution by FFT, ``conv_fft.py``, share: one copy per
  program and precision, :func:`passes_helper`) runs every job of both precisions: lines are
  transformed ``CW`` at a time, one per lane of a vector of the operand's precision (16 floats or 8 doubles
  with AVX-512, else 8 or 4; the compiler's target decides, ``-march=native``, and the program
  cache key records the CPU), by Stockham passes of radix 8 and 4 (a power of two) or 8, 4, 2, 3,
  5 and odd primes up to :data:`BLUESTEIN_PRIME` over the plan's factors (other lengths; an odd
  prime ``p`` by a ``p``-point DFT that computes outputs ``u`` and ``p - u`` together from the
  symmetric input pairs, ``O(p^2 / 2)``), so every butterfly is SIMD across
  lines with broadcast twiddles. Rows are moved in and out by register transposes of
  ``CW x CW`` tiles; a power-of-two line is read from its rows straight into the first radix-8
  stage, and (complex rows up to 8 KB) its last stage runs inside the transposed store; other
  lengths order their stages (a Stockham transform's order is free) so that a first stage of
  radix 8, 5, 4, 3 or 2 whose stride holds whole tiles reads the rows and another is fused into
  the store the same way. The helpers compile with floating-point contraction on
  (:func:`contracted`: FMAs in the butterflies). A length
  with a prime factor above :data:`BLUESTEIN_PRIME` (64) uses Bluestein's chirp-z
  algorithm over the same passes: the transform becomes a cyclic convolution of length ``m2``,
  the least 2-3-5-smooth length at least ``2n - 1`` (about half the power of two's work when that
  would be near ``4n``). Twiddles, chirps and the chirp filter's transform are computed in double
  (libm ``cos``/``sin``; the chirp's phase reduces ``k**2`` modulo ``2n`` first; the filter's
  transform by ``fft_core.h``'s table transform at plan time) and rounded once to the operand's
  precision: measured error against NumPy's float64 transform at most about 2.7e-7 of the largest
  output magnitude for float32 (lengths 2..8191).
* **Batched rows of powers of two and 2-3-5 lengths** (``fft_line.h``; complex rows of a
  contiguous last axis and real rows through their half-length line, a multiple of ``CW`` points
  from ``CW**2`` to :data:`LINE_MAX` whose odd factors are 3 and 5, unless the four-step below
  takes them): one line at a time, SIMD across the butterflies of a pass instead of across
  lines. The line is held in blocks of ``CW`` points; its first stage has radix ``CW`` (contiguous
  loads from the row, per-lane twiddles, one register transpose of its outputs; when ``CW`` does
  not divide its ``m / CW`` butterflies the last group is padded), after which every stage's
  stride is a whole block and ``fft_passes.h``'s stages (radix 8, 4, 2, 3, 5) run on the blocks
  unchanged; the last one is fused into the interleaved store, the real split / merge pair a block
  with its lane-reversed mirror. This drops the lanes' transposes of the batch (about half of
  their time). A 2-3-5 length that is a multiple of ``CW / 2`` but not of ``CW`` (1000 and 3000
  with 16 float lanes; complex rows and the RFFT's half line) goes through two lines at a time:
  each block holds ``CW / 2`` points of each line, the first stage has radix ``CW / 2`` with one
  ``CW/2 x CW/2`` transpose per half, and the stages after it are unchanged. A 3 and a 5 among
  the stages after the first run as one radix-15 pass (prime-factor mapping, no inner twiddles),
  keeping a 3 or a 5 last for the fused store.
* **Few long lines** (a power-of-two length from 256 with at most half as many lines as lanes, from
  4096 with fewer lines than lanes or fewer line groups than threads; complex axes with contiguous
  lines, and real transforms through their half-length line): the four-step FFT of
  ``fft_lanes.h``, whose lanes hold CW adjacent columns of one line viewed as an ``N1 x N2``
  matrix (column transforms, twiddles, row transforms through register transposes), so one line
  fills the vectors and its buffers stay ``N2`` vectors long.
* **Plans.** Each step's tables (twiddles; Bluestein's chirp, convolution twiddles and the chirp
  filter's transform; the real-FFT split twiddles) live in block-scope static arrays filled by the
  first call and reused by every later one. A state word (empty / being filled / ready, atomic
  compare-and-swap) keeps it thread safe: a call that finds another thread filling the tables
  builds its own copy in the workspace.
* **Threads.** A step's lines go through in groups of ``CW``; when the work (``lines * n * 8``)
  reaches the parallel threshold (OpenMP on), the groups run on ember's thread pool
  (``em_par`` in blocks: each thread first runs its own contiguous chunks, so it transforms the
  same rows every call while their data is still in its caches, then steals what is left of the
  others'; the caller works too) on up to
  :data:`THREADS` threads, each with its own scratch in the workspace (sized ``THREADS`` times);
  the tables are shared. Every line is transformed alone,
  so results do not depend on the thread count.
* **Runtime lengths.** When a size is symbolic (named dynamic axes: one compile for every
  length), lengths and line counts are C expressions over the axis values; the C code factors the
  length with the same rules when the program runs (``fft_runtime.h``) and keeps its tables in a
  per-program cache of 64 slots keyed by (length, direction, real split), each table allocated
  once; slots are claimed by compare-and-swap, and a call that finds no free slot builds its
  tables in its workspace, which is sized for the worst case of any length (Bluestein, ``m2 <
  4n``). The real split (even length) is chosen at run time.
* **Real transforms** of even length ``n >= 4`` run as one complex FFT of length ``n/2`` over
  ``z_j = x_2j + i x_2j+1`` plus the split step ``X_k = E_k + W^k O_k`` (``IRFFT``: the merge
  step, then the half-length inverse); odd ``n`` (and 2) transforms the full complex line. The
  split is computed as the spectrum is stored, and a power-of-two line is read from its rows
  straight into the first radix-8 stage (no loaded copy of the line); up to ``n = 1024`` the
  half-length transform's last stage is fused into the split and the store too (columns ``q``
  and ``s - q`` of that stage hold the mirrored bins ``k`` and ``n/2 - k``), so no half spectrum
  is written and read back.
* **Types** (as :mod:`ember._src.prims.fft`): ``FFT``/``IFFT`` (``IFFT`` scales each axis by
  ``1/n``), ``RFFT`` (the last axis's full transform of a real line, first ``n//2 + 1`` bins kept,
  then complex FFTs over the other axes) and ``IRFFT`` (inverse complex FFTs over the leading
  transformed axes in a workspace copy, then each last-axis line is extended to its Hermitian
  spectrum and inverse transformed, keeping the real part: the imaginary parts of the DC and
  Nyquist bins are ignored, as NumPy's ``irfft`` does).
* **Empty** operands or a zero length give zeros, as the reference does.
* **Compile time: the kernels are shared libraries.** A program's fft steps call the kernels
  (``fft_lanes.h`` with its line kernel, passes and tables) in a library compiled once per
  precision and set of reachable paths (:mod:`.fft_blocks`): the program keeps only its plans and
  one call per step, so a new FFT program compiles in about 0.2 s instead of 2-2.5 s (the first
  one of a mask builds its library, 2-3 s, through the compile cache). The set is the mask
  (:func:`reach`, mirroring the C dispatch, ``EM_FFTG``) of the job kinds (axis, RFFT, IRFFT) and
  paths (power-of-two lanes and their row read, the fused RFFT stores, the four-step, mixed-radix
  lanes, Bluestein lanes, odd real lines, the line kernel) the program's fft steps of that
  precision can take, joined over its steps; in the library everything else is a constant-false
  branch the C compiler drops, and a branch the mask left out traps instead of computing (a
  disagreement is a bug). Runtime lengths take every path (their job kinds only are known). Plan
  set-up is inlined, so a direct plan carries no Bluestein table code, and the lanes build their
  tables in workspace room of their own, apart from a plan's private tables.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable

import numpy as np

from ember._src import shapes as sh
from ember._src.native.base.symdims import cdim, is_sym
from ember._src.native.csrc import load
from ember._src.native.emit import fft_blocks, support
from ember._src.native.emit.calls import CallCode, register
from ember._src.native.runtime.threadpool import usable_cpus
from ember._src.program import Eqn, Literal

BLUESTEIN_PRIME = 64  # a prime factor above this switches the length to Bluestein's (EM_FFT_PMAX)
THREADS = max(1, min(usable_cpus(), 8))  # line groups run on up to this many pool threads
LINE_MAX = 4096  # the longest line (complex points) of the line kernel (fft_line.h's EM_FFTK_MAX)
_Z = 16  # bytes of one em_z (two doubles)
_VZ = 128  # bytes of one em_vz at its widest (eight lanes, AVX-512)

_CORE = fft_blocks.core_text()
_RUNTIME = load("fft_runtime.h")


def passes_helper(cc: CallCode, real_t: str, s: str) -> None:
    """Register fft_passes.h (the Stockham passes of the fft_conv step and the 2-D convolution by
    FFT; the fft step's are in its kernel library) for one precision (``real_t`` float or double,
    name suffix ``s``), after dft_small.h's DFTs; once per program and precision, whichever step
    asks first."""
    cc.helper(f"em_fftp_{s}", fft_blocks.passes_text(real_t, s))


def _factors(n: int) -> list[int]:
    """The radices of ``n``: 4s while four divides it, then its prime factors ascending."""
    out, p = [], 2
    while n % 4 == 0:
        out.append(4)
        n //= 4
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def plan_of(n: int) -> tuple[list[int], int, list[int]]:
    """``(factors, m2, factors of m2)`` for length ``n``: direct mixed radix (``m2 == 0``) or
    Bluestein with the power-of-two convolution length ``m2``."""
    f = _factors(n) or [1]
    if max(f) <= BLUESTEIN_PRIME:
        return f, 0, []
    m2 = _smooth(2 * n - 1)
    return [], m2, _factors(m2)


def _smooth(n: int) -> int:
    """The least length at least ``n`` whose prime factors are 2, 3 and 5 (Bluestein's convolution
    length: about half the power of two's work when that would be near ``2n``)."""
    best = 1 << (n - 1).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _half(ft: str, n: int) -> bool:
    """Whether a real transform (``RFFT``/``IRFFT``) of last-axis length ``n`` runs as a half-length
    complex FFT plus the split step (even ``n`` from 4 on; else the full complex line)."""
    return ft in ("RFFT", "IRFFT") and n % 2 == 0 and n >= 4


def _table_elems(n: int, half: bool) -> int:
    """em_z entries of the tables of a length-``n`` plan (:c:func:`em_fft_tables`)."""
    _, m2, _ = plan_of(n)
    return (n + 2 * m2 if m2 else n) + (n + 1 if half else 0)


def _scratch_vz(n: int, plan_n: int) -> int:
    """em_vz (at most 128 bytes: eight lanes of two doubles) a length-``n`` axis step takes:
    Bluestein's two convolution buffers, then its line and result buffers."""
    return 2 * plan_of(plan_n)[1] + 2 * n


def _axes(e: Eqn) -> tuple[tuple, tuple, str, tuple]:
    x = e.inputs[0]
    return tuple(x.aval.shape), tuple(e.outvars[0].aval.shape), e.params["fft_type"], \
        tuple(e.params["fft_lengths"])


def _symbolic(e: Eqn) -> bool:
    """Whether a size of ``e`` is symbolic (its lengths are then known only at run time)."""
    shape, oshape, _, lengths = _axes(e)
    return any(is_sym(d) for d in (*shape, *oshape, *lengths))


def _empty(e: Eqn) -> bool:
    if _symbolic(e):
        return False  # decided at run time (_fft_runtime)
    shape, oshape, _, lengths = _axes(e)
    return math.prod(shape) == 0 or math.prod(oshape) == 0 or 0 in lengths


def _copy_bytes(e: Eqn) -> sh.Dim:
    """Bytes of the IRFFT workspace copy of the operand (multi-axis IRFFT only), 64-aligned when
    static (a symbolic size is followed by the workspace's 64 bytes of alignment slack)."""
    shape, _, ft, lengths = _axes(e)
    if ft != "IRFFT" or len(lengths) == 1:
        return 0
    nbytes = sh.size(shape) * np.dtype(e.inputs[0].aval.dtype).itemsize
    return nbytes if is_sym(nbytes) else -(-nbytes // 64) * 64


def _steps(e: Eqn) -> list[tuple[int, int, bool]]:
    """``(axis length, plan length, half)`` of each transformed axis."""
    _, _, ft, lengths = _axes(e)
    out = [(n, n, False) for n in lengths[:-1]]
    n = lengths[-1]
    half = _half(ft, n)
    return out + [(n, n // 2 if half else n, half)]


def _lane_tables(pn: int) -> int:
    """em_z fft_lanes.h's tables of a length-``pn`` plan take at most (built in the workspace: a
    power of two's when fft_conv's cache cannot hold them, 2 pn + 1 pairs of the operand's
    precision; other lengths' rounded from the plan's double tables, 2 m2 + 2 pn + 1 float pairs)."""
    return 2 * (plan_of(pn)[1] + pn) + 2


def _sizes(e: Eqn) -> tuple[int, int]:
    """(em_vz scratch, em_z workspace tables) the steps need at most: a plan's private tables (when
    another thread is filling its static ones), then the lanes' tables (:func:`_lane_tables`), so
    both can be in use at once (the lanes never fall back to the double path for want of room)."""
    st = _steps(e)
    return max(_scratch_vz(n, pn) for n, pn, _ in st), max(1 + _table_elems(pn, h) + _lane_tables(pn)
                                                           for _, pn, h in st)


def _workspace(e: Eqn) -> sh.Dim:
    if _symbolic(e):  # bounds over every runtime length (Bluestein's m2 < 4n; _fft_runtime)
        ns = _axes(e)[3]
        per_thread = sum(10 * n for n in ns) * _VZ
        # tables: a plan's private ones (< 10n + 1 em_z), then the lanes' (< 10n + 2, _lane_tables)
        return _copy_bytes(e) + 64 + per_thread * THREADS + sum(20 * n + 4 for n in ns) * _Z
    if _empty(e):
        return 0
    nv, nt = _sizes(e)
    return _copy_bytes(e) + 64 + nv * _VZ * THREADS + nt * _Z


def _accepts(e: Eqn) -> bool:
    return not isinstance(e.inputs[0], Literal)


def _plan(name: str, n: int, inv: bool, half: bool = False) -> list[str]:
    """C lines declaring plan ``name`` of length ``n``: its tables cached in block-scope static
    storage (built by the first call, em_fft_make), its scratch in the workspace."""
    fac, m2, fac2 = plan_of(n)
    arr = lambda v: "{" + ", ".join(str(int(t)) for t in (v or [0])) + "}"  # noqa: E731
    return [f"static const int32_t {name}f_[] = {arr(fac)}, {name}g_[] = {arr(fac2)};",
            f"static em_z {name}t_[{_table_elems(n, half)}];",
            f"static int {name}s_;",
            f"em_fft_plan {name};",
            f"em_fft_make(&{name}, {n}, {name}f_, {m2}, {name}g_, {int(inv)}, {int(half)}, "
            f"{name}t_, &{name}s_, zt_, zv_);"]


def _run(s: str, kind: int, src: str, dst: str, outer: sh.Dim, n: sh.Dim | str, inner: sh.Dim, half: str,
         scale: str, stride: str, cc: CallCode, wtab: str = "zt_") -> list[str]:
    """C lines running one step's line groups (``em_fft_run``: kind 0 an axis, 1 the RFFT last axis, 2
    the IRFFT one) with plan ``pl_`` and per-thread scratch of ``stride`` em_vz from ``zv_``; on
    the thread pool when OpenMP is on and the work (``lines * n * 8``) reaches the parallel
    threshold, decided at run time for symbolic sizes, on at most :data:`THREADS` threads (fewer
    with the ``num_threads`` option); ``wtab``: where fft_lanes.h builds its tables."""
    lines, nc = cdim(sh.size([outer, inner])), n if isinstance(n, str) else cdim(n)
    work = f"{lines} * {nc} * 8 >= {cc.parallel_threshold}" if cc.openmp else "0"
    return [f"em_fft_job_{s} j_ = {{{kind}, {half}, {src}, {dst}, {cdim(outer)}, {nc}, {cdim(inner)}, &pl_, "
            f"zv_, {stride}, {scale}, {wtab}}};",
            f"em_fft_run_{s}(&j_, {lines}, {work}, {_threads(cc)});"]


def _threads(cc: CallCode) -> str:
    """C expression: the threads a step's line groups run on, decided per call (``em_threads``): the
    ``num_threads`` option where given, else the OpenMP default (``OMP_NUM_THREADS``, the affinity
    mask), at most :data:`THREADS` (the per-thread scratch planned)."""
    return f"em_threads({cc.num_threads or 0}, {min(THREADS, cc.num_threads or THREADS)})"


def _real_t(e: Eqn) -> tuple[str, str]:
    """``(C real type, name suffix)`` of the operand's precision."""
    real_t = "float" if np.dtype(e.inputs[0].aval.dtype) in (np.float32, np.complex64) else "double"
    return real_t, "f32" if real_t == "float" else "f64"


# The EM_FFTG bits of fft_typed.h: the job kinds and the paths a program's fft steps can reach.
(G_AXIS, G_RFFT, G_IRFFT, G_P2, G_LONG, G_MIXED, G_BLUE, G_FULL, G_RL8, G_RL4, G_RSG,
 G_P2R, G_LINE) = (1 << i for i in range(13))
G_PATHS = G_P2 | G_LONG | G_MIXED | G_BLUE | G_FULL | G_RL8 | G_RL4 | G_RSG | G_P2R | G_LINE
_KIND_BIT = (G_AXIS, G_RFFT, G_IRFFT)


def reach(real_t: str, kind: int, n: int, half: bool, inner: int, lines: int, par: bool, nt: int) -> int:
    """The EM_FFTG bits one static job can reach: job ``kind`` (0 an axis of length ``n`` with
    ``inner`` elements between a line's entries, 1 the RFFT last axis, 2 the IRFFT one; ``half``:
    through the half-length transform, else the full complex line) over ``lines`` lines,
    ``par``: on the pool on ``nt`` threads. Mirrors ``em_fftl_run`` (fft_lanes.h): the four-step
    can decline a job (a table not cached), so the lanes path stays reachable beside it."""
    bits = _KIND_BIT[kind]
    m = n // 2 if half else n
    if kind != 0 and not half:
        bits |= G_FULL
    pow2 = m & (m - 1) == 0
    # em_cw: lanes of a 32- or 64-byte vector (the target decides; both are allowed for)
    cws = (8, 16) if real_t == "float" else (4, 8)
    few = any(2 * lines <= cw or (m >= 4096 and (lines < cw or (par and nt > 1 and -(-lines // cw) < nt)))
              for cw in cws)
    if pow2 and m >= 256 and (half or (kind == 0 and inner == 1)) and few:
        bits |= G_LONG
    fac, m2, _ = plan_of(m)
    if m2:
        bits |= G_BLUE
    elif pow2:
        bits |= G_P2
        if (half or (kind == 0 and inner == 1)) and any(cw * cw <= m <= LINE_MAX for cw in cws):
            bits |= G_LINE  # fft_line.h's em_fftk_fits
        if ((kind == 1 and half) or (kind == 0 and inner == 1)) and m >= 4 * min(cws):  # em_fftl_load_line
            bits |= G_P2R
    else:
        bits |= G_MIXED
        rows = half or (kind == 0 and inner == 1)
        if rows and max(fac) <= 5 and m <= LINE_MAX and any(
                (m % cw == 0 and cw * cw <= m)  # 2-3-5 rows in fft_line.h (em_fftk_fits)
                or (kind != 2 and cw >= 8 and m % (cw // 2) == 0 and cw * cw <= 2 * m)  # pair blocks
                for cw in cws):
            bits |= G_LINE
    if kind == 1 and half:  # em_fftl_rfft's store (one per lane count)
        item = 4 if real_t == "float" else 8
        bits |= functools.reduce(operator.or_,
                                 (_RL_BIT[_fused_radix(m if pow2 else 0, cw, item)] for cw in cws))
    return bits


_RL_BIT = {8: G_RL8, 4: G_RL4, 1: G_RSG}


def _radix(n: int) -> int:
    """fft_conv.h's em_fftp_radix: the radix of its transform's stage at length ``n``."""
    return 8 if n % 8 == 0 and n != 16 else 4 if n % 4 == 0 else 2


def _fused_radix(m: int, cw: int, item: int = 4) -> int:
    """The radix of the last stage em_fftl_rfft fuses into its store for a power-of-two half length
    ``m`` (0: not a power of two) in lanes of ``cw`` elements of ``item`` bytes, or 1 (none: the plain
    split store)."""
    if not m or m < 4 * cw or 2 * m * item > 4096:  # EM_FFTL_WAY bytes of a row's spectrum
        return 1
    q = m // 8
    while _radix(q) != q:
        q //= _radix(q)
    return q if m // q >= cw and q > 2 else 1


def _helpers(e: Eqn, cc: CallCode, gates: int | None = None) -> tuple[str, str]:
    """Register what the program's fft steps of the operand's precision need: the plans and the call
    into the FFT kernel library of the ``EM_FFTG`` bits ``gates`` (:func:`reach`; ``None``:
    everything), joined with those of the program's earlier fft steps of the same precision (the
    block's text is rewritten in place: helpers are assembled after every step; emit/fft_blocks.py
    builds the library); ``(C real type, name suffix)``."""
    real_t, s = _real_t(e)
    cc.helper("em_fft_core", _CORE)
    support.need("threadpool")  # em_threads: the threads a step's line groups may use
    name = f"em_fft_{s}"
    prev = cc.helpers.get(name)
    if prev is not None:
        had = fft_blocks.gates_of(prev)
        if had is None:  # already everything
            return real_t, s
        if gates is not None:
            gates |= had
    cc.helpers[name] = fft_blocks.program_block(real_t, s, gates)
    return real_t, s


@register("fft", "mixed-radix / Bluestein FFT in C, SIMD across lines, over each transformed axis; "
          "static or runtime (symbolic) lengths (fft.py)", _accepts, _workspace, complex_ok=True,
          symbolic_ok=True)
def _fft(e: Eqn, cc: CallCode) -> list[str]:
    if _symbolic(e):
        return _fft_runtime(e, cc)
    shape, oshape, ft, lengths = _axes(e)
    out_d = np.dtype(e.outvars[0].aval.dtype)
    if _empty(e):
        size = math.prod(oshape) * out_d.itemsize
        return [f"memset({cc.outs[0]}, 0, {size});"] if size else []
    real_t, s = _real_t(e)
    k = len(lengths)
    inv = ft in ("IFFT", "IRFFT")
    cpy = _copy_bytes(e)
    nt = min(THREADS, cc.num_threads or THREADS)
    gates = 0

    def gate(kind: int, n: int, half: bool, inner: int, lines: int) -> None:
        nonlocal gates
        gates |= reach(real_t, kind, n, half, inner, lines, cc.parallel(lines * n * 8), nt)
    x, y = f"(const {real_t} *)({cc.ins[0]})", f"({real_t} *)({cc.outs[0]})"
    nv, _ = _sizes(e)
    lines = [f"em_vz *zv_ = (em_vz *)(((uintptr_t)({cc.ws} + {cpy}) + 63) & ~(uintptr_t)63);",
             f"em_z *zt_ = (em_z *)(zv_ + {nv * THREADS});"]

    def axis_step(src: str, dst: str, axis: int, shp: tuple) -> list[str]:
        n = int(shp[axis])
        outer, inner = math.prod(shp[:axis]), math.prod(shp[axis + 1:])
        scale = repr(1.0 / n) if inv else "1.0"
        gate(0, n, False, inner, outer * inner)
        body = _plan("pl_", n, inv) + _run(s, 0, src, dst, outer, n, inner, "0", scale, str(nv), cc,
                                           f"zt_ + {_table_elems(n, False)}")
        return ["{", *("    " + b for b in body), "}"]

    n_last = lengths[-1]
    half = _half(ft, n_last) if ft in ("RFFT", "IRFFT") else False

    def last_axis(mode: int, src: str, dst: str) -> list[str]:
        scale = repr(1.0 / n_last) if mode == 2 else "1.0"
        gate(mode, n_last, half, 1, math.prod(shape[:-1]))
        pn = n_last // 2 if half else n_last
        body = _plan("pl_", pn, mode == 2, half)
        body += _run(s, mode, src, dst, math.prod(shape[:-1]), n_last, 1, str(int(half)), scale, str(nv), cc,
                     f"zt_ + {_table_elems(pn, half)}")
        return ["{", *("    " + b for b in body), "}"]

    def copy() -> tuple[str, list[str]]:
        h = f"(({real_t} *)({cc.ws}))"
        nbytes = math.prod(shape) * np.dtype(e.inputs[0].aval.dtype).itemsize
        return h, [f"memcpy({h}, {x}, {nbytes});"]

    lines += _axis_order(ft, x, y, shape, oshape, k, axis_step, last_axis, copy)
    _helpers(e, cc, gates)
    return lines


def _axis_order(ft: str, x: str, y: str, shape: tuple, oshape: tuple, k: int,
                axis_step: Callable[[str, str, int, tuple], list[str]],
                last_axis: Callable[[int, str, str], list[str]],
                copy: Callable[[], tuple[str, list[str]]]) -> list[str]:
    """The per-axis transforms of an ``fft`` step in order, for static and runtime lengths alike:
    complex transforms innermost axis first (the first reads ``x``, the rest work in ``y``); RFFT
    the real last axis first (``last_axis(1, ...)``), then complex transforms of the leading axes
    in place; IRFFT inverse complex transforms of the leading axes in a workspace ``copy()`` of
    the input, then the real last axis (``last_axis(2, ...)``)."""
    nd, lines = len(oshape), []
    if ft in ("FFT", "IFFT"):
        src = x
        for axis in range(nd - 1, nd - k - 1, -1):
            lines += axis_step(src, y, axis, oshape)
            src = y
        return lines
    if ft == "RFFT":
        lines += last_axis(1, x, y)
        for axis in range(nd - 2, nd - k - 1, -1):
            lines += axis_step(y, y, axis, oshape)
        return lines
    h = x
    if k > 1:
        h, copy_lines = copy()
        lines += copy_lines
        for axis in range(nd - 2, nd - k - 1, -1):
            lines += axis_step(h, h, axis, shape)
    return lines + last_axis(2, h, y)


def _fft_runtime(e: Eqn, cc: CallCode) -> list[str]:
    """The transform when a size is symbolic: lengths, line counts and the real-split choice are C
    expressions over the axis values, each plan comes from the per-length cache of
    ``fft_runtime.h`` (``em_fft_make_rt``), and the workspace is sized for the worst case of every
    length (:func:`_workspace`)."""
    shape, oshape, ft, lengths = _axes(e)
    out_item = np.dtype(e.outvars[0].aval.dtype).itemsize
    # every path a runtime length can take; the job kinds are known
    kinds = {"RFFT": G_RFFT, "IRFFT": G_IRFFT}.get(ft, G_AXIS) | (G_AXIS if len(lengths) > 1 else 0)
    real_t, s = _helpers(e, cc, kinds | G_PATHS)
    cc.helper("em_fft_runtime", _RUNTIME)
    k = len(lengths)
    inv = int(ft in ("IFFT", "IRFFT"))
    nv = cdim(sum(10 * n for n in lengths))
    x, y = f"(const {real_t} *)({cc.ins[0]})", f"({real_t} *)({cc.outs[0]})"
    cpy = cdim(_copy_bytes(e))
    empty = " || ".join([f"{cdim(sh.size(shape))} == 0", f"{cdim(sh.size(oshape))} == 0",
                         *(f"{cdim(n)} == 0" for n in lengths)])
    lines = [f"if ({empty}) {{",
             f"    memset({cc.outs[0]}, 0, (size_t){cdim(sh.size(oshape))} * {out_item});",
             "} else {",
             f"em_vz *zv_ = (em_vz *)(((uintptr_t)({cc.ws} + {cpy}) + 63) & ~(uintptr_t)63);",
             f"em_z *zt_ = (em_z *)(zv_ + {nv} * {THREADS});",
             "int32_t lf_[2 * EM_FFT_MAXFAC];"]

    def plan(n: str, inv_: int, half: str) -> list[str]:
        return ["em_fft_plan pl_;", f"em_fft_make_rt(&pl_, {n}, {inv_}, {half}, lf_, zt_, zv_);"]

    def axis_step(src: str, dst: str, axis: int, shp: tuple) -> list[str]:
        n = cdim(shp[axis])
        shp_outer, shp_inner = sh.size(shp[:axis]), sh.size(shp[axis + 1:])
        scale = f"1.0 / (double){n}" if inv else "1.0"
        body = plan(n, inv, "0") + _run(s, 0, src, dst, shp_outer, shp[axis], shp_inner, "0", scale, nv, cc,
                                        f"zt_ + 10 * ({n}) + 2")
        return ["{", *("    " + b for b in body), "}"]

    n_last = cdim(lengths[-1])
    head = ["const int64_t n_ = " + n_last + ";", "const int half_ = !(n_ & 1) && n_ >= 4;",
            *plan("half_ ? n_ / 2 : n_", int(ft == "IRFFT"), "half_")]

    def last_axis(mode: int, src: str, dst: str) -> list[str]:
        scale = "1.0 / (double)n_" if mode == 2 else "1.0"
        body = head + _run(s, mode, src, dst, sh.size(shape[:-1]), "n_", 1, "half_", scale, nv, cc,
                           "zt_ + 10 * n_ + 2")
        return ["{", *("    " + b for b in body), "}"]

    def copy() -> tuple[str, list[str]]:
        h = f"(({real_t} *)({cc.ws}))"
        nbytes = cdim(sh.size(shape) * np.dtype(e.inputs[0].aval.dtype).itemsize)
        return h, [f"memcpy({h}, {x}, (size_t){nbytes});"]

    return lines + _axis_order(ft, x, y, shape, oshape, k, axis_step, last_axis, copy) + ["}"]


# ---- fft_conv: real linear convolution by FFT in one pass (csrc/fft_conv.h) ----


def _conv_helper(cc: CallCode, real_t: str, s: str) -> None:
    """Register fft_conv.h for one precision (the fft_conv step's kernel; the fft step's power-of-two
    lanes build on its tables and transposes), after ``em_fft_core`` and fft_passes.h."""
    passes_helper(cc, real_t, s)
    cc.helper(f"em_fftc_{s}", fft_blocks.conv_text(real_t, s))


def _conv_dims(e: Eqn) -> tuple[tuple, tuple, tuple]:
    return tuple(e.inputs[0].aval.shape), tuple(e.inputs[1].aval.shape), tuple(e.outvars[0].aval.shape)


def _conv_workspace(e: Eqn) -> sh.Dim:
    """Per thread four line buffers of ``m + 1`` vectors (``m = L / 2 < ca + cb``, two vectors of
    at most 64 bytes each), plus tables for ``2m + 1`` complex (16 bytes at most) when the cache
    cannot hold them, and 64 bytes of alignment slack."""
    xs, ys, _ = _conv_dims(e)
    bound = xs[-1] + ys[-1]
    return 64 + 4 * bound * 128 * THREADS + (2 * bound + 1) * 16


@register("fft_conv", "real linear convolution on the last axis by FFT: rows read straight from the "
          "operands, Stockham radix-4 transforms in their precision, SIMD across rows (fft_conv.h)",
          _accepts, _conv_workspace, symbolic_ok=True)
def _fft_conv(e: Eqn, cc: CallCode) -> list[str]:
    xs, ys, os_ = _conv_dims(e)
    real_t = "float" if np.dtype(e.inputs[0].aval.dtype) == np.float32 else "double"
    s = "f32" if real_t == "float" else "f64"
    cc.helper("em_fft_core", _CORE)
    support.need("threadpool")  # row groups on the pool (fft_conv.h)
    _conv_helper(cc, real_t, s)
    nb = len(os_) - 1
    arr = lambda v: "{" + ", ".join([*(cdim(d) for d in v), "1"]) + "}"  # noqa: E731
    rows, co = cdim(sh.size(os_[:-1])), cdim(os_[-1])
    bound = cdim(xs[-1] + ys[-1])
    nt = min(THREADS, cc.num_threads or THREADS)
    work = f"{rows} * {co} * 16 >= {cc.parallel_threshold}" if cc.openmp else "0"
    return ["{",
            f"    const int64_t bo_[] = {arr(os_[:-1])}, bx_[] = {arr(xs[:-1])}, by_[] = {arr(ys[:-1])};",
            f"    char *zs_ = (char *)(((uintptr_t)({cc.ws}) + 63) & ~(uintptr_t)63);",
            f"    const int64_t st_ = 4 * ({bound}) * 128;",
            f"    em_fftc_job_{s} j_ = {{(const {real_t} *)({cc.ins[0]}), (const {real_t} *)({cc.ins[1]}), "
            f"({real_t} *)({cc.outs[0]}), {nb}, bo_, bx_, by_, {cdim(xs[-1])}, {cdim(ys[-1])}, {rows}, "
            f"(int64_t){cc.scalar(2)}, zs_, st_, (em_fftc_sz_{s} *)(zs_ + {nt} * st_)}};",
            f"    if ({co} > 0) em_fftc_run_{s}(&j_, {work}, {_threads(cc)});",
            "}"]
