"""optax's wrappers of gradient transformations: ``inject_hyperparams``, ``flatten``,
``multi_transform``, ``apply_if_finite``.

Each takes transformations (or a factory of them) and returns a
:class:`~ember._src.compat.optim.GradientTransformation` whose state holds the inner ones', laid out
as optax lays it out (the same field names), so code that reads or edits the state (e.g.
``state.hyperparams["learning_rate"] = 1e-4``) works unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

import numpy as np

import ember.numpy as jnp
from ember._src.compat.flatten_util import ravel_pytree
from ember._src.compat.optim import GradientTransformation, OptState, Params, Updates, masked
from ember._src.tree import leaves as _leaves
from ember._src.tree import tree_map


class InjectHyperparamsState(NamedTuple):
    """State of :func:`inject_hyperparams`: the step count, the current hyperparameters, the inner state."""

    count: Any
    hyperparams: dict[str, Any]
    inner_state: Any


class MultiTransformState(NamedTuple):
    """State of :func:`multi_transform`: one masked inner state per label."""

    inner_states: dict[Hashable, Any]


class ApplyIfFiniteState(NamedTuple):
    """State of :func:`apply_if_finite` (optax's field names)."""

    notfinite_count: Any
    last_finite: Any
    total_notfinite: Any
    inner_state: Any


def _increment(count: Any) -> Any:
    big = np.iinfo(np.int32).max
    return jnp.where(count < big, count + 1, big).astype(jnp.int32)


def _as_hyperparam(value: Any, dtype: Any) -> Any:
    value = jnp.asarray(value)
    if dtype is not None and jnp.issubdtype(value.dtype, jnp.floating):
        value = value.astype(dtype)
    return value


def inject_hyperparams(inner_factory: Callable[..., GradientTransformation], static_args: Any = (),
                       hyperparam_dtype: Any = None) -> Callable[..., GradientTransformation]:
    """Wraps an optimizer factory so its numeric hyperparameters live in the optimizer state.

    ``inject_hyperparams(adam)(learning_rate=schedule, b1=0.9)`` is ``adam`` whose arguments are
    read from ``state.hyperparams`` at each update: numbers (not ``bool``, not named in
    ``static_args``) are stored there and may be changed between steps; callables are schedules of
    the step count, evaluated before each update (and their value stored); other arguments are
    passed unchanged. As ``optax.inject_hyperparams``.
    """
    static = {static_args} if isinstance(static_args, str) else set(static_args)
    signature = inspect.signature(inner_factory)

    def wrapped(*args: Any, **kwargs: Any) -> GradientTransformation:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        scheduled, numeric, other = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static or isinstance(value, bool):
                other[name] = value
            elif callable(value):
                scheduled[name] = value
            elif isinstance(value, (int, float, np.ndarray, np.number)) or hasattr(value, "aval"):
                numeric[name] = value
            else:
                other[name] = value

        def evaluate(count: Any) -> dict[str, Any]:
            return {k: _as_hyperparam(f(count), hyperparam_dtype) for k, f in scheduled.items()}

        def init(params: Params) -> InjectHyperparamsState:
            count = jnp.zeros([], jnp.int32)
            hparams = {k: _as_hyperparam(v, hyperparam_dtype) for k, v in numeric.items()}
            hparams.update(evaluate(count))
            return InjectHyperparamsState(count, hparams, inner_factory(**other, **hparams).init(params))

        def update(updates: Updates, state: InjectHyperparamsState,
                   params: Params = None) -> tuple[Updates, OptState]:
            hparams = {k: _as_hyperparam(v, hyperparam_dtype) for k, v in state.hyperparams.items()}
            hparams.update(evaluate(state.count))
            tx = inner_factory(**other, **hparams)
            updates, inner_state = tx.update(updates, state.inner_state, params)
            return updates, InjectHyperparamsState(_increment(state.count), hparams, inner_state)
        return GradientTransformation(init, update)
    wrapped.__doc__ = inner_factory.__doc__
    wrapped.__name__ = getattr(inner_factory, "__name__", "inject_hyperparams")
    return wrapped


def flatten(inner: GradientTransformation) -> GradientTransformation:
    """Runs ``inner`` on all leaves raveled into one vector (and the result unraveled), as
    ``optax.flatten``: one big array instead of many small ones, same arithmetic."""
    def init(params: Params) -> OptState:
        return inner.init(ravel_pytree(params)[0])

    def update(updates: Updates, state: OptState, params: Params = None) -> tuple[Updates, OptState]:
        flat, unravel = ravel_pytree(updates)
        flat_params = None if params is None else ravel_pytree(params)[0]
        flat, state = inner.update(flat, state, flat_params)
        return unravel(flat), state
    return GradientTransformation(init, update)


def multi_transform(transforms: Mapping[Hashable, GradientTransformation],
                    param_labels: Any) -> GradientTransformation:
    """Applies ``transforms[label]`` to the parameters labelled ``label``, as ``optax.multi_transform``.

    ``param_labels`` is a pytree of labels with the parameters' structure, or a function of the
    parameters (or of the updates, when ``update`` gets no params) returning one. Every label must
    have a transformation.
    """
    def labels_of(tree: Any) -> Any:
        labels = param_labels(tree) if callable(param_labels) else param_labels
        missing = set(_leaves(labels)) - set(transforms)
        if missing:
            raise ValueError(f"multi_transform: labels {sorted(map(str, missing))} have no transformation "
                             f"(transforms has {sorted(map(str, transforms))})")
        return labels

    def mask_for(label: Hashable) -> Callable[[Any], Any]:
        return lambda tree: tree_map(lambda lab: lab == label, labels_of(tree))

    inner = {label: masked(t, mask_for(label)) for label, t in transforms.items()}

    def init(params: Params) -> MultiTransformState:
        labels_of(params)
        return MultiTransformState({label: t.init(params) for label, t in inner.items()})

    def update(updates: Updates, state: MultiTransformState,
               params: Params = None) -> tuple[Updates, OptState]:
        new = {}
        for label, t in inner.items():
            updates, new[label] = t.update(updates, state.inner_states[label], params)
        return updates, MultiTransformState(new)
    return GradientTransformation(init, update)


def apply_if_finite(inner: GradientTransformation, max_consecutive_errors: int) -> GradientTransformation:
    """Skips updates containing NaN or infinity, as ``optax.apply_if_finite``.

    A non-finite update is replaced by zeros and leaves ``inner``'s state as it was, unless more
    than ``max_consecutive_errors`` came in a row: then it goes through. The state counts them
    (``notfinite_count``, ``total_notfinite``) and records whether the last one was finite.
    """
    def init(params: Params) -> ApplyIfFiniteState:
        zero = jnp.zeros([], jnp.int32)
        return ApplyIfFiniteState(zero, jnp.asarray(True), zero, inner.init(params))

    def update(updates: Updates, state: ApplyIfFiniteState,
               params: Params = None) -> tuple[Updates, OptState]:
        finite = jnp.asarray(True)
        for leaf in _leaves(updates):
            finite = finite & jnp.all(jnp.isfinite(leaf))
        notfinite_count = jnp.where(finite, 0, state.notfinite_count + 1).astype(jnp.int32)
        total = jnp.where(finite, state.total_notfinite, state.total_notfinite + 1).astype(jnp.int32)
        take = finite | (notfinite_count > max_consecutive_errors)
        new_updates, new_inner = inner.update(updates, state.inner_state, params)
        out = tree_map(lambda u: jnp.where(take, u, jnp.zeros_like(u)), new_updates)
        inner_state = tree_map(lambda a, b: jnp.where(take, a, b), new_inner, state.inner_state)
        return out, ApplyIfFiniteState(notfinite_count, finite, total, inner_state)
    return GradientTransformation(init, update)


__all__ = ["ApplyIfFiniteState", "InjectHyperparamsState", "MultiTransformState", "apply_if_finite",
           "flatten", "inject_hyperparams", "multi_transform"]
