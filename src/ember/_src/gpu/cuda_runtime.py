"""The CUDA runtime: NVRTC compilation (needs no GPU) and execution through the CUDA driver API.

Both through NVIDIA's ``cuda-bindings`` package (``cuda.bindings.nvrtc`` / ``cuda.bindings.driver``)
with NVRTC from the ``nvidia-cuda-nvrtc-cu12`` wheel (see ``docs/DESIGN.md`` for the choice).
:class:`CUDAExecutable` renders a program's kernels into one CUDA C translation unit
(``jit(f, backend="cuda").lower(*args).compile().as_text()`` returns it); :func:`compile_ptx`
compiles it for an architecture; running it needs a CUDA device and its driver (where none is
found, a call raises :class:`DeviceUnavailable` naming what is missing).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from typing import Any

import numpy as np

from ember._src.gpu import kernels, segments
from ember._src.gpu.cuda import CUDARenderer
from ember._src.gpu.render import compile_error
from ember._src.program import Program

INSTALL = "install NVRTC and its bindings: pip install 'ember[gpu]' (cuda-bindings, nvidia-cuda-nvrtc-cu12)"

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
_PTX: dict[tuple[str, str], bytes] = {}


class DeviceUnavailable(RuntimeError):
    """No CUDA device, driver or NVRTC here (the message says what is missing)."""


def _nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise DeviceUnavailable(f"cuda: NVRTC is not importable ({e}); {INSTALL}") from None
    try:
        nvrtc.nvrtcVersion()
    except Exception as e:  # the bindings load libnvrtc lazily
        raise DeviceUnavailable(f"cuda: libnvrtc does not load ({e}); {INSTALL}") from None
    return nvrtc


def nvrtc_unavailable_reason() -> str | None:
    """Why CUDA C cannot be compiled here, or None."""
    try:
        _nvrtc()
    except DeviceUnavailable as e:
        return str(e)
    return None


def compile_ptx(source: str, arch: str = "compute_90") -> bytes:
    """PTX of ``source`` for the virtual architecture ``arch`` (``compute_80``, ``compute_90``, ...);
    a failure raises CompileError with the saved source's path and NVRTC's log."""
    key = (hashlib.sha256(source.encode()).hexdigest(), arch)
    hit = _PTX.get(key)
    if hit is not None:
        return hit
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"ember.cu", 0, [], [])
    try:
        opts = [f"--gpu-architecture={arch}".encode(), b"-default-device"]
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if res != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, n = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, log)
            path = os.path.join(tempfile.gettempdir(), f"ember-cuda-{key[0][:16]}.cu")
            with open(path, "w") as f:
                f.write(source)
            raise compile_error("cuda", path, log.rstrip(b"\0 ").decode(errors="replace"))
        _, n = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * n
        nvrtc.nvrtcGetPTX(prog, ptx)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    _PTX[key] = ptx
    return ptx


def _check(res: Any, what: str) -> Any:
    err, *rest = res if isinstance(res, tuple) else (res,)
    if int(err) != 0:
        raise RuntimeError(f"cuda: {what} failed ({err})")
    return rest[0] if len(rest) == 1 else rest


def _open() -> Any:
    """The driver module with a context current on device 0 (raises DeviceUnavailable)."""
    if "ctx" in _STATE:
        drv = _STATE["driver"]
        _check(drv.cuCtxSetCurrent(_STATE["ctx"]), "cuCtxSetCurrent")
        return drv
    if "error" in _STATE:
        raise DeviceUnavailable(_STATE["error"])
    try:
        from cuda.bindings import driver as drv

        (err,) = drv.cuInit(0)
        if int(err) != 0:
            raise RuntimeError(f"cuInit: {err}")
        err, count = drv.cuDeviceGetCount()
        if int(err) != 0 or count == 0:
            raise RuntimeError("no CUDA device")
    except Exception as e:
        _STATE["error"] = (f"cuda: no CUDA device found ({e}); running CUDA kernels needs an NVIDIA GPU "
                           "and its driver")
        raise DeviceUnavailable(_STATE["error"]) from None
    dev = _check(drv.cuDeviceGet(0), "cuDeviceGet")
    major = _check(drv.cuDeviceGetAttribute(
        drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = _check(drv.cuDeviceGetAttribute(
        drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    ctx = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    _STATE.update(driver=drv, ctx=ctx, arch=f"compute_{min(major * 10 + minor, 90)}")
    return drv


def unavailable_reason() -> str | None:
    """Why CUDA kernels cannot run here (no NVRTC, no device or driver), or None."""
    why = nvrtc_unavailable_reason()
    if why is not None:
        return why
    with _LOCK:
        try:
            _open()
        except DeviceUnavailable as e:
            return str(e)
    return None


class CUDAExecutable:
    """A program's kernels as CUDA C (:attr:`source`); calling it runs them on CUDA device 0."""

    def __init__(self, prog: Program):
        self.schedule = kernels.schedule(prog, CUDARenderer())
        from ember._src.gpu.cuda import PRELUDE

        self.source = PRELUDE + "\n".join(k.source for k in self.schedule.kernels)
        self.out_avals = prog.out_avals
        self._functions: list | None = None

    def ptx(self, arch: str = "compute_90") -> bytes:
        """The program's PTX for ``arch`` (NVRTC; no device needed)."""
        return compile_ptx(self.source, arch)

    def __call__(self, args: list) -> list:
        with _LOCK:
            drv = _open()
            return self._run(drv, args)

    def _run(self, drv: Any, args: list) -> list:  # runs only where a CUDA device exists
        sch = self.schedule
        if self._functions is None:
            mod = _check(drv.cuModuleLoadData(self.ptx(_STATE["arch"])), "cuModuleLoadData")
            self._functions = [_check(drv.cuModuleGetFunction(mod, k.name.encode()), "cuModuleGetFunction")
                               for k in sch.kernels]
        ptrs: dict[int, Any] = {}
        itemsize = {b.index: _storage_dtype(b.dtype).itemsize for b in sch.buffers}
        try:
            for b in sch.buffers:
                ptrs[b.index] = _check(drv.cuMemAlloc(max(b.size, 1) * itemsize[b.index]), "cuMemAlloc")
            uploads = [(i, a) for i, a in zip(sch.inputs, args)] + list(sch.consts)
            for i, a in uploads:
                host = np.ascontiguousarray(np.asarray(a, dtype=sch.buffers[i].dtype)).view(
                    _storage_dtype(sch.buffers[i].dtype))
                if host.nbytes:
                    _check(drv.cuMemcpyHtoD(ptrs[i], host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
            for k, fn in zip(sch.kernels, self._functions):
                vals = [np.array([int(ptrs[b.index])], dtype=np.uint64) for b in k.buffers()]
                params = np.array([v.ctypes.data for v in vals], dtype=np.uint64)
                block = (kernels.TILE, kernels.TILE, 1) if k.kind == "matmul" else (kernels.WG, 1, 1)
                _check(drv.cuLaunchKernel(fn, *k.grid, *block, 0, 0, params.ctypes.data, 0), "cuLaunchKernel")
            outs = []
            for (kind, v), aval in zip(sch.outputs, self.out_avals):
                if kind == "input":
                    outs.append(np.array(args[v], dtype=aval.dtype))
                elif kind == "literal":
                    outs.append(np.full(aval.shape, v, dtype=aval.dtype))
                else:
                    host = np.empty(aval.shape, _storage_dtype(aval.dtype))
                    if host.nbytes:
                        _check(drv.cuMemcpyDtoH(host.ctypes.data, ptrs[v], host.nbytes), "cuMemcpyDtoH")
                    outs.append(host.view(aval.dtype))
            return outs
        finally:
            for p in ptrs.values():
                drv.cuMemFree(p)


def _storage_dtype(dtype: np.dtype) -> np.dtype:
    d = np.dtype(dtype)
    return np.dtype(np.uint16) if d.itemsize == 2 else d


def cuda_backend(prog: Program, **options: Any) -> Any:
    """The ``"cuda"`` backend factory (``jit(f, backend="cuda")``): renders at lowering, compiles
    and runs at the first call (needs a device; ``lower(...).compile().as_text()`` does not). With
    ``host_fallback=True`` the primitives without a device kernel run on the host (:mod:`.segments`)."""
    if options.get("host_fallback") and not all(segments.device_computes(e) for e in prog.eqns):
        return segments.SegmentedExecutable(prog, CUDAExecutable)
    return CUDAExecutable(prog)


cuda_backend.unavailable_reason = unavailable_reason  # type: ignore[attr-defined]
