"""The WebGPU runtime (through the ``wgpu`` package, wgpu-native inside its wheel).

One device per process (the first adapter, high-performance preferred; on a machine without a GPU,
Mesa's software Vulkan driver ``llvmpipe``/lavapipe). A :class:`.pool.WebGPUPool` of storage buffers in
power-of-two size classes is reused across calls; compute pipelines are cached by the SHA-256 of
their WGSL source; every dispatch of one call and the copies of its outputs are encoded into one
command buffer and submitted with one ``queue.submit``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from typing import Any

import numpy as np

from ember._src.core import ShapedArray
from ember._src.devices import Device
from ember._src.gpu import kernels, segments, symbolic
from ember._src.gpu.device_array import DeviceArray
from ember._src.gpu.pool import WebGPUPool
from ember._src.gpu.render import compile_error
from ember._src.gpu.wgsl import WGSLRenderer
from ember._src.program import Program

INSTALL = ("install the 'wgpu' Python package (pip install 'ember[gpu]') and a Vulkan driver "
           "(Debian/Ubuntu without a GPU: apt-get install mesa-vulkan-drivers libvulkan1)")

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
DEVICE = Device(0, "webgpu", "webgpu")
TRANSFERS = {"host_to_device": 0, "device_to_host": 0, "host_to_device_bytes": 0, "device_to_host_bytes": 0}
"""Copies between the host and the device since the process started (what residency saves)."""


class DeviceUnavailable(RuntimeError):
    """No WebGPU adapter here (the message says what to install)."""


def _open() -> Any:
    if "device" in _STATE:
        return _STATE["device"]
    if "error" in _STATE:
        raise DeviceUnavailable(_STATE["error"])
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())  # wgpu-native warns without one
    try:
        import wgpu
    except ImportError as e:
        _STATE["error"] = f"webgpu: the wgpu package is not importable ({e}); {INSTALL}"
        raise DeviceUnavailable(_STATE["error"]) from None
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as e:  # wgpu raises its own errors when no driver loads
        adapter, why = None, str(e)
    else:
        why = "no adapter"
    if adapter is None:
        _STATE["error"] = f"webgpu: no WebGPU adapter found ({why}); {INSTALL}"
        raise DeviceUnavailable(_STATE["error"])
    names = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size")
    features = ["shader-f16"] if "shader-f16" in adapter.features else []  # float16 storage and math
    dev = adapter.request_device_sync(required_features=features,
                                      required_limits={n: adapter.limits[n] for n in names})
    _STATE.update(device=dev, adapter=adapter, wgpu=wgpu, pool=WebGPUPool(dev, wgpu, str(DEVICE)),
                  pipelines={}, f16=bool(features))
    return dev


def unavailable_reason() -> str | None:
    """Why WebGPU cannot run here (naming what to install), or None."""
    with _LOCK:
        try:
            _open()
        except DeviceUnavailable as e:
            return str(e)
    return None


def adapter_info() -> dict:
    """The adapter's description (``device``, ``adapter_type``, ``backend_type``, ...)."""
    with _LOCK:
        _open()
        return dict(_STATE["adapter"].info)


def renderer() -> WGSLRenderer:
    """The WGSL renderer for this device (float16 where the adapter has ``shader-f16``); the caller
    holds the lock and has opened the device."""
    info = _STATE["adapter"].info
    return WGSLRenderer(f16=_STATE["f16"], adapter=f"the adapter '{info.get('device', '?')}'")


