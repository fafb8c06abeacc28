"""``minimize`` (BFGS and L-BFGS) as ``jax.scipy.optimize.minimize``: one ``while_loop``, jit-able.

Both methods use a line search for the weak Wolfe conditions (bisection/expansion from step 1);
the inverse-Hessian update is skipped when the curvature ``y.s`` is not positive. Convergence:
the infinity norm of the gradient below ``gtol`` (``tol`` if given, else 1e-5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import ember.numpy as jnp
from ember import lax
from ember._src.ad import value_and_grad


class OptimizeResults(NamedTuple):
    """``x`` (the solution), ``success``, ``status`` (0 converged, 1 max iterations, 3 line search
    failed), ``fun``, ``jac``, ``hess_inv`` (BFGS only), ``nfev``, ``njev``, ``nit``."""

    x: Any
    success: Any
    status: Any
    fun: Any
    jac: Any
    hess_inv: Any
    nfev: Any
    njev: Any
    nit: Any


def _line_search(vg: Callable, x: Any, f: Any, g: Any, p: Any, max_evals: int = 50) -> tuple:
    """A step ``alpha`` meeting the weak Wolfe conditions by bisection/expansion from 1.

    Armijo ``f(x + a p) <= f + 1e-4 a g.p`` and curvature ``g(x + a p).p >= 0.9 g.p``.
    Returns (alpha, f, g at the new point, evaluations, ok); ``ok`` when Armijo holds.
    """
    slope = jnp.dot(g, p)
    dt = x.dtype
    slack = 4 * jnp.finfo(dt).eps * jnp.abs(f)  # rounding of f near the minimum

    def conditions(alpha: Any, f_new: Any, g_new: Any) -> tuple:
        armijo = f_new <= f + 1e-4 * alpha * slope + slack
        return armijo, armijo & (jnp.dot(g_new, p) >= 0.9 * slope)

    def cond(s: tuple) -> Any:
        alpha, lo, hi, f_new, g_new, k = s
        return ~conditions(alpha, f_new, g_new)[1] & (k < max_evals)

    def body(s: tuple) -> tuple:
        alpha, lo, hi, f_new, g_new, k = s
        armijo, _ = conditions(alpha, f_new, g_new)
        hi = jnp.where(armijo, hi, alpha)
        lo = jnp.where(armijo, alpha, lo)
        alpha = jnp.where(jnp.isinf(hi), 2 * lo, 0.5 * (lo + hi))
        f_new, g_new = vg(x + alpha * p)
        return alpha, lo, hi, f_new, g_new, k + 1

    f1, g1 = vg(x + p)
    one = jnp.asarray(1.0, dt)
    alpha, lo, _, f_new, g_new, k = lax.while_loop(
        cond, body, (one, jnp.asarray(0.0, dt), jnp.asarray(jnp.inf, dt), f1, g1, jnp.asarray(0, jnp.int32)))
    armijo, _ = conditions(alpha, f_new, g_new)
    ok = armijo & (slope < 0) & jnp.isfinite(f_new)
    return alpha, f_new, g_new, k + 1, ok


def _bfgs(vg: Callable, x0: Any, maxiter: int, gtol: float) -> OptimizeResults:
    n = x0.shape[0]
    f0, g0 = vg(x0)
    eye = jnp.eye(n, dtype=x0.dtype)

    def cond(s: tuple) -> Any:
        k, x, f, g, h, status, nfev = s
        return (status < 0) & (k < maxiter)

    def body(s: tuple) -> tuple:
        k, x, f, g, h, status, nfev = s
        p = -h @ g
        alpha, f_new, g_new, evals, ok = _line_search(vg, x, f, g, p)
        step = alpha * p
        y = g_new - g
        ys = jnp.dot(y, step)
        rho = jnp.where(ys > 0, 1.0 / jnp.where(ys > 0, ys, 1.0), 0.0)
        left = eye - rho * jnp.outer(step, y)
        h_new = jnp.where(ys > 0, left @ h @ left.T + rho * jnp.outer(step, step), h)
        converged = jnp.max(jnp.abs(g_new)) < gtol
        status = jnp.where(~ok, 3, jnp.where(converged, 0, -1))
        keep = ok
        return (k + 1, jnp.where(keep, x + step, x), jnp.where(keep, f_new, f), jnp.where(keep, g_new, g),
                jnp.where(keep, h_new, h), status, nfev + evals)

    status0 = jnp.where(jnp.max(jnp.abs(g0)) < gtol, 0, -1)
    k, x, f, g, h, status, nfev = lax.while_loop(
        cond, body, (jnp.asarray(0, jnp.int32), x0, f0, g0, eye, status0, jnp.asarray(1, jnp.int32)))
    status = jnp.where(status < 0, 1, status)
    return OptimizeResults(x, status == 0, status, f, g, h, nfev, nfev, k)


def _lbfgs(vg: Callable, x0: Any, maxiter: int, gtol: float, m: int) -> OptimizeResults:
    n = x0.shape[0]
    f0, g0 = vg(x0)
    zeros_hist = jnp.zeros((m, n), x0.dtype)

    def direction(g: Any, s_hist: Any, y_hist: Any, rho: Any, count: Any) -> Any:
        """Two-loop recursion over the stored pairs (newest at index ``count - 1`` mod m)."""
        def first(i: Any, c: tuple) -> tuple:
            q, alphas = c
            j = (count - 1 - i) % m
            valid = i < jnp.minimum(count, m)
            a = jnp.where(valid, rho[j] * jnp.dot(s_hist[j], q), 0.0)
            return q - a * y_hist[j], alphas.at[j].set(a)

        q, alphas = lax.fori_loop(0, m, first, (g, jnp.zeros((m,), x0.dtype)))
        newest = (count - 1) % m
        yy = jnp.dot(y_hist[newest], y_hist[newest])
        sy = jnp.dot(s_hist[newest], y_hist[newest])
        gamma = jnp.where(count > 0, sy / jnp.where(yy > 0, yy, 1.0), 1.0)
        r = gamma * q

        def second(i: Any, r: Any) -> Any:
            j = (count - jnp.minimum(count, m) + i) % m
            valid = i < jnp.minimum(count, m)
            b = rho[j] * jnp.dot(y_hist[j], r)
            return jnp.where(valid, r + s_hist[j] * (alphas[j] - b), r)

        return -lax.fori_loop(0, m, second, r)

    def cond(s: tuple) -> Any:
        return (s[6] < 0) & (s[0] < maxiter)

    def body(s: tuple) -> tuple:
        k, x, f, g, hist, count, status, nfev = s
        s_hist, y_hist, rho = hist
        p = direction(g, s_hist, y_hist, rho, count)
        alpha, f_new, g_new, evals, ok = _line_search(vg, x, f, g, p)
        step = alpha * p
        y = g_new - g
        ys = jnp.dot(y, step)
        store = ok & (ys > 0)
        slot = count % m
        hist_new = (s_hist.at[slot].set(step), y_hist.at[slot].set(y),
                    rho.at[slot].set(1.0 / jnp.where(ys > 0, ys, 1.0)))
        hist = tuple(jnp.where(store, a, b) for a, b in zip(hist_new, hist))
        converged = jnp.max(jnp.abs(g_new)) < gtol
        status = jnp.where(~ok, 3, jnp.where(converged, 0, -1))
        return (k + 1, jnp.where(ok, x + step, x), jnp.where(ok, f_new, f), jnp.where(ok, g_new, g), hist,
                count + store.astype(jnp.int32), status, nfev + evals)

    status0 = jnp.where(jnp.max(jnp.abs(g0)) < gtol, 0, -1)
    init = (jnp.asarray(0, jnp.int32), x0, f0, g0, (zeros_hist, zeros_hist, jnp.zeros((m,), x0.dtype)),
            jnp.asarray(0, jnp.int32), status0, jnp.asarray(1, jnp.int32))
    k, x, f, g, _, _, status, nfev = lax.while_loop(cond, body, init)
    status = jnp.where(status < 0, 1, status)
    return OptimizeResults(x, status == 0, status, f, g, None, nfev, nfev, k)


def minimize(fun: Callable[..., Any], x0: Any, args: tuple = (), *, method: str, tol: float | None = None,
             options: Mapping[str, Any] | None = None) -> OptimizeResults:
    """Minimize ``fun(x, *args)`` over a 1-D ``x`` from ``x0``.

    ``method``: ``"BFGS"`` or ``"L-BFGS"`` (also JAX's ``"l-bfgs-experimental-do-not-rely-on-this"``).
    ``options``: ``maxiter`` (default ``200 * len(x0)`` for BFGS, 200 for L-BFGS), ``gtol``,
    ``maxcor`` (L-BFGS history, default 10).
    """
    options = dict(options or {})
    x0 = jnp.asarray(x0)
    if x0.ndim != 1:
        raise ValueError(f"minimize: x0 must be 1-D, got shape {tuple(x0.shape)}")
    if not jnp.issubdtype(x0.dtype, jnp.inexact):
        x0 = x0.astype(jnp.float32)
    gtol = options.pop("gtol", tol if tol is not None else 1e-5)
    vg = value_and_grad(lambda x: fun(x, *args))
    name = method.lower()
    if name == "bfgs":
        maxiter = options.pop("maxiter", 200 * x0.shape[0])
        out = _bfgs(vg, x0, maxiter, gtol)
    elif name in ("l-bfgs", "lbfgs", "l-bfgs-b", "l-bfgs-experimental-do-not-rely-on-this"):
        maxiter = options.pop("maxiter", 200)
        out = _lbfgs(vg, x0, maxiter, gtol, int(options.pop("maxcor", 10)))
    else:
        raise ValueError(f"minimize: method {method!r} is not supported (BFGS or L-BFGS)")
    if options:
        raise TypeError(f"minimize: unknown options {sorted(options)}")
    return out


__all__ = ["OptimizeResults", "minimize"]
