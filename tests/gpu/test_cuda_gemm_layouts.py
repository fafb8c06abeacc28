"""Products whose operands are stored transposed or batch-strided are cuBLAS calls on CUDA, read in
place: an operand of a ``transpose`` is read from the transpose's source (no copy kernel), and
batch dimensions inside an operand, contracted pairs listed in any common order and size-1
dimensions between free ones become cuBLAS's op flags, leading dimensions and batch strides
(``gemm_layouts.gemm_layout``). A batch of one side only (free dimensions apart) is a batch of stride 0
in the other operand; batch dimensions no one stride reads (the attention layout, heads in the
middle) are one call per index of the outer ones. Each layout's arguments are evaluated by a NumPy model of
``cublasGemmStridedBatchedEx`` on the host buffers (``tests/gpu/cublas_model.py``) and compared with
the row-major product; the calls and launches through the recording driver; the tiled fallback
kernels through NVRTC. Layouts whose matrices have no unit-stride side, whose contracted
dimensions differ in order, or that would take more than ``MAX_GEMM_CALLS`` calls stay tiled
kernels."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.gpu import cuda_blas, cuda_runtime, gemm_layouts, kernels
from ember._src.gpu.cuda import CUDARenderer
from ember._src.gpu.wgsl import WGSLRenderer
from tests.gpu.cublas_model import column_major_gemm
from tests.gpu.cuda_marks import needs_device, needs_nvrtc
from tests.gpu.fake_cuda import RecordingBlas, RecordingDriver, install, run


def _r(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _dg(dn):
    return lambda a, b: lax.dot_general(a, b, dn)


def _es(spec: str):
    return lambda a, b: jnp.einsum(spec, a, b)


# (name, function, operands, its NumPy value); each is one GEMM step reading the inputs in place
LAYOUTS = [
    ("lhs_batch_inside", _dg((((2,), (1,)), ((1,), (0,)))), (_r(3, 2, 4), _r(2, 4, 5, seed=1)),
     lambda a, b: np.einsum("mbk,bkn->bmn", a, b)),
    ("both_batch_inside", _dg((((2,), (0,)), ((1,), (1,)))), (_r(3, 2, 4), _r(4, 2, 5, seed=1)),
     lambda a, b: np.einsum("mbk,kbn->bmn", a, b)),
    ("rhs_n_by_k_batch_inside", _dg((((2,), (2,)), ((1,), (1,)))), (_r(3, 2, 4), _r(5, 2, 4, seed=1)),
     lambda a, b: np.einsum("mbk,nbk->bmn", a, b)),
    ("lhs_k_by_m_batch_inside", _dg((((0,), (1,)), ((1,), (0,)))), (_r(4, 2, 3), _r(2, 4, 5, seed=1)),
     lambda a, b: np.einsum("kbm,bkn->bmn", a, b)),
    ("two_batch_dims_inside", _dg((((3,), (2,)), ((1, 2), (0, 1)))), (_r(3, 2, 3, 4), _r(2, 3, 4, 5, seed=1)),
     lambda a, b: np.einsum("mabk,abkn->abmn", a, b)),
    ("contracted_pairs_listed_in_reverse", _dg((((2, 1), (1, 0)), ((), ()))),
     (_r(3, 2, 4), _r(2, 4, 5, seed=1)), lambda a, b: np.einsum("mij,ijn->mn", a, b)),
    ("size_one_dim_between_free_dims", _dg((((1,), (0,)), ((), ()))), (_r(3, 4, 1), _r(4, 5, seed=1)),
     lambda a, b: np.einsum("mkx,kn->mxn", a, b)),
    ("transposed_lhs", lambda a, b: a.T @ b, (_r(4, 3), _r(4, 5, seed=1)), lambda a, b: a.T @ b),
    ("transposed_rhs", lambda a, b: a @ b.T, (_r(3, 4), _r(5, 4, seed=1)), lambda a, b: a @ b.T),
    ("both_transposed", lambda a, b: a.T @ b.T, (_r(4, 3), _r(5, 4, seed=1)), lambda a, b: a.T @ b.T),
    ("swapaxes_batched", lambda a, b: jnp.swapaxes(a, 1, 2) @ b, (_r(2, 4, 3), _r(2, 4, 5, seed=1)),
     lambda a, b: np.swapaxes(a, 1, 2) @ b),
    ("batch_moved_by_a_transpose", lambda a, b: jnp.transpose(a, (1, 0, 2)) @ b,
     (_r(3, 2, 4), _r(2, 4, 5, seed=1)), lambda a, b: np.transpose(a, (1, 0, 2)) @ b),
    ("transposed_matvec", lambda a, v: a.T @ v, (_r(4, 3), _r(4, seed=1)), lambda a, v: a.T @ v),
    ("einsum_ibj_jbk", _es("ibj,jbk->bik"), (_r(3, 2, 4), _r(4, 2, 5, seed=1)),
     lambda a, b: np.einsum("ibj,jbk->bik", a, b)),
    ("einsum_kbm_nbk", _es("kbm,nbk->bmn"), (_r(4, 2, 3), _r(5, 2, 4, seed=1)),
     lambda a, b: np.einsum("kbm,nbk->bmn", a, b)),
    ("einsum_bkm_bnk", _es("bkm,bnk->bmn"), (_r(2, 4, 3), _r(2, 5, 4, seed=1)),
     lambda a, b: np.einsum("bkm,bnk->bmn", a, b)),
    # a batch of one side only: the other side's batch stride is 0, the result's N apart (ldc B N)
    ("rhs_free_dims_apart", _dg((((1,), (1,)), ((), ()))), (_r(3, 4), _r(2, 4, 5, seed=1)),
     lambda a, b: np.einsum("mk,bkn->mbn", a, b)),
    ("lhs_free_dims_apart", _dg((((1,), (0,)), ((), ()))), (_r(3, 4, 2), _r(4, 5, seed=1)),
     lambda a, b: np.einsum("mkx,kn->mxn", a, b)),
    # batch dimensions no one stride reads: a call per index of the outer ones
    ("attention_scores", _es("bqhd,bkhd->bhqk"), (_r(2, 3, 4, 5), _r(2, 6, 4, 5, seed=1)),
     lambda a, b: np.einsum("bqhd,bkhd->bhqk", a, b)),
    ("attention_values", _es("bhqk,bkhd->bhqd"), (_r(3, 2, 4, 6), _r(3, 6, 2, 5, seed=1)),
     lambda a, b: np.einsum("bhqk,bkhd->bhqd", a, b)),
    ("batch_and_free_apart", _dg((((2,), (1,)), ((0,), (0,)))), (_r(2, 3, 4), _r(2, 4, 3, 5, seed=1)),
     lambda a, b: np.einsum("bmk,bkxn->bmxn", a, b)),
    # a size-1 axis (its stride is whatever the view had): the leading dimensions are still at least
    # the stored rows (the cuBLAS model checks; the CPU's strided BLAS call once passed 1)
    ("row_times_transposed_rows", lambda a, b: a @ b.T, (_r(1, 4), _r(3, 4, seed=1)), lambda a, b: a @ b.T),
]
_IDS = [p[0] for p in LAYOUTS]


def _schedule(f, args) -> kernels.Schedule:
    return ember.jit(f, backend="cuda").lower(*args).executable.schedule


def _ptr(index: int) -> int:
    return (index + 1) << 24  # (buffers far apart: a call inside a loop points into one)


def _model(sch: kernels.Schedule, args) -> np.ndarray:
    """The schedule's one GEMM step, its calls (one per index of an outer batch) evaluated by the
    cuBLAS model on the host copies of the inputs, as the row-major result."""
    (k,) = sch.kernels
    assert k.kind == "gemm", k.kind
    g = k.info["gemm"]
    mem = {_ptr(sch.inputs[i]): np.asarray(x, np.float64).ravel() for i, x in enumerate(args)}
    assert {_ptr(g["a"]), _ptr(g["b"])} <= set(mem)  # the inputs themselves: no copy
    sizes = tuple(int(g[d]) for d in "BMNK")
    mem[_ptr(k.out.index)] = np.full(sizes[0] * sizes[1] * sizes[2], np.nan)
    for call in cuda_blas.gemm_calls(g, sizes, _ptr(g["a"]), _ptr(g["b"]), _ptr(k.out.index), None):
        column_major_gemm(call, mem)
    assert sch.outputs == [("buf", k.out.index)]
    return mem[_ptr(k.out.index)]


@pytest.mark.parametrize("name,f,args,ref", LAYOUTS, ids=_IDS)
def test_the_arguments_compute_the_row_major_product(name: str, f, args, ref) -> None:
    want = ref(*(np.asarray(x, np.float64) for x in args))
    got = _model(_schedule(f, args), args)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-12)
    # the CPU gives the same
    np.testing.assert_allclose(np.asarray(ember.jit(f)(*args)), want, rtol=1e-5, atol=1e-6)


def test_the_arguments_of_a_batch_inside_the_lhs_by_hand() -> None:
    """lhs (M=3, B=2, K=4), rhs (B, K, N=5): the lhs's batch b starts at element 4 b, its rows
    8 apart: cuBLAS's B operand is the lhs with ldb 8, strideB 4; its A operand the rhs as
    before (lda 5, strideA 20); C^T dense (ldc 5, strideC 15), 2 batches."""
    sch = _schedule(LAYOUTS[0][1], LAYOUTS[0][2])
    g = sch.kernels[0].info["gemm"]
    call = cuda_blas.gemm_arguments(g, (2, 3, 5, 4), 100, 200, 300, None)
    assert call == {"transa": 0, "transb": 0, "m": 5, "n": 3, "k": 4, "A": 200, "Atype": 0, "lda": 5,
                    "strideA": 20, "B": 100, "Btype": 0, "ldb": 8, "strideB": 4, "C": 300, "Ctype": 0,
                    "ldc": 5, "strideC": 15, "batchCount": 2, "computeType": 68, "algo": -1}


def test_the_arguments_of_a_transposed_lhs_by_hand() -> None:
    """a (K=4 x M=3) read through a.T: cuBLAS's B operand is ``a``'s buffer transposed (ldb 3)."""
    sch = _schedule(lambda a, b: a.T @ b, (_r(4, 3), _r(4, 5)))
    g = sch.kernels[0].info["gemm"]
    assert (g["a"], g["b"]) == (sch.inputs[0], sch.inputs[1])
    call = cuda_blas.gemm_arguments(g, (1, 3, 5, 4), 100, 200, 300, None)
    assert (call["transa"], call["transb"], call["lda"], call["ldb"], call["ldc"]) == (0, 1, 5, 3, 5)


# (name, function, operands): layouts no single call reads; the tiled kernel computes them
UNREADABLE = [
    ("batch_last", _dg((((1,), (1,)), ((2,), (0,)))), (_r(3, 4, 2), _r(2, 4, 5, seed=1))),
    ("contraction_orders_differ", _es("mij,jin->mn"), (_r(3, 2, 4), _r(4, 2, 5, seed=1))),
    ("int32", lambda a, b: a @ b, (np.ones((3, 4), np.int32), np.ones((4, 5), np.int32))),
]


@pytest.mark.parametrize("name,f,args", UNREADABLE, ids=[u[0] for u in UNREADABLE])
def test_layouts_one_call_cannot_read_stay_tiled_kernels(name: str, f, args) -> None:
    kinds = [k.kind for k in _schedule(f, args).kernels]
    assert "gemm" not in kinds and "matmul" in kinds


def test_webgpu_schedules_no_library_step() -> None:
    """WebGPU has no library GEMM: its tiled kernel reads a transposed operand from a copy, as
    before."""
    prog = ember.jit(lambda a, b: a.T @ b, backend="cuda").lower(_r(4, 3), _r(4, 5)).program
    assert [k.kind for k in kernels.schedule(prog, WGSLRenderer()).kernels] == ["map", "matmul"]


def test_a_transpose_that_is_also_an_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """``a.T`` is returned too: it gets its own kernel, the GEMM still reads ``a`` in place, and the
    fallback kernel takes ``a``'s buffer as a parameter."""
    a, b = _r(4, 3), _r(4, 5, seed=1)
    sch = _schedule(lambda a, b: (a.T @ b, a.T), (a, b))
    assert sorted(k.kind for k in sch.kernels) == ["gemm", "map"]
    (gemm,) = [k for k in sch.kernels if k.kind == "gemm"]
    assert gemm.info["gemm"]["a"] == sch.inputs[0]
    assert sch.inputs[0] in [buf.index for buf in gemm.inputs]
    install(RecordingDriver(), monkeypatch, blas=cuda_blas.Blas(RecordingBlas()))
    ptrs = [100 * (i + 1) for i in range(len(gemm.buffers()))]
    call = cuda_runtime.make_step(gemm, None, ptrs, [], {}, None).args
    assert call["B"] == ptrs[[buf.index for buf in gemm.buffers()].index(sch.inputs[0])]


