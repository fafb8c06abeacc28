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

from ember._src.core import ShapedArray
from ember._src.devices import Device
from ember._src.gpu import cuda_blas, cuda_blaslt, cuda_graphs, kernel_cache, kernels, segments, symbolic
from ember._src.gpu.cuda import CUDARenderer
from ember._src.gpu.device_array import DeviceArray
from ember._src.gpu.pool import Pool
from ember._src.gpu.render import compile_error
from ember._src.program import Program

INSTALL = "install NVRTC and its bindings: pip install 'ember[gpu]' (cuda-bindings, nvidia-cuda-nvrtc-cu12)"

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}
_PTX: dict[tuple[str, str], bytes] = {}
COMPILES = {"nvrtc": 0}
"""NVRTC compiles since the process started (those the memory and disk caches did not save)."""
DEVICE = Device(0, "cuda", "cuda")
TRANSFERS = {"host_to_device": 0, "device_to_host": 0, "host_to_device_bytes": 0, "device_to_host_bytes": 0}


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
    a failure raises CompileError with the saved source's path and NVRTC's log. Cached in memory,
    and on disk (:mod:`.kernel_cache`) by the source's hash, ``arch`` and NVRTC's version."""
    key = (hashlib.sha256(source.encode()).hexdigest(), arch)
    hit = _PTX.get(key)
    if hit is not None:
        return hit
    nvrtc = _nvrtc()
    _, major, minor = nvrtc.nvrtcVersion()
    disk_key = kernel_cache.key_of(key[0], arch, f"nvrtc {major}.{minor}")
    text = kernel_cache.load("ptx", disk_key)
    if text is not None:
        _PTX[key] = text.encode("latin-1")
        return _PTX[key]
    COMPILES["nvrtc"] += 1
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
    kernel_cache.store("ptx", disk_key, ptx.decode("latin-1"))
    return ptx


_check = cuda_graphs.check


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
    _STATE["pool"] = CUDAPool.open(drv, dev, call_stream(drv))
    return drv


def call_stream(drv: Any) -> Any:
    """The stream all of ember's CUDA work is issued on (made at the first use): a stream of its
    own, not the legacy default stream (which cannot be captured into a graph), created blocking,
    so the synchronous host copies (on the legacy stream) stay ordered with it."""
    stream = _STATE.get("stream")
    if stream is None:
        stream = _STATE["stream"] = _check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_DEFAULT),
                                           "cuStreamCreate")
    return stream


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


class CUDAPool(Pool):
    """Device memory of CUDA device 0 for the shared pool logic (:mod:`.pool`: the limit, the
    out-of-memory retry and message, ``memory_stats``), in one of two forms.

    **Stream-ordered** (``mempool`` given: the device supports memory pools): a buffer is
    ``cuMemAllocFromPoolAsync`` from a pool of ember's own (``cuMemPoolCreate``, its release
    threshold set so that freed memory stays reserved) on the call stream, and goes back with
    ``cuMemFreeAsync`` on that stream when its last array dies, so its next holder's work is
    ordered after its last one's; the driver's pool does the reuse (requests rounded up to 256
    bytes). Out of memory: the stream is synchronized (its pending frees complete), the pool trimmed
    to nothing, and the request retried once. **Synchronous** otherwise: ``cuMemAlloc`` in the
    shared pool's power-of-two size classes, a freed buffer serving the next request of its class;
    reuse is ordered because all of ember's CUDA work runs on the one call stream."""

    def __init__(self, drv: Any, mempool: Any = None, stream: Any = None):
        super().__init__(str(DEVICE))
        self.drv, self.mempool, self.stream = drv, mempool, stream

    @classmethod
    def open(cls, drv: Any, dev: Any, stream: Any) -> CUDAPool:
        """The pool of device ``dev``: stream-ordered on ``stream`` where the device supports memory
        pools (``CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED``) and a pool can be made, else
        synchronous."""
        attr = drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
        try:
            if not _check(drv.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute"):
                return cls(drv)
            props = drv.CUmemPoolProps()
            props.allocType = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            props.handleTypes = drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
            props.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            props.location.id = int(dev)
            try:
                mempool = _check(drv.cuMemPoolCreate(props), "cuMemPoolCreate")
            except RuntimeError:
                mempool = _check(drv.cuDeviceGetDefaultMemPool(dev), "cuDeviceGetDefaultMemPool")
            keep = drv.cuuint64_t(2**64 - 1)  # never give freed memory back on a synchronize
            threshold = drv.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
            _check(drv.cuMemPoolSetAttribute(mempool, threshold, keep), "cuMemPoolSetAttribute")
        except RuntimeError:
            return cls(drv)
        return cls(drv, mempool, stream)

    @property
    def stream_ordered(self) -> bool:
        """Whether buffers come from the driver's stream-ordered pool."""
        return self.mempool is not None

    def round(self, nbytes: int) -> int:
        return -(-max(nbytes, 1) // 256) * 256 if self.stream_ordered else super().round(nbytes)

    def _new(self, size: int, kind: int) -> tuple[Any, int]:
        if self.stream_ordered:
            err, ptr = self.drv.cuMemAllocFromPoolAsync(size, self.mempool, self.stream)
            what = "cuMemAllocFromPoolAsync"
        else:
            err, ptr = self.drv.cuMemAlloc(size)
            what = "cuMemAlloc"
        if int(err) != 0:
            raise RuntimeError(f"{what}: {err}")
        return ptr, size

    def _destroy(self, buf: tuple[Any, int]) -> None:
        self.drv.cuMemFree(buf[0])

    def _key(self, buf: tuple[Any, int]) -> tuple[int, int]:
        return buf[1], 0

    def release(self, buf: tuple[Any, int]) -> None:
        """Stream-ordered: ``cuMemFreeAsync`` on the call stream (the driver's pool keeps it);
        otherwise back to its size class's free list."""
        if not self.stream_ordered:
            return super().release(buf)
        self.drv.cuMemFreeAsync(buf[0], self.stream)
        self.in_use -= buf[1]

    def clear(self) -> None:
        """Free every pooled buffer; stream-ordered: wait for the stream's frees, then trim the
        driver's pool to nothing."""
        super().clear()
        if self.stream_ordered:
            self.drv.cuStreamSynchronize(self.stream)
            self.drv.cuMemPoolTrimTo(self.mempool, 0)

    def stats(self) -> dict[str, int]:
        """:meth:`.pool.Pool.stats`; stream-ordered, ``pool_bytes`` and ``bytes_reserved`` are the
        driver pool's free and reserved bytes (``stream_ordered`` is 1)."""
        out = super().stats()
        if self.stream_ordered:
            attr = self.drv.CUmemPool_attribute
            try:
                reserved = int(_check(self.drv.cuMemPoolGetAttribute(
                    self.mempool, attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), "cuMemPoolGetAttribute"))
                used = int(_check(self.drv.cuMemPoolGetAttribute(
                    self.mempool, attr.CU_MEMPOOL_ATTR_USED_MEM_CURRENT), "cuMemPoolGetAttribute"))
                out.update(pool_bytes=max(reserved - used, 0), bytes_reserved=reserved)
            except RuntimeError:
                pass
        return out


def _alloc(nbytes: int) -> CUDABuffer:
    """A buffer of at least ``nbytes`` from the pool (the caller holds the lock and a current
    context); out of memory, after the pool is emptied, is :class:`.pool.DeviceOutOfMemory`."""
    pool = _STATE["pool"]
    return CUDABuffer(pool.take(max(nbytes, 1)), pool)


class CUDABuffer:
    """Device memory a device array holds; back to the pool when the last holder dies."""

    __slots__ = ("ptr", "size", "pool", "__weakref__")
    device = DEVICE

    def __init__(self, block: tuple[Any, int], pool: Pool):
        (self.ptr, self.size), self.pool = block, pool

    def __del__(self) -> None:
        if self.pool is not None:
            self.pool.give_back((self.ptr, self.size))  # deque.append: no lock in a finalizer

    def free(self) -> None:
        """Back to the pool now, ordered after the work issued so far (the caller holds the lock;
        stream-ordered pool: ``cuMemFreeAsync`` on the call stream)."""
        if self.pool is not None:
            self.pool.release((self.ptr, self.size))
            self.pool = None

    def download(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """The buffer's values on the host (one transfer)."""
        host = np.empty(shape, _storage_dtype(dtype))
        if host.nbytes:
            with _LOCK:
                drv = _open()
                _check(drv.cuMemcpyDtoH(host.ctypes.data, self.ptr, host.nbytes), "cuMemcpyDtoH")
                TRANSFERS["device_to_host"] += 1
                TRANSFERS["device_to_host_bytes"] += host.nbytes
        return host.view(dtype)

    def sync(self) -> None:
        """Wait for the device (the driver API calls here are synchronous)."""
        with _LOCK:
            _check(_open().cuCtxSynchronize(), "cuCtxSynchronize")


def _upload(a: Any, dtype: np.dtype) -> CUDABuffer:
    host = np.ascontiguousarray(np.asarray(a, dtype=dtype)).view(_storage_dtype(dtype))
    buf = _alloc(host.nbytes)
    if host.nbytes:
        _check(_STATE["driver"].cuMemcpyHtoD(buf.ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")
        TRANSFERS["host_to_device"] += 1
        TRANSFERS["host_to_device_bytes"] += host.nbytes
    return buf


def put(value: np.ndarray, weak_type: bool = False) -> DeviceArray:
    """``value`` copied to CUDA device 0, as a :class:`DeviceArray`."""
    value = np.asarray(value)
    CUDARenderer().check_dtype(value.dtype, "an array put on cuda:0")
    with _LOCK:
        _open()
        buf = _upload(value, value.dtype)
    return DeviceArray(buf, ShapedArray(value.shape, value.dtype, weak_type))


def memory_stats() -> dict[str, int]:
    """The device's buffer pool (:meth:`.pool.Pool.stats`)."""
    with _LOCK:
        _open()
        return _STATE["pool"].stats()


class CUDAExecutable:
    """A program's kernels as CUDA C (:attr:`source`); calling it runs them on CUDA device 0.

    With ``axes`` (a symbolic program's named dynamic axes) the module is compiled once for every
    binding: a call takes the binding ``env``, allocates its buffers and computes its grids from it,
    and passes the axis values to the kernels as ``int`` parameters after the buffers."""

    def __init__(self, prog: Program, axes: tuple[str, ...] = ()):
        self.prog, self.axes = prog, tuple(axes)
        self.schedule = kernels.schedule(prog, CUDARenderer(), axes)
        from ember._src.gpu.cuda import PRELUDE

        self.source = PRELUDE + "\n".join(k.source for k in self.schedule.kernels)
        self.out_avals = prog.out_avals
        self._functions: list | None = None
        self.graphs = cuda_graphs.GraphCache()  # per binding of the named axes

    def ptx(self, arch: str = "compute_90") -> bytes:
        """The program's PTX for ``arch`` (NVRTC; no device needed)."""
        return compile_ptx(self.source, arch)

    def functions(self, drv: Any) -> list:
        """The kernels' function handles, in the order of :attr:`schedule` (the module loaded once;
        the lock held and a context current)."""
        if self._functions is None:
            mod = _check(drv.cuModuleLoadData(self.ptx(_STATE["arch"])), "cuModuleLoadData")
            self._functions = [_check(drv.cuModuleGetFunction(mod, k.name.encode()), "cuModuleGetFunction")
                               for k in self.schedule.kernels]
        return self._functions

    def __call__(self, args: list, env: dict | None = None) -> list:
        """Host arrays in, host arrays out."""
        env = env or {}
        outs = self.run_device(args, env)
        return [o.download(tuple(kernels.evaluate(d, env) for d in a.shape), a.dtype)
                for o, a in zip(outs, self.out_avals)]

    def run_device(self, args: list, env: dict | None = None) -> list:
        """:class:`CUDABuffer` arguments are read in place (others copied to the device); the
        outputs are new buffers left on the device."""
        with _LOCK:
            drv = _open()
            return self._run(drv, args, env or {})

    def _run(self, drv: Any, args: list, env: dict) -> list:  # runs only where a CUDA device exists
        sch = self.schedule
        sizes = sch.sizes(env)
        axis_values = [np.array([int(env[a])], dtype=np.int32) for a in sch.axes]
        functions = self.functions(drv)
        held: dict[int, CUDABuffer] = {}  # buffers of this call (inputs, constants, intermediates)
        for i, a in zip(sch.inputs, args):
            if i is not None:
                held[i] = a if isinstance(a, CUDABuffer) else _upload(a, sch.buffers[i].dtype)
        for i, val in sch.consts:
            held[i] = _upload(val, sch.buffers[i].dtype)
        for b in sch.buffers:
            if b.index not in held:
                held[b.index] = _alloc(sizes[b.index] * _storage_dtype(b.dtype).itemsize)
        steps, ptrs = [], []
        precision = cuda_blas.precision()
        for k, fn in zip(sch.kernels, functions):
            p = [int(held[b.index].ptr) for b in k.buffers()]
            steps.append(make_step(k, fn, p, axis_values, env, precision))
            ptrs.append(p)
        if steps:
            key = (tuple(int(env[a]) for a in sch.axes), precision)
            self.graphs.run(drv, key, steps, ptrs, call_stream(drv))
        outs = []
        for (kind, v), aval in zip(sch.outputs, self.out_avals):
            if kind == "input":
                a = args[v]
                outs.append(a if isinstance(a, CUDABuffer) else _upload(a, aval.dtype))
            elif kind == "literal":
                shape = tuple(kernels.evaluate(d, env) for d in aval.shape)
                outs.append(_upload(np.full(shape, v, aval.dtype), aval.dtype))
            else:
                outs.append(held[v])
        kept = {id(o) for o in outs} | {id(a) for a in args}
        for buf in held.values():  # the call's intermediates (and uploads), freed after its work
            if id(buf) not in kept:
                buf.free()
        return outs


def kernel_params(k: kernels.Kernel, ptrs: list[int], axis_values: list[np.ndarray]) -> tuple:
    """The ``kernelParams`` of a launch of ``k`` over the device pointers ``ptrs`` (its buffers, in
    order) and the axis values: the address array, and the value arrays it points into (both must
    live until the launch, or as long as launches reuse them)."""
    vals = [np.array([p], dtype=np.uint64) for p in ptrs]
    if k.uses_sizes:
        vals += axis_values
    return np.array([v.ctypes.data for v in vals], dtype=np.uint64), vals


def launch_step(k: kernels.Kernel, fn: Any, params: tuple, env: dict) -> cuda_graphs.Launch:
    """The launch of ``k`` (its function ``fn``) with ``params`` (:func:`kernel_params`) under the
    binding ``env``."""
    block = (kernels.TILE, kernels.TILE, 1) if k.kind in ("matmul", "gemm") else (kernels.WG, 1, 1)
    return cuda_graphs.Launch(fn, k.launch(env), block, params)


def make_step(k: kernels.Kernel, fn: Any, ptrs: list[int], axis_values: list[np.ndarray], env: dict,
              precision: Any) -> Any:
    """The step of ``k`` over the device pointers ``ptrs`` (its buffers, in order) under the
    binding ``env``: a cuBLAS call for a GEMM step where cuBLAS loads (:mod:`.cuda_blas`, at
    ``precision``; a cuBLASLt call, :mod:`.cuda_blaslt`, for one with an epilogue), else the
    launch of its kernel."""
    blas = cuda_blas.blas() if k.kind == "gemm" else None
    if blas is None:
        return launch_step(k, fn, kernel_params(k, ptrs, axis_values), env)
    g = k.info["gemm"]
    g = dict(g, **{key: kernels.evaluate(g[key], env) for key in cuda_blas.LAYOUT_SIZES if key in g},
             loops=[tuple(kernels.evaluate(x, env) for x in loop) for loop in g.get("loops", ())])
    at = {b.index: p for b, p in zip(k.buffers(), ptrs)}
    sizes = tuple(kernels.evaluate(g[d], env) for d in "BMNK")
    args = cuda_blas.gemm_arguments(g, sizes, at[g["a"]], at[g["b"]], at[k.out.index], precision)
    if g.get("epilogue"):  # cublasLtMatmul with it, else (no cuBLASLt, no algorithm, no elements) the kernel
        lt = cuda_blaslt.lt() if all(sizes) else None
        step = None if lt is None else cuda_blaslt.LtStep.make(lt, _alloc, args, g["epilogue"], at[g["bias"]])
        return step if step is not None else launch_step(k, fn, kernel_params(k, ptrs, axis_values), env)
    calls = cuda_blas.gemm_calls(g, sizes, at[g["a"]], at[g["b"]], at[k.out.index], precision)
    out_bytes = nbytes(sizes[0] * sizes[1] * sizes[2], g["out_dtype"])
    return cuda_blas.GemmStep(blas, _alloc, args, out_bytes, calls)


def nbytes(n: int, dtype: np.dtype) -> int:
    """The bytes ``n`` elements of ``dtype`` take in device memory."""
    return n * _storage_dtype(dtype).itemsize


def _storage_dtype(dtype: np.dtype) -> np.dtype:
    d = np.dtype(dtype)
    return np.dtype(np.uint16) if d.itemsize == 2 else d


def _kind(e: Any) -> str:
    """``device`` (the kernels compute it), ``loop`` (a device scan, a host-driven while/cond, a
    scan stepped from the host around a while in its body) or ``host``."""
    from ember._src.gpu import cuda_loops, cuda_stepped  # (they build on this module)

    if segments.device_computes(e):
        return "device"
    loop = segments.device_control(e) or cuda_loops.device_scan(e) or cuda_stepped.stepped_scan(e)
    return "loop" if loop else "host"


def cuda_backend(prog: Program, **options: Any) -> Any:
    """The ``"cuda"`` backend factory (``jit(f, backend="cuda")``): renders at lowering, compiles
    and runs at the first call (needs a device; ``lower(...).compile().as_text()`` does not). A
    static ``scan`` with a device body runs on the device (:class:`.cuda_loops.CUDAScan`); a
    ``while`` with device ``cond`` and ``body`` is host-driven (:class:`.segments.HostDrivenWhile`);
    with ``host_fallback=True`` the primitives without a device kernel run on the host."""
    kinds = {_kind(e) for e in prog.eqns}
    if "host" in kinds and not options.get("host_fallback"):
        from ember._src.gpu import cuda_loops  # (it builds on this module)

        for e in prog.eqns:  # a loop: the error names the primitive inside it
            if _kind(e) == "host":
                cuda_loops.check_loop(e)
    if kinds <= {"device"} or ("host" in kinds and not options.get("host_fallback")):
        return CUDAExecutable(prog)  # (a primitive without a kernel: the error naming it)
    return segments.SegmentedExecutable(prog, CUDAExecutable, _kind, _while, _to_host, _to_device)


def _symbolic(prog: Program, axes: tuple[str, ...], options: dict) -> Any:
    """The one executable of a symbolic program (:mod:`.symbolic`), as WebGPU's."""
    kinds = {_kind(e) for e in prog.eqns}
    if kinds <= {"device"}:
        return CUDAExecutable(prog, axes)
    if "host" in kinds and not options.get("host_fallback"):
        return None
    return segments.SegmentedExecutable(prog, CUDAExecutable, _kind, _while, _to_host, _to_device, axes=axes)


def _while(prog: Program, axes: tuple[str, ...] = ()) -> Any:
    """The executable of a program of one loop equation: a device scan (:mod:`.cuda_loops`), a
    scan whose body holds a ``while`` stepped from the host (:mod:`.cuda_stepped`), or a
    host-driven ``while``/``cond``."""
    if prog.eqns[0].prim.name == "scan":
        from ember._src.gpu import cuda_loops, cuda_stepped  # (they build on this module)

        if cuda_loops.device_scan(prog.eqns[0]):
            return cuda_loops.CUDAScan(prog, axes)
        return cuda_stepped.CUDASteppedScan(prog, axes)
    driven = segments.HostDrivenCond if prog.eqns[0].prim.name == "cond" else segments.HostDrivenWhile
    return driven(prog, CUDAExecutable, CUDABuffer, _to_device, axes)


def _to_host(handle: CUDABuffer, aval: Any) -> np.ndarray:
    return handle.download(aval.shape, aval.dtype)


def _to_device(value: np.ndarray, aval: Any) -> CUDABuffer:
    with _LOCK:
        _open()
        return _upload(value, aval.dtype)


cuda_backend.unavailable_reason = unavailable_reason  # type: ignore[attr-defined]
cuda_backend.specialize = symbolic.make_specialize(cuda_backend, _symbolic)  # type: ignore[attr-defined]
