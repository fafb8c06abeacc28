"""``ember.experimental.ode``: ``odeint`` (adaptive Dormand-Prince with an adjoint gradient)."""

from ember._src.compat.ode import odeint

__all__ = ["odeint"]
