"""ember.numpy.einsum_path against numpy.einsum_path: the chosen path (greedy, optimal, memory
limits, explicit paths, ellipses, interleaved sublists) and the printed report, on fixed and random
subscripts; works on traced operands (only shapes are used)."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp

rng = np.random.default_rng(21)

CASES = [
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ea,fb,abcd,gc,hd->efgh", [(10, 10), (10, 10), (10, 10, 10, 10), (10, 10), (10, 10)]),
    ("abc,bcd,de,ea->", [(3, 4, 5), (4, 5, 6), (6, 7), (7, 3)]),
    ("ij,jk,kl,lm,mn->in", [(5, 30), (30, 2), (2, 40), (40, 3), (3, 8)]),
    ("ab,cd,ef->", [(2, 2), (3, 3), (4, 4)]),  # only outer products
    ("i,i,i->", [(3,), (3,), (3,)]),
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit output
    ("ijk,kl,lmn,nm,ji->", [(2, 3, 4), (4, 5), (5, 6, 7), (7, 6), (3, 2)]),
    ("abcd,dc,ac,b->", [(4, 5, 6, 7), (7, 6), (4, 6), (5,)]),
    ("ij,ij,ij->ij", [(3, 4), (3, 4), (3, 4)]),  # nothing summed: one step
    ("ij,jk,kl->il", [(1, 3), (3, 1), (1, 5)]),  # broadcasting size-1 labels
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("optimize", ["greedy", "optimal", ("greedy", 12), ("optimal", 30), True, False])
def test_path_and_report_match_numpy(case, optimize):
    sub, shapes = case
    ops = [np.ones(s) for s in shapes]
    path, report = jnp.einsum_path(sub, *ops, optimize=optimize)
    want_path, want_report = np.einsum_path(sub, *ops, optimize=optimize)
    assert path == want_path
    assert report == want_report


def test_random_subscripts_match_numpy():
    letters = list("abcdefgh")
    for _ in range(150):
        n = int(rng.integers(3, 6))
        terms = ["".join(rng.choice(letters, int(rng.integers(1, 4)), replace=False)) for _ in range(n)]
        used = sorted(set("".join(terms)))
        out = "".join(c for c in used if rng.random() < 0.3)
        sizes = {c: int(rng.integers(1, 7)) for c in used}
        sub = ",".join(terms) + "->" + out
        ops = [np.ones([sizes[c] for c in t]) for t in terms]
        for optimize in ("greedy", "optimal"):
            got = jnp.einsum_path(sub, *ops, optimize=optimize)
            want = np.einsum_path(sub, *ops, optimize=optimize)
            assert got[0] == want[0], (sub, sizes, optimize)
            assert got[1] == want[1], (sub, sizes, optimize)


def test_explicit_path_ellipsis_and_sublists():
    ops = [np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))]
    explicit = ["einsum_path", (1, 2), (0, 1)]
    got = jnp.einsum_path("ij,jk,kl->il", *ops, optimize=explicit)
    want = np.einsum_path("ij,jk,kl->il", *ops, optimize=explicit)
    assert got == want
    # ellipses: NumPy picks the replacement letters from a set, so compare only the path
    e_ops = [np.ones((2, 3, 4)), np.ones((2, 4, 5)), np.ones((5, 6))]
    assert jnp.einsum_path("...ij,...jk,kl", *e_ops)[0] == np.einsum_path("...ij,...jk,kl", *e_ops)[0]
    assert "Complete contraction" in jnp.einsum_path("...ij,...jk,kl", *e_ops)[1]
    sl = (ops[0], [0, 1], ops[1], [1, 2], ops[2], [2, 3], [0, 3])
    assert jnp.einsum_path(*sl) == np.einsum_path(*sl)


def test_path_is_usable_by_einsum_and_traced_operands():
    a, b, c = (rng.standard_normal(s) for s in [(4, 5), (5, 6), (6, 3)])
    path, _ = jnp.einsum_path("ij,jk,kl->il", a, b, c, optimize="optimal")
    np.testing.assert_allclose(np.asarray(jnp.einsum("ij,jk,kl->il", a, b, c, optimize=path)), a @ b @ c,
                               rtol=1e-12)

    def f(x, y, z):
        p, _ = jnp.einsum_path("ij,jk,kl->il", x, y, z)
        assert p == np.einsum_path("ij,jk,kl->il", a, b, c)[0]  # the traced shapes suffice
        return jnp.einsum("ij,jk,kl->il", x, y, z)

    np.testing.assert_allclose(np.asarray(ember.jit(f)(a, b, c)), a @ b @ c, rtol=1e-12)


def test_einsum_path_errors():
    a = np.ones((2, 3))
    with pytest.raises(ValueError, match="subscript terms"):
        jnp.einsum_path("ij,jk->ik", a)
    with pytest.raises(ValueError, match="rank"):
        jnp.einsum_path("ijk,jk->ik", a, np.ones((3, 4)))
    with pytest.raises(ValueError, match="does not match"):
        jnp.einsum_path("ij,jk->ik", a, np.ones((4, 4)))
    with pytest.raises(ValueError, match="more than once"):
        jnp.einsum_path("ij,jk->ii", a, np.ones((3, 3)))
    with pytest.raises(ValueError, match="not a valid"):
        jnp.einsum_path("i1,jk->ik", a, np.ones((3, 3)))
    with pytest.raises(TypeError, match="optimize"):
        jnp.einsum_path("ij,jk->ik", a, np.ones((3, 3)), optimize=("greedy", "x", 3))
    with pytest.raises(KeyError):
        jnp.einsum_path("ij,jk,kl->il", a, np.ones((3, 3)), np.ones((3, 2)), optimize="dp")
    with pytest.raises(RuntimeError, match="more operands"):
        jnp.einsum_path("ij,jk,kl->il", a, np.ones((3, 3)), np.ones((3, 2)), optimize=["einsum_path", (0, 1)])
