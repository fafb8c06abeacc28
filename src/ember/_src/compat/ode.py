"""``odeint``: adaptive Dormand-Prince 5(4) integration with an adjoint (reverse-mode) gradient.

The state may be any pytree of arrays (raveled to one vector inside). Between two output times the
solver takes adaptive steps (error per step below ``atol + rtol * |y|`` in RMS norm) and its last
step lands exactly on the output time. The reverse-mode derivative integrates the adjoint system
backwards in time with the same solver (Pontryagin / Chen et al. 2018), so memory does not grow with
the number of steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.numpy as jnp
from ember import lax
from ember._src.ad import vjp
from ember._src.batching import vmap
from ember._src.compat.flatten_util import ravel_pytree
from ember._src.custom_derivatives import custom_vjp
from ember._src.tree import tree_map

# Dormand-Prince 5(4) Butcher tableau
_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_A = ((), (1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
      (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
      (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
      (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84))
_B5 = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_B4 = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
_ERR = tuple(b5 - b4 for b5, b4 in zip(_B5, _B4))


def _dopri_step(f: Callable, y: Any, t: Any, h: Any, f0: Any) -> tuple[Any, Any, Any]:
    """One step: (y_next, f(y_next), error estimate)."""
    ks = [f0]
    for i in range(1, 7):
        yi = y + h * sum(a * k for a, k in zip(_A[i], ks) if a != 0.0)
        ks.append(f(yi, t + _C[i] * h))
    y_next = y + h * sum(b * k for b, k in zip(_B5, ks) if b != 0.0)
    err = h * sum(e * k for e, k in zip(_ERR, ks) if e != 0.0)
    return y_next, ks[-1], err


def _rms(x: Any) -> Any:
    return jnp.sqrt(jnp.mean(x * x)) if x.size else jnp.asarray(0.0, x.dtype)


def _initial_step(f: Callable, y0: Any, t0: Any, f0: Any, rtol: float, atol: float) -> Any:
    """Hairer, Norsett & Wanner's starting step size heuristic (order 5)."""
    scale = atol + rtol * jnp.abs(y0)
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / jnp.maximum(d1, 1e-30))
    f1 = f(y0 + h0 * f0, t0 + h0)
    d2 = _rms((f1 - f0) / scale) / h0
    h1 = jnp.where(jnp.maximum(d1, d2) <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3),
                   (0.01 / jnp.maximum(jnp.maximum(d1, d2), 1e-30)) ** (1.0 / 5))
    return jnp.minimum(100 * h0, h1)


def _solve(f: Callable, y0: Any, ts: Any, rtol: float, atol: float, mxstep: float, hmax: float) -> Any:
    """States at ``ts`` (``ys[0] = y0``) for the flat system ``dy/dt = f(y, t)``."""
    f0 = f(y0, ts[0])
    h0 = jnp.minimum(_initial_step(f, y0, ts[0], f0, rtol, atol), hmax)

    def to_target(carry: tuple, target: Any) -> tuple:
        def cond(state: tuple) -> Any:
            y, fy, t, h, n = state
            return (t < target) & (n < mxstep)

        def body(state: tuple) -> tuple:
            y, fy, t, h, n = state
            last = h >= target - t
            h_eff = jnp.where(last, target - t, h)
            y_new, f_new, err = _dopri_step(f, y, t, h_eff, fy)
            ratio = _rms(err / (atol + rtol * jnp.maximum(jnp.abs(y), jnp.abs(y_new))))
            accept = ratio <= 1.0
            factor = jnp.clip(0.9 * jnp.where(ratio > 0, ratio, 1e-10) ** -0.2, 0.2, 10.0)
            h_next = jnp.minimum(h_eff * factor, hmax)
            t_new = jnp.where(last, target, t + h_eff)
            return (jnp.where(accept, y_new, y), jnp.where(accept, f_new, fy), jnp.where(accept, t_new, t),
                    jnp.where(last & accept, jnp.maximum(h, h_next), h_next), n + 1)

        y, fy, t, h = carry
        y, fy, t, h, _ = lax.while_loop(cond, body, (y, fy, t, h, jnp.asarray(0, jnp.int32)))
        return (y, fy, t, h), y

    _, ys = lax.scan(to_target, (y0, f0, ts[0], h0), ts[1:])
    return jnp.concatenate([y0[None], ys], axis=0)


