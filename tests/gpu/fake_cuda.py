"""A recording stand-in for ``cuda.bindings.driver`` (no memory, no kernels): it records what the
CUDA launch layer issues, models stream capture, executable graphs and their kernel-node updates,
and a stream-ordered memory pool, so the tests can check the driver calls without a GPU."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

import ember
from ember._src.gpu import cuda_blas, cuda_blaslt, cuda_runtime


class Fn(int):
    """A kernel function handle: an int (as the driver's handles convert) with the kernel's name."""

    def __new__(cls, value: int, name: str):
        self = super().__new__(cls, value)
        self.name = name
        return self


class Stream(tuple):
    """A stream handle: ``("stream", "blocking" | "non-blocking")``, an int as the driver's are."""

    def __int__(self) -> int:
        return 0x5000 + (self[1] == "non-blocking")


def read_args(address: int, n: int) -> list[int]:
    """The first ``n`` 64-bit values a ``kernelParams`` address array points at (the pointers)."""
    slots = (ctypes.c_uint64 * n).from_address(address)
    return [ctypes.c_uint64.from_address(slots[i]).value for i in range(n)]


class RecordingDriver:
    """The calls made while a stream captures go to :attr:`captured` (and into the graph being
    built), the others to :attr:`calls`; every kernel that runs (a direct launch, or a node of a
    launched graph) is appended to :attr:`executed` as ``(name, pointers)``, the pointers read for
    the kernels whose argument count :attr:`nargs` knows."""

    class CUstream_flags:  # noqa: N801 (the driver's spelling)
        CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING = 0, 1

    class CUstreamCaptureMode:
        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

    class CUgraphNodeType:
        CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY = 0, 1

    class CUdevice_attribute:  # noqa: N801
        CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115

    class CUmemPool_attribute:  # noqa: N801
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 4, 5
        CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7

    class CUmemAllocationType:
        CU_MEM_ALLOCATION_TYPE_PINNED = 1

    class CUmemAllocationHandleType:
        CU_MEM_HANDLE_TYPE_NONE = 0

    class CUmemLocationType:
        CU_MEM_LOCATION_TYPE_DEVICE = 1

    @staticmethod
    def CUmemPoolProps():  # noqa: N802
        return SimpleNamespace(allocType=0, handleTypes=0, location=SimpleNamespace(type=0, id=-1))

    @staticmethod
    def CUDA_KERNEL_NODE_PARAMS():  # noqa: N802
        return SimpleNamespace()

    cuuint64_t = int

    def __init__(self, pools: bool = False) -> None:
        self.calls: list[tuple] = []
        self.captured: list[tuple] = []
        self.capturing = False
        self.fail_capture = False
        self.pools = pools  # CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
        self.next_ptr = 1 << 20
        self.allocs: list[int] = []
        self.frees: list[int] = []
        self.refuse = 0  # allocations to refuse (out of memory) before the next succeeds
        self.nargs: dict[str, int] = {}
        self.functions: dict[bytes, Fn] = {}
        self.executed: list[tuple[str, list[int]]] = []
        self.graphs: dict[int, list[dict]] = {}  # graph -> nodes
        self.exes: dict[int, list[dict]] = {}  # executable graph -> its own copy of the nodes
        self.used = self.reserved = 0
        self.threshold = None

    def _log(self, *entry) -> tuple:
        (self.captured if self.capturing else self.calls).append(entry)
        return (0,)

    def cuCtxSetCurrent(self, ctx):
        return (0,)

    # memory
    def _ptr(self, n: int) -> int:
        self.next_ptr += -(-n // 256) * 256 + 256
        self.allocs.append(n)
        return self.next_ptr

    def cuMemAlloc(self, n):
        if self.refuse:
            self.refuse -= 1
            return (2, None)
        return (0, self._ptr(n))

    def cuMemFree(self, ptr):
        self.frees.append(int(ptr))
        return (0,)

    def cuDeviceGetAttribute(self, attr, dev):
        assert attr == self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
        return (0, int(self.pools))

    def cuMemPoolCreate(self, props):
        assert props.location.type == 1 and props.location.id == 0 and props.allocType == 1
        return (0, "mempool")

    def cuMemPoolSetAttribute(self, pool, attr, value):
        assert pool == "mempool" and attr == self.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        self.threshold = int(value)
        return (0,)

    def cuMemPoolGetAttribute(self, pool, attr):
        a = self.CUmemPool_attribute
        return (0, {a.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: self.reserved,
                    a.CU_MEMPOOL_ATTR_USED_MEM_CURRENT: self.used}[attr])

    def cuMemAllocFromPoolAsync(self, n, pool, stream):
        assert pool == "mempool"
        if self.refuse:
            self.refuse -= 1
            return (2, None)
        ptr = self._ptr(n)
        self.used += n
        self.reserved = max(self.reserved, self.used)
        self._log("alloc_async", ptr, n, stream)
        return (0, ptr)

    def cuMemFreeAsync(self, ptr, stream):
        self.frees.append(int(ptr))
        return self._log("free_async", int(ptr), stream)

    def cuMemPoolTrimTo(self, pool, keep):
        self.reserved = self.used
        return self._log("trim", keep)

    def cuStreamSynchronize(self, stream):
        return self._log("sync", stream)

    def cuMemcpyHtoD(self, dst, src, n):
        return self._log("htod", int(dst), n)

    def cuMemcpyDtoH(self, dst, src, n):
        return self._log("dtoh", int(src), n)

    def _on(self, stream) -> None:
        """Work goes to the capture stream while capturing, else to the blocking stream."""
        assert stream[1] == ("non-blocking" if self.capturing else "blocking")

    def cuMemcpyDtoDAsync(self, dst, src, n, stream):
        self._on(stream)
        if self.capturing:
            self.graph.append({"type": 1})
        return self._log("dtod", int(dst), int(src), n)

    # modules and launches
    def cuModuleLoadData(self, ptx):
        assert b".entry" in ptx
        return (0, "module")

    def cuModuleGetFunction(self, mod, name):
        fn = self.functions.setdefault(name, Fn(1000 + len(self.functions), name.decode()))
        return (0, fn)

    def _args(self, fn, params: int) -> list[int]:
        n = self.nargs.get(fn.name)
        return read_args(params, n) if n else []

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        self._on(stream)
        args = self._args(fn, params)
        if self.capturing:
            self.graph.append({"type": 0, "fn": fn, "grid": (gx, gy, gz), "args": args})
        else:
            self.executed.append((fn.name, args))
        return self._log("launch", fn.name, (gx, gy, gz), stream)

    # streams and graphs
    def cuStreamCreate(self, flags):
        return (0, Stream(("stream", "non-blocking" if flags else "blocking")))

    def cuStreamDestroy(self, stream):
        return (0,)

    def cuStreamBeginCapture(self, stream, mode):
        assert stream[1] == "non-blocking" and not self.capturing
        if self.fail_capture:
            return (900,)
        self.capturing = True
        self.graph: list[dict] = []
        return (0,)

    def cuStreamEndCapture(self, stream):
        self.capturing = False
        g = 7000 + len(self.graphs)
        self.graphs[g] = self.graph
        return (0, g)

    def cuGraphInstantiate(self, graph, flags):
        e = 9000 + len(self.exes)
        self.exes[e] = [dict(n) for n in self.graphs[graph]]
        return self._log("instantiate", graph) + (e,)

    def cuGraphDestroy(self, graph):
        return self._log("graph_destroy", graph)

    def cuGraphExecDestroy(self, exe):
        return self._log("exec_destroy", exe)

    def cuGraphGetNodes(self, graph, n):
        nodes = [(graph, i) for i in range(len(self.graphs[graph]))]
        return (0, nodes[:n], len(nodes))

    def cuGraphNodeGetType(self, node):
        g, i = node
        return (0, self.graphs[g][i]["type"])

    def cuGraphKernelNodeGetParams(self, node):
        g, i = node
        return (0, SimpleNamespace(func=self.graphs[g][i]["fn"]))

    def cuGraphExecKernelNodeSetParams(self, exe, node, p):
        g, i = node
        n = self.exes[exe][i]
        assert n["fn"] == p.func
        n["grid"], n["args"] = (p.gridDimX, p.gridDimY, p.gridDimZ), self._args(p.func, p.kernelParams)
        return self._log("set_params", p.func.name)

    def cuGraphExecUpdate(self, exe, graph):
        nodes = self.graphs[graph]
        if [n.get("fn") for n in nodes] != [n.get("fn") for n in self.exes[exe]]:
            return (910, None)  # (another topology)
        self.exes[exe] = [dict(n) for n in nodes]
        return self._log("exec_update", exe) + (None,)

    def cuMemsetD8Async(self, ptr, value, n, stream):
        self._on(stream)
        return self._log("memset", int(ptr), value, n)

    def cuGraphLaunch(self, exe, stream):
        assert stream[1] == "blocking"  # the call stream, ordered with the legacy stream's copies
        self.executed += [(n["fn"].name, n["args"]) for n in self.exes[exe] if n["type"] == 0]
        return self._log("graph_launch", exe)


def program(drv: RecordingDriver, f, args) -> cuda_runtime.CUDAExecutable:
    """The CUDA executable of ``jit(f, backend="cuda")`` at ``args``, its kernels' argument counts
    told to ``drv`` (so that it reads their pointers)."""
    exe = cuda_runtime.CUDAExecutable(ember.jit(f, backend="cuda").lower(*args).program)
    for k in exe.schedule.kernels:
        drv.nargs[k.name] = len(k.buffers())
    return exe


def run(drv: RecordingDriver, f, args) -> tuple:
    """``(executable, input buffers, outputs)``: :func:`program` run once on new device buffers of
    the operands' sizes."""
    exe = program(drv, f, args)
    bufs = [cuda_runtime._alloc(a.nbytes) for a in args]
    return exe, bufs, exe.run_device(bufs)


def install(drv: RecordingDriver, monkeypatch: pytest.MonkeyPatch,
            pool: cuda_runtime.CUDAPool | None = None, blas: cuda_blas.Blas | None = None,
            lt: cuda_blaslt.Lt | None = None) -> None:
    """The CUDA runtime's state with ``drv`` as its driver and a pool of its own (synchronous
    unless given; the test drops every buffer of it before the state is restored); GEMM steps
    call ``blas`` (a :class:`.cuda_blas.Blas` over :class:`RecordingBlas`), or launch their tiled
    kernels where it is None; GEMM steps with an epilogue call ``lt`` (a :class:`.cuda_blaslt.Lt`
    over :class:`RecordingBlasLt`), or launch their tiled kernels where it (or ``blas``) is None."""
    monkeypatch.setattr(cuda_blas, "_STATE", {"blas": blas})
    monkeypatch.setattr(cuda_blaslt, "_STATE", {"lt": lt})
    state = {"driver": drv, "ctx": None, "arch": "compute_80"}
    monkeypatch.setattr(cuda_runtime, "_STATE", state)
    state["pool"] = pool if pool is not None else cuda_runtime.CUDAPool(drv)
    monkeypatch.setattr(cuda_runtime, "TRANSFERS", dict.fromkeys(cuda_runtime.TRANSFERS, 0))


class RecordingBlas:
    """A stand-in for the cuBLAS library (ctypes-style calls): records the calls, with the GEMM's
    arguments by name and its scalars read from their addresses."""

    GEMM_ARGS = ("handle", "transa", "transb", "m", "n", "k", "alpha", "A", "Atype", "lda", "strideA", "B",
                 "Btype", "ldb", "strideB", "beta", "C", "Ctype", "ldc", "strideC", "batchCount",
                 "computeType", "algo")

    def __init__(self, drv: RecordingDriver | None = None) -> None:
        self.calls: list[tuple] = []
        self.drv = drv

    def _log(self, *entry) -> int:
        if self.drv is not None:
            self.drv._log("cublas", *entry)
        self.calls.append(entry)
        return 0

    def cublasCreate_v2(self, ref):
        ref._obj.value = 0xB1A5
        return self._log("create")

    def cublasSetWorkspace_v2(self, handle, ptr, n):
        return self._log("workspace", handle, ptr, n)

    def cublasSetStream_v2(self, handle, stream):
        return self._log("stream", handle, stream)

    def cublasGemmStridedBatchedEx(self, *args):
        a = dict(zip(self.GEMM_ARGS, args))
        scalar = ctypes.c_double if a["computeType"] == 70 else ctypes.c_float
        a["alpha"], a["beta"] = (scalar.from_address(a[s]).value for s in ("alpha", "beta"))
        return self._log("gemm", a)


def _value(x) -> int:
    """A ctypes argument (a ``c_void_p``, an int) as an int."""
    return int(getattr(x, "value", x) or 0)


class RecordingBlasLt:
    """A stand-in for the cuBLASLt library (ctypes-style calls): descriptors are numbered dicts
    that record what is set on them (attribute values read from the addresses given, as the
    library reads them); ``cublasLtMatmul`` records its call with copies of its descriptors and
    its scalars. ``algorithms``: how many the heuristic query offers (0: none)."""

    def __init__(self, drv: RecordingDriver | None = None, algorithms: int = 1) -> None:
        self.calls: list[tuple] = []
        self.drv, self.algorithms = drv, algorithms
        self.objects: dict[int, dict] = {}

    def _log(self, *entry) -> int:
        if self.drv is not None:
            self.drv._log("cublaslt", *entry)
        self.calls.append(entry)
        return 0

    def _make(self, ref, **fields) -> int:
        handle = 0xD000 + 16 * len(self.objects)
        self.objects[handle] = dict(fields, attrs={})
        ref._obj.value = handle
        return handle

    def _attr(self, obj, attr, address, size) -> int:
        value = int.from_bytes(ctypes.string_at(address, size), "little")
        self.objects[_value(obj)]["attrs"][attr] = value
        return self._log("set", _value(obj), attr, value)

    def cublasLtCreate(self, ref):
        return self._log("create", self._make(ref, kind="handle"))

    def cublasLtMatmulDescCreate(self, ref, compute, scale):
        return self._log("desc", self._make(ref, kind="desc", compute=compute, scale=scale))

    def cublasLtMatrixLayoutCreate(self, ref, dtype, rows, cols, ld):
        return self._log("layout", self._make(ref, kind="layout", type=dtype, rows=rows, cols=cols, ld=ld))

    def cublasLtMatmulPreferenceCreate(self, ref):
        return self._log("preference", self._make(ref, kind="preference"))

    def _destroy(self, obj) -> int:
        handle = _value(obj)
        entry = self.objects[handle]
        assert not entry.get("destroyed"), f"object {handle:#x} destroyed twice"
        entry["destroyed"] = True
        return self._log("destroy", entry["kind"], handle)

    cublasLtMatmulDescDestroy = cublasLtMatrixLayoutDestroy = cublasLtMatmulPreferenceDestroy = _destroy

    def live(self, kind: str) -> list[int]:
        """The objects of ``kind`` made and not destroyed."""
        return [h for h, o in self.objects.items() if o["kind"] == kind and not o.get("destroyed")]

    cublasLtMatmulDescSetAttribute = cublasLtMatrixLayoutSetAttribute = _attr
    cublasLtMatmulPreferenceSetAttribute = _attr

    def cublasLtMatmulAlgoGetHeuristic(self, handle, desc, a, b, c, d, pref, requested, results, count):
        assert requested == 1 and _value(c) == _value(d)
        if self.algorithms:
            cuda_blaslt.HeuristicResult.from_address(results).algo[0] = 0xA190
        count._obj.value = min(self.algorithms, requested)
        return self._log("heuristic", _value(desc))

    def cublasLtMatmul(self, handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, ws,
                       ws_size, stream):
        op = self.objects[_value(desc)]
        assert not op.get("destroyed") and not any(self.objects[_value(x)].get("destroyed")
                                                   for x in (adesc, bdesc, cdesc, ddesc)), "use after destroy"
        call = {"desc": dict(op, attrs=dict(op["attrs"])), "alpha": ctypes.c_float.from_address(alpha).value,
                "beta": ctypes.c_float.from_address(beta).value,
                "A": _value(a), "B": _value(b), "C": _value(c), "D": _value(d),
                "algo": ctypes.c_uint64.from_address(algo).value, "workspace": _value(ws), "ws_size": ws_size,
                "stream": _value(stream)}
        for name, layout in (("Adesc", adesc), ("Bdesc", bdesc), ("Cdesc", cdesc), ("Ddesc", ddesc)):
            call[name] = self.objects[_value(layout)]
        return self._log("matmul", call)
