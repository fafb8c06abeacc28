"""The fused ``attention`` primitive and its native call step (native/emit/attention.py, the tiled
online-softmax kernel): against a float64 NumPy reference written here (not the primitive's impl)
over sequence lengths 1..1000, head dims 1..80, grouped-query heads, both causal alignments,
boolean and additive masks, fully masked rows in both semantics; one compile for several
sequence lengths; grad against finite differences; vmap; and the memory plan holds nothing of
size ``L x S``."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember._src.prims.attention import attention
from tests.native.conftest import requires_cc
from tests.native.util import run_with_call_step

pytestmark = requires_cc
RNG = np.random.default_rng(18)


def ref(q, k, v, bias=None, mask=None, *, scale, causal=None, mask_value=None):
    """float64 reference: explicit loops over (batch, head), materialized scores."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    B, H, L, _ = q.shape
    Hk, S = k.shape[1], k.shape[2]
    out = np.zeros((B, H, L, v.shape[3]))
    keep = np.ones((L, S), bool)
    i, j = np.arange(L)[:, None], np.arange(S)[None, :]
    if causal == "top_left":
        keep = j <= i
    elif causal == "bottom_right":
        keep = j <= i + S - L
    for b in range(B):
        for h in range(H):
            kh = h // (H // Hk)
            s = q[b, h] @ k[b, kh].T * scale
            if bias is not None:
                s = s + np.broadcast_to(bias, (B, H, L, S))[b, h]
            kp = keep if mask is None else keep & np.broadcast_to(mask, (B, H, L, S))[b, h]
            for r in range(L):
                if not kp[r].any():
                    out[b, h, r] = 0 if mask_value is None else v[b, kh].mean(0)
                    continue
                row = np.where(kp[r], s[r], -np.inf)
                e = np.exp(row - row.max())
                out[b, h, r] = (e / e.sum()) @ v[b, kh]
    return out


def data(B, H, Hk, L, S, D, Dv, dtype=np.float32):
    return (RNG.standard_normal((B, H, L, D)).astype(dtype), RNG.standard_normal((B, Hk, S, D)).astype(dtype),
            RNG.standard_normal((B, Hk, S, Dv)).astype(dtype))


def native(f, *args):
    return run_with_call_step(f, "attention", *args)[0]


