"""LAPACK-backed call steps: ``cholesky``, ``triangular_solve``, ``lu``, ``qr``, ``eigh``, ``svd``,
``eig`` (real input).

Each lowering loops over the leading (batch) dims in C and calls the float32/float64 routine that
SciPy ships (function pointers from ``scipy.linalg.cython_lapack`` / ``cython_blas`` capsules, see
:mod:`.blas`), passed to ``ember_main`` in its ``fns`` table (the slots of :data:`.abi.LINALG_NAMES`).
Workspace (column-major copies, ``tau``, LAPACK ``work`` arrays sized by the routines' documented
minimums) comes from the memory plan, so nothing is allocated at run time.

Row-major/column-major: a C-contiguous ``m x n`` matrix is, to LAPACK, the ``n x m`` matrix of its
transpose. ``cholesky``/``eigh`` read one triangle of a symmetric matrix (the other triangle of the
column-major view), ``triangular_solve`` flips side and triangle (``trsm`` on the transposed
system), ``svd`` factorizes the transpose and swaps the roles of ``U`` and ``V^T`` (so results land
in the outputs directly); ``lu`` and ``qr`` transpose into workspace. Output conventions are those
of the primitives' NumPy implementations (prims/linalg.py): NaN factors for failed factorizations
and non-finite inputs (per matrix), ``lu`` pivots 0-based int32 with the row permutation, ``eigh``
ascending eigenvalues with eigenvectors as columns, ``svd`` returns ``(s, u, vh)``, ``eig`` the
complex eigenvalues in ``?geev``'s order and right eigenvectors as columns (a conjugate pair's
vectors assembled from ``?geev``'s two real columns, as NumPy does).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src.native import abi, csrc
from ember._src.native.emit import calls
from ember._src.native.emit.calls import CallCode
from ember._src.program import Eqn, Literal

_INT_MAX = 2**31 - 1
LAPACK_PRIMS: set[str] = set()  # the primitives registered below (their steps need the fns tail)


def register(name: str, *args: Any, **kwargs: Any) -> Callable:
    """:func:`.calls.register` for a LAPACK-backed lowering (recorded in :data:`LAPACK_PRIMS`)."""
    LAPACK_PRIMS.add(name)
    return calls.register(name, *args, **kwargs)


def sched_uses_lapack(sched: object) -> bool:
    """Whether a schedule has a LAPACK-backed call step (its ``fns`` table then needs the tail)."""
    steps = getattr(sched, "steps", ())
    return any(st.kind == "call" and st.eqns[0].prim.name in LAPACK_PRIMS for st in steps)


def _fn(routine: str, d: np.dtype) -> str:
    return abi.fn_ref(('s' if d.itemsize == 4 else 'd') + routine)




def _sfx(d: np.dtype) -> str:
    return "f32" if d.itemsize == 4 else "f64"


def _typedefs(cc: CallCode, d: np.dtype) -> tuple[str, str]:
    """Register the typedefs for ``d``; returns (C element type, name suffix)."""
    t, s = ("float" if d.itemsize == 4 else "double"), _sfx(d)
    head = f"#define ELT {t}\n#define EM_T(name) name##_{s}\n"
    cc.helper(f"em_lapack_{s}", head + csrc.load("lapack_types.h") + "#undef EM_T\n#undef ELT\n")
    return t, s


def _float_matrix(e: Eqn, n_in: int = 1) -> bool:
    """float32/float64 operands of rank >= 2, sizes in LAPACK's 32-bit range, no literals."""
    for a in e.inputs[:n_in]:
        if isinstance(a, Literal) or a.aval.ndim < 2:
            return False
        if np.dtype(a.aval.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
            return False
        if any(d > _INT_MAX // 8 for d in a.aval.shape[-2:]):
            return False
    return True


def _loop2(m: int, n: int, stmt: str) -> str:
    """``stmt`` for all ``i < m``, ``j < n`` (one C line)."""
    return f"    for (int64_t i = 0; i < {m}; ++i) for (int64_t j = 0; j < {n}; ++j) {stmt}"


def _batch(shape: tuple) -> int:
    return int(math.prod(shape[:-2]))


def _item(e: Eqn) -> int:
    return np.dtype(e.inputs[0].aval.dtype).itemsize


# ---------------------------------------------------------------------------------------------
# cholesky: potrf('U') on the column-major view reads the row-major lower triangle
# ---------------------------------------------------------------------------------------------


@register("cholesky", "LAPACK ?potrf per matrix (lapack.py)", _float_matrix)
def _cholesky(e: Eqn, cc: CallCode) -> list[str]:
    shape = tuple(e.inputs[0].aval.shape)
    n, nb = shape[-1], _batch(shape)
    d = np.dtype(e.inputs[0].aval.dtype)
    if n == 0 or nb == 0:
        return []
    t, s = _typedefs(cc, d)
    return [
        f"char up_ = 'U'; int n_ = {n}, info_ = 0;",
        f"for (int64_t b = 0; b < {nb}; ++b) {{",
        f"    {t} *o_ = {cc.outs[0]} + b * {n * n};",
        f"    memcpy(o_, {cc.ins[0]} + b * {n * n}, {n * n * d.itemsize});",
        f"    (({'em_potrf_' + s})({_fn('potrf', d)}))(&up_, &n_, o_, &n_, &info_);",
        f"    if (info_ != 0) {{ em_fill_nan_{s}(o_, {n * n}); continue; }}",
        f"    for (int64_t i = 0; i < {n}; ++i) for (int64_t j = i + 1; j < {n}; ++j) o_[i * {n} + j] = 0;",
        "}"]


# ---------------------------------------------------------------------------------------------
# triangular_solve: trsm on the transposed system (side and triangle flip, trans stays)
# ---------------------------------------------------------------------------------------------


@register("triangular_solve", "BLAS ?trsm per matrix (lapack.py)", lambda e: _float_matrix(e, 2))
def _tsolve(e: Eqn, cc: CallCode) -> list[str]:
    a, b = e.inputs
    p = e.params
    k = a.aval.shape[-1]
    m, n = b.aval.shape[-2:]
    nb = _batch(tuple(b.aval.shape))
    d = np.dtype(b.aval.dtype)
    if nb == 0 or m * n == 0:
        return []
    t, s = _typedefs(cc, d)
    side = "R" if p["left_side"] else "L"
    uplo = "U" if p["lower"] else "L"
    trans = "T" if p["transpose_a"] else "N"
    diag = "U" if p["unit_diagonal"] else "N"
    return [
        f"char sd_ = '{side}', ul_ = '{uplo}', tr_ = '{trans}', dg_ = '{diag}';",
        f"int mc_ = {n}, nc_ = {m}, lda_ = {max(1, k)}, ldb_ = {max(1, n)}; {t} one_ = 1;",
        f"for (int64_t q = 0; q < {nb}; ++q) {{",
        f"    {t} *o_ = {cc.outs[0]} + q * {m * n};",
        f"    memcpy(o_, {cc.ins[1]} + q * {m * n}, {m * n * d.itemsize});",
        f"    ((em_trsm_{s}){_fn('trsm', d)})(&sd_, &ul_, &tr_, &dg_, &mc_, &nc_, &one_, "
        f"({t} *)({cc.ins[0]} + q * {k * k}), &lda_, o_, &ldb_);",
        "}"]


# ---------------------------------------------------------------------------------------------
# lu: getrf on a column-major copy; 0-based pivots and the row permutation
# ---------------------------------------------------------------------------------------------


def _lu_ws(e: Eqn) -> int:
    m, n = e.inputs[0].aval.shape[-2:]
    return m * n * _item(e) + 64


@register("lu", "LAPACK ?getrf per matrix (lapack.py)", _float_matrix, _lu_ws)
def _lu(e: Eqn, cc: CallCode) -> list[str]:
    shape = tuple(e.inputs[0].aval.shape)
    m, n = shape[-2:]
    k, nb = min(m, n), _batch(shape)
    d = np.dtype(e.inputs[0].aval.dtype)
    if nb == 0:
        return []
    t, s = _typedefs(cc, d)
    lu, piv, perm = cc.outs
    lines = [f"{t} *w_ = ({t} *)({cc.ws}); int m_ = {m}, n_ = {n}, ld_ = {max(1, m)}, info_ = 0;",
             f"for (int64_t b = 0; b < {nb}; ++b) {{",
             f"    const {t} *x_ = {cc.ins[0]} + b * {m * n}; {t} *o_ = {lu} + b * {m * n};",
             f"    int32_t *pv_ = {piv} + b * {k}, *pm_ = {perm} + b * {m};",
             f"    for (int64_t i = 0; i < {m}; ++i) pm_[i] = (int32_t)i;"]
    if m * n == 0:
        return lines + ["}"]
    lines += [
        f"    if (!em_all_finite_{s}(x_, {m * n})) {{",
        f"        em_fill_nan_{s}(o_, {m * n}); for (int64_t i = 0; i < {k}; ++i) pv_[i] = (int32_t)i;",
        "        continue;",
        "    }",
        _loop2(m, n, f"w_[i + j * {m}] = x_[i * {n} + j];"),
        f"    ((em_getrf_{s}){_fn('getrf', d)})(&m_, &n_, w_, &ld_, (int *)pv_, &info_);",
        _loop2(m, n, f"o_[i * {n} + j] = w_[i + j * {m}];"),
        f"    for (int64_t i = 0; i < {k}; ++i) {{",
        "        pv_[i] -= 1;",
        "        int32_t tmp_ = pm_[i]; pm_[i] = pm_[pv_[i]]; pm_[pv_[i]] = tmp_;",
        "    }",
        "}"]
    return lines


# ---------------------------------------------------------------------------------------------
# qr: geqrf + orgqr on a column-major copy
# ---------------------------------------------------------------------------------------------


def _qr_dims(e: Eqn) -> tuple[int, int, int, int]:
    m, n = e.inputs[0].aval.shape[-2:]
    k = min(m, n)
    qc = m if e.params["full_matrices"] else k
    return m, n, k, qc


def _qr_lwork(e: Eqn) -> int:
    m, n, k, qc = _qr_dims(e)
    return 64 * max(n, qc, 1) + 64


def _qr_ws(e: Eqn) -> int:
    m, n, k, qc = _qr_dims(e)
    return (m * max(n, qc) + k + _qr_lwork(e)) * _item(e) + 192


@register("qr", "LAPACK ?geqrf + ?orgqr per matrix (lapack.py)", _float_matrix, _qr_ws)
def _qr(e: Eqn, cc: CallCode) -> list[str]:
    shape = tuple(e.inputs[0].aval.shape)
    m, n, k, qc = _qr_dims(e)
    nb = _batch(shape)
    d = np.dtype(e.inputs[0].aval.dtype)
    if nb == 0:
        return []
    t, s = _typedefs(cc, d)
    q, r = cc.outs
    rr = qc  # rows of r
    if m * n == 0:  # q = eye(m, qc), r = 0
        return [f"for (int64_t b = 0; b < {nb}; ++b) {{",
                f"    for (int64_t i = 0; i < {m}; ++i) for (int64_t j = 0; j < {qc}; ++j) "
                f"{q}[b * {m * qc} + i * {qc} + j] = i == j;",
                f"    for (int64_t i = 0; i < {rr * n}; ++i) {r}[b * {rr * n} + i] = 0;",
                "}"]
    wsz = m * max(n, qc)
    lw = _qr_lwork(e)
    return [
        f"{t} *w_ = ({t} *)({cc.ws}), *tau_ = w_ + {wsz}, *work_ = tau_ + {k};",
        f"int m_ = {m}, n_ = {n}, k_ = {k}, qc_ = {qc}, ld_ = {m}, lw_ = {lw}, info_ = 0;",
        f"for (int64_t b = 0; b < {nb}; ++b) {{",
        f"    const {t} *x_ = {cc.ins[0]} + b * {m * n};",
        f"    {t} *qo_ = {q} + b * {m * qc}, *ro_ = {r} + b * {rr * n};",
        _loop2(m, n, f"w_[i + j * {m}] = x_[i * {n} + j];"),
        f"    ((em_geqrf_{s}){_fn('geqrf', d)})(&m_, &n_, w_, &ld_, tau_, work_, &lw_, &info_);",
        f"    for (int64_t i = 0; i < {rr}; ++i) for (int64_t j = 0; j < {n}; ++j) "
        f"ro_[i * {n} + j] = (j >= i && i < {m}) ? w_[i + j * {m}] : 0;",
        f"    ((em_orgqr_{s}){_fn('orgqr', d)})(&m_, &qc_, &k_, w_, &ld_, tau_, work_, &lw_, &info_);",
        _loop2(m, qc, f"qo_[i * {qc} + j] = w_[i + j * {m}];"),
        "}"]


# ---------------------------------------------------------------------------------------------
# eigh: syevd on the column-major view (the other triangle), eigenvectors transposed out
# ---------------------------------------------------------------------------------------------


def _eigh_sizes(n: int) -> tuple[int, int]:
    return 1 + 6 * n + 2 * n * n, 3 + 5 * n


def _eigh_ws(e: Eqn) -> int:
    n = e.inputs[0].aval.shape[-1]
    lw, liw = _eigh_sizes(n)
    return (n * n + lw) * _item(e) + 4 * liw + 192


@register("eigh", "LAPACK ?syevd per matrix (lapack.py)", _float_matrix, _eigh_ws)
def _eigh(e: Eqn, cc: CallCode) -> list[str]:
    shape = tuple(e.inputs[0].aval.shape)
    n, nb = shape[-1], _batch(shape)
    d = np.dtype(e.inputs[0].aval.dtype)
    if nb == 0 or n == 0:
        return []
    t, s = _typedefs(cc, d)
    v, w = cc.outs
    lw, liw = _eigh_sizes(n)
    uplo = "U" if e.params["lower"] else "L"
    return [
        f"{t} *a_ = ({t} *)({cc.ws}), *work_ = a_ + {n * n}; int *iwork_ = (int *)(work_ + {lw});",
        f"char jz_ = 'V', ul_ = '{uplo}'; int n_ = {n}, lw_ = {lw}, liw_ = {liw}, info_ = 0;",
        f"for (int64_t b = 0; b < {nb}; ++b) {{",
        f"    const {t} *x_ = {cc.ins[0]} + b * {n * n}; {t} *vo_ = {v} + b * {n * n}, *wo_ = {w} + b * {n};",
        f"    if (!em_all_finite_{s}(x_, {n * n})) {{ em_fill_nan_{s}(vo_, {n * n}); "
        f"em_fill_nan_{s}(wo_, {n}); continue; }}",
        f"    memcpy(a_, x_, {n * n * d.itemsize});",
        f"    ((em_syevd_{s}){_fn('syevd', d)})(&jz_, &ul_, &n_, a_, &n_, wo_, work_, &lw_, iwork_, &liw_, "
        "&info_);",
        f"    if (info_ != 0) {{ em_fill_nan_{s}(vo_, {n * n}); em_fill_nan_{s}(wo_, {n}); continue; }}",
        _loop2(n, n, f"vo_[i * {n} + j] = a_[i + j * {n}];"),
        "}"]


# ---------------------------------------------------------------------------------------------
# svd: gesdd on the transpose (the column-major view): u and vh swap roles and land in place
# ---------------------------------------------------------------------------------------------


def _svd_dims(e: Eqn) -> tuple[int, int, int, int, int]:
    m, n = e.inputs[0].aval.shape[-2:]
    k = min(m, n)
    full = e.params["full_matrices"]
    return m, n, k, (m if full else k), (n if full else k)


def _svd_lwork(e: Eqn) -> int:
    m, n, k, _, _ = _svd_dims(e)
    mx = max(m, n)
    return 5 * k * k + 9 * k + 2 * mx + 64


def _svd_ws(e: Eqn) -> int:
    m, n, k, _, _ = _svd_dims(e)
    return (m * n + _svd_lwork(e) + 2) * _item(e) + 4 * 8 * k + 192


@register("svd", "LAPACK ?gesdd per matrix (lapack.py)", _float_matrix, _svd_ws)
def _svd(e: Eqn, cc: CallCode) -> list[str]:
    shape = tuple(e.inputs[0].aval.shape)
    m, n, k, um, vn = _svd_dims(e)
    nb = _batch(shape)
    d = np.dtype(e.inputs[0].aval.dtype)
    uv = e.params["compute_uv"]
    if nb == 0:
        return []
    t, s = _typedefs(cc, d)
    so = cc.outs[0]
    u, vh = (cc.outs[1], cc.outs[2]) if uv else ("dummy_", "dummy_")
    if m * n == 0:
        lines = [f"for (int64_t b = 0; b < {nb}; ++b) {{"]
        if k:
            lines.append(f"    for (int64_t i = 0; i < {k}; ++i) {so}[b * {k} + i] = 0;")
        if uv:
            lines += [f"    for (int64_t i = 0; i < {m}; ++i) for (int64_t j = 0; j < {um}; ++j) "
                      f"{u}[b * {m * um} + i * {um} + j] = i == j;",
                      f"    for (int64_t i = 0; i < {vn}; ++i) for (int64_t j = 0; j < {n}; ++j) "
                      f"{vh}[b * {vn * n} + i * {n} + j] = i == j;"]
        return lines + ["}"]
    jobz = ("A" if e.params["full_matrices"] else "S") if uv else "N"
    lw = _svd_lwork(e)
    nan_all = [f"em_fill_nan_{s}(so_, {k});"]
    if uv:
        nan_all += [f"em_fill_nan_{s}(uo_, {m * um});", f"em_fill_nan_{s}(vo_, {vn * n});"]
    return [
        f"{t} *a_ = ({t} *)({cc.ws}), *work_ = a_ + {m * n}, *dummy_ = work_ + {lw};",
        "int *iwork_ = (int *)(dummy_ + 2);",
        f"char jz_ = '{jobz}'; int mc_ = {n}, nc_ = {m}, lda_ = {n}, lw_ = {lw}, info_ = 0;",
        f"int ldu_ = {n if uv else 1}, ldvt_ = {max(1, um) if uv else 1};",
        f"for (int64_t b = 0; b < {nb}; ++b) {{",
        f"    const {t} *x_ = {cc.ins[0]} + b * {m * n}; {t} *so_ = {so} + b * {k};",
        f"    {t} *uo_ = {u + f' + b * {m * um}' if uv else u};",
        f"    {t} *vo_ = {vh + f' + b * {vn * n}' if uv else vh};",
        "    (void)uo_; (void)vo_;",
        f"    if (!em_all_finite_{s}(x_, {m * n})) {{ {' '.join(nan_all)} continue; }}",
        f"    memcpy(a_, x_, {m * n * d.itemsize});",
        f"    ((em_gesdd_{s}){_fn('gesdd', d)})(&jz_, &mc_, &nc_, a_, &lda_, so_, vo_, &ldu_, uo_, &ldvt_, "
        "work_, &lw_, iwork_, &info_);",
        f"    if (info_ != 0) {{ {' '.join(nan_all)} }}",
        "}"]


# ---------------------------------------------------------------------------------------------
# eig: geev on a column-major copy (zgeev for complex input); eigenvalues and right eigenvectors
# ---------------------------------------------------------------------------------------------


def _eig_lwork(n: int) -> int:
    return 68 * max(n, 1) + 64  # >= 4n (the documented minimum), room for blocked Hessenberg


def _eig_ws(e: Eqn) -> int:
    n = e.inputs[0].aval.shape[-1]
    if np.dtype(e.inputs[0].aval.dtype).kind == "c":  # zgeev: a, w, vr, work (complex), rwork
        return (2 * n * n + n + _eig_lwork(n)) * 16 + 2 * n * 8 + 256
    return (2 * n * n + 2 * n + _eig_lwork(n)) * 8 + 256  # double precision: see _eig


def _eig_accepts(e: Eqn) -> bool:
    """A real matrix (``?geev``) or a complex one (``zgeev``)."""
    a = e.inputs[0]
    if isinstance(a, Literal) or a.aval.ndim < 2 or any(d > _INT_MAX // 16 for d in a.aval.shape[-2:]):
        return False
    return _float_matrix(e) or np.dtype(a.aval.dtype) in (np.dtype(np.complex64), np.dtype(np.complex128))


@register("eig", "LAPACK ?geev per matrix (zgeev for complex input), pairs assembled into "
          "complex vectors (lapack.py)", _eig_accepts, _eig_ws, complex_ok=True)
def _eig(e: Eqn, cc: CallCode) -> list[str]:
    shape = tuple(e.inputs[0].aval.shape)
    n, nb = shape[-1], _batch(shape)
    if np.dtype(e.inputs[0].aval.dtype).kind == "c":
        return _eig_complex(e, cc, n, nb)
    # float32 is factorized in double precision and rounded once, as NumPy's eig does (its
    # eigenvector signs then agree with the reference's)
    d = np.dtype(np.float64)
    if nb == 0 or n == 0:
        return []
    t, s = _typedefs(cc, d)
    ot = "float" if np.dtype(e.inputs[0].aval.dtype) == np.float32 else "double"
    vecs = e.params["compute_eigenvectors"]
    lw = _eig_lwork(n)
    # NaN + 0j, as the reference (np.nan cast to complex)
    nan = [f"for (int64_t i = 0; i < {n}; ++i) {{ wo_[2 * i] = ({ot})NAN; wo_[2 * i + 1] = 0; }}"]
    if vecs:
        nan.append(f"for (int64_t i = 0; i < {n * n}; ++i) {{ vo_[2 * i] = ({ot})NAN; vo_[2 * i + 1] = 0; }}")
    lines = [
        f"{t} *a_ = ({t} *)({cc.ws}), *wr_ = a_ + {n * n}, *wi_ = wr_ + {n}, *vr_ = wi_ + {n}, "
        f"*work_ = vr_ + {n * n}, vl_[1];",
        f"char jl_ = 'N', jr_ = '{'V' if vecs else 'N'}';",
        f"int n_ = {n}, one_ = 1, ldvr_ = {n if vecs else 1}, "
        f"lw_ = {lw}, info_ = 0;",
        f"for (int64_t b = 0; b < {nb}; ++b) {{",
        f"    const {ot} *x_ = {cc.ins[0]} + b * {n * n}; {ot} *wo_ = ({ot} *)({cc.outs[0]} + b * {n});",
        f"    {ot} *vo_ = {f'({ot} *)({cc.outs[1]} + b * {n * n})' if vecs else '0'}; (void)vo_;",
        f"    int fin_ = 1; for (int64_t i = 0; i < {n * n}; ++i) fin_ &= isfinite(x_[i]) != 0;",
        f"    if (!fin_) {{ {' '.join(nan)} continue; }}",
        _loop2(n, n, f"a_[i + j * {n}] = x_[i * {n} + j];"),
        f"    ((em_geev_{s}){_fn('geev', d)})(&jl_, &jr_, &n_, a_, &n_, wr_, wi_, vl_, &one_, vr_, &ldvr_, "
        "work_, &lw_, &info_);",
        f"    if (info_ != 0) {{ {' '.join(nan)} continue; }}",
        f"    for (int64_t j = 0; j < {n}; ++j) {{ wo_[2 * j] = ({ot})wr_[j]; "
        f"wo_[2 * j + 1] = ({ot})wi_[j]; }}"]
    if vecs:
        lines += [
            f"    for (int64_t j = 0; j < {n}; ++j) {{",
            f"        if (wi_[j] == 0 || j + 1 == {n}) {{",
            f"            for (int64_t i = 0; i < {n}; ++i) {{",
            f"                vo_[2 * (i * {n} + j)] = ({ot})vr_[i + j * {n}]; "
            f"vo_[2 * (i * {n} + j) + 1] = 0; }}",
            "            continue;",
            "        }",
            f"        for (int64_t i = 0; i < {n}; ++i) {{",
            f"            {ot} re_ = ({ot})vr_[i + j * {n}], im_ = ({ot})vr_[i + (j + 1) * {n}];",
            f"            vo_[2 * (i * {n} + j)] = re_; vo_[2 * (i * {n} + j) + 1] = im_;",
            f"            vo_[2 * (i * {n} + j + 1)] = re_; vo_[2 * (i * {n} + j + 1) + 1] = -im_;",
            "        }",
            "        ++j;",
            "    }"]
    return lines + ["}"]


def _eig_complex(e: Eqn, cc: CallCode, n: int, nb: int) -> list[str]:
    """eig of complex matrices: zgeev in double precision (complex64 rounded once at the end, as
    NumPy's eig computes), eigenvalues in its order, right eigenvectors as columns; NaN + 0j
    outputs for a matrix with a non-finite entry (the reference's ``np.nan`` cast to complex)."""
    if nb == 0 or n == 0:
        return []
    cc.helper("em_zgeev_t", "typedef void (*em_zgeev_t)(char *, char *, int *, em_c128 *, int *, em_c128 *, "
                            "em_c128 *, int *, em_c128 *, int *, em_c128 *, int *, double *, int *);\n")
    ct = "em_c64" if np.dtype(e.inputs[0].aval.dtype) == np.complex64 else "em_c128"
    rt = "float" if ct == "em_c64" else "double"
    vecs = e.params["compute_eigenvectors"]
    lw = _eig_lwork(n)
    nan = f"__builtin_complex(({rt})NAN, ({rt})0)"
    fill = [f"for (int64_t i = 0; i < {n}; ++i) wo_[i] = {nan};"]
    if vecs:
        fill.append(f"for (int64_t i = 0; i < {n * n}; ++i) vo_[i] = {nan};")
    fn = abi.fn_ref("zgeev")
    lines = [
        f"em_c128 *a_ = (em_c128 *)({cc.ws}), *w_ = a_ + {n * n}, *vr_ = w_ + {n}, "
        f"*work_ = vr_ + {n * n}, vl_[1];",
        f"double *rw_ = (double *)(work_ + {lw});",
        f"char jl_ = 'N', jr_ = '{'V' if vecs else 'N'}';",
        f"int n_ = {n}, one_ = 1, ldvr_ = {n if vecs else 1}, lw_ = {lw}, info_ = 0;",
        f"for (int64_t b = 0; b < {nb}; ++b) {{",
        f"    const {ct} *x_ = (const {ct} *)({cc.ins[0]}) + b * {n * n};",
        f"    {ct} *wo_ = ({ct} *)({cc.outs[0]}) + b * {n};",
        f"    {ct} *vo_ = {f'({ct} *)({cc.outs[1]}) + b * {n * n}' if vecs else '0'}; (void)vo_;",
        f"    int fin_ = 1; for (int64_t i = 0; i < {n * n}; ++i) "
        "fin_ &= isfinite(__real__ x_[i]) && isfinite(__imag__ x_[i]);",
        f"    if (!fin_) {{ {' '.join(fill)} continue; }}",
        _loop2(n, n, f"a_[i + j * {n}] = (em_c128)x_[i * {n} + j];"),
        f"    ((em_zgeev_t){fn})(&jl_, &jr_, &n_, a_, &n_, w_, vl_, &one_, vr_, &ldvr_, work_, &lw_, rw_, "
        "&info_);",
        f"    if (info_ != 0) {{ {' '.join(fill)} continue; }}",
        f"    for (int64_t j = 0; j < {n}; ++j) wo_[j] = ({ct})w_[j];"]
    if vecs:
        lines.append("    " + _loop2(n, n, f"vo_[i * {n} + j] = ({ct})vr_[i + j * {n}];").strip())
    return lines + ["}"]
