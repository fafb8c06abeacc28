"""``ember.experimental``: ``ode.odeint`` (as ``jax.experimental.ode``)."""

from ember.experimental import ode

__all__ = ["ode"]