def tol(dtype):
    return dict(rtol=1e-4, atol=2e-5) if np.dtype(dtype) == np.float32 else dict(rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("B,H,Hk,L,S,D,Dv", [
    (1, 1, 1, 1, 1, 1, 1), (2, 2, 2, 7, 7, 8, 8), (1, 4, 2, 64, 64, 64, 64), (1, 2, 1, 130, 130, 80, 80),
    (2, 3, 3, 7, 130, 8, 5), (1, 2, 2, 130, 7, 64, 64), (1, 1, 1, 1000, 1000, 64, 64)])
@pytest.mark.parametrize("causal", [None, "top_left", "bottom_right"])
def test_matches_reference(B, H, Hk, L, S, D, Dv, causal):
    q, k, v = data(B, H, Hk, L, S, D, Dv)
    scale = 1 / np.sqrt(D)
    got = native(lambda q, k, v: attention(q, k, v, causal=causal), q, k, v)
    np.testing.assert_allclose(got, ref(q, k, v, scale=scale, causal=causal), **tol(np.float32))


@pytest.mark.parametrize("causal", [None, "bottom_right"])
def test_float64(causal):
    q, k, v = data(2, 4, 2, 70, 90, 64, 16, np.float64)
    got = native(lambda q, k, v: attention(q, k, v, causal=causal, scale=0.3), q, k, v)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref(q, k, v, scale=0.3, causal=causal), **tol(np.float64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask_value", [None, -1e30])
def test_bool_mask_and_bias_with_fully_masked_rows(dtype, mask_value):
    B, H, L, S = 2, 3, 33, 70
    q, k, v = data(B, H, H, L, S, 8, 8, dtype)
    bias = RNG.standard_normal((B, 1, L, S)).astype(dtype)
    mask = RNG.random((1, H, L, S)) < 0.7
    mask[0, 1, 5] = False  # a row with nothing to attend
    mask[0, :, 32] = False
    f = lambda q, k, v, b, m: attention(q, k, v, b, m, scale=0.5, causal="top_left",  # noqa: E731
                                        mask_value=mask_value)
    got = native(f, q, k, v, bias, mask)
    want = ref(q, k, v, bias, mask, scale=0.5, causal="top_left", mask_value=mask_value)
    np.testing.assert_allclose(got, want, **tol(dtype))
    if mask_value is None:
        assert np.all(got[:, 1, 5] == 0)
    np.testing.assert_allclose(np.asarray(attention(q, k, v, bias, mask, scale=0.5, causal="top_left",
                                                    mask_value=mask_value)), want, **tol(dtype))


def test_additive_minus_inf_rows_give_zeros_like_torch():
    torch = pytest.importorskip("torch")
    q, k, v = data(1, 2, 2, 9, 9, 8, 8)
    bias = np.zeros((1, 1, 9, 9), np.float32)
    bias[..., 3, :] = -np.inf
    bias[..., 4, ::2] = -np.inf
    got = native(lambda q, k, v, b: attention(q, k, v, b, scale=0.25), q, k, v, bias)
    want = torch.nn.functional.scaled_dot_product_attention(*(torch.from_numpy(t) for t in (q, k, v, bias)),
                                                            scale=0.25).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


def test_one_compile_for_several_sequence_lengths():
    f = ember.jit(lambda q, k, v: attention(q, k, v, causal="bottom_right"),
                  dynamic_axes={"q": (None, None, "seq", None), "k": (None, None, "past", None),
                                "v": (None, None, "past", None)}, backend="native")
    for L, S in [(1, 1), (7, 7), (1, 130), (64, 200), (130, 130)]:
        q, k, v = data(1, 4, 2, L, S, 16, 16)
        np.testing.assert_allclose(np.asarray(f(q, k, v)), ref(q, k, v, scale=0.25, causal="bottom_right"),
                                   **tol(np.float32))
    assert f.cache_info()["compiles"] == 1 and f.cache_info()["specializations"] == 5


def test_activation_memory_is_linear_in_sequence_length():
    def block(q, k, v):
        return attention(q, k, v, causal="top_left") * 2.0

    f = ember.jit(block, dynamic_axes={a: (None, None, "seq", None) for a in "qkv"}, backend="native")
    sizes = {}
    for n in (512, 1024):
        args = data(1, 4, 4, n, n, 64, 64)
        spec = f.lower(*args).specialize(seq=n)
        sizes[n] = spec.run.arena_bytes
        # the attention output and the packed K^T: a few [seq, heads * 64] float buffers, while the
        # scores of the four heads would take 4 * n * n * 4 bytes (16 MiB at 1024)
        assert sizes[n] <= 3 * n * 4 * 64 * 4
    assert sizes[1024] <= 2.1 * sizes[512]


def test_grad_matches_finite_differences():
    q, k, v = data(1, 2, 1, 5, 6, 3, 2, np.float64)
    bias = RNG.standard_normal((1, 2, 5, 6))

    def loss(q, k, v, b):
        return (attention(q, k, v, b, scale=0.7, causal="bottom_right") ** 2).sum()

    grads = ember.jit(ember.grad(loss, argnums=(0, 1, 2, 3)))(q, k, v, bias)
    args = [q, k, v, bias]
    for n, g in enumerate(grads):
        num = np.zeros_like(args[n])
        for idx in np.ndindex(args[n].shape):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[n][idx] += 1e-6
            minus[n][idx] -= 1e-6
            num[idx] = (float(loss(*plus)) - float(loss(*minus))) / 2e-6
        np.testing.assert_allclose(np.asarray(g), num, rtol=1e-6, atol=1e-8)


def test_vmap_merges_the_mapped_axis():
    q, k, v = data(2, 2, 2, 5, 6, 4, 4)
    qs = np.stack([q, 2 * q, -q])
    mask = RNG.random((3, 1, 1, 5, 6)) < 0.8
    got = ember.jit(ember.vmap(lambda q, m: attention(q, k, v, None, m, scale=0.5), in_axes=(0, 0)))(qs, mask)
    for n in range(3):
        np.testing.assert_allclose(np.asarray(got[n]), ref(qs[n], k, v, None, mask[n], scale=0.5), rtol=1e-4,
                                   atol=2e-5)


def test_bad_operands_raise_named_errors():
    q, k, v = data(1, 3, 2, 4, 4, 8, 8)
    with pytest.raises(ember.errors.ShapeError, match="multiple of key/value heads"):
        attention(q, k, v)
    with pytest.raises(ember.errors.ShapeError, match="bias"):
        attention(q[:, :2], k, v, np.zeros((1, 2, 3, 4), np.float32))
    with pytest.raises(ember.errors.DTypeError, match="mask must be bool"):
        attention(q[:, :2], k, v, None, np.zeros((1, 1, 4, 4), np.float32))


@pytest.mark.parametrize("L,S", [(0, 5), (5, 0), (0, 0)])
@pytest.mark.parametrize("mask_value", [None, -np.inf, -1e30])
def test_empty_sequences(L, S, mask_value):
    q, k, v = data(1, 2, 2, L, S, 8, 8)
    f = lambda q, k, v: attention(q, k, v, mask_value=mask_value, causal="bottom_right")  # noqa: E731
    got = np.asarray(ember.jit(f, backend="native")(q, k, v))
    assert got.shape == (1, 2, L, 8) and np.all(got == 0)  # a sum over no keys, in every semantics
    np.testing.assert_array_equal(got, np.asarray(f(q, k, v)))


def test_inside_a_scan_body():
    q, k, v = data(1, 2, 2, 40, 40, 16, 16)

    def body(c, _):
        o = attention(c, k, v, causal="top_left")
        return o, o.sum()

    f = ember.jit(lambda q: ember.lax.scan(body, q, None, length=3), backend="native")
    out, _ = f(q)
    want = q.astype(np.float64)
    for _ in range(3):
        want = ref(want, k, v, scale=0.25, causal="top_left")
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-4, atol=2e-5)
    exe = f.lower(q).executable
    assert "em_attn_run" in exe.source  # the body runs the kernel, not a fallback
