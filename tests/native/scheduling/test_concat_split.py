"""Split loops for concatenates (native/scheduling/concat_split.py): per-piece loop nests instead of select
chains, checked against the reference backend."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.lax import conv as lax_conv
from ember._src.native.backend import NativeExecutable
from ember._src.native.scheduling import concat_split
from tests.native.util import check


def _kernel_parts(exe: NativeExecutable) -> list[int]:
    """Number of parts of each kernel step (0: one loop nest)."""
    return [len(s.ir.parts or []) for s in exe.schedule.steps if s.kind == "kernel" and s.ir is not None]


def _rng() -> np.random.Generator:
    return np.random.default_rng(42)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_many_pieces_along_each_axis(axis: int) -> None:
    """Twelve pieces of different sizes along an outer, middle and inner axis."""
    rng = _rng()
    sizes = [1, 3, 2, 5, 1, 4, 2, 1, 6, 3, 2, 8]
    xs = []
    for n in sizes:
        shape = [4, 5, 9]
        shape[axis] = n
        xs.append(rng.standard_normal(shape).astype(np.float32))

    def f(*xs: object) -> object:
        return jnp.concatenate(xs, axis=axis)

    exe = check(f, *xs)
    assert max(_kernel_parts(exe)) == len(sizes)
    assert "? " not in exe.source.split("ember_main")[0].split("static void k0")[1]  # no select chain


def test_fused_producers_per_piece() -> None:
    """Each piece's producers (elementwise ops, slices, pads, broadcasts) fuse into its loop nest."""
    rng = _rng()
    x = rng.standard_normal((6, 10)).astype(np.float32)
    y = rng.standard_normal((6, 1)).astype(np.float32)

    def f(x: object, y: object) -> object:
        pieces = [jnp.sin(x[:, 2 * i:2 * i + 2]) * float(i) for i in range(5)]
        pieces += [jnp.pad(x[:, :3] * 2.0, ((0, 0), (1, 2))), jnp.broadcast_to(y, (6, 4)) + 1.0]
        return jnp.concatenate(pieces, axis=1)

    exe = check(f, x, y)
    assert exe.schedule.count("kernel") == 1
    assert _kernel_parts(exe) == [7]


def test_concatenate_inside_bigger_expression() -> None:
    """A concatenate read through other ops (elementwise after it, a transpose of it) still splits."""
    rng = _rng()
    xs = [rng.standard_normal((3, k, 8)).astype(np.float64) for k in (2, 1, 4, 3, 2, 5)]
    b = rng.standard_normal((17, 8)).astype(np.float64)

    def f(*args: object) -> object:
        *xs, b = args
        c = jnp.concatenate([jnp.tanh(v) for v in xs], axis=1)
        return jnp.transpose(c * 2.0 + b, (1, 0, 2)) - 1.0

    exe = check(f, *xs, b)
    assert _kernel_parts(exe) == [6]


