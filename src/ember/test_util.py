"""Testing helpers: :func:`check_grads` compares ember's derivatives with finite differences."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import ad
from ember._src import dtypes as dt
from ember._src import tree as tu
from ember._src.ad_util import float0

__all__ = ["check_grads", "check_jvp", "check_vjp", "numerical_jvp"]

EPS = 1e-4
_DEFAULT_TOL = 1e-5
# JAX's default gradient tolerances by the dtype of the values compared (atol and rtol alike)
DEFAULT_GRADIENT_TOLERANCE: dict[np.dtype, float] = {
    np.dtype(np.float16): 1e-2, np.dtype(np.float32): 2e-3, np.dtype(np.float64): 1e-5,
    np.dtype(np.complex64): 1e-3, np.dtype(np.complex128): 1e-5}
try:
    DEFAULT_GRADIENT_TOLERANCE[np.dtype(dt.bfloat16)] = 1e-1
except TypeError:  # no bfloat16 type in this NumPy build
    pass

Tolerance = float | dict | None


def _tolerance(tol: Tolerance, *arrays: Any) -> float:
    """The tolerance for comparing ``arrays``: ``tol`` when it is a number, otherwise the largest
    default (overridden per dtype by a ``tol`` dict) over their dtypes, as JAX's ``check_grads``."""
    if tol is not None and not isinstance(tol, dict):
        return float(tol)
    table = dict(DEFAULT_GRADIENT_TOLERANCE)
    if tol:
        table.update({np.dtype(k): v for k, v in tol.items()})
    dtypes = [np.asarray(a).dtype for a in arrays]
    return max((table.get(d, _DEFAULT_TOL) for d in dtypes if d.kind in "fcV"), default=_DEFAULT_TOL)


def _np(x: Any) -> np.ndarray:
    return np.asarray(x)


def _is_inexact(x: Any) -> bool:
    return dt.is_inexact(np.asarray(x).dtype) if not hasattr(x, "dtype") else dt.is_inexact(np.dtype(x.dtype))


def _to64(x: Any) -> Any:
    """Float leaves to float64 and complex leaves to complex128 NumPy arrays; others unchanged."""
    a = np.asarray(x)
    if a.dtype.kind == "f" or str(a.dtype) == "bfloat16":
        return a.astype(np.float64)
    if a.dtype.kind == "c":
        return a.astype(np.complex128)
    return x


def _rand_like(rng: Any, tree: Any) -> Any:
    """Standard normal values shaped and typed like each leaf, drawn leaf by leaf in tree order as
    JAX's ``rand_like`` draws them (so a ``np.random.RandomState(0)`` gives JAX's directions);
    float0 zeros for integer leaves, which are not perturbed."""
    def one(x: Any) -> Any:
        a = np.asarray(x)
        if a.dtype.kind == "f":
            return np.asarray(rng.standard_normal(a.shape), dtype=a.dtype)
        if a.dtype.kind == "c":
            re = np.asarray(rng.standard_normal(a.shape), dtype=a.dtype)
            return re + a.dtype.type(1j) * np.asarray(rng.standard_normal(a.shape), dtype=a.dtype)
        return np.zeros(a.shape, dtype=float0)

    return tu.tree_map(one, tree)


def _axpy(a: float, x: Any, y: Any) -> Any:
    """``a * x + y`` leaf-wise; float0 (integer) tangents leave ``y`` unchanged."""

    def one(xi: Any, yi: Any) -> Any:
        xa = np.asarray(xi)
        if xa.dtype.kind not in "fc":
            return yi
        return np.asarray(a * xa + np.asarray(yi))  # arrays, never NumPy scalars (weakly typed floats)

    return tu.tree_map(one, x, y)


def numerical_jvp(f: Callable, primals: Sequence[Any], tangents: Sequence[Any], eps: float = EPS) -> Any:
    """Central finite difference ``(f(x + eps t) - f(x - eps t)) / (2 eps)``."""
    plus = f(*_axpy(eps, tangents, primals))
    minus = f(*_axpy(-eps, tangents, primals))

    def diff(p: Any, m: Any) -> np.ndarray:
        pa, ma = _np(p), _np(m)
        if pa.dtype.kind not in "fc":
            return np.zeros(pa.shape)
        return (pa.astype(np.complex128 if pa.dtype.kind == "c" else np.float64) - ma) / (2 * eps)

    return tu.tree_map(diff, plus, minus)


def _inner(xs: Any, ys: Any) -> float:
    total = 0.0
    for x, y in zip(tu.leaves(xs), tu.leaves(ys)):
        xa, ya = _np(x), _np(y)
        if xa.dtype.kind not in "fc" or ya.dtype.kind not in "fc":
            continue
        total += float(np.real(np.dot(np.conj(xa).reshape(-1), ya.reshape(-1))))
    return total


def _close(actual: Any, expected: Any, atol: Tolerance, rtol: Tolerance, msg: str) -> None:
    a_leaves, e_leaves = tu.leaves(actual), tu.leaves(expected)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"{msg}: {len(a_leaves)} leaves vs {len(e_leaves)} expected")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        aa, ea = _np(a), _np(e)
        if aa.dtype.kind not in "fcbiu" or ea.dtype.kind not in "fcbiu":
            continue  # float0
        # as JAX's check_close: the tolerances grow with the number of elements compared
        np.testing.assert_allclose(aa.astype(np.result_type(aa, np.float64)), ea,
                                   atol=_tolerance(atol, aa, ea) * aa.size,
                                   rtol=_tolerance(rtol, aa, ea) * ea.size, err_msg=f"{msg} (leaf {i})")


