"""``ember.example_libraries.optimizers``: JAX's example optimizers ``(init, update, get_params)``."""

from ember._src.compat.example_optimizers import *  # noqa: F403
from ember._src.compat.example_optimizers import __all__  # noqa: F401
