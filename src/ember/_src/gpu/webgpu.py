"""The WebGPU runtime (through the ``wgpu`` package, wgpu-native inside its wheel).

One device per process (the first adapter, high-performance preferred; on a machine without a GPU,
Mesa's software Vulkan driver ``llvmpipe``/lavapipe). A :class:`Pool` of storage buffers in
power-of-two size classes is reused across calls; compute pipelines are cached by the SHA-256 of
their WGSL source; every dispatch of one call and the copies of its outputs are encoded into one
command buffer and submitted with one ``queue.submit``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections import defaultdict
from typing import Any

import numpy as np

from ember._src.gpu import kernels, segments
from ember._src.gpu.render import compile_error
from ember._src.gpu.wgsl import WGSLRenderer
from ember._src.program import Program

INSTALL = ("install the 'wgpu' Python package (pip install 'ember[gpu]') and a Vulkan driver "
           "(Debian/Ubuntu without a GPU: apt-get install mesa-vulkan-drivers libvulkan1)")

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


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
    dev = adapter.request_device_sync(required_limits={n: adapter.limits[n] for n in names})
    _STATE.update(device=dev, adapter=adapter, wgpu=wgpu, pool=Pool(dev, wgpu), pipelines={})
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


class Pool:
    """Storage buffers by power-of-two size class (at least 256 bytes), reused across calls."""

    def __init__(self, device: Any, wgpu: Any):
        self.device, self.wgpu = device, wgpu
        self.free: dict[tuple[int, int], list] = defaultdict(list)
        self.stats = {"allocated_bytes": 0, "buffers": 0, "reused": 0}

    def acquire(self, nbytes: int, staging: bool = False) -> Any:
        size = max(256, 1 << (max(nbytes, 4) - 1).bit_length())
        bu = self.wgpu.BufferUsage
        usage = (bu.MAP_READ | bu.COPY_DST) if staging else (bu.STORAGE | bu.COPY_SRC | bu.COPY_DST)
        lst = self.free[(size, int(usage))]
        if lst:
            self.stats["reused"] += 1
            return lst.pop()
        self.stats["allocated_bytes"] += size
        self.stats["buffers"] += 1
        return self.device.create_buffer(size=size, usage=usage)

    def release(self, buf: Any) -> None:
        self.free[(buf.size, int(buf.usage))].append(buf)

    def clear(self) -> None:
        for lst in self.free.values():
            for b in lst:
                b.destroy()
        self.free.clear()


def memory_stats() -> dict:
    """The buffer pool's counters (bytes allocated, buffers, reuses)."""
    pool = _STATE.get("pool")
    return dict(pool.stats) if pool is not None else {"allocated_bytes": 0, "buffers": 0, "reused": 0}


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
    return np.ascontiguousarray(a.astype(np.uint32) if dtype == np.bool_ else a)


class WebGPUExecutable:
    """A program's kernels on the WebGPU device: ``run(list of arrays) -> list of arrays``."""

    def __init__(self, prog: Program):
        self.schedule = kernels.schedule(prog, WGSLRenderer())
        self.source = "\n".join(f"// kernel {k.name}: grid {k.grid}\n{k.source}"
                                for k in self.schedule.kernels)
        self.out_avals = prog.out_avals
        self.in_avals = prog.in_avals
        with _LOCK:
            _open()
            self.pipelines = [_pipeline(k.source) for k in self.schedule.kernels]
        self._consts: dict[int, Any] = {}

    def __call__(self, args: list) -> list:
        with _LOCK:
            return self._run(args)

    def _run(self, args: list) -> list:
        dev, pool, wgpu = _STATE["device"], _STATE["pool"], _STATE["wgpu"]
        sch = self.schedule
        bufs: dict[int, Any] = {}
        taken = []
        for i, a in zip(sch.inputs, args):
            buf = bufs[i] = pool.acquire(sch.buffers[i].size * 4)
            taken.append(buf)
            data = _storage(a, sch.buffers[i].dtype)
            if data.nbytes:
                dev.queue.write_buffer(buf, 0, data)
        for i, val in sch.consts:
            if i not in self._consts:
                usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
                buf = self._consts[i] = dev.create_buffer(size=max(256, val.size * 4), usage=usage)
                dev.queue.write_buffer(buf, 0, _storage(val, sch.buffers[i].dtype))
            bufs[i] = self._consts[i]
        enc = dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        for k, pipe in zip(sch.kernels, self.pipelines):
            entries = []
            for slot, b in enumerate(k.buffers()):
                if b.index not in bufs:
                    bufs[b.index] = pool.acquire(b.size * 4)
                    taken.append(bufs[b.index])
                entries.append({"binding": slot, "resource": {"buffer": bufs[b.index], "offset": 0,
                                                             "size": max(b.size, 1) * 4}})
            cp.set_pipeline(pipe)
            cp.set_bind_group(0, dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries))
            cp.dispatch_workgroups(*k.grid)
        cp.end()
        staged = []
        for kind, v in sch.outputs:
            if kind == "buf" and sch.buffers[v].size:
                st = pool.acquire(sch.buffers[v].size * 4, staging=True)
                enc.copy_buffer_to_buffer(bufs[v], 0, st, 0, sch.buffers[v].size * 4)
                staged.append(st)
        dev.queue.submit([enc.finish()])
        outs, it = [], iter(staged)
        for (kind, v), aval in zip(sch.outputs, self.out_avals):
            if kind == "input":
                outs.append(np.array(args[v], dtype=aval.dtype))
            elif kind == "literal":
                outs.append(np.full(aval.shape, v, dtype=aval.dtype))
            elif sch.buffers[v].size == 0:
                outs.append(np.zeros(aval.shape, aval.dtype))
            else:
                st = next(it)
                st.map_sync(wgpu.MapMode.READ)
                n = sch.buffers[v].size
                data = st.read_mapped(0, n * 4, copy=True)
                raw = np.frombuffer(data, dtype=_raw_dtype(aval.dtype), count=n)
                st.unmap()
                pool.release(st)
                outs.append((raw != 0) if aval.dtype == np.bool_ else raw.reshape(aval.shape).copy())
                outs[-1] = outs[-1].reshape(aval.shape)
        for b in taken:
            pool.release(b)
        return outs


def _raw_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.uint32) if np.dtype(dtype) == np.bool_ else np.dtype(dtype)


def webgpu_backend(prog: Program, **options: Any) -> Any:
    """The ``"webgpu"`` backend factory (``jit(f, backend="webgpu")``); with ``host_fallback=True``
    the primitives without a device kernel run on the host (:mod:`.segments`)."""
    if options.get("host_fallback") and not all(segments.device_computes(e) for e in prog.eqns):
        return segments.SegmentedExecutable(prog, WebGPUExecutable)
    return WebGPUExecutable(prog)


webgpu_backend.unavailable_reason = unavailable_reason  # type: ignore[attr-defined]
