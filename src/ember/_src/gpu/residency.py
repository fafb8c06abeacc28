"""Where calls on device arrays run: ``jit`` follows its inputs' device, eager ops run there too.

- **jit** (``jit.device_call_hook``): a call with a :class:`~.device_array.DeviceArray` among its
  inputs, or with no device input inside ``ember.default_device(gpu)``, runs on that device with
  the device buffers read in place, and its outputs stay there (JAX's rule). Host arrays among the
  inputs are copied to the device; inputs on two different devices are a ValueError naming both.
  An explicit ``jit(f, backend=...)`` wins: a GPU backend runs there (inputs on another device are
  copied through the host), a CPU backend (``"native"``, ``"numpy"``) gets host copies and returns
  host arrays.
- **Eager ops** (``core.device_eager_hook``): a primitive applied to device arrays outside any
  trace runs on their device as ``jit`` of that one primitive (one executable per primitive,
  parameters and operand types, cached), so its result stays on the device too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import core, devices
from ember._src import tree as tu
from ember._src.array import Array
from ember._src.devices import Device
from ember._src.gpu.device_array import DeviceArray
from ember._src.jit import _LIVE_JITS, JitFunction

GPU_BACKENDS = ("webgpu", "cuda")

# platform -> (put(np_value, weak) -> DeviceArray, handle type); filled by __init__
RUNTIMES: dict[str, tuple[Callable, type]] = {}


def _leaf_device(leaves: list, label: str) -> Device | None:
    """The one GPU device among ``leaves`` (None: all on the host); two devices are an error."""
    found: Device | None = None
    for x in leaves:
        d = devices.on_device(x)
        if d is not None and found is not None and d != found:
            raise ValueError(f"{label}: arguments live on different devices, {found} and {d}; put them on "
                             "one device first (ember.device_put(x, device))")
        found = found or d
    return found


def _to_host(x: Any) -> Any:
    if devices.on_device(x) is None:
        return x
    return Array(x.value, x.weak_type)


def _arg_for(x: Any, platform: str) -> Any:
    """A leaf as the executable of ``platform`` takes it: its handle when it lives there, else
    a host value (the executable copies it to the device)."""
    if devices.on_device(x) is not None:
        if x.device.platform == platform:
            return x.handle
        return x.value  # another device: through the host
    return core.concrete_or_error(x, "a jit argument") if not isinstance(x, np.ndarray) else x


def jit_call(jf: Any, args: tuple, kwargs: dict, leaves: list) -> Any:
    """Run ``jit`` function ``jf`` on the device its inputs live on (or the default device)."""
    dev = _leaf_device(leaves, jf._label) or devices.default_device_now()
    backend = jf.backend or (dev.platform if dev is not None else None)
    if backend not in GPU_BACKENDS:  # an explicit CPU backend: host copies in, host arrays out
        host_args, host_kw = tu.tree_map(_to_host, (args, kwargs))
        return jf._call(host_args, host_kw, route=False)
    inner = jf.__dict__.setdefault("_device_jits", {}).get(backend)
    if inner is None:
        inner = jf._device_jits[backend] = JitFunction(
            jf.fun, jf.static_argnums, jf.static_argnames, backend,
            dynamic_axes=getattr(jf, "dynamic_axes", None), **jf.options)
    c = inner.lower(*args, **kwargs)
    exe = c.executable
    flat = inner._flatten(args, kwargs)[0]
    out_avals = c.out_avals
    if c.symbolic:  # named dynamic axes: bind them from the leaves' shapes (no copy of a device array)
        spec = exe.specialization(exe.env_from_shapes([np.shape(x) for x in flat]))
        exe, out_avals = spec.run, spec.out_avals
    run = getattr(exe, "run_device", None)
    if run is None:  # a host-fallback program: its segments copy between host and device anyway
        outs = exe([np.asarray(x) for x in flat])
        put = RUNTIMES[backend][0]
        arrays = [put(np.asarray(o, a.dtype), a.weak_type) for o, a in zip(outs, out_avals)]
    else:
        handles = run([_arg_for(x, backend) for x in flat])
        arrays = [DeviceArray(h, a) for h, a in zip(handles, out_avals)]
    return tu.unflatten(c.out_tree, arrays)


_EAGER: dict[tuple, Any] = {}
_EAGER_MAX = 512


def eager_apply(prim: core.Primitive, args: list, params: dict) -> list:
    """Apply ``prim`` to concrete arrays among which are device arrays, on their device: ``jit``
    of the one primitive, cached by primitive, parameters and operand types."""
    dev = _leaf_device(args, prim.name)
    key = None
    if all(core._plain(v) for v in params.values()):
        key = (prim, dev, tuple((a.aval.dtype, a.aval.shape, a.aval.weak_type) for a in args),
               tuple((k, type(v), v) for k, v in params.items()))
    jf = _EAGER.get(key) if key is not None else None
    if jf is None:
        def one(*xs: Any) -> Any:
            out = prim.bind(*xs, **params)
            return list(out) if prim.multiple_results else out
        jf = JitFunction(one, backend=dev.platform)
        if key is not None:
            if len(_EAGER) >= _EAGER_MAX:
                _EAGER.clear()
            _EAGER[key] = jf
    out = jit_call(jf, tuple(args), {}, list(args))
    return list(out) if prim.multiple_results else [out]


def park_dispatchers(active: bool) -> None:
    """While a GPU default device is in effect, warm calls must not run on the CPU in the C
    dispatcher: ``jit``'s ``CallSlot`` finds no dispatcher (parked here) until the last block ends
    (a ``devices.GPU_DEFAULT_WATCHERS`` callback)."""
    for f in list(_LIVE_JITS):
        if active:
            f._parked, f._dispatch = f._dispatch, None
        elif f._dispatch is None:
            f._dispatch = f.__dict__.pop("_parked", None)


def clear() -> None:
    """Drop the cached executables of eager device ops (``ember.clear_caches``)."""
    _EAGER.clear()


def device_put(x: np.ndarray, device: Device, weak_type: bool = False) -> DeviceArray:
    """A host value on ``device`` (through the runtime registered for its platform)."""
    return RUNTIMES[device.platform][0](x, weak_type)
