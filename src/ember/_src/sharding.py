"""JAX's sharding API over MPI processes: ``Mesh``, ``PartitionSpec``, ``NamedSharding``,
``SingleDeviceSharding``, ``AxisType``, ``make_mesh``, ``set_mesh``/``use_mesh``, ``device_put``
with a sharding, ``reshard`` and sharded arrays.

A mesh's devices are the MPI processes (``mpirun -n N``: N devices, device ``i`` is process ``i``;
one process without MPI: a mesh of one). A sharded array (:class:`ShardedArray`) holds this
process's shard and reports the global shape; ``jit`` over sharded arrays runs the per-process
program with the collectives the shardings imply (:mod:`ember._src.distributed.shard_trace`).
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import tree as tu
from ember._src.array import Array, asarray_eager
from ember._src.compat.api import Device
from ember._src.core import ShapedArray

# -- processes -------------------------------------------------------------------------------------

_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def _launched() -> bool:
    """Whether this process runs under an MPI launcher (or ember.distributed was initialized)."""
    from ember._src.distributed import mpi
    return bool(mpi._comm) or any(v in os.environ for v in _LAUNCH_VARS)


def process_count() -> int:
    """The number of processes (1 without an MPI launcher)."""
    if not _launched():
        return 1
    from ember._src.distributed import mpi
    return mpi.process_count()


def process_index() -> int:
    """This process's rank (0 without an MPI launcher)."""
    if not _launched():
        return 0
    from ember._src.distributed import mpi
    return mpi.process_index()


def all_devices() -> list[Device]:
    """One device per process, in rank order."""
    return [Device(id=i, process_index=i) for i in range(process_count())]


def this_device() -> Device:
    """This process's device."""
    r = process_index()
    return Device(id=r, process_index=r)


# -- meshes and specs ------------------------------------------------------------------------------


class AxisType(enum.Enum):
    """How a mesh axis is sharded (as ``jax.sharding.AxisType``).

    ember treats all three alike: shardings are explicit in the arrays and the per-process program
    follows them."""

    Auto = enum.auto()
    Explicit = enum.auto()
    Manual = enum.auto()


class PartitionSpec(tuple):
    """How each array dimension is split over mesh axes (``jax.sharding.PartitionSpec``).

    Per dimension: ``None`` (not split), a mesh axis name, or a tuple of mesh axis names (split
    over their product); ``P()`` is replicated."""

    def __new__(cls, *parts: Any) -> PartitionSpec:
        for p in parts:
            if not (p is None or isinstance(p, str) or
                    (isinstance(p, tuple) and all(isinstance(q, str) for q in p))):
                raise TypeError("PartitionSpec entries are None, a mesh axis name or a tuple of names; "
                                f"got {p!r}")
        return super().__new__(cls, parts)

    def __repr__(self) -> str:
        return f"PartitionSpec{tuple.__repr__(self)}"

    def axes(self, dim: int) -> tuple[str, ...]:
        """The mesh axes dimension ``dim`` is split over (empty: not split)."""
        if dim >= len(self) or self[dim] is None:
            return ()
        p = self[dim]
        return (p,) if isinstance(p, str) else tuple(p)


P = PartitionSpec
_MESH: list[Mesh] = []  # the meshes set by set_mesh / use_mesh, innermost last