def test_a_named_axis_gives_the_strides_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """lhs (3, n, 4) with its batch inside, rhs (n, 4, 5): one executable; per binding the lhs's
    leading dimension is 4 n, its batch stride 4, n batches."""
    drv, lib = RecordingDriver(), RecordingBlas()
    install(drv, monkeypatch, blas=cuda_blas.Blas(lib))
    f = ember.jit(LAYOUTS[0][1], backend="cuda", dynamic_axes=((None, "n", None), ("n", None, None)))
    exe = f.lower(_r(3, 2, 4), _r(2, 4, 5)).specialize(n=2).run.exe
    (k,) = exe.schedule.kernels
    assert k.kind == "gemm"
    for n in (2, 7):
        a = cuda_runtime.make_step(k, None, [100, 200, 300], [], {"n": n}, None).args
        assert (a["ldb"], a["strideB"], a["lda"], a["strideA"], a["batchCount"]) == (4 * n, 4, 5, 20, n)
        x, w = _r(3, n, 4).astype(np.float64), _r(n, 4, 5, seed=1).astype(np.float64)
        mem = {100: x.ravel(), 200: w.ravel(), 300: np.full(n * 15, np.nan)}
        column_major_gemm(a, mem)
        np.testing.assert_allclose(mem[300].reshape(n, 3, 5), np.einsum("mbk,bkn->bmn", x, w), rtol=1e-12)
    gc.collect()


