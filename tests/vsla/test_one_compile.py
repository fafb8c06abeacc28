"""vsla.jit (issue 19, "One compile for every shape"): one trace for all logical shapes of a rank.

References are plain NumPy that pads explicitly; nothing here goes through vsla's eager kernels.
"""
import gc

import numpy as np
import pytest

import ember
from ember import vsla
from ember._src.native import specialize as native_specialize
from ember._src.native.runtime import toolchain
from ember.errors import TracerError
from ember.test_util import check_grads
from tests.vsla.test_properties import _np_binary, _np_strip
from tests.vsla.test_varray import _minimal, _pad

requires_cc = pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")




def _sample(rng, shape) -> np.ndarray:
    """Random values; sometimes trailing zeros (so a minimal representative is shorter)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if x.ndim == 1 and x.size > 1 and rng.random() < 0.3:
        x[-int(rng.integers(1, min(3, x.size) + 1)):] = 0
    return x


def _check(out: vsla.VArray, shape, expect: np.ndarray, tol=1e-4):
    assert out.shape == tuple(shape)
    np.testing.assert_allclose(np.asarray(out.logical()), expect, rtol=tol, atol=tol)
    slack = np.array(out.data)
    slack[tuple(slice(0, d) for d in shape)] = 0
    assert not slack.any()  # stored entries outside the logical region are zero


def _program(a, b, c):
    s = a + b
    h = s * c
    d = a - 2.0 * c
    cv = vsla.conv(s, c)
    k = vsla.kron(a, b)
    return s, h, d, cv, k, vsla.sum(cv), vsla.mean(h)


def _reference(a, b, c):
    ls = max(a.size, b.size)
    s = _pad(a, (ls,)) + _pad(b, (ls,))
    lh = max(ls, c.size)
    h = _pad(s, (lh,)) * _pad(c, (lh,))
    ld = max(a.size, c.size)
    d = _pad(a, (ld,)) - 2.0 * _pad(c, (ld,))
    cv = np.convolve(s, c) if s.size and c.size else np.zeros(0, np.float32)
    k = np.kron(_minimal(a), _minimal(b))
    mean = h.sum() / max(lh, 1)
    return [(s, (ls,)), (h, (lh,)), (d, (ld,)), (cv, cv.shape), (k, k.shape),
            (np.asarray([cv.sum()]), (1,)), (np.asarray([mean]), (1,))]  # full sums: rank 1, [s]


def _cap(n: int) -> int:
    return max(1, vsla.next_pow2(n))


def test_hundred_shapes_one_compile():
    f = vsla.jit(_program)
    rng = np.random.default_rng(19)
    caps = set()
    builds = native_specialize.cache_stats()["level1_builds"]
    for _ in range(100):
        m, n, q = (int(x) for x in rng.integers(0, 41, 3))
        a, b, c = _sample(rng, (m,)), _sample(rng, (n,)), _sample(rng, (q,))
        caps.add((_cap(m), _cap(n), _cap(q)))
        outs = f(vsla.array(a), vsla.array(b), vsla.array(c))
        for out, (expect, shape) in zip(outs, _reference(a, b, c)):
            _check(out, shape, expect)
    info = f.cache_info()
    assert info["compiles"] == 1
    if ember.default_backend() == "native":  # one symbolic program turned into one C library
        assert native_specialize.cache_stats()["level1_builds"] - builds == 1
    # each capacity bucket is one specialization; every other call built nothing
    assert info["specializations"] == len(caps) < 100
    assert info["hits"] == 100 - len(caps)


def test_rank2_ops_one_compile():
    def prog(a, b):
        p = vsla.matmul(a, vsla.transpose(b))
        return (p, vsla.softmax(a + b), vsla.layer_norm(a), vsla.rms_norm(b), vsla.sum(a * b, 0),
                vsla.conv(a, b, method="direct"))

    f = vsla.jit(prog)
    rng = np.random.default_rng(5)
    for _ in range(25):
        sa = tuple(int(x) for x in rng.integers(1, 12, 2))
        sb = tuple(int(x) for x in rng.integers(1, 12, 2))
        a, b = _sample(rng, sa), _sample(rng, sb)
        p, sm, ln, rn, s0, cv = f(vsla.array(a), vsla.array(b))
        k = max(sa[1], sb[1])
        _check(p, (sa[0], sb[0]), _pad(a, (sa[0], k)) @ _pad(b, (sb[0], k)).T)
        joint = tuple(max(x, y) for x, y in zip(sa, sb))
        z = _pad(a, joint) + _pad(b, joint)
        e = np.exp(z - z.max(-1, keepdims=True))
        _check(sm, joint, e / e.sum(-1, keepdims=True))
        c = a - a.mean(-1, keepdims=True)
        _check(ln, sa, c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5))
        _check(rn, sb, b / np.sqrt((b * b).mean(-1, keepdims=True) + 1e-6))
        _check(s0, (joint[1],), (_pad(a, joint) * _pad(b, joint)).sum(0))
        rows = joint[0]
        pa, pb = _pad(a, (rows, sa[1])), _pad(b, (rows, sb[1]))
        conv = np.stack([np.convolve(pa[i], pb[i]) for i in range(rows)])
        _check(cv, (rows, sa[1] + sb[1] - 1), conv)
    assert f.cache_info()["compiles"] == 1


def test_same_capacities_plan_nothing():
    f = vsla.jit(lambda a, b: vsla.conv(a, b) + a)
    rng = np.random.default_rng(2)

    def call(m, n):
        a, b = _sample(rng, (m,)), _sample(rng, (n,))
        out = f(vsla.array(a), vsla.array(b))
        _check(out, (m + n - 1,), _pad(np.convolve(a, b), (m + n - 1,)) + _pad(a, (m + n - 1,)))

    call(5, 9)  # capacities (8, 16): one specialization
    built = native_specialize.cache_stats()["specializations"]
    for m, n in [(6, 12), (8, 16), (7, 10), (5, 9)]:  # the same capacity bucket
        call(m, n)
    info = f.cache_info()
    assert (info["specializations"], info["hits"]) == (1, 4)
    assert native_specialize.cache_stats()["specializations"] == built  # no sizes or offsets planned
    call(9, 16)  # a new bucket (16, 16): a specialization, not a compile
    info = f.cache_info()
    assert (info["compiles"], info["specializations"]) == (1, 2)


@requires_cc
def test_memory_plan_and_no_allocation_in_a_warm_call():
    f = vsla.jit(lambda a, b: (vsla.conv(vsla.conv(a, b), a) + a, vsla.sum(a * b)), backend="native")
    rng = np.random.default_rng(3)
    a, b = vsla.array(_sample(rng, (30,))), vsla.array(_sample(rng, (20,)))
    plan = f.memory_plan(a, b)
    # capacities 32 and 32: inputs are two float32[32] and two int32[1]; outputs float32[94]
    # (capacity (32 + 32 - 1) + 32 - 1), int32[1] (its lengths) and float32[1] (the sum, rank 1: no
    # rank-0 VArray at the API boundary) with its lengths int32[1]; the inner conv is an
    # intermediate (the outer one gathers from it)
    assert plan["EXTERNAL_IN"] == 2 * (32 * 4 + 4)
    assert plan["EXTERNAL_OUT"] == 94 * 4 + 4 + 4 + 4
    assert plan["PARAMS"] >= 0 and plan["WORKSPACE"] >= 0
    assert plan["ACTIVATION"] > 0 and plan["arena_bytes"] > 0
    gc.collect()
    arena0 = ember.memory_stats()["arena_bytes"]
    f(a, b)  # the first run allocates the planned arena (plus up to 64 bytes to align it)
    assert 0 <= ember.memory_stats()["arena_bytes"] - arena0 - plan["arena_bytes"] <= 64
    f(a, b)
    before = ember.memory_stats()
    outs = f(a, b)
    after = ember.memory_stats()
    out_bytes = sum(o.data.nbytes for o in outs) + 4 + 4  # + the lengths of the conv result and of [s]
    assert after["total_allocated_bytes"] - before["total_allocated_bytes"] == out_bytes
    for key in ("arena_bytes", "native_executables", "loaded_libraries"):
        assert after[key] == before[key], key
    xa, xb = np.asarray(a.logical()), np.asarray(b.logical())
    _check(outs[1], (1,), np.asarray([(xa * _pad(xb, (30,))).sum()]))
    _check(outs[0], (78,), np.convolve(np.convolve(xa, xb), xa) + _pad(xa, (78,)))


@requires_cc
def test_static_capacity_mode_fft_workspace():
    f = vsla.jit(lambda a, b: vsla.conv(a, b, method="fft"), capacity="static", backend="native")
    rng = np.random.default_rng(4)
    for m, n in [(3, 5), (4, 7), (30, 20), (17, 31)]:
        a, b = _sample(rng, (m,)), _sample(rng, (n,))
        _check(f(vsla.array(a), vsla.array(b)), (m + n - 1,), np.convolve(a, b))
    info = f.cache_info()
    assert (info["compiles"], info["hits"]) == (2, 2)  # buckets (4, 8) and (32, 32), each a compile
    assert f.memory_plan(vsla.array(a), vsla.array(b))["WORKSPACE"] > 0  # the FFT buffers


def test_grad_through_jitted_varray_function():
    f = vsla.jit(lambda a, b: vsla.sum(vsla.conv(a, b) * a + vsla.softmax(a * b)))

    def g(xa, xb):
        return f(vsla.VArray(xa, (3,)), vsla.VArray(xb, (5,))).data[0]  # the one entry of [s]

    rng = np.random.default_rng(0)
    xa, xb = _pad(rng.standard_normal(3), (4,)), _pad(rng.standard_normal(5), (8,))
    check_grads(g, (xa, xb), order=1)
    # the gradient on the logical region against finite differences of the NumPy reference
    def ref(x):
        s = np.convolve(x, xb[:5])[:3] * x
        e = np.exp(x * xb[:3] - (x * xb[:3]).max())
        return s.sum() + (e / e.sum()).sum()
    eps = 1e-6
    fd = [(ref(xa[:3] + eps * np.eye(3)[i]) - ref(xa[:3] - eps * np.eye(3)[i])) / (2 * eps) for i in range(3)]
    np.testing.assert_allclose(np.asarray(ember.grad(g)(xa, xb))[:3], fd, rtol=1e-5, atol=1e-6)


def test_ops_needing_a_static_shape_raise_clearly():
    v = vsla.array([1.0, 2.0])
    for op in (lambda x: vsla.unstack(vsla.stack([x, x])), lambda x: x.to_numpy(), lambda x: x.shape):
        with pytest.raises(TracerError, match="runtime value"):
            vsla.jit(op)(v)
    with pytest.raises(ValueError, match="capacity must be"):
        vsla.jit(lambda x: x, capacity="dynamic")


def test_captured_varray_map_and_shrink():
    const = vsla.array([1.0, -2.0, 0.5])

    def prog(a):
        t = (a + const).map(ember.numpy.tanh)
        return t, a.shrink(), vsla.conv(a, const)

    f = vsla.jit(prog)
    rng = np.random.default_rng(8)
    for m in (1, 2, 5, 9, 2, 6):
        a = _sample(rng, (m,))
        a[m // 2:] = 0 if m == 6 else a[m // 2:]
        t, s, c = f(vsla.array(a))
        n = max(m, 3)
        _check(t, (n,), np.tanh(_pad(a, (n,)) + _pad(const.to_numpy(), (n,))))
        _check(s, _minimal(a).shape, _minimal(a))  # the minimal shape, computed at run time
        _check(c, (m + 2,), np.convolve(a, const.to_numpy()))
    assert f.cache_info()["compiles"] == 1
    assert f(vsla.array(np.zeros(4, np.float32)))[1].shape == (0,)


def test_pytree_arguments_and_results():
    f = vsla.jit(lambda d, w: {"sum": d["a"] + d["b"], "scaled": d["a"] * w})
    for m, n in [(3, 5), (6, 2), (2, 7)]:
        a, b = np.arange(1.0, m + 1, dtype=np.float32), np.arange(2.0, n + 2, dtype=np.float32)
        out = f({"a": vsla.array(a), "b": vsla.array(b)}, w=np.float32(2.0))
        k = max(m, n)
        _check(out["sum"], (k,), _pad(a, (k,)) + _pad(b, (k,)))
        _check(out["scaled"], (m,), 2.0 * a)
    assert f.cache_info()["compiles"] == 1


def test_vsla_grad_inside_one_compile():
    def loss(a, b):
        return vsla.sum(vsla.conv(a, b) * a + vsla.softmax(a * b))

    def ref(x, y):  # NumPy, padding explicitly
        c = np.convolve(x, y)
        s = c * _pad(x, c.shape)
        k = max(x.size, y.size)
        z = _pad(x, (k,)) * _pad(y, (k,))
        e = np.exp(z - z.max())
        return s.sum() + (e / e.sum()).sum()

    g = vsla.jit(vsla.grad(loss, argnums=(0, 1)))
    rng = np.random.default_rng(6)
    eps = 1e-5
    for m, n in [(3, 5), (6, 2), (7, 7), (1, 4)]:
        a, b = rng.standard_normal(m), rng.standard_normal(n)
        ga, gb = g(vsla.array(a.astype(np.float32)), vsla.array(b.astype(np.float32)))
        assert (ga.shape, gb.shape) == ((m,), (n,))
        fa = [(ref(a + eps * e, b) - ref(a - eps * e, b)) / (2 * eps) for e in np.eye(m)]
        fb = [(ref(a, b + eps * e) - ref(a, b - eps * e)) / (2 * eps) for e in np.eye(n)]
        _check(ga, (m,), np.asarray(fa), tol=2e-3)
        _check(gb, (n,), np.asarray(fb), tol=2e-3)
    assert g.cache_info()["compiles"] == 1
    if ember.default_backend() == "native":  # the native memory plan
        plan = g.memory_plan(vsla.array(a.astype(np.float32)), vsla.array(b.astype(np.float32)))
        # the last call's capacities (1, 4): float32[1] and float32[4] (their lengths are the inputs')
        assert plan["GRAD_OUTPUTS"] == plan["EXTERNAL_OUT"] == (1 + 4) * 4
        assert plan["GRADS"] > 0  # the backward pass's cotangents (test_grads_arena.py)


@pytest.mark.parametrize("seed", range(4))
def test_random_programs_one_compile_each(seed):
    """A random chain of + - * conv kron and scalar multiply over small integer vectors (many zeros,
    so minimal representatives differ from the logical shapes), run on 12 random shape triples."""
    rng = np.random.default_rng(100 + seed)
    steps = []
    for n in range(3, 3 + int(rng.integers(2, 6))):
        i, j = (int(k) for k in rng.integers(0, n, 2))
        steps.append((["+", "-", "*", "conv", "kron", "scale"][int(rng.integers(0, 6))], i, j,
                      float(rng.integers(-2, 3))))

    def run(vals, conv, kron, binary):
        vals = list(vals)
        for op, i, j, s in steps:
            x, y = vals[i], vals[j]
            vals.append(conv(x, y) if op == "conv" else kron(x, y) if op == "kron" else
                        s * x if op == "scale" else binary(op, x, y))
        return vals[3:]

    def np_conv(x, y):
        return np.convolve(x, y) if x.size and y.size else np.zeros(0)

    def np_kron(x, y):
        return np.kron(_np_strip(x), _np_strip(y))

    def v_binary(op, x, y):
        return {"+": x + y, "-": x - y, "*": x * y}[op]

    f = vsla.jit(lambda *vs: run(vs, vsla.conv, vsla.kron, v_binary))
    for _ in range(12):
        vals = [rng.integers(-3, 4, int(rng.integers(0, 9))).astype(np.float64) for _ in range(3)]
        got = f(*[vsla.array(v.astype(np.float32)) for v in vals])
        for g, r in zip(got, run(vals, np_conv, np_kron, _np_binary)):
            _check(g, r.shape, r, tol=1e-3)
    assert f.cache_info()["compiles"] == 1


# the FFT path under symbolic capacities (one compile; a runtime branch for "auto")

# capacity pairs around FFT_THRESHOLD = 256 (ca * cb): at it and below the direct kernel, above it
# the FFT; L = 1, 2, 4 logical lengths, lengths that fill their bucket, and ones just above a bucket
_BOUNDARY = [(1, 1), (1, 2), (2, 2), (4, 4), (1, 4), (2, 4), (16, 16), (9, 16), (16, 17), (17, 16),
             (8, 32), (8, 33), (32, 32), (1, 300), (300, 1), (2, 300), (100, 3), (130, 129), (513, 511)]


def _conv_fns():
    return {m: vsla.jit(lambda a, b, m=m: vsla.conv(a, b, method=m), backend="native")
            for m in ("auto", "direct", "fft")}


@requires_cc
def test_fft_conv_under_symbolic_capacities_one_compile():
    """``method="fft"`` and ``"auto"`` under ``vsla.jit``: every pair of lengths (1, 2, 4, bucket
    edges, both sides of the threshold, batched rank 2) against ``np.convolve``, one compile per
    function; ``"auto"`` equals the direct result bit for bit when ``ca * cb <= FFT_THRESHOLD`` and
    the FFT result bit for bit above it (both paths are in the one program: a runtime branch)."""
    fns = _conv_fns()
    rng = np.random.default_rng(7)
    for m, n in _BOUNDARY:
        a, b = _sample(rng, (m,)), _sample(rng, (n,))
        want = np.convolve(a, b)
        outs = {k: f(vsla.array(a), vsla.array(b)) for k, f in fns.items()}
        for out in outs.values():
            _check(out, (m + n - 1,), want, tol=1e-4 * max(1.0, np.abs(want).max()))
        ca, cb = vsla.next_pow2(m), vsla.next_pow2(n)
        same = "fft" if ca * cb > vsla.FFT_THRESHOLD else "direct"
        np.testing.assert_array_equal(np.asarray(outs["auto"].data), np.asarray(outs[same].data))
    for f in fns.values():
        assert f.cache_info()["compiles"] == 1
    batched = vsla.jit(lambda a, b: vsla.conv(a, b, method="fft"), backend="native")
    for rows, m, n in [(3, 5, 40), (2, 64, 64), (5, 1, 2)]:
        a, b = _sample(rng, (rows, m)), _sample(rng, (rows, n))
        want = np.stack([np.convolve(x, y) for x, y in zip(a, b)])
        _check(batched(vsla.array(a), vsla.array(b)), (rows, m + n - 1), want)
    assert batched.cache_info()["compiles"] == 1


@requires_cc
def test_auto_conv_compiles_both_paths_natively():
    """The symbolic ``"auto"`` conv is one native ``cond`` step whose branches hold the one-pass
    ``fft_conv`` call step and the direct kernel; no Python fallback."""
    f = _conv_fns()["auto"]
    a = vsla.array(np.ones(300, np.float32))
    sym = native_specialize.symbolic_executable(f.lower(a, a).program)
    assert sym.fallback_reason is None
    conds = [st for st in sym.schedule.steps if st.kind == "cond"]
    assert len(conds) == 1 and sym.schedule.count("fallback") == 0
    branch_steps = [(st.kind, st.eqns[0].prim.name) for b in conds[0].sub.bodies for st in b.schedule.steps]
    assert branch_steps.count(("call", "fft_conv")) == 1, branch_steps  # transforms, product and inverse
    assert not any(k == "fallback" for k, _ in branch_steps)


@requires_cc
def test_grad_of_fft_conv_under_vsla_jit():
    """Gradients through the FFT branch (its transposes at a symbolic length) and the direct one,
    one compile, against finite differences of a NumPy reference."""
    loss = lambda a, b: vsla.sum(vsla.conv(a, b) * vsla.conv(a, a))  # noqa: E731
    dl = vsla.jit(vsla.grad(loss, (0, 1)), backend="native")

    def ref(a, b):
        c1, c2 = np.convolve(a, b), np.convolve(a, a)
        k = min(c1.size, c2.size)
        return (c1[:k] * c2[:k]).sum()

    rng = np.random.default_rng(3)
    eps = 1e-3
    for m, n in [(3, 2), (20, 30), (40, 9)]:  # (4, 2): direct; (32, 32) and (64, 16): FFT
        a, b = rng.standard_normal(m), rng.standard_normal(n)
        ga, gb = dl(vsla.array(a.astype(np.float32)), vsla.array(b.astype(np.float32)))
        fa = [(ref(a + eps * e, b) - ref(a - eps * e, b)) / (2 * eps) for e in np.eye(m)]
        fb = [(ref(a, b + eps * e) - ref(a, b - eps * e)) / (2 * eps) for e in np.eye(n)]
        scale = max(1.0, np.abs(fa).max(), np.abs(fb).max())
        np.testing.assert_allclose(_pad(ga.to_numpy(), (m,)), fa, rtol=0, atol=1e-4 * scale)
        np.testing.assert_allclose(_pad(gb.to_numpy(), (n,)), fb, rtol=0, atol=1e-4 * scale)
    assert dl.cache_info()["compiles"] == 1
    # the gradient program runs natively: the forward and backward conds (the direct conv's
    # derivative gathers only, so no scatter without a symbolic lowering sends a branch back to
    # the reference interpreter)
    sym = native_specialize.symbolic_executable(dl.lower(vsla.array(a), vsla.array(b)).program)
    kinds = [st.kind for st in sym.schedule.steps]
    assert "fallback" not in kinds and kinds.count("cond") == 4, kinds


def test_kron_above_rank_one_one_compile():
    """Kronecker of rank-2 and rank-3 VArrays under ``vsla.jit``: ``np.kron`` of the minimal
    representatives (trailing zero rows/columns cut at run time), one compile per rank for 30
    random shape pairs, the slack of every result zero."""
    rng = np.random.default_rng(19)
    for rank in (2, 3):
        f = vsla.jit(lambda a, b: vsla.kron(a, b))
        for _ in range(30):
            xs = [rng.integers(-2, 3, tuple(int(d) for d in rng.integers(1, 6, rank))).astype(np.float32)
                  for _ in range(2)]
            for x in xs:  # trailing zero hyperplanes on some axes: the minimal representative is smaller
                if rng.random() < 0.5:
                    ax = int(rng.integers(0, rank))
                    np.moveaxis(x, ax, 0)[-1] = 0
            want = np.kron(_minimal(xs[0]), _minimal(xs[1]))
            _check(f(vsla.array(xs[0]), vsla.array(xs[1])), want.shape, want)
        assert f.cache_info()["compiles"] == 1
    # gradient under vsla.jit at rank 2: d/da sum(kron(a, b)^2) = 2 a sum(b^2)
    g = vsla.jit(vsla.grad(lambda a, b: vsla.sum(vsla.sum(vsla.kron(a, b) * vsla.kron(a, b), 1), 0)))
    a = np.array([[1.0, 2.0], [3.0, 0.5]], np.float32)
    b = np.array([[1.0, -1.0, 2.0]], np.float32)
    np.testing.assert_allclose(g(vsla.array(a), vsla.array(b)).to_numpy(), 2 * a * (b ** 2).sum(), rtol=1e-6)
