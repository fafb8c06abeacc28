"""``jax.example_libraries.optimizers``: ``(init_fun, update_fun, get_params)`` triples.

``init_fun(params) -> OptimizerState``, ``update_fun(step, grads, state) -> state``,
``get_params(state) -> params``; the state is a pytree, so a step can be ``jit``-ed. The rules are
JAX's (same defaults); step sizes may be numbers or schedules ``i -> step_size``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import ember.numpy as jnp
from ember._src.tree import flatten, register_pytree_node, unflatten

Schedule = Callable[[Any], Any]


class Optimizer(NamedTuple):
    init_fn: Callable[[Any], Any]
    update_fn: Callable[[Any, Any, Any], Any]
    params_fn: Callable[[Any], Any]


class OptimizerState(NamedTuple):
    packed_state: list
    tree_def: Any
    subtree_defs: tuple


register_pytree_node(OptimizerState, lambda s: ((s.packed_state,), (s.tree_def, s.subtree_defs)),
                     lambda aux, children: OptimizerState(children[0], aux[0], aux[1]))


def optimizer(opt_maker: Callable[..., tuple[Callable, Callable, Callable]]) -> Callable[..., Optimizer]:
    """Decorator: per-array ``(init, update, get_params)`` -> functions over pytrees of arrays."""
    @functools.wraps(opt_maker)
    def tree_opt_maker(*args: Any, **kwargs: Any) -> Optimizer:
        init, update, get_params = opt_maker(*args, **kwargs)

        def tree_init(x0_tree: Any) -> OptimizerState:
            x0_flat, tree = flatten(x0_tree)
            flats = [flatten(init(jnp.asarray(x0))) for x0 in x0_flat]
            return OptimizerState([f[0] for f in flats], tree, tuple(f[1] for f in flats))

        def tree_update(i: Any, grad_tree: Any, opt_state: OptimizerState) -> OptimizerState:
            states_flat, tree, subtrees = opt_state
            grad_flat, tree2 = flatten(grad_tree)
            if tree2 != tree:
                raise TypeError("optimizer update function was passed a gradient tree that did not match "
                                f"the parameter tree structure: parameter tree {tree} and grad tree {tree2}.")
            states = [unflatten(t, s) for t, s in zip(subtrees, states_flat)]
            new = [flatten(update(i, g, s)) for g, s in zip(grad_flat, states)]
            return OptimizerState([n[0] for n in new], tree, subtrees)

        def tree_get_params(opt_state: OptimizerState) -> Any:
            states_flat, tree, subtrees = opt_state
            return unflatten(tree, [get_params(unflatten(t, s)) for t, s in zip(subtrees, states_flat)])

        return Optimizer(tree_init, tree_update, tree_get_params)
    return tree_opt_maker


def constant(step_size: float) -> Schedule:
    """The schedule ``i -> step_size``."""
    return lambda i: step_size


def exponential_decay(step_size: float, decay_steps: int, decay_rate: float) -> Schedule:
    """``step_size * decay_rate ** (i / decay_steps)``."""
    return lambda i: step_size * decay_rate ** (i / decay_steps)


def inverse_time_decay(step_size: float, decay_steps: int, decay_rate: float,
                       staircase: bool = False) -> Schedule:
    """``step_size / (1 + decay_rate * i / decay_steps)`` (``i // decay_steps`` if ``staircase``)."""
    if staircase:
        return lambda i: step_size / (1 + decay_rate * jnp.floor(i / decay_steps))
    return lambda i: step_size / (1 + decay_rate * i / decay_steps)


def polynomial_decay(step_size: float, decay_steps: int, final_step_size: float,
                     power: float = 1.0) -> Schedule:
    """From ``step_size`` to ``final_step_size`` as ``(1 - i/decay_steps)**power``."""
    def schedule(step_num: Any) -> Any:
        step_num = jnp.minimum(step_num, decay_steps)
        return (step_size - final_step_size) * (1 - step_num / decay_steps) ** power + final_step_size
    return schedule


def piecewise_constant(boundaries: Any, values: Any) -> Schedule:
    """``values[j]`` for ``boundaries[j-1] <= i < boundaries[j]``."""
    boundaries, values = jnp.asarray(boundaries), jnp.asarray(values)
    if values.shape[0] != boundaries.shape[0] + 1:
        raise ValueError("values must have one more entry than boundaries")
    return lambda i: values[jnp.sum(i > boundaries)]


def make_schedule(scalar_or_schedule: float | Schedule) -> Schedule:
    """A schedule from a number or a schedule."""
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if jnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(type(scalar_or_schedule))


def _zeros_state(n: int) -> Callable[[Any], tuple]:
    """An ``init`` whose state is the parameters followed by ``n`` zero arrays shaped like them."""
    def init(x0: Any) -> tuple:
        return (x0, *(jnp.zeros_like(x0) for _ in range(n)))
    return init


def _params(state: tuple) -> Any:
    """``get_params`` of a state whose first entry is the parameters."""
    return state[0]


@optimizer
def sgd(step_size: float | Schedule) -> tuple:
    """Stochastic gradient descent."""
    step_size = make_schedule(step_size)
    return (lambda x0: x0, lambda i, g, x: x - step_size(i) * g, lambda x: x)


@optimizer
def momentum(step_size: float | Schedule, mass: float) -> tuple:
    """Heavy-ball momentum: ``v = mass v + g; x -= step v``."""
    step_size = make_schedule(step_size)

    def update(i: Any, g: Any, state: tuple) -> tuple:
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * velocity, velocity
    return _zeros_state(1), update, _params


@optimizer
def nesterov(step_size: float | Schedule, mass: float) -> tuple:
    """Nesterov momentum: ``v = mass v + g; x -= step (mass v + g)``."""
    step_size = make_schedule(step_size)

    def update(i: Any, g: Any, state: tuple) -> tuple:
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * (mass * velocity + g), velocity
    return _zeros_state(1), update, _params


@optimizer
def adagrad(step_size: float | Schedule, momentum: float = 0.9) -> tuple:
    """Adagrad with momentum (JAX's example-library variant)."""
    step_size = make_schedule(step_size)

    def update(i: Any, g: Any, state: tuple) -> tuple:
        x, g_sq, m = state
        g_sq = g_sq + jnp.square(g)
        g_sq_inv_sqrt = jnp.where(g_sq > 0, 1.0 / jnp.sqrt(g_sq), 0.0)
        m = (1.0 - momentum) * (g * g_sq_inv_sqrt) + momentum * m
        return x - step_size(i) * m, g_sq, m
    return _zeros_state(2), update, _params


@optimizer
def rmsprop(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8) -> tuple:
    """RMSProp: ``x -= step g / sqrt(avg_sq_grad + eps)``."""
    step_size = make_schedule(step_size)

    def update(i: Any, g: Any, state: tuple) -> tuple:
        x, avg_sq_grad = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1.0 - gamma)
        return x - step_size(i) * g / jnp.sqrt(avg_sq_grad + eps), avg_sq_grad
    return _zeros_state(1), update, _params


