"""The ``unbatch_broadcast_dot`` pass: a batched ``dot_general`` whose operand is broadcast along
exactly its batch axes (``torch.bmm`` of an expanded weight, as ``nn.MultiheadAttention``'s export
writes its in-projection) becomes one product without batch axes; against NumPy, on the reference
executor and the native backend."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.lax as lax
from ember._src.native.rewrite import passes
from ember._src.program import run_numpy, validate
from tests.native.conftest import requires_cc

RNG = np.random.default_rng(35)


def _batched_dots(p) -> list:
    return [e for e in p.eqns if e.prim.name == "dot_general" and e.params["dimension_numbers"][1][0]]


def _consts(p) -> list[np.ndarray]:
    return [np.asarray(getattr(c, "value", c)) for c in p.consts]


# (x shape, w shape, broadcast shape, broadcast dims, broadcast side, dimension numbers, einsum)
CASES = {
    # the MHA in-projection: x [S, B, K] times w [K, N] shared by the S batches
    "weight right": ((5, 3, 8), (8, 6), (5, 8, 6), (1, 2), 1, (((2,), (1,)), ((0,), (0,))), "sbk,kn->sbn"),
    # the shared matrix on the left: the result comes out [M, S, N] and is transposed back
    "weight left": ((5, 8, 6), (4, 8), (5, 4, 8), (1, 2), 0, (((2,), (1,)), ((0,), (0,))), "mk,skn->smn"),
    # the batch axis of x in the middle, the weight transposed (contracting its last axis)
    "batch in the middle": ((3, 5, 8), (6, 8), (5, 6, 8), (1, 2), 1, (((2,), (2,)), ((1,), (0,))),
                            "bsk,nk->sbn"),
    # two batch axes
    "two batch axes": ((2, 3, 4, 8), (8, 5), (2, 3, 8, 5), (2, 3), 1,
                       (((3,), (2,)), ((0, 1), (0, 1))), "abmk,kn->abmn"),
}


def _case(case: str) -> tuple:
    """``(f, x, w, want)`` of a case of :data:`CASES`."""
    xs, ws, bshape, bdims, side, dn, spec = CASES[case]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)

    def f(x, w):
        wb = lax.broadcast_in_dim(w, bshape, bdims)
        return lax.dot_general(x, wb, dn) if side == 1 else lax.dot_general(wb, x, dn)

    want = np.einsum(spec, *((x.astype(np.float64), w) if side == 1 else (w.astype(np.float64), x)))
    return f, x, w, want


@pytest.mark.parametrize("case", sorted(CASES))
def test_shared_operand_becomes_one_product(case):
    f, x, w, want = _case(case)
    p = ember.make_program(f)(x, w)
    assert len(_batched_dots(p)) == 1
    q = passes.run_passes(p, ["unbatch_broadcast_dot"])
    validate(q)
    assert not _batched_dots(q) and "broadcast_in_dim" not in [e.prim.name for e in q.eqns]
    got = run_numpy(q, _consts(q), [x, w])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_broadcast_of_a_non_batch_axis_is_left_batched():
    """A broadcast that also spreads a free axis (``w`` ``[1, N]`` to ``[S, K, N]``) keeps the
    batched product (the rewrite needs the source to be the whole per-batch matrix)."""
    x = RNG.standard_normal((4, 3, 6)).astype(np.float32)
    w = RNG.standard_normal((1, 5)).astype(np.float32)

    def f(x, w):
        return lax.dot_general(x, lax.broadcast_in_dim(w, (4, 6, 5), (1, 2)), (((2,), (1,)), ((0,), (0,))))

    p = ember.make_program(f)(x, w)
    q = passes.run_passes(p, ["unbatch_broadcast_dot"])
    assert len(_batched_dots(q)) == 1
    want = np.einsum("sbk,kn->sbn", x.astype(np.float64), np.broadcast_to(w, (6, 5)))
    np.testing.assert_allclose(run_numpy(q, _consts(q), [x, w])[0], want, rtol=1e-5, atol=1e-5)


@requires_cc
@pytest.mark.parametrize("case", ["weight right", "weight left", "batch in the middle"])
def test_native_values(case):
    f, x, w, want = _case(case)
    fn = ember.jit(f, backend="native")
    exe = fn.lower(x, w).executable
    assert [st.kind for st in exe.schedule.steps].count("gemm") == 1
    assert all(len(e.inputs[0].aval.shape) == 2 for e in exe.optimized.eqns if e.prim.name == "native_gemm")
    np.testing.assert_allclose(np.asarray(fn(x, w)), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# refine_transposes: the head layout of nn.MultiheadAttention's export
# ---------------------------------------------------------------------------------------------


def test_refinement_of_shapes():
    from ember._src import shapes as sh
    from ember._src.native.rewrite.movement_passes import refinement

    assert refinement((10, 2, 64), (10, 8, 16)) == ([10, 2, 4, 16], [[0], [1], [2, 3]], [[0], [1, 2], [3]])
    assert refinement((1, 6), (2, 1, 3)) == ([2, 3], [[], [0, 1]], [[0], [], [1]])
    assert refinement((6, 4), (4, 6)) is None  # 4 neither divides nor is a multiple of 6
    b = sh.axis("batch")
    atoms, _, groups = refinement((7, b, 256), (7, 8 * b, 32))
    assert atoms == [7, b, 8, 32] and groups == [[0], [1, 2], [3]]


L_, B_, H_, D_ = 5, 3, 4, 8


def _head_split(x):
    """As ``nn.MultiheadAttention``'s export: the keys' part of a fused ``[L, B, 3*H*D]`` projection,
    ``[L, B, H*D] -> [L, B*H, D] -> [B*H, L, D]``, then ``[B, H, L, D]``."""
    L, B = x.shape[0], x.shape[1]
    k = lax.slice_in_dim(x, H_ * D_, 2 * H_ * D_, axis=2)
    y = lax.transpose(lax.reshape(k, (L, B * H_, D_)), (1, 0, 2))
    return lax.reshape(y, (B, H_, L, D_))


def _head_split_numpy(x):
    L, B = x.shape[0], x.shape[1]
    k = x[:, :, H_ * D_:2 * H_ * D_]
    return k.reshape(L, B * H_, D_).transpose(1, 0, 2).reshape(B, H_, L, D_)


def test_head_split_transpose_runs_over_the_refinement():
    """The transpose of ``[L, B*H, D]`` becomes one of ``[L, B, H, D]``."""
    x = RNG.standard_normal((L_, B_, 3 * H_ * D_)).astype(np.float32)
    q = passes.run_passes(ember.make_program(_head_split)(x))
    moves = [e for e in q.eqns if e.prim.name == "transpose"]
    assert len(moves) == 1 and moves[0].inputs[0].aval.shape == (L_, B_, H_, D_)
    np.testing.assert_array_equal(run_numpy(q, _consts(q), [x])[0], _head_split_numpy(x))


@requires_cc
@pytest.mark.parametrize("shape", [(1, 2, 0), (1, 0, 3), (0, 2, 3)])
def test_empty_operands_compile_and_match_numpy(shape):
    """A product with a 0-size dim (found by the fuzzer: a zero contraction raised ZeroDivisionError
    in the view reshape of the pass chain) runs and gives NumPy's result (zeros or an empty array)."""
    jnp = ember.numpy

    def f(x):
        return jnp.matmul(x, jnp.swapaxes(jnp.broadcast_to(x, (2,) + x.shape), -1, -2))
    x = np.ones(shape, np.float32)
    want = np.matmul(x, np.swapaxes(np.broadcast_to(x, (2,) + shape), -1, -2))
    got = np.asarray(ember.jit(f)(x))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
