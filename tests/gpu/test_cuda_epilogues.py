"""GEMM epilogues on CUDA (``ember._src.gpu.epilogues``, ``cuda_blaslt``): a product followed by a
bias along its last axis, and ReLU or GELU (tanh form), is one GEMM step -- one ``cublasLtMatmul``
with ``CUBLASLT_EPILOGUE_BIAS`` / ``_RELU_BIAS`` / ``_GELU_BIAS``, or its tiled kernel applying
the same expression. Without a GPU: which programs fold; the recorded cuBLASLt calls (through the
recording driver and cuBLASLt, ``tests/gpu/fake_cuda.py``) evaluated by a NumPy model of
``cublasLtMatmul`` on the host values and compared with NumPy; the descriptors made before the
graph's capture and the call inside it; the tiled kernel where cuBLASLt is absent or has no
algorithm (NVRTC compiles it). With a GPU: the values."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.gpu import cuda_blas, cuda_blaslt, cuda_runtime
from tests.gpu.cublas_model import lt_matmul
from tests.gpu.cuda_marks import needs_device, needs_nvrtc
from tests.gpu.fake_cuda import RecordingBlas, RecordingBlasLt, RecordingDriver, install, run


def _r(*shape: int, seed: int = 0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


X, W, B = _r(5, 4), _r(4, 3, seed=1), _r(3, seed=2)

# (name, function, operands, NumPy value, the epilogue folded)
FOLDED = [
    ("bias", lambda x, w, b: x @ w + b, (X, W, B), lambda x, w, b: x @ w + b, "bias"),
    ("bias_first", lambda x, w, b: b + x @ w, (X, W, B), lambda x, w, b: x @ w + b, "bias"),
    ("nn_relu", lambda x, w, b: ember.nn.relu(x @ w + b), (X, W, B),
     lambda x, w, b: np.maximum(x @ w + b, 0), "relu_bias"),
    ("maximum", lambda x, w, b: jnp.maximum(x @ w + b, 0.0), (X, W, B),
     lambda x, w, b: np.maximum(x @ w + b, 0), "relu_bias"),
    ("nn_gelu", lambda x, w, b: ember.nn.gelu(x @ w + b), (X, W, B),
     lambda x, w, b: _gelu(x @ w + b), "gelu_bias"),
    ("transposed_weight", lambda x, w, b: ember.nn.relu(x @ w.T + b), (X, W.T.copy(), B),
     lambda x, w, b: np.maximum(x @ w.T + b, 0), "relu_bias"),
    ("batched_rows", lambda x, w, b: ember.nn.gelu(x @ w + b), (_r(2, 5, 4), W, B),
     lambda x, w, b: _gelu(x @ w + b), "gelu_bias"),
    ("batched_product", lambda x, w, b: ember.nn.relu(jnp.einsum("bmk,bkn->bmn", x, w) + b),
     (_r(2, 5, 4), _r(2, 4, 3, seed=1), B),
     lambda x, w, b: np.maximum(np.einsum("bmk,bkn->bmn", x, w) + b, 0), "relu_bias"),
    ("float16", lambda x, w, b: ember.nn.relu(x @ w + b), tuple(a.astype(np.float16) for a in (X, W, B)),
     lambda x, w, b: np.maximum(x @ w + b, 0), "relu_bias"),
]
_IDS = [f[0] for f in FOLDED]

# (name, function, operands): products whose following ops keep their own kernel
NOT_FOLDED = [
    ("gelu_erf", lambda x, w, b: ember.nn.gelu(x @ w + b, approximate=False), (X, W, B)),
    ("tanh", lambda x, w, b: jnp.tanh(x @ w + b), (X, W, B)),
    ("relu_times_two", lambda x, w, b: ember.nn.relu(x @ w + b) * 2.0, (X, W, B)),
    ("bias_along_rows", lambda x, w, b: x @ w + b[:, None], (X, W, _r(5, seed=2))),
    ("computed_bias", lambda x, w, b: x @ w + b * 2.0, (X, W, B)),
    ("product_also_returned", lambda x, w, b: (x @ w + b, x @ w), (X, W, B)),
    ("float64", lambda x, w, b: x @ w + b, tuple(a.astype(np.float64) for a in (X, W, B))),
    ("gradient", ember.grad(lambda x, w, b: jnp.sum(ember.nn.relu(x @ w + b) ** 2), argnums=(1, 2)),
     (X, W, B)),
]


def _schedule(f, args):
    return ember.jit(f, backend="cuda").lower(*args).executable.schedule


@pytest.mark.parametrize("name,f,args,ref,kind", FOLDED, ids=_IDS)
def test_the_epilogue_folds_into_the_gemm_step(name: str, f, args, ref, kind: str) -> None:
    """One kernel: the GEMM step, its epilogue and bias buffer recorded, writing the output."""
    sch = _schedule(f, args)
    (k,) = sch.kernels
    g = k.info["gemm"]
    assert k.kind == "gemm" and g["epilogue"] == kind and g["bias"] == sch.inputs[2]
    assert sch.outputs == [("buf", k.out.index)]
    want = ref(*(a.astype(np.float64) for a in args))
    tol = 2e-2 if args[0].dtype == np.float16 else 1e-5
    np.testing.assert_allclose(np.asarray(ember.jit(f)(*args), np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name,f,args", NOT_FOLDED, ids=[n[0] for n in NOT_FOLDED])
def test_other_programs_keep_their_kernels(name: str, f, args) -> None:
    sch = _schedule(f, args)
    assert not any(k.info.get("gemm", {}).get("epilogue") for k in sch.kernels)
    assert len(sch.kernels) > 1 or sch.kernels[0].kind == "matmul"


def test_a_sum_read_elsewhere_folds_the_bias_only() -> None:
    """``z = x @ w + b`` returned and read by a ReLU: the step writes ``z`` (bias epilogue), the
    ReLU keeps its kernel reading it."""
    sch = _schedule(lambda x, w, b: (ember.nn.relu(x @ w + b), x @ w + b), (X, W, B))
    gemm, relu = sch.kernels
    assert (gemm.kind, gemm.info["gemm"]["epilogue"], relu.kind) == ("gemm", "bias", "map")
    assert sch.outputs == [("buf", relu.out.index), ("buf", gemm.out.index)]
    assert [b.index for b in relu.inputs] == [gemm.out.index]


def _host(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64).ravel()


@pytest.mark.parametrize("name,f,args,ref,kind", FOLDED, ids=_IDS)
def test_the_cublaslt_call_computes_the_program(name: str, f, args, ref, kind: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded cublasLtMatmul (descriptors as set, pointers of the inputs and the output),
    evaluated by the NumPy model on the host values, gives NumPy's result; no kernel runs."""
    drv = RecordingDriver()
    lib = RecordingBlasLt(drv)
    install(drv, monkeypatch, blas=cuda_blas.Blas(RecordingBlas(drv)), lt=cuda_blaslt.Lt(lib))
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    exe, bufs, (out,) = run(drv, f, args)
    assert not [c for c in drv.calls if c[0] == "launch"]
    (call,) = [c[2] for c in drv.calls if c[:2] == ("cublaslt", "matmul")]
    want = ref(*(a.astype(np.float64) for a in args))
    assert call["D"] == int(out.ptr) and call["desc"]["attrs"][8] == int(bufs[2].ptr)
    assert call["desc"]["attrs"][7] == cuda_blaslt.EPILOGUES[kind] and call["algo"] == 0xA190
    mem = {int(b.ptr): _host(a) for b, a in zip(bufs, args)}
    mem[call["D"]] = np.full(want.size, np.nan)
    lt_matmul(call, mem)
    np.testing.assert_allclose(mem[call["D"]].reshape(want.shape), want, rtol=1e-9, atol=1e-12)
    del out, bufs, exe
    gc.collect()


