"""cuBLASLt for the GEMM steps that fold an epilogue (:mod:`.epilogues`: bias, bias+ReLU,
bias+GELU): one ``cublasLtMatmul`` on the call stream writes ``act(A @ B + bias)``.

The library is ``libcublasLt``, which ``libcublas`` itself links against: it is looked for next to
the loaded libcublas (:mod:`.cuda_blas`), then by its sonames. Where it does not load, or finds no
algorithm for a product, the step launches its tiled kernel, which applies the same epilogue.

The call's matrices are :func:`.cuda_blas.gemm_arguments`'s (column-major, ``C^T = B^T A^T``):
each a matrix layout (``cublasLtMatrixLayoutCreate`` with the stored rows, columns and leading
dimension, then the batch count and stride); the operation descriptor carries the compute type
(the precision, as for ``cublasGemmStridedBatchedEx``), the op flags, the epilogue and the bias
pointer -- a vector along cuBLAS's ``m`` (ember's ``N``), the same for every batch. Descriptors
and the algorithm (``cublasLtMatmulAlgoGetHeuristic`` with the workspace as the limit) are made
once per call shape, before any stream capture; the bias pointer is set again before each call
(under the wrapper's lock: two programs of one shape share a plan). The preference object is
destroyed after the query; a plan's descriptor and layouts when the plan is dropped from the
wrapper's cache (the :data:`MAX_PLANS` most recently used shapes are kept: a program with dynamic
axes meets a new shape per binding) and no step holds it any more.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import weakref
from collections import OrderedDict
from typing import Any

from ember._src.gpu import cuda_blas

LOG = logging.getLogger("ember.gpu")
SYMBOLS = ("cublasLtCreate", "cublasLtMatmulDescCreate", "cublasLtMatmulDescSetAttribute",
           "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutSetAttribute", "cublasLtMatmulPreferenceCreate",
           "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmul",
           "cublasLtMatmulDescDestroy", "cublasLtMatrixLayoutDestroy", "cublasLtMatmulPreferenceDestroy")
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8  # cublasLtMatmulDescAttributes_t
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6  # cublasLtMatrixLayoutAttribute_t
PREF_MAX_WORKSPACE_BYTES = 1  # cublasLtMatmulPreferenceAttributes_t
EPILOGUES = {"bias": 4, "relu_bias": 6, "gelu_bias": 36}  # cublasLtEpilogue_t
SCALE_32F = 0  # cudaDataType CUDA_R_32F: alpha and beta (the epilogues' results are 16- or 32-bit)
MAX_PLANS = 64  # call shapes whose plans a wrapper keeps (least recently used dropped first)

_STATE: dict[str, Any] = {}


class HeuristicResult(ctypes.Structure):
    """``cublasLtMatmulHeuristicResult_t``."""

    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspaceSize", ctypes.c_size_t), ("state", ctypes.c_int),
                ("wavesCount", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


def candidates() -> list[str]:
    """Where :func:`load` looks for libcublasLt: next to the loaded libcublas, then its sonames."""
    out = []
    path = cuda_blas._STATE.get("path")
    if path:
        name = os.path.basename(path).replace("libcublas.", "libcublasLt.")
        out.append(os.path.join(os.path.dirname(path), name))
    return out + ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]


def _open(path: str) -> Any:
    lib = ctypes.CDLL(path)
    for name in SYMBOLS:
        getattr(lib, name)
    vp, i, u64, i64, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
    pvp = ctypes.POINTER(vp)
    lib.cublasLtCreate.argtypes = [pvp]
    lib.cublasLtMatmulDescCreate.argtypes = [pvp, i, i]
    lib.cublasLtMatmulDescSetAttribute.argtypes = [vp, i, vp, sz]
    lib.cublasLtMatrixLayoutCreate.argtypes = [pvp, i, u64, u64, i64]
    lib.cublasLtMatrixLayoutSetAttribute.argtypes = [vp, i, vp, sz]
    lib.cublasLtMatmulPreferenceCreate.argtypes = [pvp]
    lib.cublasLtMatmulPreferenceSetAttribute.argtypes = [vp, i, vp, sz]
    lib.cublasLtMatmulAlgoGetHeuristic.argtypes = [vp, vp, vp, vp, vp, vp, vp, i, vp, ctypes.POINTER(i)]
    lib.cublasLtMatmul.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp]
    for name in SYMBOLS[-3:]:  # the Destroy functions
        getattr(lib, name).argtypes = [vp]
    return lib


def lt() -> Lt | None:
    """The process's cuBLASLt wrapper (None where the library does not load; logged once)."""
    if "lt" not in _STATE:
        _STATE["lt"] = None
        tried = []
        for path in candidates():
            try:
                _STATE["lt"] = Lt(_open(path))
                break
            except (OSError, AttributeError) as e:
                tried.append(f"{path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        else:
            LOG.warning("cuda: cuBLASLt not found; GEMM steps with an epilogue run as tiled kernels. "
                        "Tried: %s", "; ".join(tried[-3:]))
    return _STATE["lt"]


def _ptr(value: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(value)


def _destroy(lib: Any, desc: int, layouts: tuple[int, ...]) -> None:
    """Destroy a plan's descriptor and layouts (host objects: no device work, no stream)."""
    for layout in layouts:
        if layout:
            lib.cublasLtMatrixLayoutDestroy(_ptr(layout))
    if desc:
        lib.cublasLtMatmulDescDestroy(_ptr(desc))


class Plan:
    """The descriptors and algorithm of one call shape (kept with the values they point at);
    destroyed in the library when the plan is garbage."""

    def __init__(self, lib: Any, desc: int, layouts: tuple[int, int, int], algo: HeuristicResult):
        self.desc, self.layouts, self.algo = desc, layouts, algo
        self.bias = ctypes.c_void_p(0)  # the bias pointer attribute's value
        fin = weakref.finalize(self, _destroy, lib, desc, layouts)
        fin.atexit = False  # at exit the process's host objects go with it


class Lt:
    """A cuBLASLt handle over the loaded library ``lib`` with its workspace (made at the first
    step, outside capture) and the plans of the call shapes seen."""

    def __init__(self, lib: Any):
        self.lib, self.handle, self.workspace = lib, None, None
        self.plans: OrderedDict[tuple, Plan | None] = OrderedDict()
        self.one, self.zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.lock = threading.Lock()  # a plan's bias attribute is set, then the call made

    def _check(self, status: int, what: str) -> None:
        if int(status) != 0:
            raise RuntimeError(f"cuda: {what} failed (cuBLAS status {int(status)})")

    def _new(self, fn: str, *args: Any) -> int:
        out = ctypes.c_void_p()
        self._check(getattr(self.lib, fn)(ctypes.byref(out), *args), fn)
        return int(out.value or 0)

    def _set(self, fn: str, obj: int, attr: int, value: Any) -> None:
        self._check(getattr(self.lib, fn)(_ptr(obj), attr, ctypes.addressof(value), ctypes.sizeof(value)), fn)

    def prepare(self, alloc: Any) -> None:
        """The handle exists and has its workspace (``alloc(nbytes)``: a buffer with ``.ptr``)."""
        if self.handle is None:
            self.handle = self._new("cublasLtCreate")
            self.workspace = alloc(cuda_blas.WORKSPACE)

    def _layout(self, dtype: int, rows: int, cols: int, ld: int, batch: int, stride: int) -> int:
        layout = self._new("cublasLtMatrixLayoutCreate", dtype, rows, cols, ld)
        for attr, value in ((LAYOUT_BATCH_COUNT, ctypes.c_int32(batch)),
                            (LAYOUT_STRIDED_BATCH_OFFSET, ctypes.c_int64(stride))):
            self._set("cublasLtMatrixLayoutSetAttribute", layout, attr, value)
        return layout

    def plan(self, a: dict[str, Any], epilogue: str, bias: int) -> Plan | None:
        """The plan of the call ``a`` (:func:`.cuda_blas.gemm_arguments`) with ``epilogue`` and the
        bias at ``bias``; None where cuBLASLt offers no algorithm."""
        key = (epilogue, *(v for name, v in sorted(a.items()) if name not in ("A", "B", "C")))
        with self.lock:
            if key in self.plans:
                self.plans.move_to_end(key)
                return self.plans[key]
            plan = self._make_plan(a, epilogue, bias)
            if plan is None:
                LOG.info("cuda: cuBLASLt has no algorithm for %s; the tiled kernel runs", key)
            self.plans[key] = plan
            while len(self.plans) > MAX_PLANS:  # (steps holding an evicted plan keep it alive)
                self.plans.popitem(last=False)
            return plan

    def _make_plan(self, a: dict[str, Any], epilogue: str, bias: int) -> Plan | None:
        made: list[int] = []  # descriptor, then layouts: destroyed again if a step fails
        pref = 0
        try:
            made.append(self._new("cublasLtMatmulDescCreate", a["computeType"], SCALE_32F))
            desc = made[0]
            for attr, value in ((DESC_TRANSA, ctypes.c_int32(a["transa"])),
                                (DESC_TRANSB, ctypes.c_int32(a["transb"])),
                                (DESC_EPILOGUE, ctypes.c_uint32(EPILOGUES[epilogue])),
                                (DESC_BIAS_POINTER, ctypes.c_void_p(bias))):
                self._set("cublasLtMatmulDescSetAttribute", desc, attr, value)
            m, n, k, batch = a["m"], a["n"], a["k"], a["batchCount"]
            made.append(self._layout(a["Atype"], *((k, m) if a["transa"] else (m, k)), a["lda"], batch,
                                     a["strideA"]))
            made.append(self._layout(a["Btype"], *((n, k) if a["transb"] else (k, n)), a["ldb"], batch,
                                     a["strideB"]))
            made.append(self._layout(a["Ctype"], m, n, a["ldc"], batch, a["strideC"]))
            la, lb, lc = made[1:]
            pref = self._new("cublasLtMatmulPreferenceCreate")
            self._set("cublasLtMatmulPreferenceSetAttribute", pref, PREF_MAX_WORKSPACE_BYTES,
                      ctypes.c_uint64(cuda_blas.WORKSPACE))
            result, count = HeuristicResult(), ctypes.c_int(0)
            self._check(self.lib.cublasLtMatmulAlgoGetHeuristic(
                _ptr(self.handle), _ptr(desc), _ptr(la), _ptr(lb), _ptr(lc), _ptr(lc), _ptr(pref), 1,
                ctypes.addressof(result), ctypes.byref(count)), "cublasLtMatmulAlgoGetHeuristic")
        except BaseException:
            _destroy(self.lib, made[0] if made else 0, tuple(made[1:]))
            raise
        finally:
            if pref:
                self.lib.cublasLtMatmulPreferenceDestroy(_ptr(pref))
        if count.value <= 0:
            _destroy(self.lib, desc, (la, lb, lc))
            return None
        return Plan(self.lib, desc, (la, lb, lc), result)

    def matmul(self, plan: Plan, a: dict[str, Any], bias: int, stream: Any) -> None:
        """One ``cublasLtMatmul`` of ``plan`` on ``stream`` (``D = C``: beta is 0)."""
        la, lb, lc = (_ptr(x) for x in plan.layouts)
        with self.lock:
            plan.bias.value = bias
            self._set("cublasLtMatmulDescSetAttribute", plan.desc, DESC_BIAS_POINTER, plan.bias)
            self._check(self.lib.cublasLtMatmul(
                _ptr(self.handle), _ptr(plan.desc), ctypes.addressof(self.one), _ptr(a["A"]), la,
                _ptr(a["B"]), lb, ctypes.addressof(self.zero), _ptr(a["C"]), lc, _ptr(a["C"]), lc,
                ctypes.addressof(plan.algo.algo), _ptr(int(self.workspace.ptr)), cuda_blas.WORKSPACE,
                _ptr(int(stream))), "cublasLtMatmul")


class LtStep:
    """A GEMM step with an epilogue: ``issue(drv, stream)`` calls ``cublasLtMatmul`` on ``stream``."""

    def __init__(self, lt: Lt, plan: Plan, args: dict[str, Any], bias: int):
        self.lt, self.plan, self.args, self.bias = lt, plan, args, bias

    @classmethod
    def make(cls, lt: Lt, alloc: Any, args: dict[str, Any], epilogue: str, bias: int) -> LtStep | None:
        """The step (its handle, workspace and plan made now, before any capture), or None where
        cuBLASLt has no algorithm for it."""
        lt.prepare(alloc)
        plan = lt.plan(args, epilogue, bias)
        return cls(lt, plan, args, bias) if plan is not None else None

    def issue(self, drv: Any, stream: Any) -> None:
        self.lt.matmul(self.plan, self.args, self.bias, stream)
