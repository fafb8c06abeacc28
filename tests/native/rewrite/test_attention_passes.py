"""The attention passes (native/rewrite/attention_passes.py) and the affine index analysis they use
(native/rewrite/index_affine.py): causal masks built in different ways become the ``causal`` flag, other
index-only masks are left alone, a padding factor stays an operand read through its broadcast;
results equal a float64 NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import shapes as sh
from ember._src.core import ShapedArray
from ember._src.native.rewrite import index_affine as ia
from ember._src.native.rewrite.passes import run_passes
from ember._src.prims.attention import attention
from ember._src.program import trace_to_program
from tests.native.conftest import requires_cc
from tests.native.emit.test_attention import data, ref

pytestmark = requires_cc
RNG = np.random.default_rng(19)


def attention_eqns(f, *args):
    p = run_passes(ember.make_program(f)(*args), ["simplify", "cse", "absorb_causal_mask", "dce"])
    return [e for e in p.eqns if e.prim.name == "attention"], p


def iota_causal(L, S, offset=0):
    return jnp.arange(S)[None, :] <= jnp.arange(L)[:, None] + offset


MASKS = {
    "arange compare": lambda L, S: iota_causal(L, S),
    "tril of ones": lambda L, S: jnp.tril(jnp.ones((L, S), bool)),
    "negated upper": lambda L, S: ~(jnp.arange(S)[None, :] > jnp.arange(L)[:, None]),
    "and with all-true": lambda L, S: iota_causal(L, S) & jnp.ones((L, S), bool),
    "gathered positions": lambda L, S: jnp.take(jnp.arange(S), jnp.arange(S))[None, :]
    <= jnp.take(jnp.arange(L), jnp.arange(L))[:, None],
}


@pytest.mark.parametrize("name", sorted(MASKS))
def test_causal_masks_become_the_flag(name):
    q, k, v = data(1, 2, 2, 9, 9, 8, 8)

    def f(q, k, v):
        return attention(q, k, v, None, MASKS[name](9, 9)[None, None], scale=0.3)

    eqns, _ = attention_eqns(f, q, k, v)
    assert len(eqns) == 1 and eqns[0].params["causal"] == "top_left" and not eqns[0].params["has_mask"]
    got = np.asarray(ember.jit(f, backend="native")(q, k, v))
    np.testing.assert_allclose(got, ref(q, k, v, scale=0.3, causal="top_left"), rtol=1e-4, atol=2e-5)


def test_kv_cache_offset_is_bottom_right_for_every_length():
    def f(q, k, v):
        L, S = q.shape[2], k.shape[2]
        return attention(q, k, v, None, iota_causal(L, S, ember.dimension_as_value(S) -
                                                    ember.dimension_as_value(L))[None, None], scale=0.3)

    seq, past = sh.axis("seq"), sh.axis("past")
    avals = [ShapedArray((1, 2, seq, 8), np.float32), ShapedArray((1, 2, past, 8), np.float32),
             ShapedArray((1, 2, past, 8), np.float32)]
    prog, _ = trace_to_program(lambda q, k, v: [f(q, k, v)], avals)
    p = run_passes(prog, ["simplify", "cse", "absorb_causal_mask", "dce"])
    (e,) = [e for e in p.eqns if e.prim.name == "attention"]
    assert e.params["causal"] == "bottom_right" and not e.params["has_mask"]
    jf = ember.jit(f, dynamic_axes={"q": (None, None, "seq", None), "k": (None, None, "past", None),
                                    "v": (None, None, "past", None)}, backend="native")
    for L, S in [(1, 5), (3, 9), (9, 9)]:
        q, k, v = data(1, 2, 2, L, S, 8, 8)
        np.testing.assert_allclose(np.asarray(jf(q, k, v)), ref(q, k, v, scale=0.3, causal="bottom_right"),
                                   rtol=1e-4, atol=2e-5)


def test_padding_factor_stays_an_operand_without_the_query_axis():
    q, k, v = data(2, 2, 2, 9, 9, 8, 8)
    pad = np.ones((2, 9), bool)
    pad[1, 6:] = False

    def f(q, k, v, pad):
        m = iota_causal(9, 9)[None, None] & jnp.broadcast_to(pad[:, None, None, :], (2, 1, 9, 9))
        return attention(q, k, v, None, m, scale=0.3)

    (e,), _ = attention_eqns(f, q, k, v, pad)
    assert e.params["causal"] == "top_left" and e.params["has_mask"]
    assert tuple(e.inputs[-1].aval.shape) == (2, 1, 1, 9)
    got = np.asarray(ember.jit(f, backend="native")(q, k, v, pad))
    np.testing.assert_allclose(got, ref(q, k, v, None, pad[:, None, None, :], scale=0.3, causal="top_left"),
                               rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("offset", [1, -1])
def test_other_index_masks_are_left_alone(offset):
    q, k, v = data(1, 2, 2, 9, 9, 8, 8)
    mask = np.arange(9)[None, :] <= np.arange(9)[:, None] + offset

    def f(q, k, v):
        return attention(q, k, v, None, iota_causal(9, 9, offset)[None, None], scale=0.3)

    (e,), _ = attention_eqns(f, q, k, v)
    assert e.params["has_mask"] and e.params["causal"] is None
    got = np.asarray(ember.jit(f, backend="native")(q, k, v))
    np.testing.assert_allclose(got, ref(q, k, v, None, mask, scale=0.3), rtol=1e-4, atol=2e-5)


def test_analysis_of_index_values():
    seq = sh.axis("seq")

    def f(x):
        i = jnp.arange(x.shape[0])
        shifted = jnp.concatenate([i[:1] - 1, i])  # [-1, 0, 1, ..., seq-1]
        steps = shifted[1:] - shifted[:-1]         # all 1
        seg = jnp.cumsum((steps != 1).astype(jnp.int32))  # all 0
        return [shifted, steps, seg, jnp.take(i, i) * 2 + 3, i < 0, i >= 0]

    prog, _ = trace_to_program(f, [ShapedArray((seq,), np.float32)])
    prog = run_passes(prog, ["simplify", "cse"])
    an = ia.IndexAnalysis(prog)
    shifted, steps, seg, gathered, neg, nonneg = (an.of(v) for v in prog.outvars)
    assert shifted == ia.Aff(((0, 1),), -1)
    assert steps == ia.Aff((), 1) and seg == ia.Aff((), 0)
    assert gathered == ia.Aff(((0, 2),), 3)
    assert ia.simplify(neg, (seq,)).false and ia.simplify(nonneg, (seq,)) == ia.TRUE


def composed(q, k, v, bias=None, mask=None, fill=-np.inf, scale=0.125):
    """Attention written out with jnp (the importer's and hand-written form)."""
    s = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * scale
    if bias is not None:
        s = s + bias
    if mask is not None:
        s = jnp.where(mask, s, fill)
    return jnp.matmul(ember.nn.softmax(s, axis=-1), v)


def fused(f, *args):
    """The optimized program's attention equations, and the native result vs the numpy backend's."""
    p = run_passes(ember.make_program(f)(*args))
    got = np.asarray(ember.jit(f, backend="native")(*args))
    want = np.asarray(ember.jit(f, backend="numpy")(*args))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5, equal_nan=True)
    return [e for e in p.eqns if e.prim.name == "attention"], got