def nbytes(n: int, dtype: np.dtype) -> int:
    """The bytes ``n`` elements of ``dtype`` take in a storage buffer: 4 an element (bool as u32),
    2 for float16, rounded up to a multiple of 4 (WebGPU's copies and bindings need it)."""
    size = 2 if np.dtype(dtype) == np.float16 else 4
    return -(-n * size // 4) * 4


def _pipeline(source: str) -> Any:
    key = hashlib.sha256(source.encode()).hexdigest()
    cache = _STATE["pipelines"]
    p = cache.get(key)
    if p is None:
        dev = _STATE["device"]
        try:
            module = dev.create_shader_module(code=source)
            p = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        except Exception as e:
            path = os.path.join(tempfile.gettempdir(), f"ember-wgsl-{key[:16]}.wgsl")
            with open(path, "w") as f:
                f.write(source)
            raise compile_error("webgpu", path, str(e)) from None
        cache[key] = p
    return p


def _storage(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    a = np.asarray(a, dtype=dtype)
    if np.dtype(dtype) == np.float16 and a.size % 2:  # a whole number of 4-byte words
        a = np.concatenate([a.ravel(), np.zeros(1, np.float16)])
    return np.ascontiguousarray(a.astype(np.uint32) if dtype == np.bool_ else a)


def _raw_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.uint32) if np.dtype(dtype) == np.bool_ else np.dtype(dtype)


class WebGPUBuffer:
    """A pooled storage buffer a device array holds; back to the pool when the last holder dies."""

    __slots__ = ("buffer", "pool", "__weakref__")
    device = DEVICE

    def __init__(self, buffer: Any, pool: WebGPUPool):
        self.buffer, self.pool = buffer, pool

    def __del__(self) -> None:
        self.pool.give_back(self.buffer)  # no lock: the pool drains the queue at its next use

    def download(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """The buffer's first ``prod(shape)`` elements on the host (one transfer)."""
        with _LOCK:
            n = int(np.prod(shape, dtype=np.int64))
            if n == 0:
                return np.zeros(shape, dtype)
            raw = _read_back(self.buffer, n, dtype)
        return (raw != 0).reshape(shape) if np.dtype(dtype) == np.bool_ else raw.reshape(shape)

    def sync(self) -> None:
        """Wait until the device work queued so far is done (a 4-byte read that is not counted)."""
        with _LOCK:
            _read_back(self.buffer, 1, np.dtype(np.uint32), count=False)


def _read_back(buf: Any, n: int, dtype: np.dtype, count: bool = True) -> np.ndarray:
    """``n`` elements of ``buf`` through a staging buffer (the caller holds the lock)."""
    dev, pool, wgpu = _STATE["device"], _STATE["pool"], _STATE["wgpu"]
    size = nbytes(n, dtype)
    st = pool.acquire(size, staging=True)
    enc = dev.create_command_encoder()
    enc.copy_buffer_to_buffer(buf, 0, st, 0, size)
    dev.queue.submit([enc.finish()])
    raw = _map_read(st, n, dtype, wgpu)
    pool.release(st)
    if count:
        TRANSFERS["device_to_host"] += 1
        TRANSFERS["device_to_host_bytes"] += size
    return raw


def _map_read(st: Any, n: int, dtype: np.dtype, wgpu: Any) -> np.ndarray:
    st.map_sync(wgpu.MapMode.READ)
    data = st.read_mapped(0, nbytes(n, dtype), copy=True)
    st.unmap()
    return np.frombuffer(data, dtype=_raw_dtype(dtype), count=n).copy()


def _upload(a: Any, dtype: np.dtype, nelem: int) -> Any:
    """A pool buffer holding ``a`` (the caller holds the lock; counted as a transfer)."""
    dev, pool = _STATE["device"], _STATE["pool"]
    buf = pool.acquire(nbytes(nelem, dtype))
    data = _storage(a, dtype)
    if data.nbytes:
        dev.queue.write_buffer(buf, 0, data)
        TRANSFERS["host_to_device"] += 1
        TRANSFERS["host_to_device_bytes"] += data.nbytes
    return buf


def put(value: np.ndarray, weak_type: bool = False) -> DeviceArray:
    """``value`` copied into a device buffer, as a :class:`DeviceArray` on ``webgpu:0``."""
    value = np.asarray(value)
    with _LOCK:
        _open()
        renderer().check_dtype(value.dtype, "an array put on webgpu:0")
        buf = _upload(value, value.dtype, value.size)
        handle = WebGPUBuffer(buf, _STATE["pool"])
    return DeviceArray(handle, ShapedArray(value.shape, value.dtype, weak_type))


def memory_stats() -> dict[str, int]:
    """The buffer pool's figures (:meth:`.pool.Pool.stats`)."""
    with _LOCK:
        _open()
        return _STATE["pool"].stats()


def pool() -> WebGPUPool:
    """The device's buffer pool (opens the device)."""
    with _LOCK:
        _open()
        return _STATE["pool"]


def sizes_uniform(cache: dict, axes: tuple[str, ...], env: dict) -> Any:
    """The uniform buffer of the axis values of ``env`` (kept in ``cache`` per binding, at most
    64; the caller holds the lock). A kernel that reads a size binds it after its storage buffers."""
    key = tuple(int(env[a]) for a in axes)
    buf = cache.get(key)
    if buf is None:
        dev, wgpu = _STATE["device"], _STATE["wgpu"]
        if len(cache) >= 64:
            cache.clear()
        data = np.zeros(max(4, -(-len(key) // 4) * 4), np.int32)
        data[:len(key)] = key
        buf = cache[key] = dev.create_buffer(size=data.nbytes,
                                             usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        dev.queue.write_buffer(buf, 0, data)
    return buf


class WebGPUExecutable:
    """A program's kernels on the WebGPU device: ``run(list of arrays) -> list of arrays``;
    :meth:`run_device` takes and returns device buffers.

    With ``axes`` (a symbolic program's named dynamic axes) the kernels are compiled once for every
    binding: a call takes the binding ``env``, its buffer sizes and launch grids are evaluated from
    it, and the axis values reach the kernels in a small uniform buffer."""

    def __init__(self, prog: Program, axes: tuple[str, ...] = ()):
        with _LOCK:
            _open()
            lang = renderer()
        self.schedule = kernels.schedule(prog, lang, axes)
        self.source = "\n".join(f"// kernel {k.name}: grid {k.grid}\n{k.source}"
                                for k in self.schedule.kernels)
        self.out_avals = prog.out_avals
        self.in_avals = prog.in_avals
        with _LOCK:
            _open()
            self.pipelines = [_pipeline(k.source) for k in self.schedule.kernels]
        self._consts: dict[int, Any] = {}
        self._size_bufs: dict[tuple, Any] = {}  # axis values -> their uniform buffer

    def __call__(self, args: list, env: dict | None = None) -> list:
        """Host arrays in, host arrays out (the inputs copied to the device, the outputs back)."""
        with _LOCK:
            return self._run(args, resident=False, env=env or {})

    def run_device(self, args: list, env: dict | None = None) -> list:
        """Arguments that are :class:`WebGPUBuffer` handles are read in place (others are copied
        to the device); the outputs are new handles, left on the device."""
        with _LOCK:
            return self._run(args, resident=True, env=env or {})

    def _sizes_buffer(self, env: dict) -> Any:
        return sizes_uniform(self._size_bufs, self.schedule.axes, env)

    def _run(self, args: list, resident: bool, env: dict) -> list:
        dev, pool, wgpu = _STATE["device"], _STATE["pool"], _STATE["wgpu"]
        sch = self.schedule
        sizes = sch.sizes(env)
        bufs: dict[int, Any] = {}
        taken = []  # pool buffers this call acquired
        for i, a in zip(sch.inputs, args):
            if i is None:
                continue
            if isinstance(a, WebGPUBuffer):
                bufs[i] = a.buffer
            else:
                bufs[i] = _upload(a, sch.buffers[i].dtype, sizes[i])
                taken.append(bufs[i])
        for i, val in sch.consts:
            if i not in self._consts:
                usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
                size = max(256, nbytes(val.size, sch.buffers[i].dtype))
                buf = self._consts[i] = dev.create_buffer(size=size, usage=usage)
                dev.queue.write_buffer(buf, 0, _storage(val, sch.buffers[i].dtype))
            bufs[i] = self._consts[i]
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        for k, pipe in zip(sch.kernels, self.pipelines):
            entries = []
            for slot, b in enumerate(k.buffers()):
                if b.index not in bufs:
                    bufs[b.index] = pool.acquire(nbytes(sizes[b.index], b.dtype))
                    taken.append(bufs[b.index])
                size = nbytes(max(sizes[b.index], 1), b.dtype)
                entries.append({"binding": slot,
                                "resource": {"buffer": bufs[b.index], "offset": 0, "size": size}})
            if k.uses_sizes:
                sz = self._sizes_buffer(env)
                entries.append({"binding": len(entries),
                                "resource": {"buffer": sz, "offset": 0, "size": sz.size}})
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries))
            cp.dispatch_workgroups(*k.launch(env))
        cp.end()
        out_shapes = [tuple(kernels.evaluate(d, env) for d in a.shape) for a in self.out_avals]
        if resident:
            outs = self._device_outputs(args, bufs, taken, enc, out_shapes)
            dev.queue.submit([enc.finish()])
        else:
            outs = self._host_outputs(args, bufs, enc, sizes, out_shapes)
        for b in taken:
            pool.release(b)
        return outs

    def _device_outputs(self, args: list, bufs: dict, taken: list, enc: Any, out_shapes: list) -> list:
        """The outputs as handles: a buffer this call made is handed over; an input, a constant
        or a literal output gets its own buffer (a copy), so every handle owns a pool buffer."""
        sch, pool = self.schedule, _STATE["pool"]
        outs: list = []
        given: dict[int, WebGPUBuffer] = {}
        for (kind, v), aval, shape in zip(sch.outputs, self.out_avals, out_shapes):
            n = max(int(np.prod(shape, dtype=np.int64)), 1)
            if kind == "input" and isinstance(args[v], WebGPUBuffer):
                outs.append(args[v])  # immutable: the same buffer serves both arrays
            elif kind in ("input", "literal"):
                val = args[v] if kind == "input" else np.full(shape, v, aval.dtype)
                outs.append(WebGPUBuffer(_upload(val, aval.dtype, n), pool))
            elif v in given:
                outs.append(given[v])
            elif any(b is bufs[v] for b in taken):
                taken[:] = [b for b in taken if b is not bufs[v]]
                outs.append(given.setdefault(v, WebGPUBuffer(bufs[v], pool)))
            else:  # a constant's buffer, owned by the executable
                buf = pool.acquire(nbytes(n, aval.dtype))
                enc.copy_buffer_to_buffer(bufs[v], 0, buf, 0, nbytes(n, aval.dtype))
                outs.append(given.setdefault(v, WebGPUBuffer(buf, pool)))
        return outs

    def _host_outputs(self, args: list, bufs: dict, enc: Any, sizes: list, out_shapes: list) -> list:
        """Copy the outputs into staging buffers, submit, and read them back."""
        sch, pool, wgpu, dev = self.schedule, _STATE["pool"], _STATE["wgpu"], _STATE["device"]
        staged = []
        for kind, v in sch.outputs:
            if kind == "buf" and sizes[v]:
                size = nbytes(sizes[v], sch.buffers[v].dtype)
                st = pool.acquire(size, staging=True)
                enc.copy_buffer_to_buffer(bufs[v], 0, st, 0, size)
                staged.append(st)
        dev.queue.submit([enc.finish()])
        outs, it = [], iter(staged)
        for (kind, v), aval, shape in zip(sch.outputs, self.out_avals, out_shapes):
            if kind == "input":
                a = args[v]
                if isinstance(a, WebGPUBuffer):  # (the lock is held: read it here, not by download)
                    n = int(np.prod(shape, dtype=np.int64))
                    a = _read_back(a.buffer, n, aval.dtype) if n else np.zeros(shape, aval.dtype)
                    a = (a != 0) if aval.dtype == np.bool_ else a
                outs.append(np.array(a, dtype=aval.dtype).reshape(shape))
            elif kind == "literal":
                outs.append(np.full(shape, v, dtype=aval.dtype))
            elif sizes[v] == 0:
                outs.append(np.zeros(shape, aval.dtype))
            else:
                st = next(it)
                n = sizes[v]
                raw = _map_read(st, n, aval.dtype, wgpu)
                pool.release(st)
                TRANSFERS["device_to_host"] += 1
                TRANSFERS["device_to_host_bytes"] += nbytes(n, aval.dtype)
                outs.append(((raw != 0) if aval.dtype == np.bool_ else raw).reshape(shape))
        return outs


def _kind(e: Any) -> str:
    """``device`` (the kernels compute it), ``loop`` (a device loop) or ``host``."""
    from ember._src.gpu import webgpu_loops  # (it builds on this module)

    if segments.device_computes(e):
        return "device"
    return "loop" if webgpu_loops.device_loop(e) else "host"


def webgpu_backend(prog: Program, **options: Any) -> Any:
    """The ``"webgpu"`` backend factory (``jit(f, backend="webgpu")``). A ``scan`` with a static
    trip count and a device body runs as preencoded dispatches, a ``while`` with device ``cond`` and
    ``body`` host-driven over device buffers (:mod:`.webgpu_loops`); with ``host_fallback=True`` the
    primitives without a device kernel run on the host (:mod:`.segments`)."""
    from ember._src.gpu import webgpu_loops  # (it builds on this module)

    prog = webgpu_loops.even_f16_steps(prog)  # (scans over odd float16 steps: padded to whole words)
    kinds = [_kind(e) for e in prog.eqns]
    if "host" in kinds and not options.get("host_fallback"):
        webgpu_loops.check_loop_bodies(prog.eqns[kinds.index("host")])
    if set(kinds) <= {"device"} or ("host" in kinds and not options.get("host_fallback")):
        return WebGPUExecutable(prog)  # (a primitive without a kernel: the error naming it)
    return segments.SegmentedExecutable(prog, WebGPUExecutable, _kind, webgpu_loops.make_loop,
                                        _to_host, _to_device)


def _symbolic(prog: Program, axes: tuple[str, ...], options: dict) -> Any:
    """The one executable of a symbolic program (:mod:`.symbolic`): its kernels, or its device
    segments and loops (host segments with ``host_fallback=True``); None: compiled per binding."""
    from ember._src.gpu import webgpu_loops  # (it builds on this module)

    prog = webgpu_loops.even_f16_steps(prog)
    kinds = {_kind(e) for e in prog.eqns}
    if kinds <= {"device"}:
        return WebGPUExecutable(prog, axes)
    if "host" in kinds and not options.get("host_fallback"):
        return None  # (compiled per binding: a scan over a named axis, or the error naming a primitive)
    if any(e.prim.name == "scan" and not isinstance(e.params["length"], int) for e in prog.eqns):
        return None  # a scan over a named axis: per binding, its trip count static, on the device
    return segments.SegmentedExecutable(prog, WebGPUExecutable, _kind, webgpu_loops.make_loop, _to_host,
                                        _to_device, axes=axes)


def _to_host(handle: WebGPUBuffer, aval: Any) -> np.ndarray:
    return handle.download(aval.shape, aval.dtype)


def _to_device(value: np.ndarray, aval: Any) -> WebGPUBuffer:
    with _LOCK:
        return WebGPUBuffer(_upload(value, aval.dtype, max(value.size, 1)), _STATE["pool"])


webgpu_backend.unavailable_reason = unavailable_reason  # type: ignore[attr-defined]
webgpu_backend.specialize = symbolic.make_specialize(webgpu_backend, _symbolic)  # type: ignore[attr-defined]
