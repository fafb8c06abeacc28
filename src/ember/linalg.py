"""``ember.linalg``: the same functions as ``ember.numpy.linalg``, plus ``lu`` and
``triangular_solve`` (SciPy-style ``lu`` lives in ``ember.scipy.linalg``)."""

from ember._src.numpy.linalg_functions import *  # noqa: F403
from ember._src.numpy.linalg_functions import __all__ as _np_all
from ember._src.numpy.linalg_tensor import tensorinv
from ember._src.prims.linalg import triangular_solve
from ember.scipy.linalg import lu, lu_factor, lu_solve, solve_triangular

__all__ = [*_np_all, "tensorinv", "lu", "lu_factor", "lu_solve", "solve_triangular", "triangular_solve"]
