"""JAX's small top-level names: ``make_jaxpr``, ``jacobian``, devices, ``named_call``,
``ensure_compile_time_eval``, ``checkpoint_policies``, ``custom_vmap``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ember._src import core
from ember._src.batching import BatchTrace, BatchTracer, moveaxis
from ember._src.devices import Device
from ember._src.jacobians import jacrev
from ember._src.jit import make_program
from ember._src.program import Program
from ember._src.tree import flatten, unflatten


def make_jaxpr(fun: Callable[..., Any], static_argnums: int | Sequence[int] = (),
               static_argnames: str | Sequence[str] = (),
               return_shape: bool = False) -> Callable[..., Program | tuple[Program, Any]]:
    """``make_jaxpr(f)(*args)``: ember's traced :class:`Program` (JAX's "jaxpr") of ``f`` at ``args``.

    ``str(program)`` prints it. With ``return_shape=True`` also the output
    ``ShapeDtypeStruct`` pytree (as ``jax.make_jaxpr``).
    """
    build = make_program(fun, static_argnums=static_argnums, static_argnames=static_argnames)

    @functools.wraps(fun)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        program = build(*args, **kwargs)
        if not return_shape:
            return program
        from ember._src.eval_shape import eval_shape
        return program, eval_shape(fun, *args, **kwargs)
    return wrapped


def jacobian(fun: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
             holomorphic: bool = False, allow_int: bool = False) -> Callable[..., Any]:
    """``jax.jacobian``: the Jacobian by reverse mode (same as :func:`ember.jacrev`)."""
    return jacrev(fun, argnums=argnums, has_aux=has_aux, holomorphic=holomorphic, allow_int=allow_int)


_CPU = Device()
_GPU_PLATFORMS = ("webgpu", "cuda")


def devices(backend: str | None = None) -> list[Device]:
    """The devices of ``backend`` (default the CPU; ``"webgpu"``, ``"cuda"``, or ``"all"``).

    ``None`` or ``"cpu"``: every process's host CPU device, in rank order (one per MPI process; one
    without MPI: JAX's rule, the default backend's devices); ``"webgpu"`` / ``"cuda"``: that GPU
    backend's device; ``"all"``: every device present (the CPUs first). A GPU backend that cannot
    run here raises RuntimeError saying what to install."""
    from ember._src import sharding

    if backend in (None, "cpu"):
        return sharding.all_devices()
    if backend == "all":
        gpus = [Device(0, p, p) for p in _GPU_PLATFORMS if _gpu_unavailable(p) is None]
        return sharding.all_devices() + gpus
    if backend in _GPU_PLATFORMS:
        why = _gpu_unavailable(backend)
        if why is not None:
            raise RuntimeError(f"backend {backend!r} is unavailable: {why}")
        return [Device(0, backend, backend)]
    raise RuntimeError(f"unknown backend {backend!r}; ember's backends: cpu, webgpu, cuda")


def _gpu_unavailable(platform: str) -> str | None:
    from ember._src.jit import BACKENDS

    factory = BACKENDS.get(platform)
    if factory is None:
        return "the GPU backends are not loaded"
    return factory.unavailable_reason()


def local_devices(process_index: int | None = None, backend: str | None = None) -> list[Device]:
    """The devices of this process (one CPU device)."""
    if backend not in (None, "cpu"):
        raise RuntimeError(f"ember runs on the host CPU only; unknown backend {backend!r}")
    from ember._src import sharding
    return [sharding.this_device()]


def device_count(backend: str | None = None) -> int:
    """Number of devices (one per MPI process)."""
    return len(devices(backend))


def local_device_count(backend: str | None = None) -> int:
    """Number of devices of this process (1)."""
    return len(local_devices(backend=backend))


def process_index(backend: str | None = None) -> int:
    """The index of this process (its MPI rank; 0 without MPI)."""
    from ember._src import sharding
    return sharding.process_index()


def process_count(backend: str | None = None) -> int:
    """The number of processes (under ``mpirun -n N``: N; 1 without MPI)."""
    from ember._src import sharding
    return sharding.process_count()


def named_call(fun: Callable[..., Any], *, name: str | None = None) -> Callable[..., Any]:
    """``fun`` under ``name`` for profiles; ember's programs carry no call names, so it is ``fun``."""
    @functools.wraps(fun)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return fun(*args, **kwargs)
    if name is not None:
        wrapped.__name__ = wrapped.__qualname__ = name
    return wrapped


