"""Learning-rate schedules ``count -> value`` (optax's formulas), usable inside ``jit``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ember.numpy as jnp

Schedule = Callable[[Any], Any]


def constant_schedule(value: float) -> Schedule:
    """``value`` at every step."""
    return lambda count: jnp.asarray(value, jnp.float32) + 0 * jnp.asarray(count)


def polynomial_schedule(init_value: float, end_value: float, power: float, transition_steps: int,
                        transition_begin: int = 0) -> Schedule:
    """From ``init_value`` to ``end_value`` as ``(1 - t/T)**power`` over ``transition_steps``."""
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def schedule(count: Any) -> Any:
        c = jnp.clip(jnp.asarray(count) - transition_begin, 0, transition_steps)
        frac = 1 - c / transition_steps
        return (init_value - end_value) * (frac ** power) + end_value
    return schedule


def linear_schedule(init_value: float, end_value: float, transition_steps: int,
                    transition_begin: int = 0) -> Schedule:
    """Linear interpolation from ``init_value`` to ``end_value`` over ``transition_steps``."""
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def cosine_decay_schedule(init_value: float, decay_steps: int, alpha: float = 0.0,
                          exponent: float = 1.0) -> Schedule:
    """``init_value * ((1 - alpha) * (0.5 (1 + cos(pi t / T)))**exponent + alpha)``, ``t <= T``."""
    if decay_steps <= 0:
        raise ValueError(f"cosine_decay_schedule: decay_steps must be positive, got {decay_steps}")

    def schedule(count: Any) -> Any:
        c = jnp.minimum(jnp.asarray(count), decay_steps)
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * c / decay_steps))
        return init_value * ((1 - alpha) * cosine ** exponent + alpha)
    return schedule


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """``schedules[i]`` (restarted at 0) from ``boundaries[i-1]`` on."""
    def schedule(count: Any) -> Any:
        out = schedules[0](count)
        for boundary, s in zip(boundaries, schedules[1:]):
            out = jnp.where(jnp.asarray(count) < boundary, out, s(jnp.asarray(count) - boundary))
        return out
    return schedule


def warmup_cosine_decay_schedule(init_value: float, peak_value: float, warmup_steps: int, decay_steps: int,
                                 end_value: float = 0.0, exponent: float = 1.0) -> Schedule:
    """Linear warmup from ``init_value`` to ``peak_value``, then cosine decay to ``end_value``.

    ``decay_steps`` counts the warmup too (as optax).
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
                           cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
                          [warmup_steps])


def warmup_constant_schedule(init_value: float, peak_value: float, warmup_steps: int) -> Schedule:
    """Linear warmup to ``peak_value``, then constant."""
    return join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
                           constant_schedule(peak_value)], [warmup_steps])


def exponential_decay(init_value: float, transition_steps: int, decay_rate: float, transition_begin: int = 0,
                      staircase: bool = False, end_value: float | None = None) -> Schedule:
    """``init_value * decay_rate ** ((t - begin) / transition_steps)`` (floored if ``staircase``)."""
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def schedule(count: Any) -> Any:
        dc = jnp.asarray(count) - transition_begin
        p = dc / transition_steps
        if staircase:
            p = jnp.floor(p)
        out = jnp.where(dc <= 0, init_value, init_value * jnp.power(decay_rate, p))
        if end_value is not None:
            out = jnp.maximum(out, end_value) if decay_rate < 1 else jnp.minimum(out, end_value)
        return out
    return schedule


def piecewise_constant_schedule(init_value: float, boundaries_and_scales: dict[int, float] | None = None
                                ) -> Schedule:
    """``init_value`` multiplied by ``scale`` at each boundary step passed."""
    items = sorted((boundaries_and_scales or {}).items())

    def schedule(count: Any) -> Any:
        v = jnp.asarray(init_value, jnp.float32)
        for b, s in items:
            v = v * jnp.where(jnp.asarray(count) >= b, s, 1.0)
        return v
    return schedule


__all__ = ["constant_schedule", "cosine_decay_schedule", "exponential_decay", "join_schedules",
           "linear_schedule", "piecewise_constant_schedule", "polynomial_schedule",
           "warmup_constant_schedule", "warmup_cosine_decay_schedule"]
