"""An optax-style optimizer library: gradient transformations ``(init, update)`` that compose.

``update(updates, state, params=None) -> (updates, state)``; :func:`apply_updates` adds the
result to the parameters. The update rules follow optax's (same defaults, same bias corrections,
``eps`` placement and schedule formulas). Everything is written over ``ember.numpy``, so a whole
training step can be ``jit``-ed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import ember.numpy as jnp
from ember._src.tree import leaves as _leaves
from ember._src.tree import tree_map

Params = Any
Updates = Any
OptState = Any
Schedule = Callable[[Any], Any]
ScalarOrSchedule = float | Schedule


class GradientTransformation(NamedTuple):
    """A pair of pure functions: ``init(params) -> state`` and ``update(updates, state, params)``."""

    init: Callable[[Params], OptState]
    update: Callable[..., tuple[Updates, OptState]]


class EmptyState(NamedTuple):
    """The state of a stateless transformation."""


class ScaleByScheduleState(NamedTuple):
    count: Any


class TraceState(NamedTuple):
    trace: Any


class ScaleByAdamState(NamedTuple):
    count: Any
    mu: Any
    nu: Any


class ScaleByRmsState(NamedTuple):
    nu: Any


class ScaleByRStdDevState(NamedTuple):
    mu: Any
    nu: Any


class ScaleByRssState(NamedTuple):
    sum_of_squares: Any


class ScaleByLionState(NamedTuple):
    count: Any
    mu: Any


class MaskedState(NamedTuple):
    inner_state: Any


def _count() -> Any:
    return jnp.zeros([], jnp.int32)


def _inc(count: Any) -> Any:
    """``count + 1``, saturating at the largest int32 (as optax's ``safe_increment``)."""
    big = np.iinfo(np.int32).max
    return jnp.where(count < big, count + 1, big).astype(jnp.int32)


def _zeros_like(params: Params) -> Any:
    return tree_map(lambda p: jnp.zeros_like(jnp.asarray(p)), params)


def _full_like(params: Params, value: float) -> Any:
    return tree_map(lambda p: jnp.full_like(jnp.asarray(p), value), params)


def identity() -> GradientTransformation:
    """Leaves updates unchanged."""
    return GradientTransformation(lambda params: EmptyState(), lambda u, s, params=None: (u, s))


def set_to_zero() -> GradientTransformation:
    """Replaces every update with zeros (freezes parameters, e.g. inside :func:`masked`)."""
    return GradientTransformation(lambda params: EmptyState(),
                                  lambda u, s, params=None: (_zeros_like(u), s))


def scale(step_size: float) -> GradientTransformation:
    """Multiplies updates by ``step_size``."""
    def update(updates: Updates, state: OptState, params: Params = None) -> tuple[Updates, OptState]:
        return tree_map(lambda g: g * step_size, updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation:
    """Multiplies updates by ``step_size_fn(count)``; ``count`` is the number of updates so far."""
    def update(updates: Updates, state: ScaleByScheduleState,
               params: Params = None) -> tuple[Updates, OptState]:
        step = step_size_fn(state.count)
        updates = tree_map(lambda g: g * jnp.asarray(step, g.dtype), updates)
        return updates, ScaleByScheduleState(_inc(state.count))
    return GradientTransformation(lambda params: ScaleByScheduleState(_count()), update)


def scale_by_learning_rate(learning_rate: ScalarOrSchedule, *,
                           flip_sign: bool = True) -> GradientTransformation:
    """Scales by ``-learning_rate`` (a number or a schedule of the step count)."""
    m = -1 if flip_sign else 1
    if callable(learning_rate):
        return scale_by_schedule(lambda count: m * learning_rate(count))
    return scale(m * learning_rate)


def trace(decay: float, nesterov: bool = False, accumulator_dtype: Any = None) -> GradientTransformation:
    """Momentum: ``t = g + decay * t``; updates are ``t`` (or ``g + decay * t`` if ``nesterov``)."""
    def init(params: Params) -> TraceState:
        return TraceState(_zeros_like(params))

    def update(updates: Updates, state: TraceState, params: Params = None) -> tuple[Updates, OptState]:
        new_trace = tree_map(lambda g, t: g + decay * t, updates, state.trace)
        out = tree_map(lambda g, t: g + decay * t, updates, new_trace) if nesterov else new_trace
        return out, TraceState(new_trace)
    return GradientTransformation(init, update)


def _moment(updates: Updates, moments: Any, decay: float, order: int) -> Any:
    return tree_map(lambda g, t: (1 - decay) * (g ** order) + decay * t, updates, moments)


def _bias_correction(moment: Any, decay: float, count: Any) -> Any:
    """``moment / (1 - decay**count)``, the correction computed in each leaf's precision."""
    return tree_map(lambda t: t / (1 - decay ** count.astype(t.dtype)), moment)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0,
                  nesterov: bool = False) -> GradientTransformation:
    """Adam's rescaling: ``m_hat / (sqrt(v_hat + eps_root) + eps)`` with bias-corrected moments."""
    def init(params: Params) -> ScaleByAdamState:
        return ScaleByAdamState(_count(), _zeros_like(params), _zeros_like(params))

    def update(updates: Updates, state: ScaleByAdamState, params: Params = None) -> tuple[Updates, OptState]:
        mu = _moment(updates, state.mu, b1, 1)
        nu = _moment(updates, state.nu, b2, 2)
        count = _inc(state.count)
        if nesterov:
            mu_hat = tree_map(lambda m, g: b1 * m + (1 - b1) * g, _bias_correction(mu, b1, _inc(count)),
                              _bias_correction(updates, b1, count))
        else:
            mu_hat = _bias_correction(mu, b1, count)
        nu_hat = _bias_correction(nu, b2, count)
        out = tree_map(lambda m, v: m / (jnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return out, ScaleByAdamState(count, mu, nu)
    return GradientTransformation(init, update)


def scale_by_rms(decay: float = 0.9, eps: float = 1e-8,
                 initial_scale: float = 0.0) -> GradientTransformation:
    """RMSProp's rescaling: ``g / sqrt(nu + eps)``, ``nu`` an EMA of ``g**2``."""
    def update(updates: Updates, state: ScaleByRmsState, params: Params = None) -> tuple[Updates, OptState]:
        nu = _moment(updates, state.nu, decay, 2)
        return tree_map(lambda g, n: g / jnp.sqrt(n + eps), updates, nu), ScaleByRmsState(nu)
    return GradientTransformation(lambda params: ScaleByRmsState(_full_like(params, initial_scale)), update)


def scale_by_stddev(decay: float = 0.9, eps: float = 1e-8,
                    initial_scale: float = 0.0) -> GradientTransformation:
    """Centered RMSProp's rescaling: ``g / sqrt(nu - mu**2 + eps)``."""
    def init(params: Params) -> ScaleByRStdDevState:
        return ScaleByRStdDevState(_zeros_like(params), _full_like(params, initial_scale))

    def update(updates: Updates, state: ScaleByRStdDevState,
               params: Params = None) -> tuple[Updates, OptState]:
        mu = _moment(updates, state.mu, decay, 1)
        nu = _moment(updates, state.nu, decay, 2)
        out = tree_map(lambda g, m, n: g / jnp.sqrt(n - m ** 2 + eps), updates, mu, nu)
        return out, ScaleByRStdDevState(mu, nu)
    return GradientTransformation(init, update)


def scale_by_rss(initial_accumulator_value: float = 0.1, eps: float = 1e-7) -> GradientTransformation:
    """Adagrad's rescaling: ``g / sqrt(sum of g**2 + eps)`` (zero where the sum is zero)."""
    def update(updates: Updates, state: ScaleByRssState, params: Params = None) -> tuple[Updates, OptState]:
        sos = tree_map(lambda g, s: g * g + s, updates, state.sum_of_squares)
        out = tree_map(lambda g, s: jnp.where(s > 0, g / jnp.sqrt(s + eps), 0.0).astype(g.dtype),
                       updates, sos)
        return out, ScaleByRssState(sos)
    return GradientTransformation(
        lambda params: ScaleByRssState(_full_like(params, initial_accumulator_value)), update)


def scale_by_lion(b1: float = 0.9, b2: float = 0.99) -> GradientTransformation:
    """Lion's rescaling: ``sign((1 - b1) g + b1 m)``; ``m`` an EMA of ``g`` with rate ``b2``."""
    def init(params: Params) -> ScaleByLionState:
        return ScaleByLionState(_count(), _zeros_like(params))

    def update(updates: Updates, state: ScaleByLionState, params: Params = None) -> tuple[Updates, OptState]:
        out = tree_map(lambda g, m: jnp.sign((1 - b1) * g + b1 * m), updates, state.mu)
        mu = _moment(updates, state.mu, b2, 1)
        return out, ScaleByLionState(_inc(state.count), mu)
    return GradientTransformation(init, update)


def _mask_tree(mask: Any, params: Params) -> Any:
    return mask(params) if callable(mask) else mask


def masked(inner: GradientTransformation, mask: Any) -> GradientTransformation:
    """Apply ``inner`` only where ``mask`` (a pytree of bools, or ``params -> pytree``) is True."""
    def pick(tree: Any, m: Any) -> Any:
        return tree_map(lambda x, keep: x if keep else None, tree, m)

    def init(params: Params) -> MaskedState:
        return MaskedState(inner.init(pick(params, _mask_tree(mask, params))))

    def update(updates: Updates, state: MaskedState, params: Params = None) -> tuple[Updates, OptState]:
        m = _mask_tree(mask, updates if params is None else params)
        sub_params = None if params is None else pick(params, m)
        new_sub, inner_state = inner.update(pick(updates, m), state.inner_state, sub_params)
        return _fill(new_sub, updates, m), MaskedState(inner_state)
    return GradientTransformation(init, update)


def _fill(sub: Any, full: Any, m: Any) -> Any:
    """``sub`` (``None`` where masked out) back to the structure of ``full``."""
    return tree_map(lambda s, g, keep: s if keep else g, sub, full, m, is_leaf=lambda x: x is None)


def add_decayed_weights(weight_decay: float = 0.0, mask: Any = None) -> GradientTransformation:
    """Adds ``weight_decay * params`` to the updates (only where ``mask`` is True, if given)."""
    def update(updates: Updates, state: OptState, params: Params = None) -> tuple[Updates, OptState]:
        if params is None:
            raise ValueError("add_decayed_weights needs params: call update(updates, state, params)")
        return tree_map(lambda g, p: g + weight_decay * p, updates, params), state
    t = GradientTransformation(lambda params: EmptyState(), update)
    return masked(t, mask) if mask is not None else t


def global_norm(updates: Updates) -> Any:
    """The L2 norm of all leaves together."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in _leaves(updates)))


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Rescales updates to global norm ``max_norm`` when their norm is larger."""
    def update(updates: Updates, state: OptState, params: Params = None) -> tuple[Updates, OptState]:
        g_norm = global_norm(updates)
        trigger = g_norm < max_norm
        out = tree_map(lambda t: jnp.where(trigger, t, (t / g_norm.astype(t.dtype)) * max_norm), updates)
        return out, state
    return GradientTransformation(lambda params: EmptyState(), update)


def clip(max_delta: float) -> GradientTransformation:
    """Clips each update to ``[-max_delta, max_delta]``."""
    def update(updates: Updates, state: OptState, params: Params = None) -> tuple[Updates, OptState]:
        return tree_map(lambda g: jnp.clip(g, -max_delta, max_delta), updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Applies ``transforms`` in order; the state is the tuple of their states."""
    def init(params: Params) -> tuple:
        return tuple(t.init(params) for t in transforms)

    def update(updates: Updates, state: tuple, params: Params = None) -> tuple[Updates, OptState]:
        if len(state) != len(transforms):
            raise ValueError(f"chain: expected a state of {len(transforms)} entries, got {len(state)}")
        new = []
        for t, s in zip(transforms, state):
            updates, s = t.update(updates, s, params)
            new.append(s)
        return updates, tuple(new)
    return GradientTransformation(init, update)


def apply_updates(params: Params, updates: Updates) -> Params:
    """``params + updates`` leaf-wise, each result in its parameter's dtype."""
    return tree_map(lambda p, u: None if p is None else (jnp.asarray(p) + u).astype(jnp.asarray(p).dtype),
                    params, updates, is_leaf=lambda x: x is None)


# ----------------------------------------------------------------------------- optimizers

def sgd(learning_rate: ScalarOrSchedule, momentum: float | None = None,
        nesterov: bool = False) -> GradientTransformation:
    """Stochastic gradient descent, with optional (Nesterov) momentum."""
    parts = [trace(momentum, nesterov)] if momentum is not None else []
    return chain(*parts, scale_by_learning_rate(learning_rate))


def momentum(learning_rate: ScalarOrSchedule, momentum: float = 0.9,
             nesterov: bool = False) -> GradientTransformation:
    """SGD with heavy-ball momentum (``sgd(learning_rate, momentum, nesterov)``)."""
    return sgd(learning_rate, momentum, nesterov)


def nesterov(learning_rate: ScalarOrSchedule, momentum: float = 0.9) -> GradientTransformation:
    """SGD with Nesterov momentum."""
    return sgd(learning_rate, momentum, nesterov=True)


def adam(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         eps_root: float = 0.0, *, nesterov: bool = False) -> GradientTransformation:
    """Adam (Kingma & Ba 2014), as ``optax.adam``."""
    return chain(scale_by_adam(b1, b2, eps, eps_root, nesterov), scale_by_learning_rate(learning_rate))


def adamw(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          eps_root: float = 0.0, weight_decay: float = 1e-4, mask: Any = None, *,
          nesterov: bool = False) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019), as ``optax.adamw``."""
    return chain(scale_by_adam(b1, b2, eps, eps_root, nesterov), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate: ScalarOrSchedule, decay: float = 0.9, eps: float = 1e-8,
            initial_scale: float = 0.0, centered: bool = False, momentum: float | None = None,
            nesterov: bool = False) -> GradientTransformation:
    """RMSProp (optionally centered, with momentum), as ``optax.rmsprop``."""
    rescale = (scale_by_stddev(decay, eps, initial_scale) if centered
               else scale_by_rms(decay, eps, initial_scale))
    parts = [trace(momentum, nesterov)] if momentum is not None else []
    return chain(rescale, scale_by_learning_rate(learning_rate), *parts)


def adagrad(learning_rate: ScalarOrSchedule, initial_accumulator_value: float = 0.1,
            eps: float = 1e-7) -> GradientTransformation:
    """Adagrad, as ``optax.adagrad``."""
    return chain(scale_by_rss(initial_accumulator_value, eps), scale_by_learning_rate(learning_rate))


def lion(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.99, weight_decay: float = 1e-3,
         mask: Any = None) -> GradientTransformation:
    """Lion (Chen et al. 2023), as ``optax.lion``."""
    return chain(scale_by_lion(b1, b2), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


__all__ = [
    "EmptyState", "GradientTransformation", "MaskedState", "OptState", "Params", "Schedule",
    "ScaleByAdamState", "ScaleByLionState", "ScaleByRStdDevState", "ScaleByRmsState", "ScaleByRssState",
    "ScaleByScheduleState", "TraceState", "Updates", "adagrad", "adam", "adamw", "add_decayed_weights",
    "apply_updates", "chain", "clip", "clip_by_global_norm", "global_norm", "identity", "lion", "masked",
    "momentum", "nesterov", "rmsprop", "scale", "scale_by_adam", "scale_by_learning_rate",
    "scale_by_lion", "scale_by_rms", "scale_by_rss", "scale_by_schedule", "scale_by_stddev",
    "set_to_zero", "sgd", "trace"
]