def ensure_compile_time_eval() -> Any:
    """Context manager: operations on concrete values run eagerly, even inside ``jit``.

    Inside it, arrays that do not depend on traced arguments stay concrete (so ``int(x)`` or
    Python ``if`` on them work); operations on traced values are traced as usual.
    """
    return core.new_dynamic(None)


class custom_vmap:  # noqa: N801 - JAX's name
    """A function with its own batching rule: ``f.def_vmap(rule)``.

    ``rule(axis_size, in_batched, *args) -> (out, out_batched)``: ``args`` hold the whole batch
    (batched arguments have the mapped axis first); ``in_batched``/``out_batched`` are pytrees of
    bools matching the arguments/outputs. Outside ``vmap`` the function itself runs.
    """

    def __init__(self, fun: Callable[..., Any]):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.vmap_rule: Callable[..., Any] | None = None

    def def_vmap(self, vmap_rule: Callable[..., Any]) -> Callable[..., Any]:
        self.vmap_rule = vmap_rule
        return vmap_rule

    def __call__(self, *args: Any) -> Any:
        if self.vmap_rule is None:
            name = getattr(self.fun, "__name__", "")
            raise AttributeError(f"custom_vmap function {name} has no vmap rule: define one with @f.def_vmap")
        leaves, tree = flatten(args)
        trace = core.find_top_trace(leaves)
        if not isinstance(trace, BatchTrace):
            return self.fun(*args)
        tracers = [trace.full_raise(x) for x in leaves]
        vals = [t.val if t.batch_dim is None else moveaxis(t.val, t.batch_dim, 0) for t in tracers]
        in_batched = unflatten(tree, [t.batch_dim is not None for t in tracers])
        out, out_batched = self.vmap_rule(trace.axis_data.size, list(in_batched), *unflatten(tree, vals))
        out_leaves, out_tree = flatten(out)
        flags, _ = flatten(out_batched)
        if len(flags) == 1 and len(out_leaves) != 1:
            flags = flags * len(out_leaves)
        if len(flags) != len(out_leaves):
            raise ValueError(f"custom_vmap rule returned out_batched with {len(flags)} entries for "
                             f"{len(out_leaves)} outputs")
        return unflatten(out_tree, [core.full_lower(BatchTracer(trace, o, 0 if b else None))
                                    for o, b in zip(out_leaves, flags)])


class _Policies:
    """``jax.checkpoint_policies``: the names, accepted by ``ember.checkpoint``, which ignores them."""

    @staticmethod
    def everything_saveable(*_: Any, **__: Any) -> bool:
        return True

    @staticmethod
    def nothing_saveable(*_: Any, **__: Any) -> bool:
        return False

    dots_saveable = checkpoint_dots = everything_saveable
    dots_with_no_batch_dims_saveable = checkpoint_dots_with_no_batch_dims = everything_saveable

    @staticmethod
    def save_only_these_names(*names: str) -> Callable[..., bool]:
        return _Policies.nothing_saveable

    @staticmethod
    def save_anything_except_these_names(*names: str) -> Callable[..., bool]:
        return _Policies.everything_saveable

    save_any_names_but_these = save_anything_except_these_names

    @staticmethod
    def save_from_both_policies(p1: Callable[..., bool], p2: Callable[..., bool]) -> Callable[..., bool]:
        return lambda *a, **k: p1(*a, **k) or p2(*a, **k)


checkpoint_policies = _Policies()

__all__ = [
    "Device", "checkpoint_policies", "custom_vmap", "device_count", "devices", "ensure_compile_time_eval",
    "jacobian", "local_device_count", "local_devices", "make_jaxpr", "named_call", "process_count",
    "process_index"
]
