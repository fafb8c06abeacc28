"""GEMM on CUDA through cuBLAS: which products become library steps, the column-major arguments
of a row-major product (checked by evaluating them with the NumPy model of the call in
``tests/gpu/cublas_model.py``), the calls on the call stream inside the program's graph, the
compute type per precision, and the tiled kernel where cuBLAS is absent. Without a GPU through the
recording driver and a recording cuBLAS (``tests/gpu/fake_cuda.py``); with one, the values against
NumPy. Transposed and batch-strided operands: ``test_cuda_gemm_layouts.py``."""

from __future__ import annotations

import gc
import logging

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.dtypes import bfloat16
from ember._src.gpu import cuda_blas, cuda_runtime, kernels
from tests.gpu.cublas_model import column_major_gemm
from tests.gpu.cuda_marks import needs_device, needs_nvrtc
from tests.gpu.fake_cuda import RecordingBlas, RecordingDriver, install, program


def _r(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _dg(dn):
    return lambda a, b: lax.dot_general(a, b, dn)


# (name, function, operands, its NumPy value)
PRODUCTS = [
    ("matmul", lambda a, b: a @ b, (_r(3, 4), _r(4, 5, seed=1)), lambda a, b: a @ b),
    ("rhs_n_by_k", _dg((((1,), (1,)), ((), ()))), (_r(3, 4), _r(5, 4, seed=1)), lambda a, b: a @ b.T),
    ("lhs_k_by_m", _dg((((0,), (0,)), ((), ()))), (_r(4, 3), _r(4, 5, seed=1)), lambda a, b: a.T @ b),
    ("both_transposed", _dg((((0,), (1,)), ((), ()))), (_r(4, 3), _r(5, 4, seed=1)), lambda a, b: a.T @ b.T),
    ("batched", _dg((((2,), (2,)), ((0,), (0,)))), (_r(2, 3, 4), _r(2, 5, 4, seed=1)),
     lambda a, b: np.einsum("bik,bjk->bij", a, b)),
    ("two_contracted", _dg((((1, 2), (0, 1)), ((), ()))), (_r(3, 2, 2), _r(2, 2, 5, seed=1)),
     lambda a, b: np.einsum("mij,ijn->mn", a, b)),
    ("matvec", lambda a, b: a @ b, (_r(3, 4), _r(4, seed=1)), lambda a, b: a @ b),
]
_IDS = [p[0] for p in PRODUCTS]


def _gemm_kernel(f, args) -> kernels.Kernel:
    exe = ember.jit(f, backend="cuda").lower(*args).executable
    gemms = [k for k in exe.schedule.kernels if k.kind == "gemm"]
    assert len(gemms) == 1, [k.kind for k in exe.schedule.kernels]
    return gemms[0]


@pytest.mark.parametrize("name,f,args,ref", PRODUCTS, ids=_IDS)
def test_the_column_major_arguments_compute_the_row_major_product(name: str, f, args, ref) -> None:
    k = _gemm_kernel(f, args)
    g = k.info["gemm"]
    sizes = tuple(int(g[d]) for d in "BMNK")
    a, b = (np.asarray(x, np.float64).ravel() for x in args)
    mem = {1: a, 2: b, 3: np.full(sizes[0] * sizes[1] * sizes[2], np.nan)}
    call = cuda_blas.gemm_arguments(g, sizes, 1, 2, 3, None)
    column_major_gemm(call, mem)
    want = ref(*(np.asarray(x, np.float64) for x in args))
    np.testing.assert_allclose(mem[3].reshape(want.shape), want, rtol=1e-12)


def test_the_arguments_of_a_plain_matmul_by_hand() -> None:
    """x (3 x 4) @ w (4 x 5), row-major: cuBLAS computes C^T (5 x 3) = w^T x^T, both stored as
    they are (column-major views w^T: 5 x 4 with ld 5, x^T: 4 x 3 with ld 4), C^T with ld 5."""
    k = _gemm_kernel(lambda a, b: a @ b, (_r(3, 4), _r(4, 5)))
    call = cuda_blas.gemm_arguments(k.info["gemm"], (1, 3, 5, 4), 100, 200, 300, None)
    assert call == {"transa": 0, "transb": 0, "m": 5, "n": 3, "k": 4, "A": 200, "Atype": 0, "lda": 5,
                    "strideA": 20, "B": 100, "Btype": 0, "ldb": 4, "strideB": 12, "C": 300, "Ctype": 0,
                    "ldc": 5, "strideC": 15, "batchCount": 1, "computeType": 68, "algo": -1}


@pytest.mark.parametrize("precision,dtype,compute", [
    (None, np.float32, 68), ("highest", np.float32, 68), ("float32", np.float32, 68),
    ("tensorfloat32", np.float32, 77), ("high", np.float32, 77), ("bfloat16", np.float32, 75),
    ("default", np.float32, 75), ("tensorfloat32", bfloat16, 68), (None, np.float16, 68),
    ("bfloat16", np.float64, 70)])
def test_the_compute_type_follows_the_precision(precision, dtype, compute: int) -> None:
    from ember._src.prims.dot import canonicalize_precision

    assert cuda_blas.compute_type(np.dtype(dtype), canonicalize_precision(precision)) == compute


@pytest.mark.parametrize("dtype,code,out", [(bfloat16, 14, 14), (np.float16, 2, 2), (np.float64, 1, 1)])
def test_16_bit_and_float64_operands(dtype, code: int, out: int) -> None:
    a, b = np.ones((3, 4), dtype), np.ones((4, 5), dtype)
    k = _gemm_kernel(lambda a, b: a @ b, (a, b))
    call = cuda_blas.gemm_arguments(k.info["gemm"], (1, 3, 5, 4), 1, 2, 3, None)
    assert (call["Atype"], call["Btype"], call["Ctype"]) == (code, code, out)
    lib = RecordingBlas()
    blas = cuda_blas.Blas(lib)
    blas.handle = 1
    blas.gemm(call)
    (_, got), = lib.calls
    assert got["alpha"] == 1.0 and got["beta"] == 0.0  # (read as double where the compute is 64F)


@needs_nvrtc
def test_a_gemm_steps_fallback_kernel_is_in_the_source_and_compiles() -> None:
    lowered = ember.jit(lambda a, b: jnp.tanh(a @ b), backend="cuda").lower(_r(3, 4), _r(4, 5))
    text = lowered.compile().as_text()
    assert ("a cuBLAS GEMM step (cublasGemmStridedBatchedEx on the call stream, lhs M x K (ld 4, batch "
            "stride 12), rhs K x N (ld 5, batch stride 20))") in text
    for arch in ("compute_80", "compute_90"):
        ptx = cuda_runtime.compile_ptx(text, arch).decode()
        assert ".entry matmul0(" in ptx and ".entry map1(" in ptx


@needs_nvrtc
def test_gemm_steps_call_cublas_inside_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """x @ w then tanh: the GEMM is a cuBLAS call captured into the program's graph between the
    kernels (on the capture stream; the handle made once with its workspace), with the buffers'
    pointers (the tanh kernel reads what it writes); a precision set through ``ember.config``
    is another graph with its compute type; a new input buffer re-captures and updates the
    executable graph in place (no new instantiation)."""
    drv = RecordingDriver()
    lib = RecordingBlas(drv)
    install(drv, monkeypatch, blas=cuda_blas.Blas(lib))
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "1")
    exe = program(drv, lambda x, w: jnp.tanh(x @ w), (_r(3, 4), _r(4, 5)))
    assert [k.kind for k in exe.schedule.kernels] == ["gemm", "map"]
    x, w = cuda_runtime._alloc(48), cuda_runtime._alloc(80)
    try:
        (out,) = exe.run_device([x, w])
        # the handle and its workspace made before the capture (no allocation while capturing)
        assert [c[1] for c in drv.calls if c[0] == "cublas"] == ["create", "workspace"]
        assert [c[1] for c in drv.captured if c[0] == "cublas"] == ["stream", "gemm"]
        assert [c for c in drv.captured if c[0] == "cublas"][0][3] == 0x5001  # the capture stream
        assert lib.calls[1][3] == cuda_blas.WORKSPACE
        (_, _, call), = [c for c in drv.captured if c[:2] == ("cublas", "gemm")]
        assert (call["A"], call["B"], call["m"], call["n"], call["k"]) == (int(w.ptr), int(x.ptr), 5, 3, 4)
        assert call["computeType"] == 68 and call["alpha"] == 1.0 and call["beta"] == 0.0
        assert drv.executed == [("map1", [call["C"], int(out.ptr)])]  # tanh reads the GEMM's result
        for name, compute in (("tensorfloat32", 77), ("bfloat16", 75)):
            ember.config.update("jax_default_matmul_precision", name)
            exe.run_device([x, w])
            assert [c for c in drv.captured if c[:2] == ("cublas", "gemm")][-1][2]["computeType"] == compute
        assert [c[0] for c in drv.calls].count("instantiate") == 3
        ember.config.update("jax_default_matmul_precision", None)
        y = cuda_runtime._alloc(48)
        n = len(drv.calls)
        exe.run_device([y, w])
        new = [c[0] for c in drv.calls[n:]]
        assert "exec_update" in new and "instantiate" not in new and new.count("graph_launch") == 1
        assert [c for c in drv.captured if c[:2] == ("cublas", "gemm")][-1][2]["B"] == int(y.ptr)
    finally:
        ember.config.update("jax_default_matmul_precision", None)
    del x, w, y, out, exe
    gc.collect()