def test_written_out_attention_is_fused_with_bias_and_causal_mask():
    q, k, v = data(2, 3, 3, 37, 37, 8, 8)
    bias = RNG.standard_normal((1, 1, 37, 37)).astype(np.float32)

    def f(q, k, v, b):
        return composed(q, k, v, b, jnp.arange(37)[:, None] >= jnp.arange(37)[None, :])

    (e,), got = fused(f, q, k, v, bias)
    assert e.params["causal"] == "top_left" and e.params["has_bias"] and not e.params["has_mask"]
    np.testing.assert_allclose(got, ref(q, k, v, bias, scale=0.125, causal="top_left"), rtol=1e-4, atol=2e-5)


def test_einsum_layout_and_division_scale():
    q, k, v = (RNG.standard_normal((2, 20, 3, 8)).astype(np.float32) for _ in range(3))

    def f(q, k, v):
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / 8.0
        return jnp.einsum("bhqk,bkhd->bqhd", ember.nn.softmax(s, axis=-1), v)

    (e,), got = fused(f, q, k, v)
    assert e.params["scale"] == 0.125 and not e.params["has_mask"]
    want = ref(*(t.transpose(0, 2, 1, 3) for t in (q, k, v)), scale=0.125).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("fill", [-np.inf, -1e30, float(np.finfo(np.float32).min)])
def test_fully_masked_rows_keep_the_composed_semantics(fill):
    q, k, v = data(1, 2, 2, 6, 6, 8, 8)
    mask = RNG.random((1, 2, 6, 6)) < 0.6
    mask[0, 0, 2] = False

    (e,), got = fused(lambda q, k, v, m: composed(q, k, v, None, m, fill), q, k, v, mask)
    assert e.params["has_mask"] and e.params["mask_value"] == float(np.float32(fill))
    if fill == -np.inf:  # softmax of a row of -inf is NaN
        assert np.isnan(got[0, 0, 2]).all()
    else:  # equal logits: the mean of the values
        np.testing.assert_allclose(got[0, 0, 2], v[0, 0].mean(0), rtol=1e-5, atol=1e-6)


def test_no_fusion_when_scores_are_needed_elsewhere_or_the_fill_is_small():
    q, k, v = data(1, 2, 2, 6, 6, 8, 8)
    mask = RNG.random((1, 2, 6, 6)) < 0.6

    def probs_too(q, k, v):
        s = jnp.matmul(q, jnp.swapaxes(k, -1, -2))
        p = ember.nn.softmax(s, axis=-1)
        return jnp.matmul(p, v), p

    p = run_passes(ember.make_program(probs_too)(q, k, v))
    assert not any(e.prim.name == "attention" for e in p.eqns)
    small = run_passes(ember.make_program(lambda q, k, v, m: composed(q, k, v, None, m, -5.0))(q, k, v, mask))
    assert not any(e.prim.name == "attention" for e in small.eqns)
