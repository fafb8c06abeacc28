"""Collectives across processes as native call steps: MPI called from C inside the program's one
native call, in place on the arena buffers (the ``process_*`` primitives of
:mod:`ember._src.prims.process`, bound by ``ember.distributed.spmd``).

How MPI is reached without its header or a link-time dependency: ``csrc/mpi_coll.c`` is built once
per machine into a small library (loaded ``RTLD_GLOBAL``, like the thread pool) and initialised
with what mpi4py already has in the process -- the addresses of ``MPI_Allreduce``,
``MPI_Allgather``, ``MPI_Reduce_scatter_block``, ``MPI_Sendrecv`` and ``MPI_Comm_rank``
(looked up through mpi4py's extension module, which links libmpi), the datatype and operation
handles (``MPI._handleof(MPI.FLOAT)``, ...), ``MPI_IN_PLACE`` and ``MPI_PROC_NULL``. A
communicator is handed over as its handle (``MPI._handleof(comm)``) into a slot of the library's
table; a program's step names the slot, so the generated C is the same on every process.

A program's MPI step calls the library's entry (``csrc/mpi_steps.h``) on the operand and result
buffers: an all-reduce whose result reuses its operand's buffer (the planner decides) runs with
``MPI_IN_PLACE``. Where the library cannot be built or MPI's functions cannot be found (no mpi4py,
MPI not initialised, no C compiler), or in debug mode (``ember.set_debug(1)``: the host path checks
that every process passed the same shape), the equation stays a fallback step calling the
primitive's implementation (mpi4py); :func:`unavailable_reason` says why.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from typing import Any

import numpy as np

from ember._src import debug as dbg
from ember._src.native.csrc import load, with_symbol
from ember._src.native.emit import calls
from ember._src.native.emit.c_ops import ctype
from ember._src.prims import process as pp
from ember._src.program import Eqn, Literal

logger = logging.getLogger(__name__)

_MPI_FUNCTIONS = ("MPI_Allreduce", "MPI_Allgather", "MPI_Reduce_scatter_block", "MPI_Sendrecv",
                  "MPI_Comm_rank")
# ember's type codes: index in this list (code 0, bytes, moves data of any dtype)
_TYPES = [(None, "BYTE"), ("float32", "FLOAT"), ("float64", "DOUBLE"), ("int8", "INT8_T"),
          ("int16", "INT16_T"), ("int32", "INT32_T"), ("int64", "INT64_T"), ("uint8", "UINT8_T"),
          ("uint16", "UINT16_T"), ("uint32", "UINT32_T"), ("uint64", "UINT64_T"),
          ("complex64", "C_FLOAT_COMPLEX"), ("complex128", "C_DOUBLE_COMPLEX")]
_TYPE_CODE = {np.dtype(d): k for k, (d, _) in enumerate(_TYPES) if d is not None}
_OPS = ("sum", "max", "min")  # ember's operation codes
_KIND = {"allreduce": 0, "allgather": 1, "reduce_scatter": 2, "permute": 3}


@functools.cache
def _symbol_source(int_handles: bool) -> tuple[str, str]:
    """(the library's C source, the prefix of its exported names: it carries a hash of the source)."""
    source, name = with_symbol("mpi_coll.c", "ember_mpi_", "EM_MPI_SYMBOL")
    return ("#define EM_MPI_INT_HANDLES 1\n" if int_handles else "") + source, name


class _Library:
    """The loaded MPI step library (``lib``, exported-name prefix ``name``) and its communicator
    slots, or the reason it is unavailable."""

    def __init__(self) -> None:
        self.lib: ctypes.CDLL | None = None
        self.name = ""
        self.reason: str | None = None
        self.slots: dict[int, int] = {}  # communicator handle -> slot
        try:
            self._load()
        except Exception as exc:  # noqa: BLE001 - any failure leaves the host (mpi4py) path on
            self.lib, self.reason = None, f"{type(exc).__name__}: {exc}"
            logger.warning("ember: collectives across processes run through mpi4py (host callbacks), "
                           "not from C: %s", self.reason)

    def _load(self) -> None:
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise RuntimeError("mpi4py is not installed") from e
        if not MPI.Is_initialized():
            raise RuntimeError("MPI is not initialised")
        if MPI._sizeof(MPI.Status) > 256:
            raise RuntimeError(f"MPI_Status has {MPI._sizeof(MPI.Status)} bytes (at most 256 supported)")
        ext = ctypes.CDLL(MPI.__file__)  # mpi4py's extension module: dlsym searches the libmpi it links
        fns = []
        for fn in _MPI_FUNCTIONS:
            try:
                fns.append(ctypes.cast(getattr(ext, fn), ctypes.c_void_p).value)
            except AttributeError as e:
                raise RuntimeError(f"{fn} not found through mpi4py's module {MPI.__file__}") from e
        from ember._src.native.runtime import compiler

        source, self.name = _symbol_source(MPI._sizeof(MPI.Comm) == 4)
        lib = compiler.load_global(source, name_hint="mpi_coll")
        types = (ctypes.c_int64 * len(_TYPES))(*[MPI._handleof(getattr(MPI, m)) for _, m in _TYPES])
        ops = (ctypes.c_int64 * len(_OPS))(*[MPI._handleof(getattr(MPI, o.upper())) for o in _OPS])
        init = getattr(lib, self.name + "_init")
        init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                         ctypes.c_int64, ctypes.c_int]
        table = (ctypes.c_void_p * len(fns))(*fns)
        if init(table, types, len(_TYPES), ops, len(_OPS), int(MPI.IN_PLACE), int(MPI.PROC_NULL)):
            raise RuntimeError("the MPI step library refused its constants")
        self.lib = lib

    def slot(self, group: pp.ProcessGroup) -> int:
        """The library slot holding ``group``'s communicator (registered on first use)."""
        from mpi4py import MPI

        handle = int(MPI._handleof(group.comm))
        if handle not in self.slots:
            k = len(self.slots)
            set_comm = getattr(self.lib, self.name + "_set_comm")
            set_comm.argtypes = [ctypes.c_int, ctypes.c_int64]
            if set_comm(k, handle):
                raise RuntimeError(f"too many communicators for the MPI step library ({k})")
            self.slots[handle] = k
        return self.slots[handle]