@needs_nvrtc
def test_without_cublas_the_tiled_kernel_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    drv = RecordingDriver()
    install(drv, monkeypatch, blas=None)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    exe = program(drv, lambda x, w: jnp.tanh(x @ w), (_r(33, 4), _r(4, 20)))
    x, w = cuda_runtime._alloc(33 * 16), cuda_runtime._alloc(80)
    (out,) = exe.run_device([x, w])
    launches = [c for c in drv.calls if c[0] == "launch"]
    assert [c[1] for c in launches] == ["matmul0", "map1"]
    assert launches[0][2] == (2, 3, 1)  # 16 x 16 tiles over 20 columns and 33 rows
    del x, w, out, exe
    gc.collect()


def test_empty_products() -> None:
    """No elements: nothing is issued; an empty contraction: the result is zeroed (no cuBLAS)."""
    drv, lib = RecordingDriver(), RecordingBlas()
    blas = cuda_blas.Blas(lib)
    stream = drv.cuStreamCreate(0)[1]
    f32 = np.dtype(np.float32)
    layout = {"a_trans": False, "b_trans": False, "dtype": f32, "out_dtype": f32}
    for sizes, calls in [((1, 0, 5, 4), []), ((1, 3, 5, 0), [("memset", 300, 0, 60)])]:
        n = len(drv.calls)
        cuda_blas.GemmStep(blas, None, cuda_blas.gemm_arguments(layout, sizes, 100, 200, 300, None),
                           4 * sizes[1] * sizes[2]).issue(drv, stream)
        assert drv.calls[n:] == calls and not lib.calls