def test_nested_concatenate_tap_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-d window tap stack (concatenate of slices of a concatenate) becomes k1*k2 parts. The
    convolution is forced onto its im2col composite (2-D float convolutions bind the ``conv``
    primitive, a native step of its own), which builds exactly such a tap stack."""
    monkeypatch.setattr(lax_conv, "_use_primitive", lambda *a, **k: False)
    rng = _rng()
    x = rng.standard_normal((2, 9, 7, 3)).astype(np.float32)
    k = rng.standard_normal((3, 4, 3, 5)).astype(np.float32)

    def f(x: object, k: object) -> object:
        return lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    exe = check(f, x, k, rtol=1e-4, atol=1e-5)
    assert 12 in _kernel_parts(exe)
    want = ember.jit(f, backend="numpy")(x, k)
    concat_split.ENABLED = False  # the select-chain lowering computes the same values
    try:
        got = ember.jit(lambda x, k: f(x, k) + 0.0, backend="native")(x, k)
    finally:
        concat_split.ENABLED = True
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_reversed_and_strided_reads_of_a_concatenate() -> None:
    """Cut points for indices with coefficient -1 (rev) and 2 (strided slice)."""
    rng = _rng()
    xs = [rng.standard_normal((k, 4)).astype(np.float32) for k in (3, 5, 1, 4, 6, 2, 7)]

    def f(*xs: object) -> object:
        c = jnp.concatenate(xs, axis=0)  # 28 rows
        return jnp.flip(c, 0)[1:] * 3.0, c[1::2] + 1.0, c[::3]

    exe = check(f, *xs)
    assert all(p > 1 for p in _kernel_parts(exe))


def test_many_pieces_in_a_reduction_are_materialized() -> None:
    """A reduction does not read a long select chain: the concatenate is its own split kernel."""
    rng = _rng()
    xs = [rng.standard_normal((5, k)).astype(np.float32) for k in (2, 3, 1, 4, 2, 3)]

    def f(*xs: object) -> object:
        return jnp.sum(jnp.exp(jnp.concatenate(xs, axis=1)), axis=1)

    exe = check(f, *xs, rtol=1e-5)
    assert exe.schedule.count("kernel") == 2
    assert sorted(_kernel_parts(exe)) == [0, 6]


def test_few_pieces_stay_fused_in_a_reduction() -> None:
    rng = _rng()
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((5, 2)).astype(np.float32)
    exe = check(lambda a, b: jnp.max(jnp.concatenate([a, b * 2.0], axis=1), axis=1), a, b)
    assert exe.schedule.count("kernel") == 1


def test_short_innermost_pieces_keep_the_select_chain() -> None:
    """Stacking two scalars per row on the last axis: one vectorizable loop with a select."""
    rng = _rng()
    a, b = rng.standard_normal((64, 1)).astype(np.float32), rng.standard_normal((64, 1)).astype(np.float32)
    exe = check(lambda a, b: jnp.concatenate([a, b], axis=1) * 2.0, a, b)
    assert _kernel_parts(exe) == [0]


def test_concatenate_gradient() -> None:
    """The transposed ops (slices of the cotangent, pads of slices) on native vs numpy."""
    rng = _rng()
    xs = [rng.standard_normal((4, k)).astype(np.float32) for k in (1, 2, 3, 4, 5, 6)]
    w = rng.standard_normal((4, 21)).astype(np.float32)

    def loss(*xs: object) -> object:
        c = jnp.concatenate([jnp.sin(v) for v in xs], axis=1)
        return jnp.sum(c * w)

    check(ember.grad(loss, argnums=tuple(range(6))), *xs)


def test_symbolic_batch_with_static_pieces() -> None:
    """A named dynamic axis outside the concatenate: the static axis is still cut."""
    rng = _rng()

    def f(x: object) -> object:
        return jnp.concatenate([x[:, i:i + 1] * float(i + 1) for i in range(6)] + [x], axis=1)

    nat = ember.jit(f, dynamic_axes={"x": ("batch", None)}, backend="native")
    ref = ember.jit(f, backend="numpy")
    for b in (1, 3, 8):
        x = rng.standard_normal((b, 6)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(nat(x)), np.asarray(ref(x)), rtol=1e-6)
    from ember._src.native import specialize

    sym = specialize.symbolic_executable(nat.lower(x).program)
    assert "map in 7 parts over batchx12" in sym.describe()


def test_symbolic_piece_sizes() -> None:
    """Pieces whose sizes are symbolic keep the select chain (and stay correct)."""
    rng = _rng()

    def f(x: object, y: object) -> object:
        return jnp.concatenate([x, y, x * 2.0, y - 1.0, x + 3.0, y], axis=1)

    axes = {"x": (None, "n"), "y": (None, "m")}
    nat = ember.jit(f, dynamic_axes=axes, backend="native")
    ref = ember.jit(f, backend="numpy")
    for n, m in ((1, 2), (3, 1), (5, 4)):
        x = rng.standard_normal((3, n)).astype(np.float32)
        y = rng.standard_normal((3, m)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(nat(x, y)), np.asarray(ref(x, y)), rtol=1e-6)


def test_part_limit_keeps_select_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond MAX_PARTS boxes the rest stays a select chain, with the same values."""
    monkeypatch.setattr(concat_split, "MAX_PARTS", 4)
    rng = _rng()
    xs = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(9)]
    exe = check(lambda *xs: jnp.concatenate(xs, axis=0) + 1.0, *xs)
    assert max(_kernel_parts(exe)) == 0