@optimizer
def rmsprop_momentum(step_size: float | Schedule, gamma: float = 0.9, eps: float = 1e-8,
                     momentum: float = 0.9) -> tuple:
    """RMSProp with momentum."""
    step_size = make_schedule(step_size)

    def update(i: Any, g: Any, state: tuple) -> tuple:
        x, avg_sq_grad, mom = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1.0 - gamma)
        mom = momentum * mom + step_size(i) * g / jnp.sqrt(avg_sq_grad + eps)
        return x - mom, avg_sq_grad, mom
    return _zeros_state(2), update, _params


@optimizer
def adam(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> tuple:
    """Adam (Kingma & Ba 2014)."""
    step_size = make_schedule(step_size)

    def update(i: Any, g: Any, state: tuple) -> tuple:
        x, m, v = state
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * jnp.square(g) + b2 * v
        mhat = m / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))
        vhat = v / (1 - jnp.asarray(b2, m.dtype) ** (i + 1))
        return x - step_size(i) * mhat / (jnp.sqrt(vhat) + eps), m, v
    return _zeros_state(2), update, _params


@optimizer
def adamax(step_size: float | Schedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> tuple:
    """AdaMax (the infinity-norm variant of Adam)."""
    step_size = make_schedule(step_size)

    def update(i: Any, g: Any, state: tuple) -> tuple:
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = jnp.maximum(b2 * u, jnp.abs(g))
        return x - (step_size(i) / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))) * m / (u + eps), m, u
    return _zeros_state(2), update, _params