class Mesh:
    """Devices (MPI processes) laid out on named axes (as ``jax.sharding.Mesh``).

    Also a context manager that sets it as the current mesh."""

    def __init__(self, devices: Any, axis_names: str | Sequence[str],
                 axis_types: Sequence[AxisType] | AxisType | None = None):
        names = (axis_names,) if isinstance(axis_names, str) else tuple(axis_names)
        arr = np.empty(np.shape(devices), object) if not isinstance(devices, np.ndarray) else None
        if arr is not None:
            for idx in itertools.product(*map(range, arr.shape)):
                d = devices
                for i in idx:
                    d = d[i]
                arr[idx] = d
            devices = arr
        if devices.ndim != len(names):
            raise ValueError(f"Mesh: {devices.ndim}-d devices with {len(names)} axis names {names}")
        if len(set(names)) != len(names):
            raise ValueError(f"Mesh: repeated axis name in {names}")
        self.devices = devices
        self.axis_names = names
        if axis_types is None:
            axis_types = (AxisType.Explicit,) * len(names)
        elif isinstance(axis_types, AxisType):
            axis_types = (axis_types,) * len(names)
        self.axis_types = tuple(axis_types)
        ids = sorted(d.id for d in devices.flat)
        if ids != list(range(process_count())):
            raise ValueError(f"Mesh: the devices must be every process once (ids 0..{process_count() - 1}); "
                             f"got ids {ids}")

    @property
    def shape(self) -> dict[str, int]:
        """Axis name -> size."""
        return dict(zip(self.axis_names, self.devices.shape))

    axis_sizes = property(lambda self: tuple(self.devices.shape))
    size = property(lambda self: int(self.devices.size))
    empty = property(lambda self: self.devices.size == 0)

    @property
    def local_devices(self) -> list[Device]:
        """This process's device."""
        return [this_device()]

    def coords(self, device_id: int) -> dict[str, int]:
        """The position of device ``device_id`` along each axis."""
        where = np.argwhere(np.vectorize(lambda d: d.id)(self.devices) == device_id)[0]
        return dict(zip(self.axis_names, map(int, where)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mesh) and self.axis_names == other.axis_names and \
            self.devices.shape == other.devices.shape and \
            all(a.id == b.id for a, b in zip(self.devices.flat, other.devices.flat))

    def __hash__(self) -> int:
        return hash((self.axis_names, self.devices.shape, tuple(d.id for d in self.devices.flat)))

    def __repr__(self) -> str:
        return f"Mesh({', '.join(f'{k!r}: {v}' for k, v in self.shape.items())})"

    def __enter__(self) -> Mesh:
        _MESH.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _MESH.pop()


def make_mesh(axis_shapes: Sequence[int], axis_names: Sequence[str], axis_types: Any = None, *,
              devices: Sequence[Device] | None = None) -> Mesh:
    """A mesh of ``axis_shapes`` over the processes (``jax.make_mesh``).

    The product of the shapes must be the number of processes."""
    devs = list(devices) if devices is not None else all_devices()
    shape = tuple(int(s) for s in axis_shapes)
    if math.prod(shape) != len(devs):
        raise ValueError(f"make_mesh: axis_shapes {shape} need {math.prod(shape)} devices; there are "
                         f"{len(devs)} (one per process)")
    arr = np.empty(len(devs), object)
    arr[:] = devs
    return Mesh(arr.reshape(shape), tuple(axis_names), axis_types)


@contextlib.contextmanager
def use_mesh(mesh: Mesh) -> Iterator[Mesh]:
    """Set ``mesh`` as the current mesh inside a ``with`` block."""
    _MESH.append(mesh)
    try:
        yield mesh
    finally:
        _MESH.pop()


set_mesh = use_mesh


def get_mesh() -> Mesh | None:
    """The current mesh (``set_mesh``/``use_mesh``), or None."""
    return _MESH[-1] if _MESH else None


get_abstract_mesh = get_mesh

# -- shardings -------------------------------------------------------------------------------------


class Sharding:
    """How a global array is laid out over the devices."""

    def devices_indices_map(self, global_shape: tuple) -> dict[Device, tuple]:
        raise NotImplementedError

    def shard_shape(self, global_shape: tuple) -> tuple:
        """The shape of one shard of an array of ``global_shape``."""
        idx = self.devices_indices_map(tuple(global_shape))[self._devices[0]]
        return tuple(len(range(*s.indices(n))) for s, n in zip(idx, global_shape))

    @property
    def device_set(self) -> set[Device]:
        return set(self._devices)

    @property
    def addressable_devices(self) -> set[Device]:
        return {d for d in self._devices if d.process_index == process_index()}

    @property
    def num_devices(self) -> int:
        return len(self._devices)

    @property
    def is_fully_addressable(self) -> bool:
        return len(self.addressable_devices) == len(self._devices)


class SingleDeviceSharding(Sharding):
    """The whole array on one device (``jax.sharding.SingleDeviceSharding``)."""

    def __init__(self, device: Device | None = None, *, memory_kind: str | None = None):
        self.device = device if device is not None else this_device()
        self._devices = [self.device]
        self.memory_kind = memory_kind

    def devices_indices_map(self, global_shape: tuple) -> dict[Device, tuple]:
        return {self.device: (slice(None),) * len(global_shape)}

    is_fully_replicated = True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SingleDeviceSharding) and other.device == self.device

    def __hash__(self) -> int:
        return hash(self.device)

    def __repr__(self) -> str:
        return f"SingleDeviceSharding(device={self.device!r})"