@pytest.mark.parametrize("name,ncalls", [("transposed_lhs", 1), ("lhs_batch_inside", 1),
                                          ("einsum_kbm_nbk", 1), ("rhs_free_dims_apart", 1),
                                          ("attention_scores", 2), ("attention_values", 2)])
def test_the_call_reads_the_inputs_buffers(name: str, ncalls: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the recording driver and cuBLAS: the call issues ``ncalls``
    cublasGemmStridedBatchedEx (one per index of an outer batch) on the inputs' own pointers (the
    first at their starts) and no kernel (no copy); the recorded arguments, evaluated by the model
    on the host values, give the product. Without cuBLAS the one tiled kernel runs on the same
    buffers."""
    _, f, args, ref = LAYOUTS[_IDS.index(name)]
    want = ref(*(np.asarray(x, np.float64) for x in args))
    drv = RecordingDriver()
    install(drv, monkeypatch, blas=cuda_blas.Blas(RecordingBlas(drv)))
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    exe, bufs, (out,) = run(drv, f, args)
    assert not [c for c in drv.calls if c[0] == "launch"]
    calls = [c[2] for c in drv.calls if c[:2] == ("cublas", "gemm")]
    assert len(calls) == ncalls
    assert {calls[0]["A"], calls[0]["B"]} == {int(b.ptr) for b in bufs} and calls[0]["C"] == int(out.ptr)
    mem = {int(b.ptr): np.asarray(x, np.float64).ravel() for b, x in zip(bufs, args)}
    mem[int(out.ptr)] = np.full(want.size, np.nan)
    for call in calls:
        column_major_gemm(call, mem)
    np.testing.assert_allclose(mem[int(out.ptr)].reshape(want.shape), want, rtol=1e-12)
    del out

    install(drv, monkeypatch, blas=None)
    (out,) = exe.run_device(bufs)
    launches = [c for c in drv.calls if c[0] == "launch"]
    assert [c[1] for c in launches] == ["matmul0"]
    assert drv.executed[-1] == ("matmul0", [*(int(b.ptr) for b in bufs), int(out.ptr)])
    del bufs, out, exe
    gc.collect()


@needs_nvrtc
def test_the_fallback_kernels_compile() -> None:
    """Every layout's tiled kernel (the fallback where cuBLAS is absent) compiles for sm_80 and
    sm_90, and the source names the step's layout."""
    text = ember.jit(LAYOUTS[0][1], backend="cuda").lower(*LAYOUTS[0][2]).compile().as_text()
    assert "lhs M x K (ld 8, batch stride 4), rhs K x N (ld 5, batch stride 20)" in text
    for _, f, args, _ in LAYOUTS:
        src = ember.jit(f, backend="cuda").lower(*args).compile().as_text()
        for arch in ("compute_80", "compute_90"):
            assert ".entry matmul0(" in cuda_runtime.compile_ptx(src, arch).decode()


