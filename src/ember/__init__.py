"""ember: NumPy-like arrays, composable transformations, and a native compiler with named
dynamic axes and planned memory."""

from ember import errors, tree
from ember._src import prims as _prims  # noqa: F401  (declares every primitive)
from ember._src.array import Array, check_leaks, memory_stats
from ember._src.batching import vmap
from ember._src.core import ShapedArray
from ember._src.eval_shape import ShapeDtypeStruct, eval_shape
from ember._src.jit import jit, make_program
from ember._src.numpy import array_methods as _array_methods
from ember._src.program import Program

_array_methods.attach_all()

from ember import lax, nn  # noqa: E402
from ember import numpy as numpy  # noqa: E402

__version__ = "0.1.0"

__all__ = ["Array", "Program", "ShapeDtypeStruct", "ShapedArray", "check_leaks", "errors", "eval_shape", "jit",
           "lax", "make_program", "memory_stats", "nn", "numpy", "tree", "vmap"]
