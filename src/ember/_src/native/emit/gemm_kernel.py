"""What a program's C says to use ember's GEMM kernel library
(:mod:`ember._src.native.runtime.gemm_library`, which holds the kernel, its size rules and its
build): the ``dlsym`` lookups and calls of its entries, and ``B`` operands packed once in the layout
the kernel packs into (program constants, :func:`prepack_b`; repeated arguments,
:func:`packed_argument`)."""

from __future__ import annotations

import numpy as np

from ember._src.native import csrc
from ember._src.native.emit import support
from ember._src.native.runtime import gemm_library
from ember._src.native.runtime.gemm_library import (  # noqa: F401  (this module's users read them here too)
    AVX2,
    AVX512,
    BLAS_ONLY,
    EAGER_MIN_MNK,
    ISAS,
    KC,
    PREPACKED_MIN_ROWS,
    Isa,
    c_size_rule,
    c_source,
    eager_dot_general,
    eager_sgemm,
    isa,
    kernel_rows,
    kernel_rows_for,
    kernel_symbol,
    load,
    narrow_columns,
    panel_count,
    panel_widths,
    row_limit,
    row_variants,
    use_prepacked,
    use_small_sgemm,
)

__all__ = ["c_call", "c_call_packed", "c_helpers", "dot_stride", "op_b", "packed_argument", "prepack_b"]


def op_b(buffer: np.ndarray, k: int, n: int, rsb: int, csb: int) -> np.ndarray:
    """The ``k x n`` read-only view of ``op(B)`` whose element ``(p, j)`` is ``buffer.flat[p * rsb +
    j * csb]`` (float32, C-contiguous ``buffer``): what :func:`prepack_b` takes."""
    return np.lib.stride_tricks.as_strided(buffer.reshape(-1), (k, n), (rsb * 4, csb * 4), writeable=False)


def _aligned_zeros(n: int) -> np.ndarray:
    """``n`` float32 zeros, 64-byte aligned (a view of a padded array)."""
    raw = np.zeros(n + 16, np.float32)
    off = (-raw.ctypes.data % 64) // 4
    return raw[off:off + n]


def dot_stride(k: int, target: Isa | None = None) -> int:
    """Floats between the columns of a narrow ``op(B)`` packed transposed (``em_sk_dot_ld``): ``k``
    rounded up to whole vectors, plus one cache line (so the columns are not 4 KiB apart)."""
    vw = (target or isa() or AVX2).vw
    return (k + vw - 1) // vw * vw + 16


def prepack_b(b: np.ndarray, target: Isa | None = None) -> np.ndarray:
    """``op(B)`` (``k x n`` float32) packed once in the layout the kernel packs into on every call.
    Up to :func:`narrow_columns` columns: ``op(B)`` transposed, column ``j`` at ``j *``
    :func:`dot_stride` (what the dot kernels read; zero-padded). Else column panels of
    :func:`panel_widths`, panel ``j0`` as ``k`` rows of ``w`` floats at offset ``j0 * k``, the last
    one zero-padded. 64-byte aligned (the array is a view of a padded one).
    A program whose product has a constant ``B`` keeps this and calls the kernel's ``_packed`` entry,
    so no call packs ``B`` (what ONNX Runtime does with constant weights)."""
    k, n = b.shape
    if 1 <= n <= narrow_columns(target or isa() or AVX2):  # op(B) transposed (em_sk_dot_all)
        ld = dot_stride(k, target)
        out = _aligned_zeros(n * ld)
        out.reshape(n, ld)[:, :k] = b.T
        return out
    widths = panel_widths(n, target)
    total = k * (sum(widths[:-1]) + widths[-1]) if widths else 0  # only the last panel is padded
    out = _aligned_zeros(total)
    j0 = 0
    for w in widths:
        nr = min(w, n - j0)
        out[j0 * k:j0 * k + k * w].reshape(k, w)[:, :nr] = b[:, j0:j0 + nr]
        j0 += nr
    return out


PACK_HEADER_FLOATS = 16  # 64 bytes before a packed argument's data: the address it was packed from


def packed_argument(b: np.ndarray, src: int, target: Isa | None = None) -> np.ndarray:
    """:func:`prepack_b` of ``b`` (``op(B)``, ``k x n``) behind a 64-byte header whose first 8 bytes
    hold ``src``, the address of the argument it was packed from. A program given this for an
    argument ``B`` uses it only while the argument's data pointer is ``src`` (see
    ``gemm._argument_packed_b``); the 64-byte aligned data starts at element
    :data:`PACK_HEADER_FLOATS`."""
    data = prepack_b(b, target)
    raw = np.zeros(PACK_HEADER_FLOATS + data.size + 16, np.float32)
    off = (-raw.ctypes.data % 64) // 4
    out = raw[off:off + PACK_HEADER_FLOATS + data.size]
    out[:2].view(np.uint64)[0] = src
    out[PACK_HEADER_FLOATS:] = data
    return out


def c_helpers(symbol: str) -> str:
    """Declarations for :func:`c_call`: the kernel's types and ``dlsym`` lookups of its two entries
    (null functions under :data:`BLAS_ONLY`)."""
    if gemm_library.BLAS_ONLY:
        symbol = ""
    lookup = f'dlsym((void *)0, "{symbol}")' if symbol else "0"
    lookup_packed = f'dlsym((void *)0, "{symbol}_packed")' if symbol else "0"
    return (f"#define EM_SK_LOOKUP {lookup}\n#define EM_SKP_LOOKUP {lookup_packed}\n"
            + csrc.load("gemm_program.h"))


def c_call_packed(args: str, fallback: str, guard: str = "") -> str:
    """C statement: the kernel's prepacked-B entry on ``args`` (m, n, k, alpha, a, rsa, csa, packed
    B, beta, c, ldc, bias, relu, nthreads) once its library is loaded and ``guard`` (a C condition,
    e.g. on a dynamic row count) holds, else ``fallback`` (BLAS on the original B)."""
    cond = f"f_ && ({guard})" if guard else "f_"
    support.need("gemm_kernel")
    return f"{{ em_skp_fn_t f_ = em_skp_fn(); if ({cond}) {{ f_({args}); }} else {{ {fallback} }} }}"


def c_call(args: str, fallback: str, batches: int = 1, guard: str = "") -> str:
    """C statement: the kernel on ``args`` (m, n, k, alpha, a, rsa, csa, b, rsb, csb, beta, c, ldc,
    bias, relu, nthreads; over ``bb_`` in ``[0, batches)`` when batched) once its library is loaded
    and ``guard`` holds, else the statement ``fallback`` (BLAS)."""
    call = f"f_({args});"
    if batches != 1:
        call = f"for (int64_t bb_ = 0; bb_ < {batches}; ++bb_) {call}"
    cond = f"f_ && ({guard})" if guard else "f_"
    support.need("gemm_kernel")
    return f"{{ em_sk_fn_t f_ = em_sk_fn(); if ({cond}) {{ {call} }} else {{ {fallback} }} }}"