@needs_device
@pytest.mark.parametrize("name,f,args,ref", LAYOUTS, ids=_IDS)
def test_layouts_on_the_device(name: str, f, args, ref) -> None:
    want = ref(*(np.asarray(x, np.float64) for x in args))
    np.testing.assert_allclose(np.asarray(ember.jit(f, backend="cuda")(*args)), want, rtol=1e-5, atol=1e-5)


def test_a_batch_on_one_side_by_hand() -> None:
    """lhs (M=3, K=4) shared, rhs (B=2, K=4, N=5) to c (M, B, N): one call of 2 batches, the lhs's
    batch stride 0, the rhs's 20, the result's batch b at element 5 b with ldc B N = 10."""
    name, f, args, _ = LAYOUTS[_IDS.index("rhs_free_dims_apart")]
    g = _schedule(f, args).kernels[0].info["gemm"]
    (call,) = cuda_blas.gemm_calls(g, (1, 3, 10, 4), 100, 200, 300, None)
    assert call == {"transa": 0, "transb": 0, "m": 5, "n": 3, "k": 4, "A": 200, "Atype": 0, "lda": 5,
                    "strideA": 20, "B": 100, "Btype": 0, "ldb": 4, "strideB": 0, "C": 300, "Ctype": 0,
                    "ldc": 10, "strideC": 5, "batchCount": 2, "computeType": 68, "algo": -1}