@needs_nvrtc
def test_descriptors_before_the_capture_and_the_call_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    """With graphs: the handle, descriptors, layouts and the heuristic query are made before the
    capture, once per call shape; the captured work is the bias pointer set and the matmul on the
    capture stream; the descriptor's compute type follows the precision; a second call on new
    buffers re-captures with the new pointers."""
    drv = RecordingDriver()
    lib = RecordingBlasLt(drv)
    install(drv, monkeypatch, blas=cuda_blas.Blas(RecordingBlas(drv)), lt=cuda_blaslt.Lt(lib))
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "1")
    f = lambda x, w, b: ember.nn.relu(jnp.matmul(x, w, precision="tensorfloat32") + b)  # noqa: E731
    exe, bufs, (out,) = run(drv, f, (X, W, B))
    before = [c[1] for c in drv.calls if c[0] == "cublaslt"]
    assert before[:2] == ["create", "desc"] and "heuristic" in before and "matmul" not in before
    assert [c[1] for c in drv.captured if c[0] == "cublaslt"] == ["set", "matmul"]
    (call,) = [c[2] for c in drv.captured if c[:2] == ("cublaslt", "matmul")]
    assert call["stream"] == 0x5001 and call["desc"]["compute"] == cuda_blas.COMPUTE_32F_FAST_TF32
    assert call["desc"]["scale"] == cuda_blaslt.SCALE_32F and call["ws_size"] == cuda_blas.WORKSPACE
    assert (call["Ddesc"]["rows"], call["Ddesc"]["cols"], call["Ddesc"]["ld"]) == (3, 5, 3)
    new = [cuda_runtime._alloc(a.nbytes) for a in (X, W, B)]
    n = len(lib.calls)
    exe.run_device(new)
    assert "desc" not in [c[0] for c in lib.calls[n:]]  # the plan is kept
    (again,) = [c[2] for c in drv.captured if c[:2] == ("cublaslt", "matmul")][1:]
    assert again["desc"]["attrs"][8] == int(new[2].ptr) and again["A"] == int(new[1].ptr)
    del out, bufs, new, exe
    gc.collect()