def test_expensive_broadcast_is_not_recomputed_per_part() -> None:
    """A broadcast expensive value read by every box would be computed once per box: no split
    that multiplies its work (the value is materialized instead), same results."""
    rng = _rng()
    xs = [rng.standard_normal((3, 4, 5)).astype(np.float32) for _ in range(6)]
    v = rng.standard_normal((5,)).astype(np.float32)

    def f(v: object, *xs: object) -> object:
        return jnp.concatenate([jnp.sin(x) for x in xs], axis=0) * jnp.exp(jnp.tanh(v))

    exe = check(f, v, *xs)
    assert exe.schedule.count("kernel") == 2  # exp(tanh(v)) once, then the split concatenate
    for s in exe.schedule.steps:
        if s.kind == "kernel" and s.ir is not None and s.ir.parts:
            total: dict[int, int] = {}
            for p in s.ir.parts:
                for vid, (count, size) in p.evaluations.items():
                    total[vid] = total.get(vid, 0) + count
                    assert total[vid] <= size


def test_nested_concatenate_of_expensive_pieces() -> None:
    """Expensive producers under two nested concatenates: fusible only once both are cut."""
    rng = _rng()
    x = rng.standard_normal((4, 12)).astype(np.float32)

    def f(x: object) -> object:
        rows = [jnp.concatenate([jnp.exp(x[i:i + 1, 3 * j:3 * j + 3]) for j in range(4)], axis=1)
                for i in range(4)]
        return jnp.concatenate(rows, axis=0) + 1.0

    exe = check(f, x, rtol=1e-5)
    assert exe.schedule.count("kernel") == 1
    assert _kernel_parts(exe) == [16]


@pytest.mark.parametrize("dynamic", [False, True])
def test_row_softmax_of_a_split_kernel(dynamic: bool) -> None:
    """A softmax whose rows read a concatenate (a split kernel's parts): the parts take no row
    caches of their own (none is planned for them). Found by tests/dynamic/test_property.py: the
    part's row exp asked for a scratch row the plan did not have (an AttributeError at codegen)."""
    def f(x: object) -> object:
        return ember.nn.softmax(jnp.concatenate([x, x * 0.5], axis=1)[:, 1:], axis=1)

    g = ember.jit(f, dynamic_axes={"x": "batch, seq, 4"}) if dynamic else ember.jit(f)
    rng = _rng()
    for b, n in ((1, 2), (3, 5), (2, 1)):
        x = rng.uniform(-1, 1, (b, n, 4)).astype(np.float32)
        c = np.concatenate([x, x * 0.5], axis=1)[:, 1:].astype(np.float64)
        e = np.exp(c - c.max(axis=1, keepdims=True))
        np.testing.assert_allclose(np.asarray(g(x)), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    if dynamic:
        assert g.cache_info()["compiles"] == 1


@pytest.mark.parametrize("window,stride,pad", [(3, 2, 1), (3, 1, 1), (2, 2, 1), (5, 3, 2)])
def test_padded_innermost_axis_is_cut_at_the_padding(window: int, stride: int, pad: int) -> None:
    """An NCHW max pool reads its -inf padding along the innermost axis: the loop over output
    columns is cut where the taps enter and leave the image, so the inner box reads each tap plainly
    at the stride instead of through a clamp (a gather per element). NaN, -inf and +inf inputs,
    odd and even widths, against the reference backend; the pads on outer axes only (NHWC) keep
    their loop nests."""
    rng = _rng()

    def pool(x: object, dims: tuple) -> object:
        win = tuple(window if d else 1 for d in dims)
        strides = tuple(stride if d else 1 for d in dims)
        pads = tuple((pad, pad) if d else (0, 0) for d in dims)
        return lax.reduce_window(x, -jnp.inf, lax.max, win, strides, pads)

    for w in (37, 40):
        x = rng.standard_normal((2, 3, 29, w)).astype(np.float32)
        x[0, 1, 4, 0], x[1, 2, 28, w - 1], x[0, 0, 0, 5], x[1, 0, 7, 8] = np.nan, np.nan, -np.inf, np.inf
        exe = check(lambda x: pool(x, (0, 0, 1, 1)), x, rtol=0, atol=0)
        assert max(_kernel_parts(exe)) >= 2, str(exe.schedule)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        exe = check(lambda x: pool(x, (0, 1, 1, 0)), nhwc, rtol=0, atol=0)
        assert not any(_kernel_parts(exe)), str(exe.schedule)