def test_the_attention_layout_by_hand() -> None:
    """q (b=2, q=3, h=4, d=5), k (b=2, k=6, h=4, d=5) to s (b, h, q, k): the heads are the call's
    batch (stride d = 5 in both, q k = 18 in s); the rows of q and k are h d = 20 apart, k read
    transposed; one call per b, the pointers moved by b's strides (60, 120, 72 elements)."""
    name, f, args, _ = LAYOUTS[_IDS.index("attention_scores")]
    g = _schedule(f, args).kernels[0].info["gemm"]
    calls = cuda_blas.gemm_calls(g, (8, 3, 6, 5), 1000, 2000, 3000, None)
    assert len(calls) == 2
    first = {"transa": 1, "transb": 0, "m": 6, "n": 3, "k": 5, "A": 2000, "Atype": 0, "lda": 20,
             "strideA": 5, "B": 1000, "Btype": 0, "ldb": 20, "strideB": 5, "C": 3000, "Ctype": 0,
             "ldc": 6, "strideC": 18, "batchCount": 4, "computeType": 68, "algo": -1}
    assert calls[0] == first
    assert calls[1] == dict(first, A=2000 + 120 * 4, B=1000 + 60 * 4, C=3000 + 72 * 4)


def test_the_outer_batch_is_captured_into_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """With graphs, the attention layout's calls are captured (not issued), once, and the call is
    one graph launch."""
    _, f, args, ref = LAYOUTS[_IDS.index("attention_scores")]
    drv = RecordingDriver()
    install(drv, monkeypatch, blas=cuda_blas.Blas(RecordingBlas(drv)))
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "1")
    exe, bufs, (out,) = run(drv, f, args)
    assert [c[:2] for c in drv.captured if c[0] == "cublas" and c[1] == "gemm"] == [("cublas", "gemm")] * 2
    assert not [c for c in drv.calls if c[:2] == ("cublas", "gemm")]
    assert [c[0] for c in drv.calls if c[0] in ("launch", "graph_launch")] == ["graph_launch"]
    del out, bufs, exe
    gc.collect()