def test_cublas_is_found_where_installed() -> None:
    lib = cuda_blas.load()
    if lib is None:
        pytest.skip(f"cuBLAS is not installed here: {cuda_blas.unavailable_reason()}")
    for name in cuda_blas.SYMBOLS:
        assert getattr(lib, name) is not None
    assert "libcublas" in cuda_blas._STATE["path"]


def test_a_missing_cublas_is_logged_once_and_named(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(cuda_blas, "_STATE", {})
    monkeypatch.setattr(cuda_blas, "candidates", lambda: ["/nonexistent/libcublas.so.99"])
    with caplog.at_level(logging.WARNING, logger="ember.gpu"):
        assert cuda_blas.blas() is None and cuda_blas.load() is None
    assert "pip install nvidia-cublas-cu12" in cuda_blas.unavailable_reason()
    assert "/nonexistent/libcublas.so.99" in cuda_blas.unavailable_reason()
    assert len([r for r in caplog.records if "cuBLAS not found" in r.getMessage()]) == 1


def test_the_search_starts_with_ember_cublas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CUBLAS", "/opt/x/libcublas.so.13")
    found = cuda_blas.candidates()
    assert found[0] == "/opt/x/libcublas.so.13" and found[-3:] == ["libcublas.so.13", "libcublas.so.12",
                                                                    "libcublas.so"]


def test_the_precision_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="precision argument must be"):
        ember.config.update("jax_default_matmul_precision", "sloppy")
    with pytest.raises(ValueError, match="one precision, not a pair"):
        ember.config.update("jax_default_matmul_precision", ("high", "high"))
    assert ember.config.jax_default_matmul_precision is None
    from ember._src.prims.dot import Precision, matmul_precision_setting

    with ember.default_matmul_precision("tensorfloat32"):
        assert matmul_precision_setting() == Precision.HIGH
        assert ember.config.jax_default_matmul_precision == "tensorfloat32"
        with pytest.raises(KeyError), ember.default_matmul_precision("bfloat16"):
            assert matmul_precision_setting() == Precision.DEFAULT
            raise KeyError  # (restored on the way out)
        assert matmul_precision_setting() == Precision.HIGH
    assert matmul_precision_setting() is None and ember.config.jax_default_matmul_precision is None


