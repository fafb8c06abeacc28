"""The native backend through ``ember.jit``: inspection, input validation, fallbacks, one native
call per program, the on-disk cache across processes, compile errors."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native import backend as nb
from ember._src.native import pipeline as pl
from ember._src.native.emit import codegen
from ember._src.native.runtime import toolchain
from ember.errors import CompileError, DTypeError, ShapeError
from tests.helpers import child_env
from tests.native.conftest import requires_cc
from tests.native.util import without_calls

RNG = np.random.default_rng(0)


def mlp(x, w1, b1, w2, b2, w3):
    h = jnp.maximum(lax.dot(x, w1) + b1, 0.0)
    h = jnp.tanh(lax.dot(h, w2) + b2)
    return lax.dot(h, w3)


def mlp_args(batch=4, width=16):
    return [RNG.standard_normal(s).astype(np.float32) * 0.3 for s in
            [(batch, width), (width, width), (width,), (width, width), (width,), (width, 8)]]


def transformer_block(x, wq, wk, wv, wo, w1, w2, g):
    def norm(x):
        mean = lax.reduce_sum(x, (2,)) / x.shape[-1]
        xc = x - lax.broadcast_in_dim(mean, x.shape, (0, 1))
        var = lax.reduce_sum(xc * xc, (2,)) / x.shape[-1]
        return xc * lax.broadcast_in_dim(lax.rsqrt(var + 1e-5), x.shape, (0, 1)) * g

    h = norm(x)
    q, k, v = (lax.dot_general(h, w, (((2,), (0,)), ((), ()))) for w in (wq, wk, wv))
    s = lax.dot_general(q, k, (((2,), (2,)), ((0,), (0,)))) * float(1.0 / np.sqrt(x.shape[-1]))
    m = lax.reduce_max(s, (2,))
    e = jnp.exp(s - lax.broadcast_in_dim(m, s.shape, (0, 1)))
    p = e / lax.broadcast_in_dim(lax.reduce_sum(e, (2,)), s.shape, (0, 1))
    a = lax.dot_general(p, v, (((2,), (1,)), ((0,), (0,))))
    x = x + lax.dot_general(a, wo, (((2,), (0,)), ((), ())))
    h = norm(x)
    u = lax.dot_general(h, w1, (((2,), (0,)), ((), ())))
    u = u * lax.logistic(u * 1.702)
    return x + lax.dot_general(u, w2, (((2,), (0,)), ((), ())))


def block_args(b=2, t=8, d=16):
    shapes = [(b, t, d), (d, d), (d, d), (d, d), (d, d), (d, 4 * d), (4 * d, d), (d,)]
    return [RNG.standard_normal(s).astype(np.float32) * 0.3 for s in shapes]


@requires_cc
def test_jit_native_matches_numpy_and_exposes_stages():
    args = mlp_args()
    f = ember.jit(mlp, backend="native")
    out = f(*args)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ember.jit(mlp)(*args)), rtol=1e-5, atol=1e-6)
    exe = f.lower(*args).executable
    assert isinstance(exe, nb.NativeExecutable) and exe.fallback_reason is None
    assert "int ember_main(void **bufs, char *arena, const int64_t *dims, void **fns)" in exe.source
    assert "native_gemm" in str(exe.optimized)
    assert str(exe.schedule).startswith("schedule:")
    assert str(exe.plan).startswith("memory plan:")
    assert "schedule:" in exe.describe() and "memory plan:" in exe.describe()
    assert Path(exe.library_path).exists()


@requires_cc
@pytest.mark.parametrize("which", ["mlp", "transformer"])
def test_one_native_call_per_program(which, monkeypatch):
    f, args = (mlp, mlp_args()) if which == "mlp" else (transformer_block, block_args())
    # with the C dispatcher each warm call is exactly one call of the entry point by construction
    # (tests/native/runtime/test_dispatch.py); here the Python path's ctypes call is counted
    monkeypatch.setenv("EMBER_DISPATCH", "0")
    jf = ember.jit(f, backend="native")
    want = ember.jit(f)(*args)
    jf(*args)
    exe = jf.lower(*args).executable
    calls = []
    inner = exe._fn

    def counting(*a):
        calls.append(1)
        return inner(*a)

    exe._fn = counting
    try:
        got = jf(*args)
    finally:
        exe._fn = inner
    assert len(calls) == 1
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)
    exported = re.findall(r"^(?!static|typedef)\w[\w\s\*]*\b(\w+)\(", exe.source, flags=re.M)
    assert exported == ["ember_main"], exported
    assert exe.schedule.count("fallback") == 0


@requires_cc
def test_inputs_validated_before_native_code():
    args = mlp_args()
    exe = ember.jit(mlp, backend="native").lower(*args).executable
    bad = list(args)
    bad[0] = args[0][:, :8].copy()
    with pytest.raises(ShapeError, match="input 0"):
        exe(bad)
    bad[0] = args[0].astype(np.float64)
    with pytest.raises(DTypeError, match="input 0"):
        exe(bad)
    with pytest.raises(TypeError, match="inputs"):
        exe(args[:2])
    nc = list(args)
    nc[1] = np.asfortranarray(args[1])  # non-contiguous inputs are copied, not misread
    np.testing.assert_allclose(exe(nc)[0], exe(args)[0], rtol=1e-6)


@requires_cc
def test_outputs_are_read_only_and_not_clobbered_by_later_calls():
    f = ember.jit(lambda x: jnp.exp(x) * 2.0, backend="native")
    x1, x2 = np.ones((8, 8), np.float32), np.zeros((8, 8), np.float32)
    a = f(x1)
    b = f(x2)
    np.testing.assert_allclose(np.asarray(a), 2 * np.e, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(b), 2.0)
    with pytest.raises(ValueError):
        np.asarray(a)[0, 0] = 1.0


def test_unsupported_dtype_falls_back_with_logged_reason(caplog):
    x = np.ones((3, 3), np.float16)
    with caplog.at_level(logging.DEBUG, logger="ember"):
        f = ember.jit(lambda x: x * 2 + 1, backend="native")
        out = f(x)
    exe = f.lower(x).executable
    assert exe.fallback_reason is not None and "float16" in exe.fallback_reason
    assert any("falling back" in r.getMessage() and "float16" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(np.asarray(out), np.full((3, 3), 3, np.float16))
    assert "reference backend" in exe.describe()


def test_no_compiler_falls_back_with_warning(monkeypatch):
    monkeypatch.setattr(toolchain, "find_compiler", lambda: None)
    nb._warned.clear()
    with pytest.warns(RuntimeWarning, match="no working C compiler"):
        f = ember.jit(lambda x: x + 1.0, backend="native")
        out = f(np.ones(3, np.float32))
    np.testing.assert_array_equal(np.asarray(out), [2, 2, 2])


@requires_cc
def test_fallback_errors_propagate(monkeypatch):
    without_calls(monkeypatch, "dynamic_slice")

    def f(x, i):
        return lax.dynamic_slice(jnp.exp(x), [i], (2,)) + 1.0

    jf = ember.jit(f, backend="native")
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(jf(x, np.int32(10))), np.exp([3, 4]) + 1, rtol=1e-6)
    exe = jf.lower(x, np.int32(1)).executable

    def boom(*a, **k):
        raise ZeroDivisionError("from the fallback")

    step = next(iter(exe._fallback_steps.values()))
    prim = step.eqns[0].prim
    old = prim.impl
    prim.impl = boom
    try:
        with pytest.raises(ZeroDivisionError, match="from the fallback"):
            exe([x, np.int32(1)])
    finally:
        prim.impl = old


@requires_cc
def test_options_threads_passes_and_ablation():
    args = mlp_args()
    want = np.asarray(ember.jit(mlp)(*args))
    for opts in ({"num_threads": 1, "parallel_threshold": 1}, {"passes": []}, {"fuse": False},
                 {"inplace": False, "simd": False}, {"max_kernel_inputs": 2}):
        exe = ember.jit(mlp, backend="native", **opts).lower(*args).executable
        np.testing.assert_allclose(exe(args)[0], want, rtol=1e-5, atol=1e-6, err_msg=str(opts))
    exe = ember.jit(mlp, backend="native", num_threads=1, parallel_threshold=1).lower(*args).executable
    assert "omp parallel" not in exe.source  # one thread: no OpenMP region, whatever the work
    two = ember.jit(mlp, backend="native", num_threads=2, parallel_threshold=1).lower(*args).executable
    if toolchain.find_compiler().has_openmp:
        assert "em_par(" in two.source or "num_threads(2)" in two.source


@requires_cc
def test_compile_error_carries_message_and_source(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    real = codegen.generate

    def broken(*a, **k):
        g = real(*a, **k)
        g.source = g.source.replace("return 0;\n}", "return 0 +;\n}")
        return g

    monkeypatch.setattr(pl, "generate", broken)
    with pytest.raises(CompileError) as info:
        ember.jit(lambda x: x * 3.0, backend="native")(np.ones(4, np.float32))
    msg = str(info.value)
    saved = re.search(r"source: (\S+\.c)", msg).group(1)
    assert Path(saved).exists() and "return 0 +;" in Path(saved).read_text()
    assert "error" in msg.lower()


@requires_cc
def test_second_process_loads_from_disk_without_compiling(tmp_path):
    script = (
        "import json, sys, numpy as np\n"
        "import ember, ember.numpy as jnp\n"
        "from ember import lax\n"
        "from ember._src.native import prepare\nfrom ember._src.native.runtime import compiler\n"
        # the per-machine libraries (GEMM kernel, pool) change the generated C: have them loaded
        # in both processes, so both generate the same program
        "prepare()\n"
        "f = ember.jit(lambda x, w: jnp.tanh(lax.dot(x, w) + 1.0), backend='native')\n"
        "x = np.ones((4, 8), np.float32); w = np.full((8, 3), 0.1, np.float32)\n"
        "out = np.asarray(f(x, w))\n"
        "print(json.dumps({'out': float(out.sum()), **compiler.cache_stats()}))\n"
    )
    env = child_env(tmp_path / "cache")

    def run():
        proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["compiles"] == 1 and first["disk_hits"] == 0
    assert second["compiles"] == 0 and second["disk_hits"] == 1
    assert first["out"] == pytest.approx(second["out"]) == pytest.approx(12 * np.tanh(1.8), rel=1e-5)


@requires_cc
def test_program_without_native_work_needs_no_compile():
    f = ember.jit(lambda x: (x, x.reshape(6)), backend="native")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, b = f(x)
    np.testing.assert_array_equal(np.asarray(b), np.arange(6))
    assert f.lower(x).executable.library_path is None