def l2_norm(tree: Any) -> Any:
    """The L2 norm of all leaves of ``tree`` together."""
    return jnp.sqrt(sum(jnp.vdot(x, x) for x in flatten(tree)[0]))


def clip_grads(grad_tree: Any, max_norm: float) -> Any:
    """Rescale ``grad_tree`` to L2 norm at most ``max_norm``."""
    norm = l2_norm(grad_tree)
    factor = jnp.where(norm < max_norm, 1.0, max_norm / norm)
    leaves, td = flatten(grad_tree)
    return unflatten(td, [g * factor for g in leaves])


class JoinPoint:
    """Marks where the parameter pytree ends and a parameter's state pytree begins."""

    def __init__(self, subtree: Any):
        self.subtree = subtree

    def __iter__(self) -> Any:
        yield self.subtree


def unpack_optimizer_state(opt_state: OptimizerState) -> Any:
    """The state as the parameter pytree with a :class:`JoinPoint` (holding that parameter's state)
    at each leaf, for saving; :func:`pack_optimizer_state` inverts it."""
    states_flat, tree, subtrees = opt_state
    return unflatten(tree, [JoinPoint(unflatten(t, s)) for t, s in zip(subtrees, states_flat)])


def pack_optimizer_state(marked_pytree: Any) -> OptimizerState:
    """The :class:`OptimizerState` of a pytree made by :func:`unpack_optimizer_state`."""
    sentinels, tree = flatten(marked_pytree)
    if not all(isinstance(s, JoinPoint) for s in sentinels):
        raise TypeError("pack_optimizer_state: every leaf must be a JoinPoint (from unpack_optimizer_state)")
    flats = [flatten(s.subtree) for s in sentinels]
    return OptimizerState([f[0] for f in flats], tree, tuple(f[1] for f in flats))


@optimizer
def sm3(step_size: float | Schedule, momentum: float = 0.9) -> tuple:
    """SM3 (Anil et al. 2019): per-axis maxima of accumulated squared gradients, with momentum."""
    step_size = make_schedule(step_size)

    def along(ndim: int, v: Any, axis: int) -> Any:
        idx = [None] * ndim
        idx[axis] = slice(None)
        return v[tuple(idx)]

    def init(x0: Any) -> tuple:
        shape = tuple(x0.shape)
        x0 = jnp.atleast_1d(x0)
        return x0, jnp.zeros_like(x0), [jnp.zeros(n, x0.dtype) for n in x0.shape], shape

    def update(i: Any, g: Any, state: tuple) -> tuple:
        x, m, vs, shape = state
        g = jnp.reshape(g, x.shape)
        accum = functools.reduce(jnp.minimum, [along(g.ndim, v, k) for k, v in enumerate(vs)]) + jnp.square(g)
        inv_sqrt = jnp.where(accum > 0, 1.0 / jnp.sqrt(accum), 0.0)
        m = (1.0 - momentum) * (g * inv_sqrt) + momentum * m
        x = x - step_size(i) * m
        vs = [jnp.max(accum, axis=tuple(a for a in range(x.ndim) if a != k)) for k in range(x.ndim)]
        return x, m, vs, shape

    return init, update, lambda state: jnp.reshape(state[0], state[3])


__all__ = ["JoinPoint", "Optimizer", "OptimizerState", "adagrad", "adam", "adamax", "clip_grads", "constant",
           "exponential_decay", "inverse_time_decay", "l2_norm", "make_schedule", "momentum", "nesterov",
           "optimizer", "pack_optimizer_state", "piecewise_constant", "polynomial_decay", "rmsprop",
           "rmsprop_momentum", "sgd", "sm3", "unpack_optimizer_state"]
