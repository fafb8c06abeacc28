"""``ember.numpy``: the NumPy API on ember arrays (works eagerly, under jit and transformations).

Each ``ember._src.numpy`` module lists its public names in ``__all__``.
"""

from ember._src.array import Array as ndarray
from ember._src.numpy.array_api import __array_api_version__, __array_namespace_info__
from ember._src.numpy.bit_packing import *
from ember._src.numpy.contractions import *
from ember._src.numpy.creation import *
from ember._src.numpy.creation import asarray as _placing_asarray
from ember._src.numpy.diagonals import *
from ember._src.numpy.dtype_functions import *
from ember._src.numpy.einsum_path import *
from ember._src.numpy.extras import *
from ember._src.numpy.histograms import *
from ember._src.numpy.indexing import *
from ember._src.numpy.manipulation import *
from ember._src.numpy.more_ufuncs import *
from ember._src.numpy.padding import *
from ember._src.numpy.polynomial import *
from ember._src.numpy.reductions import *
from ember._src.numpy.scalar_types import (
    bfloat16,
    bool_,
    character,
    complex64,
    complex128,
    complexfloating,
    flexible,
    float16,
    float32,
    float64,
    floating,
    generic,
    inexact,
    int8,
    int16,
    int32,
    int64,
    integer,
    number,
    signedinteger,
    uint8,
    uint16,
    uint32,
    uint64,
    unsignedinteger,
)
from ember._src.numpy.searching import *
from ember._src.numpy.statistics import *
from ember._src.numpy.ufuncs import *

bool = bool_  # noqa: A001
asarray = _placing_asarray  # ufuncs.asarray that also places (device=, ember.default_device)
pi, e, inf, nan, newaxis = 3.141592653589793, 2.718281828459045, float("inf"), float("nan"), None
euler_gamma = 0.5772156649015329
from ember._src.compat.vectorize import vectorize  # noqa: E402, F401

# last: the functions that refuse lists as JAX's do, in place of the unchecked ones imported above
from ember._src.numpy.arraylike import *  # noqa: E402, F403