def _check_defaults(eps: float | None, rng: Any) -> tuple:
    """The finite-difference step and random generator of a check: by default a fresh
    ``np.random.RandomState(0)`` per check, as JAX's ``check_jvp``/``check_vjp`` use, so both draw
    the same directions."""
    return EPS if eps is None else eps, np.random.RandomState(0) if rng is None else rng


def check_jvp(f: Callable, f_jvp: Callable, args: Sequence[Any], atol: Tolerance = None,
              rtol: Tolerance = None, eps: float | None = None, err_msg: str = "",
              rng: Any = None) -> None:
    """Compare ``f_jvp(args, tangents)`` with a central finite difference along a random tangent.

    ``atol``/``rtol``: a number, or ``None`` for JAX's defaults by dtype (2e-3 for float32, 1e-5
    for float64, ...: ``DEFAULT_GRADIENT_TOLERANCE``), or a dict overriding some dtypes."""
    eps, rng = _check_defaults(eps, rng)
    tangent = _rand_like(rng, args)
    v_out, t_out = f_jvp(tuple(args), tuple(tangent))
    _close(v_out, f(*args), atol, rtol, f"{err_msg or 'JVP'} primal output")
    t_num = numerical_jvp(f, args, tangent, eps)
    _close(t_out, t_num, atol, rtol, f"{err_msg or 'JVP'} tangent vs finite differences")


def check_vjp(f: Callable, f_vjp: Callable, args: Sequence[Any], atol: Tolerance = None,
              rtol: Tolerance = None, eps: float | None = None, err_msg: str = "",
              rng: Any = None) -> None:
    """Check ``<vjp(ct), t> == <ct, J t>`` with ``J t`` from finite differences (random ``t``, ``ct``);
    tolerances as :func:`check_jvp`."""
    eps, rng = _check_defaults(eps, rng)
    v_out, vjp_fun = f_vjp(*args)
    _close(v_out, f(*args), atol, rtol, f"{err_msg or 'VJP'} primal output")
    tangent = _rand_like(rng, args)
    t_num = numerical_jvp(f, args, tangent, eps)
    ct = _rand_like(rng, tu.tree_map(_np, v_out))
    ct_conj = tu.tree_map(lambda c: np.conj(c) if np.asarray(c).dtype.kind == "c" else c, ct)
    ct_out = vjp_fun(ct_conj)
    ct_out = tu.tree_map(lambda c: np.conj(_np(c)) if _np(c).dtype.kind == "c" else c, ct_out)
    ip = _inner(tangent, ct_out)
    ip_expected = _inner(t_num, ct)
    if np.isnan(ip) and np.isnan(ip_expected):
        return
    computed = [_np(x) for x in (*tu.leaves(v_out), *tu.leaves(ct_out))]
    atol, rtol = _tolerance(atol, *computed), _tolerance(rtol, *computed)
    if not abs(ip - ip_expected) <= atol + rtol * abs(ip_expected):
        raise AssertionError(f"{err_msg or 'VJP'}: <vjp(ct), t> = {ip!r} but <ct, J t> = {ip_expected!r} "
                             f"(finite differences); difference {abs(ip - ip_expected):.3g}")


def check_grads(f: Callable, args: Sequence[Any], order: int = 2, modes: Sequence[str] = ("fwd", "rev"),
                atol: Tolerance = None, rtol: Tolerance = None, eps: float | None = None) -> None:
    """Check derivatives of ``f`` up to ``order`` against central finite differences.

    ``args`` is a tuple of (pytrees of) arrays; floating leaves are converted to float64 and
    complex ones to complex128 (which stay 32-bit while ``jax_enable_x64`` is off). The default
    tolerances depend on the dtype of the values compared, as in JAX (float32 2e-3, float64 1e-5;
    ``DEFAULT_GRADIENT_TOLERANCE``); a number applies to every dtype, a dict overrides some; as
    in JAX, an array comparison's tolerances are multiplied by its element count, and each check
    draws its random directions from a fresh ``np.random.RandomState(0)``.
    ``"fwd"`` checks ``jvp`` along random tangents; ``"rev"`` checks
    ``vjp`` through ``<vjp(ct), t> == <ct, jvp(t)>``. Higher orders repeat the checks on the JVP
    function (``(primals, tangents) -> jvp``) and on the VJP function (``x -> vjp(f, x)(f(x))``).
    Integer leaves are not perturbed.
    """

    args = tuple(tu.tree_map(_to64, tuple(args)))
    for m in modes:
        if m not in ("fwd", "rev"):
            raise ValueError(f"check_grads: unknown mode {m!r} (use 'fwd' and/or 'rev')")
    rng = None  # each check draws from its own RandomState(0), as in JAX

    def _check(fun: Callable, fargs: tuple, k: int, msg: str) -> None:
        if "fwd" in modes:
            fwd_msg = f"JVP of {msg}" if msg else "JVP"
            check_jvp(fun, lambda p, t: ad.jvp(fun, p, t), fargs, atol, rtol, eps, fwd_msg, rng)
            if k > 1:
                _check(lambda p, t: ad.jvp(fun, p, t), (fargs, fargs), k - 1, fwd_msg)
        if "rev" in modes:
            rev_msg = f"VJP of {msg}" if msg else "VJP"
            check_vjp(fun, lambda *a: ad.vjp(fun, *a), fargs, atol, rtol, eps, rev_msg, rng)
            if k > 1:
                def f_vjp(*a: Any) -> Any:
                    out, pullback = ad.vjp(fun, *a)
                    return pullback(out)

                _check(f_vjp, fargs, k - 1, rev_msg)

    _check(f, args, order, "")