class NamedSharding(Sharding):
    """An array split over mesh axes by a :class:`PartitionSpec` (``jax.sharding.NamedSharding``)."""

    def __init__(self, mesh: Mesh, spec: PartitionSpec | None = None, *, memory_kind: str | None = None):
        spec = PartitionSpec() if spec is None else spec
        if not isinstance(spec, PartitionSpec):
            spec = PartitionSpec(*spec)
        used = [a for i in range(len(spec)) for a in spec.axes(i)]
        for a in used:
            if a not in mesh.axis_names:
                raise ValueError(f"NamedSharding: {spec} names axis {a!r}, not an axis of {mesh}")
        if len(set(used)) != len(used):
            raise ValueError(f"NamedSharding: {spec} uses a mesh axis twice")
        self.mesh, self.spec, self.memory_kind = mesh, spec, memory_kind
        self._devices = list(mesh.devices.flat)

    def parts(self, dim: int) -> int:
        """Into how many parts dimension ``dim`` is split."""
        return math.prod(self.mesh.shape[a] for a in self.spec.axes(dim))

    def part_index(self, dim: int, device_id: int) -> int:
        """Which part of dimension ``dim`` device ``device_id`` holds (row-major over the axes)."""
        c = self.mesh.coords(device_id)
        k = 0
        for a in self.spec.axes(dim):
            k = k * self.mesh.shape[a] + c[a]
        return k

    def check_shape(self, global_shape: tuple) -> None:
        if len(self.spec) > len(global_shape):
            raise ValueError(f"{self.spec} has {len(self.spec)} entries for an array of rank "
                             f"{len(global_shape)}")
        for d, n in enumerate(global_shape):
            k = self.parts(d)
            if n % k:
                raise ValueError(f"sharding {self.spec}: dimension {d} of size {n} does not split into {k} "
                                 "equal parts (ember needs equal shards)")

    def index(self, global_shape: tuple, device_id: int) -> tuple[slice, ...]:
        """The slices of the global array that device ``device_id`` holds."""
        self.check_shape(global_shape)
        out = []
        for d, n in enumerate(global_shape):
            k = self.parts(d)
            b = n // k
            i = self.part_index(d, device_id) if k > 1 else 0
            out.append(slice(i * b, (i + 1) * b) if k > 1 else slice(None))
        return tuple(out)

    def devices_indices_map(self, global_shape: tuple) -> dict[Device, tuple]:
        return {d: self.index(tuple(global_shape), d.id) for d in self._devices}

    def shard_shape(self, global_shape: tuple) -> tuple:
        self.check_shape(tuple(global_shape))
        return tuple(n // self.parts(d) for d, n in enumerate(global_shape))

    @property
    def is_fully_replicated(self) -> bool:
        return all(self.parts(d) == 1 for d in range(len(self.spec)))

    def with_spec(self, spec: PartitionSpec) -> NamedSharding:
        return NamedSharding(self.mesh, spec)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NamedSharding) and self.mesh == other.mesh and \
            _trimmed(self.spec) == _trimmed(other.spec)

    def __hash__(self) -> int:
        return hash((self.mesh, _trimmed(self.spec)))

    def __repr__(self) -> str:
        return f"NamedSharding(mesh={self.mesh!r}, spec={self.spec!r})"


def _trimmed(spec: PartitionSpec) -> tuple:
    parts = [tuple(spec.axes(i)) or None for i in range(len(spec))]
    while parts and parts[-1] is None:
        parts.pop()
    return tuple(parts)


# -- sharded arrays --------------------------------------------------------------------------------


class Shard:
    """One shard of an array: its device, its index into the global array and its data."""

    def __init__(self, device: Device, index: tuple, data: Array):
        self.device, self.index, self.data = device, index, data
        self.replica_id = 0

    def __repr__(self) -> str:
        return f"Shard(device={self.device!r}, index={self.index}, data={self.data!r})"


class ShardedArray(Array):
    """A global array of which this process holds one shard (``_value``) under ``sharding``.

    ``shape`` is the global shape. Operations on it, eager or under ``jit``, run per process with
    the collectives the sharding implies; ``np.asarray`` of it is this process's view of the global
    array only when it is fully replicated (otherwise gather it with ``reshard(x, P())``)."""

    __slots__ = ("_sharding", "_gshape")
    _sharded = True

    def __init__(self, local: np.ndarray, sharding: NamedSharding, global_shape: tuple,
                 weak_type: bool = False):
        super().__init__(local, weak_type)
        self._sharding, self._gshape = sharding, tuple(global_shape)

    @property
    def aval(self) -> ShapedArray:
        return ShapedArray(self._gshape, self.value.dtype, self._weak)

    shape = property(lambda self: self._gshape)
    ndim = property(lambda self: len(self._gshape))
    size = property(lambda self: math.prod(self._gshape))
    nbytes = property(lambda self: math.prod(self._gshape) * self.value.itemsize)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if not self._sharding.is_fully_replicated:
            raise ValueError(f"an array sharded as {self._sharding.spec} spans processes; gather it first "
                             "with ember.sharding.reshard(x, NamedSharding(mesh, P())) or read "
                             "x.addressable_shards")
        return super().__array__(dtype, copy)

    def __repr__(self) -> str:
        if self._sharding.is_fully_replicated:
            return super().__repr__()
        return f"ShardedArray(shape={self._gshape}, dtype={self.dtype}, sharding={self._sharding!r})"

    def __reduce__(self) -> Any:
        raise TypeError("a sharded array cannot be pickled; gather it first")