def test_a_named_outer_batch_gives_the_calls_per_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The attention layout with ``b`` a named axis: one executable; per binding, one call per
    index of ``b`` (its count known per call), each evaluated by the model."""
    install(RecordingDriver(), monkeypatch, blas=cuda_blas.Blas(RecordingBlas()))
    f = ember.jit(_es("bqhd,bkhd->bhqk"), backend="cuda",
                  dynamic_axes=(("n", None, None, None), ("n", None, None, None)))
    exe = f.lower(_r(2, 3, 4, 5), _r(2, 6, 4, 5)).specialize(n=2).run.exe
    (k,) = exe.schedule.kernels
    assert k.kind == "gemm"
    base = [1 << 24, 2 << 24, 3 << 24]
    for n in (1, 3):
        step = cuda_runtime.make_step(k, None, base, [], {"n": n}, None)
        assert len(step.calls) == n
        q, kk = _r(n, 3, 4, 5).astype(np.float64), _r(n, 6, 4, 5, seed=1).astype(np.float64)
        at = dict(zip([b.index for b in k.buffers()], base))
        mem = {at[k.info["gemm"]["a"]]: q.ravel(), at[k.info["gemm"]["b"]]: kk.ravel(),
               at[k.out.index]: np.full(n * 72, np.nan)}
        for call in step.calls:
            column_major_gemm(call, mem)
        np.testing.assert_allclose(mem[at[k.out.index]].reshape(n, 4, 3, 6),
                                   np.einsum("bqhd,bkhd->bhqk", q, kk), rtol=1e-12)
    gc.collect()


def test_too_many_calls_stay_a_tiled_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond ``MAX_GEMM_CALLS`` calls over the outer batch the step is the tiled kernel."""
    _, f, args, _ = LAYOUTS[_IDS.index("attention_scores")]
    prog = ember.jit(f, backend="cuda").lower(*args).program
    monkeypatch.setattr(gemm_layouts, "MAX_GEMM_CALLS", 1)
    assert [k.kind for k in kernels.schedule(prog, CUDARenderer()).kernels] == ["matmul"]
    monkeypatch.setattr(gemm_layouts, "MAX_GEMM_CALLS", 2)
    assert [k.kind for k in kernels.schedule(prog, CUDARenderer()).kernels] == ["gemm"]


def test_matmul_of_a_shared_lhs_and_a_batched_rhs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``(M, K) @ (B, K, N)``: one cuBLAS call (the lhs's batch stride 0) writing ``(M, B, N)``,
    then the kernel that moves the batch first; the recorded call gives NumPy's product."""
    a, b = _r(3, 4), _r(2, 4, 5, seed=1)
    drv = RecordingDriver()
    install(drv, monkeypatch, blas=cuda_blas.Blas(RecordingBlas(drv)))
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    exe, bufs, (out,) = run(drv, lambda a, b: a @ b, (a, b))
    assert [k.kind for k in exe.schedule.kernels] == ["gemm", "map"]
    (call,) = [c[2] for c in drv.calls if c[:2] == ("cublas", "gemm")]
    assert (call["strideB"], call["batchCount"]) == (0, 2)
    assert (call["B"], call["A"]) == (int(bufs[0].ptr), int(bufs[1].ptr))
    mem = {int(bufs[0].ptr): a.astype(np.float64).ravel(), int(bufs[1].ptr): b.astype(np.float64).ravel(),
           call["C"]: np.full(30, np.nan)}
    column_major_gemm(call, mem)
    want = np.einsum("mk,bkn->mbn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(mem[call["C"]].reshape(3, 2, 5), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ember.jit(lambda a, b: a @ b)(a, b)), a @ b, rtol=1e-5, atol=1e-6)
    del out, bufs, exe
    gc.collect()


@pytest.mark.parametrize("name", ["rhs_free_dims_apart", "lhs_free_dims_apart", "attention_scores"])
def test_a_step_of_a_new_layout_folds_no_epilogue(name: str) -> None:
    """A bias add after a product with a batch of one side only, a result not dense per call, or
    several calls stays a kernel: the step is a plain GEMM call (the cuBLASLt epilogue is kept to
    the layouts it was checked with)."""
    _, f, args, ref = LAYOUTS[_IDS.index(name)]
    want = ref(*(np.asarray(x, np.float64) for x in args))
    bias = _r(want.shape[-1], seed=2)
    sch = _schedule(lambda a, b, c: f(a, b) + c, (*args, bias))
    assert [k.kind for k in sch.kernels] == ["gemm", "map"]
    assert "epilogue" not in sch.kernels[0].info["gemm"]