def odeint(func: Callable[..., Any], y0: Any, t: Any, *args: Any, rtol: float = 1.4e-8, atol: float = 1.4e-8,
           mxstep: float = float("inf"), hmax: float = float("inf")) -> Any:
    """Solve ``dy/dt = func(y, t, *args)`` from ``y(t[0]) = y0``; returns ``y`` at each time of ``t``.

    As ``jax.experimental.ode.odeint``: ``y0`` may be a pytree, the result has a leading axis of
    ``len(t)`` on each leaf, ``t`` must be increasing, and reverse-mode derivatives with respect to
    ``y0``, ``t`` and ``args`` come from the adjoint method.
    """
    flat_y0, unravel_y = ravel_pytree(y0)
    # Python numbers take the state's precision (JAX's weak types), not float32
    args = tree_map(lambda v: jnp.asarray(v, flat_y0.dtype) if isinstance(v, (int, float)) else v, args)
    flat_args, unravel_args = ravel_pytree(args)
    t = jnp.asarray(t)
    if t.ndim != 1 or t.shape[0] < 1:
        raise ValueError(f"odeint: t must be a 1-D array of times, got shape {tuple(t.shape)}")
    dtype = flat_y0.dtype
    t = t.astype(dtype)

    def f(y: Any, tt: Any, a: Any) -> Any:
        return ravel_pytree(func(unravel_y(y), tt, *unravel_args(a)))[0].astype(dtype)

    @custom_vjp
    def solve(y0_: Any, ts: Any, a: Any) -> Any:
        return _solve(lambda y, tt: f(y, tt, a), y0_, ts, rtol, atol, mxstep, hmax)

    def fwd(y0_: Any, ts: Any, a: Any) -> tuple:
        ys = solve(y0_, ts, a)
        return ys, (ys, ts, a)

    def bwd(res: tuple, g: Any) -> tuple:
        ys, ts, a = res
        n = ys.shape[0]

        def aug_dynamics(state: Any, minus_t: Any) -> Any:
            """The adjoint system, backwards in time (time ``-minus_t``)."""
            y, adj = state[:n_y], state[n_y:2 * n_y]
            fy, pullback = vjp(lambda yy, aa: f(yy, -minus_t, aa), y, a)
            adj_y, adj_a = pullback(adj)
            return jnp.concatenate([-fy, adj_y, adj_a])

        n_y, n_a = ys.shape[1], a.shape[0]

        def step(carry: tuple, i: Any) -> tuple:
            adj, a_bar, t0_bar = carry
            y_i, t_i = ys[i], ts[i]
            t_bar = jnp.dot(f(y_i, t_i, a), g[i])
            state = jnp.concatenate([y_i, adj, jnp.zeros((n_a,), dtype)])
            out = _solve(aug_dynamics, state, jnp.stack([-t_i, -ts[i - 1]]), rtol, atol, mxstep, hmax)[1]
            adj = out[n_y:2 * n_y] + g[i - 1]
            return (adj, a_bar + out[2 * n_y:], t0_bar - t_bar), t_bar

        init = (g[n - 1], jnp.zeros((n_a,), dtype), jnp.asarray(0.0, dtype))
        idx = jnp.arange(n - 1, 0, -1)
        (adj, a_bar, t0_bar), t_bars = lax.scan(step, init, idx)
        ts_bar = jnp.concatenate([t0_bar[None], t_bars[::-1]])
        return adj, ts_bar, a_bar

    solve.defvjp(fwd, bwd)
    ys = solve(flat_y0, t, flat_args)
    return vmap(unravel_y)(ys)  # each row back to the pytree, stacked leaf-wise


__all__ = ["odeint"]