def local_value(x: Any) -> np.ndarray:
    """This process's shard of ``x`` as NumPy."""
    return x.value if isinstance(x, Array) else np.asarray(x)


def sharding_of(x: Any) -> Sharding:
    """The sharding of an ember array (``Array.sharding``)."""
    if isinstance(x, ShardedArray):
        return x._sharding
    return SingleDeviceSharding()


def addressable_shards(x: Any) -> list[Shard]:
    """This process's shards of ``x`` (one)."""
    s = sharding_of(x)
    if isinstance(x, ShardedArray):
        idx = s.index(x.shape, process_index())
        return [Shard(this_device(), idx, Array(x.value, x.weak_type))]
    return [Shard(this_device(), (slice(None),) * np.ndim(x.value), x)]


def _array_devices(x: Any) -> set[Device]:
    return sharding_of(x).device_set


def _place(x: Any, sharding: NamedSharding) -> ShardedArray:
    """``x`` (a whole array, the same on every process) as this process's shard under ``sharding``."""
    if isinstance(x, ShardedArray):
        return _reshard_one(x, sharding)
    a = asarray_eager(x)
    v = a.value
    idx = sharding.index(v.shape, process_index())
    return ShardedArray(np.ascontiguousarray(v[idx]), sharding, v.shape, a.weak_type)


def _reshard_one(x: ShardedArray, sharding: NamedSharding) -> ShardedArray:
    if x._sharding == sharding:
        return x
    from ember._src.distributed import shard_trace as st
    whole = st.gather_global(x.value, x._sharding, x.shape)
    return _place(Array(np.ascontiguousarray(whole), x.weak_type), sharding)


def device_put(x: Any, device: Any = None, *, src: Any = None, donate: bool = False,
               may_alias: bool | None = None) -> Any:
    """Every leaf of ``x`` as an ember array, placed by a sharding or on this process's host.

    With a :class:`NamedSharding` (or a pytree of them): this process's shard (``x`` holds the
    whole array on every process, as a NumPy array or a replicated array); with None or the CPU:
    on this process's host; with a GPU device (``"webgpu:0"``, ``"cuda:0"``): a device array."""
    if isinstance(device, NamedSharding):
        return tu.tree_map(lambda a: _place(a, device), x)
    if device is not None and not isinstance(device, (Device, SingleDeviceSharding, str)):
        return tu.tree_map(lambda a, s: device_put(a, s), x, device)  # a pytree of shardings
    from ember._src.api_util import device_put as plain
    return plain(x, None if isinstance(device, SingleDeviceSharding) else device)


def reshard(x: Any, out_shardings: Any) -> Any:
    """``x`` laid out under ``out_shardings``, moving data between processes as needed.

    ``out_shardings``: a :class:`NamedSharding`, or a :class:`PartitionSpec` on the current mesh."""
    def one(a: Any) -> Any:
        s = out_shardings
        if isinstance(s, PartitionSpec):
            mesh = get_mesh() or (a._sharding.mesh if isinstance(a, ShardedArray) else None)
            if mesh is None:
                raise ValueError("reshard: a PartitionSpec needs a current mesh (set_mesh) or a sharded "
                                 "input")
            s = NamedSharding(mesh, s)
        if isinstance(a, core.Tracer):
            from ember._src.distributed import shard_trace as st
            return st.reshard_traced(a, s)
        return _place(a, s)
    return tu.tree_map(one, x)


def _install() -> None:
    """Attach ``sharding``, ``addressable_shards``, ``devices()`` and friends to ember arrays."""
    Array.sharding = property(sharding_of)
    Array.addressable_shards = property(addressable_shards)
    Array.global_shards = property(addressable_shards)
    Array.is_fully_addressable = property(lambda self: sharding_of(self).is_fully_addressable)
    Array.is_fully_replicated = property(lambda self: sharding_of(self).is_fully_replicated)
    Array.addressable_data = lambda self, i: addressable_shards(self)[i].data
    if not hasattr(Array, "devices"):
        Array.devices = lambda self: sharding_of(self).device_set


_install()


def _install_hooks() -> None:
    """Route eager operations and ``jit`` calls on sharded arrays to the per-process program."""
    from ember._src import jit as jit_mod
    from ember._src.distributed import shard_trace as st
    if not core.sharded_eager_hook:
        core.sharded_eager_hook.append(st.eager_apply)
    if not jit_mod.sharded_call_hook:
        jit_mod.sharded_call_hook.append(st.jit_call)


_install_hooks()