@needs_device
@pytest.mark.parametrize("precision,rtol", [(None, 1e-5), ("tensorfloat32", 5e-3), ("bfloat16", 3e-2)])
@pytest.mark.parametrize("name,f,args,ref", PRODUCTS, ids=_IDS)
def test_products_on_the_device(name: str, f, args, ref, precision, rtol: float) -> None:
    try:
        ember.config.update("jax_default_matmul_precision", precision)
        got = np.asarray(ember.jit(f, backend="cuda")(*args))
    finally:
        ember.config.update("jax_default_matmul_precision", None)
    want = ref(*(np.asarray(x, np.float64) for x in args))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@needs_device
def test_bfloat16_operands_on_the_device() -> None:
    a, b = _r(64, 96).astype(bfloat16), _r(96, 32, seed=1).astype(bfloat16)
    got = np.asarray(ember.jit(lambda a, b: a @ b, backend="cuda")(a, b)).astype(np.float64)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_a_products_own_precision_wins_over_the_setting() -> None:
    """``precision=`` on ``matmul``/``dot`` rides on the equation (a pair: the higher) and its
    gradient's products; it chooses the compute type whatever ``jax_default_matmul_precision``
    says. Without it, the setting decides."""
    from ember._src.prims.dot import Precision

    x, w = _r(3, 4), _r(4, 5)
    k = _gemm_kernel(lambda a, b: jnp.matmul(a, b, precision="tensorfloat32"), (x, w))
    assert k.info["gemm"]["precision"] == Precision.HIGH
    for setting in (None, Precision.DEFAULT, Precision.HIGHEST):
        assert cuda_blas.gemm_arguments(k.info["gemm"], (1, 3, 5, 4), 1, 2, 3, setting)["computeType"] == 77
    k = _gemm_kernel(lambda a, b: jnp.dot(a, b, precision=("bfloat16", "highest")), (x, w))
    assert k.info["gemm"]["precision"] == Precision.HIGHEST
    k = _gemm_kernel(lambda a, b: a @ b, (x, w))
    assert k.info["gemm"]["precision"] is None
    call = cuda_blas.gemm_arguments(k.info["gemm"], (1, 3, 5, 4), 1, 2, 3, Precision.DEFAULT)
    assert call["computeType"] == 75
    grad = ember.grad(lambda a, b: jnp.sum(jnp.matmul(a, b, precision="bfloat16")), argnums=(0, 1))
    exe = ember.jit(grad, backend="cuda").lower(x, w).executable
    gemms = [k for k in exe.schedule.kernels if k.kind == "gemm"]
    assert len(gemms) == 2 and all(k.info["gemm"]["precision"] == Precision.DEFAULT for k in gemms)
    # the CPU computes every level alike
    cpu = ember.jit(lambda a, b: jnp.matmul(a, b, precision="bfloat16"))(x, w)
    np.testing.assert_allclose(np.asarray(cpu), x.astype(np.float64) @ w, rtol=1e-5)


def test_a_gemm_over_a_named_axis_takes_its_sizes_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a named dynamic axis the one executable's GEMM step gets the bound sizes: x (n x 4)
    @ w (4 x 5) is m = 5, n = the bound rows, strides from them."""
    drv, lib = RecordingDriver(), RecordingBlas()
    install(drv, monkeypatch, blas=cuda_blas.Blas(lib))
    f = ember.jit(lambda x, w: x @ w, backend="cuda", dynamic_axes=(("n", None), None))
    c = f.lower(_r(6, 4), _r(4, 5))
    exe = c.specialize(n=6).run.exe
    (k,) = exe.schedule.kernels
    assert k.kind == "gemm"
    for n in (6, 300):
        step = cuda_runtime.make_step(k, None, [100, 200, 300], [], {"n": n}, None)
        a = step.args
        assert (a["m"], a["n"], a["k"], a["ldb"], a["strideB"], a["strideC"]) == (5, n, 4, 4, 4 * n, 5 * n)
        assert step.out_bytes == 4 * 5 * n
    gc.collect()
