"""Operands that are empty under some bindings of named dynamic axes (a ``seq - 1`` slice, the
remainder ``seq - n*s`` of a checkpointed scan): concatenate, pad and gather run as native kernels
(reads of the possibly-empty operand guarded in C), with no Python fallback step, and agree with
NumPy at bindings where the operand is empty and where it is not."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native import specialize
from ember._src.native.runtime import compiler
from ember._src.prims.indexing import take_p
from tests.native.conftest import requires_cc
from tests.native.scheduling.test_symbolic_loops import _all_fallbacks, _ck_loss, _ck_loss_np, _loop_steps

pytestmark = requires_cc


def _symbolic(f, *args):
    """The level-1 symbolic build behind ``f`` (a native ``jit`` with dynamic axes)."""
    sym = specialize.symbolic_executable(f.lower(*args).program)
    assert sym.fallback_reason is None, sym.fallback_reason
    return sym


def _kernel_prims(sched) -> set[str]:
    return {e.prim.name for st in sched.steps if st.kind == "kernel" for e in st.eqns}


def _check(f, f_np, make, lengths, axes, prims) -> None:
    """``f`` natively under ``axes`` at every length (one C compile) against ``f_np`` and the
    reference backend; the schedule has no fallback step and fuses ``prims`` into kernels."""
    nat = ember.jit(f, dynamic_axes=axes, backend="native")
    ref = ember.jit(f, dynamic_axes=axes, backend="numpy")
    before = compiler.cache_stats()["compiles"]
    for L in lengths:
        args = make(L)
        got = nat(*args)
        want = f_np(*args)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=0)
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref(*args)), rtol=1e-12, atol=0)
    assert nat.cache_info()["compiles"] == 1
    assert compiler.cache_stats()["compiles"] - before <= 1
    sched = _symbolic(nat, *make(lengths[-1])).schedule
    assert _all_fallbacks(sched) == 0, sched
    assert prims <= _kernel_prims(sched), sched


def test_concatenate_with_a_piece_that_may_be_empty() -> None:
    def f(x, y):
        return jnp.concatenate([jnp.sin(x[1:]), y * 2.0, x[:1] + x[-1]]) * 3.0 + 1.0

    def f_np(x, y):
        return np.concatenate([np.sin(x[1:]), y * 2.0, x[:1] + x[-1]]) * 3.0 + 1.0

    rng = np.random.default_rng(0)
    y = rng.standard_normal(4)
    _check(f, f_np, lambda L: (rng.standard_normal(L), y), [1, 2, 1, 5, 3],
           {"x": ("seq",)}, {"concatenate"})


def test_concatenate_of_pieces_that_may_all_be_empty_on_a_2d_axis() -> None:
    """Two pieces of ``seq - 1`` rows and one of ``n - 1``: all empty at seq = n = 1 (an empty
    result), one empty at a time otherwise."""
    def f(a, b):
        return jnp.concatenate([a[1:], jnp.exp(b[1:]), a[1:] * 2.0], axis=0).T + 1.0

    def f_np(a, b):
        return np.concatenate([a[1:], np.exp(b[1:]), a[1:] * 2.0], axis=0).T + 1.0

    rng = np.random.default_rng(1)
    shapes = [(1, 1), (1, 4), (3, 1), (4, 6), (2, 2)]
    it = iter(shapes * 2)

    def make(_):
        s, n = next(it)
        return rng.standard_normal((s, 3)), rng.standard_normal((n, 3))
    _check(f, f_np, make, list(range(len(shapes))), {"a": ("seq", None), "b": ("n", None)},
           {"concatenate"})


@pytest.mark.parametrize("interior", [0, 2])
def test_pad_of_an_operand_that_may_be_empty(interior) -> None:
    def f(x):
        return lax.pad(jnp.cos(x[1:]), jnp.asarray(-1.5, x.dtype), [(2, 1, interior), (0, 1, 0)]) * 2.0

    def f_np(x):
        v = np.cos(x[1:])
        n = v.shape[0]
        rows = n + max(n - 1, 0) * interior
        out = np.full((2 + rows + 1, v.shape[1] + 1), -1.5)
        out[2:2 + rows:interior + 1, :v.shape[1]] = v
        return out * 2.0

    rng = np.random.default_rng(2)
    _check(f, f_np, lambda L: (rng.standard_normal((L, 3)),), [1, 2, 1, 4, 7],
           {"x": ("seq", None)}, {"pad"})


def test_gather_from_an_operand_that_may_be_empty() -> None:
    """``take`` (mode "fill") from a ``seq - 1`` axis: static indices (negative ones counting from
    the end) read the fill value (NaN) where they fall outside (all of them when the axis is
    empty); an index set that is itself ``seq - 1`` long is empty exactly when the operand is."""
    idx = np.array([0, 2, -1, 1, 5])

    def f(x, i):
        a = jnp.take(x[1:] * 2.0, idx, axis=0, mode="fill")
        b = jnp.take(x[1:], i[1:] % jnp.maximum(x.shape[0] - 1, 1), axis=0, mode="fill")
        return jnp.concatenate([a, b + 1.0])

    def f_np(x, i):
        v = x[1:] * 2.0
        a = np.array([v[k] if -len(v) <= k < len(v) else np.nan for k in idx])  # NumPy negatives
        b = x[1:][i[1:] % max(len(x) - 1, 1)] + 1.0
        return np.concatenate([a, b])

    rng = np.random.default_rng(3)

    def make(L):
        return rng.standard_normal(L), rng.integers(0, 10, L)
    nat = ember.jit(f, dynamic_axes={"x": ("seq",), "i": ("seq",)}, backend="native")
    for L in (1, 2, 3, 1, 7):
        x, i = make(L)
        np.testing.assert_allclose(np.asarray(nat(x, i)), f_np(x, i), rtol=1e-12, atol=0)
    assert nat.cache_info()["compiles"] == 1
    sched = _symbolic(nat, *make(4)).schedule
    assert _all_fallbacks(sched) == 0, sched
    assert "take" in _kernel_prims(sched), sched


def test_clip_gather_from_an_axis_that_may_be_empty_raises_when_it_is() -> None:
    """mode "clip" keeps its defined semantics: a non-empty index set into an empty axis raises
    (the one step that stays a fallback), the same library serves non-empty bindings."""
    def f(x):
        return take_p.bind(x[1:], jnp.array([0, 3, -2]), axis=0, mode="clip") * 2.0

    nat = ember.jit(f, dynamic_axes={"x": ("seq",)}, backend="native")
    for L in (2, 5, 3):
        x = np.arange(float(L)) + 1.0
        np.testing.assert_array_equal(np.asarray(nat(x)), x[1:][np.clip([0, 3, -2], 0, L - 2)] * 2.0)
    with pytest.raises(IndexError, match="zero-size axis"):
        nat(np.ones(1))
    assert nat.cache_info()["compiles"] == 1


def test_reads_of_possibly_empty_operands_are_bounds_checked_in_c() -> None:
    """A ``seq - 1`` piece after a static one: its clamped index would read ``x[seq]`` at seq = 1
    (the piece is empty, its value never selected); the generated C checks the offset against
    ``x``'s size. A kernel over a possibly-empty operand's own domain needs no check."""
    y = np.array([10.0, 20.0, 30.0])

    def f(x):
        return jnp.concatenate([y, x[1:]]) + 1.0, jnp.sin(x[1:])

    nat = ember.jit(f, dynamic_axes={"x": ("seq",)}, backend="native")
    sym = _symbolic(nat, np.arange(3.0))
    checked = [ln for ln in sym.source.splitlines() if "(uint64_t)" in ln and " ? p" in ln]
    assert len(checked) == 1, sym.source
    # the kernel first calls its unchecked twin when x[1:] has elements (emit/checked_reads.py)
    guards = [ln.strip() for ln in sym.source.splitlines() if ln.strip().startswith("if (") and "_u(" in ln]
    assert len(guards) == 1 and "> 0)" in guards[0], sym.source
    for L in (1, 2, 5, 1):
        x = np.arange(float(L)) - 0.5
        a, b = nat(x)
        np.testing.assert_array_equal(np.asarray(a), np.concatenate([y, x[1:]]) + 1.0)
        np.testing.assert_allclose(np.asarray(b), np.sin(x[1:]), rtol=1e-14)
    assert nat.cache_info()["compiles"] == 1
    assert _all_fallbacks(sym.schedule) == 0


def _max_pool_np(y, k, s=2):
    """Max pool of ``y`` (NHWC, padded with -inf by one row and column each side), NaN-propagating."""
    y = np.pad(y, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    n, h, w, c = y.shape
    out = np.empty((n, (h - k) // s + 1, (w - k) // s + 1, c), y.dtype)
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            win = y[:, s * i:s * i + k, s * j:s * j + k, :].reshape(n, k * k, c)
            out[:, i, j] = np.where(np.isnan(win).any(1), np.nan, win.max(1))
    return out


def test_padded_max_pools_over_symbolic_image_sizes() -> None:
    """Max pools that read their -inf padding in place, over symbolic image sizes: a 3x3 stride-2
    pool of ``x[:, ::2, ::2]`` (as after a ResNet stem: never empty, though its size's form
    ``1 + (h - 1) // 2`` is not proven non-zero)
    and a 2x2 stride-2 pool of ``x[:, 1:, 1:]`` (empty at h = 1 or w = 1). Each kernel runs its
    unchecked twin when its operand has elements and the checked body when not; NaN and -inf
    inputs, one compile, against a NumPy loop."""
    def pool(y, k):
        return lax.reduce_window(y, -jnp.inf, lax.max, (1, k, k, 1), (1, 2, 2, 1),
                                 ((0, 0), (1, 1), (1, 1), (0, 0)))

    def f(x):  # x[:, ::2, ::2] as a strided 1x1 window (a strided slice of a symbolic axis raises)
        half = lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 1, 1), (1, 2, 2, 1), "VALID")
        return pool(half * 2.0, 3), pool(x[:, 1:, 1:, :] + 1.0, 2)

    rng = np.random.default_rng(5)
    nat = ember.jit(f, dynamic_axes={"x": (None, "h", "w", None)}, backend="native")
    for h, w in ((9, 12), (1, 5), (2, 2), (17, 6), (1, 1), (8, 8)):
        x = rng.standard_normal((2, h, w, 19)).astype(np.float32)
        x[0, -1, -1, 3] = np.nan
        x[1, min(2, h - 1), 0, :5] = -np.inf
        a, b = nat(x)
        np.testing.assert_array_equal(np.asarray(a), _max_pool_np(x[:, ::2, ::2, :] * 2.0, 3))
        np.testing.assert_array_equal(np.asarray(b), _max_pool_np(x[:, 1:, 1:, :] + 1.0, 2))
    assert nat.cache_info()["compiles"] == 1
    src = _symbolic(nat, np.ones((1, 4, 4, 19), np.float32)).source
    assert sum("_u(" in ln and ln.strip().startswith("if (") for ln in src.splitlines()) >= 1, src


@pytest.mark.parametrize("reverse", [False, True])
def test_checkpointed_scan_gradient_has_no_fallback_step(reverse) -> None:
    """``grad`` of a ``checkpoint=True`` scan over a named ``seq`` axis: the remainder piece
    ``seq - n*s`` is empty at perfect squares (1, 4, 16); the xs-gradient pad and the per-step
    output concatenate run as kernels, one C compile serves every length, and the gradient matches
    the reference backend and finite differences."""
    h = 4
    rng = np.random.default_rng(11)
    W = rng.standard_normal((h, h)) / np.sqrt(h)
    h0 = rng.standard_normal(h)
    axes = {"xs": ("seq", None)}
    g = ember.jit(ember.grad(_ck_loss(True, reverse), argnums=(0, 1, 2)), dynamic_axes=axes,
                  backend="native")
    ref = ember.jit(ember.grad(_ck_loss(True, reverse, req=False), argnums=(0, 1, 2)),
                    dynamic_axes=axes, backend="numpy")
    for L in (1, 2, 3, 4, 7, 16):
        xs = rng.standard_normal((L, h))
        got = [np.asarray(a) for a in g(W, xs, h0)]
        for a, b in zip(got, ref(W, xs, h0)):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-11, atol=1e-12)
        eps = 1e-6
        V = rng.standard_normal(xs.shape)
        up, down = (_ck_loss_np(W, xs + sg * eps * V, h0, reverse) for sg in (1, -1))
        fd = (up - down) / (2 * eps)
        assert np.isclose((got[1] * V).sum(), fd, rtol=1e-6, atol=1e-8)
    assert g.cache_info()["compiles"] == 1
    sched = _symbolic(g, W, xs, h0).schedule
    assert _all_fallbacks(sched) == 0, sched
    assert _loop_steps(sched)
    assert {"pad", "concatenate"} <= _kernel_prims(sched), sched
