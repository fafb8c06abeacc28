"""``ember.example_libraries.stax``: layers as ``(init_fun, apply_fun)`` pairs, as JAX's ``stax``."""

from ember._src.compat.stax import *  # noqa: F403
from ember._src.compat.stax import __all__  # noqa: F401
