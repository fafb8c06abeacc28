"""Threads inside a loop body (native/emit/loop_bodies.py): a body's loops run once per step, so its
OpenMP loops go parallel only for BODY_REGION_FACTOR times the threshold's work, while its products
keep the threshold and share their panels on ember's pool."""

from __future__ import annotations

import re

import numpy as np

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.emit import gemm_kernel
from ember._src.native.runtime import threadpool
from ember._src.native.runtime.threadpool import DEFAULT_PARALLEL_THRESHOLD
from tests.native.conftest import requires_cc

RNG = np.random.default_rng(3)
U = (RNG.standard_normal((256, 1024)) / 16).astype(np.float32)


def _lstm_like(x):
    def step(h, xt):
        g = xt + h @ U
        c = jnp.tanh(g[:, :256]) * (1 / (1 + jnp.exp(-g[:, 256:512])))
        return c, c
    return lax.scan(step, jnp.zeros((x.shape[1], 256), jnp.float32), x)


def _reference(x):
    h = np.zeros((x.shape[1], 256))
    ys = []
    for xt in x.astype(np.float64):
        g = xt + h @ U
        h = np.tanh(g[:, :256]) / (1 + np.exp(-g[:, 256:512]))
        ys.append(h)
    return h, np.stack(ys)


def _body_functions(source: str) -> str:
    """The C of the loop body's kernels and function (names starting with L0b0)."""
    return "\n".join(m.group(0) for m in re.finditer(r"static[^\n]*\bL0b0\w*\([^)]*\) \{.*?\n\}\n",
                                                      source, re.S))


@requires_cc
def test_small_body_map_is_serial_and_product_parallel():
    gemm_kernel.load(wait=True)
    x = RNG.standard_normal((6, 8, 1024)).astype(np.float32)
    f = ember.jit(_lstm_like, backend="native", num_threads=2)
    h, ys = f(x)
    want_h, want_ys = _reference(x)
    np.testing.assert_allclose(np.asarray(h), want_h, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ys), want_ys, rtol=1e-4, atol=1e-5)
    exe = f.lower(x).executable
    if exe.fallback_reason is not None or gemm_kernel.kernel_symbol() is None or gemm_kernel.BLAS_ONLY:
        return
    body = _body_functions(exe.source)
    assert "L0b0" in body
    # the map of 8 x 256 (exp, tanh: above the plain threshold's work) runs on the calling thread
    assert "omp parallel" not in body
    # the 8 x 1024 x 256 product (2M multiply-adds, above the threshold) asks for the two threads
    # and so starts loading the pool that shares them out
    assert 8 * 1024 * 256 >= DEFAULT_PARALLEL_THRESHOLD
    call = re.search(r"f_\(8, 1024, 256, [^;]*\);", body)
    assert call is not None and call.group(0).endswith(", 2);")
    assert threadpool.load(wait=True)
    # a single thread: the product asks for one
    one = ember.jit(_lstm_like, backend="native", num_threads=1).lower(x).executable
    call1 = re.search(r"f_\(8, 1024, 256, [^;]*\);", one.source)
    assert call1 is not None and call1.group(0).endswith(", 1);")
