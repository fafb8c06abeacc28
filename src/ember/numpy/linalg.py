"""``ember.numpy.linalg``: NumPy's linear algebra (batched over leading dimensions)."""

from ember._src.numpy.linalg_functions import *  # noqa: F403
from ember._src.numpy.linalg_functions import __all__ as _fn_all
from ember._src.numpy.linalg_tensor import tensorinv

__all__ = [*_fn_all, "tensorinv"]
