"""One trace, many specializations: an MLP over 64 batch sizes and a transformer-style block over
16 sequence lengths compile once and match NumPy references at every size."""

from __future__ import annotations

import numpy as np

import ember
import ember.numpy as jnp
from ember._src import shapes as sh
from tests.dynamic import models

BATCHES = list(range(1, 65))  # 64 distinct batch sizes


def test_mlp_64_batch_sizes_one_compile() -> None:
    rng = np.random.default_rng(0)
    params = models.mlp_params(rng)
    f = ember.jit(models.mlp, dynamic_axes={"x": ("batch", None)})
    order = list(BATCHES)
    rng.shuffle(order)
    for b in order:
        x = rng.standard_normal((b, 16)).astype(np.float32)
        out = f(params, x)
        assert out.shape == (b, 8) and out.dtype == np.float32
        np.testing.assert_allclose(np.asarray(out), models.mlp_ref(params, x), rtol=2e-5, atol=2e-5)
    info = f.cache_info()
    assert info["compiles"] == 1
    assert info["specializations"] == 64
    # warm calls: served from the specialization cache, no new trace or specialization
    for b in (1, 17, 64):
        f(params, np.ones((b, 16), np.float32))
    info = f.cache_info()
    assert (info["compiles"], info["specializations"], info["hits"]) == (1, 64, 3)


def test_block_16_sequence_lengths_one_compile() -> None:
    rng = np.random.default_rng(1)
    params = models.block_params(rng)
    f = ember.jit(models.block, dynamic_axes={"x": "batch, seq, _"})
    for b, s, x in models.block_inputs(rng, 16):
        models.assert_block_close(f(params, x), models.block_ref(params, x), b, s, 16)
    info = f.cache_info()
    assert info["compiles"] == 1 and info["specializations"] == len(models.SEQS)


def test_block_program_is_symbolic() -> None:
    params = models.block_params(np.random.default_rng(2))
    f = ember.jit(models.block, dynamic_axes={"x": "batch, seq, _"})
    prog = f.lower(params, np.zeros((2, 3, 16), np.float32)).program
    b, s = sh.axis("batch"), sh.axis("seq")
    assert [a.shape for a in prog.out_avals] == [(b, s, 16), (b, 16)]
    reshapes = [e.params["new_sizes"] for e in prog.eqns if e.prim.name == "reshape"]
    assert (b * s, 16) in reshapes and (s * b, 16) in reshapes  # canonical: the same form
    iotas = [e.params["shape"] for e in prog.eqns if e.prim.name == "iota"]
    assert (s,) in iotas


def test_specialization_matches_static_jit_exactly() -> None:
    rng = np.random.default_rng(3)
    params = models.block_params(rng)
    f = ember.jit(models.block, dynamic_axes={"x": "batch, seq, _"})
    g = ember.jit(models.block)
    f.clear_cache()  # jit(models.block) of other tests shares these caches (JAX caches on the function)
    g.clear_cache()
    for b, s in [(1, 1), (2, 5), (3, 8)]:
        x = rng.standard_normal((b, s, 16)).astype(np.float32)
        for a, c in zip(f(params, x), g(params, x)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-6, atol=1e-6)
    assert f.cache_info()["compiles"] == 1 and g.cache_info()["compiles"] == 3


def test_grad_of_dynamic_jit_and_jit_of_grad() -> None:
    rng = np.random.default_rng(4)
    w = rng.standard_normal((6, 3)).astype(np.float32)

    def loss(w: object, x: object) -> object:
        return jnp.mean(jnp.square(x @ w))

    def grad_ref(w: np.ndarray, x: np.ndarray) -> np.ndarray:
        y = x.astype(np.float64) @ w
        return 2 * x.T.astype(np.float64) @ y / y.size

    jg = ember.jit(ember.grad(loss), dynamic_axes={"x": "batch, _"})
    gj = ember.grad(ember.jit(loss, dynamic_axes={"x": "batch, _"}))
    for b in (1, 4, 9):
        x = rng.standard_normal((b, 6)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(jg(w, x)), grad_ref(w, x), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(gj(w, x)), grad_ref(w, x), rtol=1e-4, atol=1e-5)
    assert jg.cache_info()["compiles"] == 1 and jg.cache_info()["specializations"] == 3


def test_vmap_inside_and_outside_dynamic_jit() -> None:
    rng = np.random.default_rng(5)

    def normalize(v: object) -> object:
        return v / jnp.sum(v)

    jv = ember.jit(ember.vmap(normalize), dynamic_axes=["batch, n"])
    vj = ember.vmap(ember.jit(normalize, dynamic_axes={"v": "n"}))
    for b, n in [(2, 3), (5, 1), (4, 7)]:
        xs = rng.uniform(0.5, 1.5, (b, n)).astype(np.float32)
        ref = xs / xs.sum(1, keepdims=True)
        np.testing.assert_allclose(np.asarray(jv(xs)), ref, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(vj(xs)), ref, rtol=1e-6)
    assert jv.cache_info()["compiles"] == 1 and jv.cache_info()["specializations"] == 3
