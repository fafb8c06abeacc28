"""``ember.numpy``: the NumPy API on ember arrays (works eagerly, under jit and transformations)."""

from ember._src.numpy.ufuncs import *  # noqa: F403
from ember._src.numpy.ufuncs import asarray  # noqa: F401