@functools.cache
def library() -> _Library:
    """The MPI step library of this process (built and initialised on first use)."""
    return _Library()


def unavailable_reason() -> str | None:
    """Why collectives across processes cannot run as native steps here (they then run as fallback
    steps through mpi4py), or None."""
    return library().reason


def native_step(e: Eqn) -> bool:
    """Whether collective equation ``e`` runs as a native MPI step (else a fallback step)."""
    if isinstance(e.inputs[0], Literal) or dbg.debug_level() > 0:
        return False
    dtype = np.dtype(e.inputs[0].aval.dtype)
    op = e.params.get("op", "sum")
    if e.prim in (pp.process_allreduce_p, pp.process_reduce_scatter_p):
        if dtype not in _TYPE_CODE or (dtype.kind == "c" and op != "sum"):
            return False
    return library().lib is not None


def _helper(cc: calls.CallCode) -> None:
    cc.helper("em_mpi_step", f'#define EM_MPI_STEP "{library().name}_step"\n' + load("mpi_steps.h"))


def _step(kind: str, e: Eqn, cc: calls.CallCode, count: int, perm: str = "0") -> list[str]:
    _helper(cc)
    dtype = np.dtype(e.inputs[0].aval.dtype)
    code = _TYPE_CODE.get(dtype, 0)
    op = _OPS.index(e.params.get("op", "sum"))
    slot = library().slot(e.params["group"])
    return [f"if (em_mpi_step({_KIND[kind]}, {slot}, {cc.ins[0]}, {cc.outs[0]}, {count}, {code}, "
            f"{dtype.itemsize}, {op}, {perm})) return -1;"]


def _count(e: Eqn) -> int:
    return int(np.prod(e.inputs[0].aval.shape, dtype=np.int64))


_NOTE = " inside the native call (mpi_calls.py, csrc/mpi_coll.c)"


def _widened(e: Eqn) -> bool:
    """An 8/16-bit integer sum: summed as int32 in the step's workspace and wrapped back, as NumPy
    wraps (Open MPI's vectorised 8/16-bit sums saturate)."""
    dtype = np.dtype(e.inputs[0].aval.dtype)
    return e.params["op"] == "sum" and dtype.kind in "iu" and dtype.itemsize < 4


@calls.register("process_allreduce", "MPI_Allreduce from C" + _NOTE, native_step, complex_ok=True, inplace=0,
                workspace=lambda e: 4 * _count(e) if _widened(e) else 0)
def _allreduce(e: Eqn, cc: calls.CallCode) -> list[str]:
    n = _count(e)
    if not _widened(e):
        return _step("allreduce", e, cc, n)
    _helper(cc)
    slot, t = library().slot(e.params["group"]), ctype(e.outvars[0].aval.dtype)
    i32 = _TYPE_CODE[np.dtype(np.int32)]
    return ["int32_t *w_ = (int32_t *)" + cc.ws + ";",
            f"for (int64_t i = 0; i < {n}; ++i) w_[i] = (int32_t){cc.ins[0]}[i];",
            f"if (em_mpi_step({_KIND['allreduce']}, {slot}, w_, w_, {n}, {i32}, 4, {_OPS.index('sum')}, 0)) "
            "return -1;",
            f"for (int64_t i = 0; i < {n}; ++i) {cc.outs[0]}[i] = ({t})(uint32_t)w_[i];"]


@calls.register("process_all_gather", "MPI_Allgather from C" + _NOTE, native_step, complex_ok=True)
def _all_gather(e: Eqn, cc: calls.CallCode) -> list[str]:
    return _step("allgather", e, cc, _count(e))


@calls.register("process_reduce_scatter", "MPI_Reduce_scatter_block from C" + _NOTE, native_step,
                complex_ok=True)
def _reduce_scatter(e: Eqn, cc: calls.CallCode) -> list[str]:
    return _step("reduce_scatter", e, cc, int(np.prod(e.outvars[0].aval.shape, dtype=np.int64)))


@calls.register("process_permute", "MPI_Sendrecv from C" + _NOTE, native_step, complex_ok=True)
def _permute(e: Eqn, cc: calls.CallCode) -> list[str]:
    group: Any = e.params["group"]
    n = group.size
    dests = [pp.permute_peers(e.params["perm"], r)[0] for r in range(n)]
    sources = [pp.permute_peers(e.params["perm"], r)[1] for r in range(n)]
    table = ", ".join(str(v) for v in (n, *dests, *sources))
    return [f"static const int32_t perm_[] = {{{table}}};", *_step("permute", e, cc, _count(e), "perm_")]

