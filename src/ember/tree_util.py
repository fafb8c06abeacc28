"""``ember.tree_util``: JAX's ``jax.tree_util`` names over ember's pytrees (``ember.tree``)."""

from ember._src.compat.tree_util import *  # noqa: F403
from ember._src.compat.tree_util import __all__  # noqa: F401
