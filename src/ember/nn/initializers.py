"""``ember.nn.initializers``: weight initializers as in ``jax.nn.initializers``."""

from ember._src.compat.initializers import *  # noqa: F403
from ember._src.compat.initializers import __all__  # noqa: F401
