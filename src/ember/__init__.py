"""ember: NumPy-like arrays, composable transformations, and a native compiler with named
dynamic axes and planned memory."""

from ember import errors, tree
from ember._src import collectives as _collectives  # noqa: F401  (declares the collective primitives)
from ember._src import gpu as _gpu  # noqa: F401  (registers the "webgpu" and "cuda" backends)
from ember._src import native as _native  # noqa: F401  (registers the "native" backend)
from ember._src import prims as _prims  # noqa: F401  (declares every primitive)
from ember._src.array import Array, check_leaks, memory_stats
from ember._src.batching import vmap
from ember._src.core import ShapedArray
from ember._src.debug import set_debug
from ember._src.dynamic import dimension_as_value
from ember._src.eval_shape import ShapeDtypeStruct, eval_shape
from ember._src.jit import clear_caches, default_backend, jit, make_program, pmap, set_default_backend
from ember._src.numpy import array_methods as _array_methods
from ember._src.program import Program
from ember._src.validation import set_validation

_array_methods.attach_all()

from ember import lax, nn  # noqa: E402
from ember import numpy as numpy  # noqa: E402

__version__ = "0.1.0"

__all__ = ["Array", "Program", "ShapeDtypeStruct", "ShapedArray", "check_leaks", "errors", "eval_shape",
           "jit", "lax", "make_program", "memory_stats", "nn", "numpy", "tree", "vmap"]

from ember._src.api_util import block_until_ready, device_get, device_put  # noqa: E402
from ember._src.devices import default_device  # noqa: E402

__all__ += ["block_until_ready", "default_device", "device_get", "device_put", "pmap"]
__all__ += ["clear_caches", "default_backend", "dimension_as_value", "set_debug", "set_default_backend",
            "set_validation"]

from ember._src.ad import (  # noqa: E402
           grad,
           jvp,
           linear_transpose,
           linearize,
           value_and_grad,
           vjp,
)
from ember._src.custom_derivatives import checkpoint, custom_jvp, custom_vjp, remat  # noqa: E402
from ember._src.jacobians import hessian, jacfwd, jacrev  # noqa: E402
from ember._src.prims.misc import stop_gradient  # noqa: E402

__all__ += ["checkpoint", "custom_jvp", "custom_vjp", "grad", "hessian", "jacfwd", "jacrev", "jvp",
            "linear_transpose", "linearize", "remat", "stop_gradient", "value_and_grad", "vjp"]

import ember.lax.linalg  # noqa: E402
import ember.numpy.fft  # noqa: E402
import ember.numpy.linalg  # noqa: E402, F401
from ember import fft, linalg, random, scipy  # noqa: E402

__all__ += ["fft", "linalg", "random", "scipy"]

from ember import flatten_util, tree_util  # noqa: E402

__all__ += ["flatten_util", "tree_util"]

from ember import example_libraries, optim  # noqa: E402

__all__ += ["example_libraries", "optim"]

from ember import custom_batching, ops, typing  # noqa: E402
from ember._src.compat.api import (  # noqa: E402
    checkpoint_policies,
    device_count,
    devices,
    ensure_compile_time_eval,
    jacobian,
    local_device_count,
    local_devices,
    make_jaxpr,
    named_call,
    process_count,
    process_index,
)
from ember._src.compat.config import config, default_matmul_precision  # noqa: E402

__all__ += ["checkpoint_policies", "config", "custom_batching", "default_matmul_precision", "device_count",
            "devices", "ensure_compile_time_eval", "jacobian", "local_device_count", "local_devices",
            "make_jaxpr", "named_call", "ops", "process_count", "process_index", "typing"]

from ember import experimental  # noqa: E402

__all__ += ["experimental"]

from ember import image  # noqa: E402

__all__ += ["image"]

from ember._src.compat.callbacks import pure_callback  # noqa: E402

__all__ += ["pure_callback"]
from ember import debug  # noqa: E402

__all__ += ["debug"]
from ember._src.session import InferenceSession  # noqa: E402

__all__ += ["InferenceSession"]
from ember import vsla  # noqa: E402, F401

__all__ += ["NamedSharding", "P", "make_mesh", "set_mesh", "shard_map", "sharding", "use_mesh"]
from ember import sharding  # noqa: E402
from ember._src.sharding import device_put  # noqa: E402, F811  (device_put with a sharding)
from ember.sharding import NamedSharding, P, make_mesh, set_mesh, shard_map, use_mesh  # noqa: E402