@needs_nvrtc
@pytest.mark.parametrize("lt", ["absent", "no_algorithm"])
def test_the_tiled_kernel_runs_without_cublaslt(lt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cuBLASLt, or no algorithm for the product: the step's tiled kernel, which applies the
    epilogue, is launched on the inputs' and the output's buffers."""
    drv = RecordingDriver()
    lib = None if lt == "absent" else cuda_blaslt.Lt(RecordingBlasLt(drv, algorithms=0))
    install(drv, monkeypatch, blas=cuda_blas.Blas(RecordingBlas(drv)), lt=lib)
    monkeypatch.setenv("EMBER_CUDA_GRAPHS", "0")
    exe, bufs, (out,) = run(drv, FOLDED[2][1], (X, W, B))
    assert [c[1] for c in drv.calls if c[0] == "launch"] == ["matmul0"]
    assert drv.executed == [("matmul0", [*(int(b.ptr) for b in bufs), int(out.ptr)])]
    assert not [c for c in drv.calls if c[:2] in (("cublaslt", "matmul"), ("cublas", "gemm"))]
    del out, bufs, exe
    gc.collect()


@needs_nvrtc
def test_the_fallback_kernels_apply_the_epilogue_and_compile() -> None:
    for name, f, args, _, kind in FOLDED:
        text = ember.jit(f, backend="cuda").lower(*args).compile().as_text()
        assert f"cublasLtMatmul with the {kind} epilogue" in text, name
        assert ("tanhf(" in text) == (kind == "gelu_bias"), name
        for arch in ("compute_80", "compute_90"):
            assert ".entry matmul0(" in cuda_runtime.compile_ptx(text, arch).decode()


@needs_device
@pytest.mark.parametrize("name,f,args,ref,kind", FOLDED, ids=_IDS)
def test_epilogues_on_the_device(name: str, f, args, ref, kind: str) -> None:
    want = ref(*(a.astype(np.float64) for a in args))
    tol = 2e-2 if args[0].dtype == np.float16 else 1e-4
    got = np.asarray(ember.jit(f, backend="cuda")(*args), np.float64)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
