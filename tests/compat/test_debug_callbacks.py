"""ember.debug.print / ember.debug.callback: what they print (captured stdout) eager, under jit (native
and numpy backends, compiled loops), vmap, jvp/grad/vjp, custom rules and control flow, checked
against hand-written expectations and against what JAX prints for the same program; the effect
survives the native passes; errors."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax

BACKENDS = ("native", "numpy")


# ---------------------------------------------------------------------------------------------
# Programs run the same way with ember and with JAX: case(lib, jit) where lib is the ember or jax
# module and jit the jit to use; each entry holds the expected lines (hand-derived)
# ---------------------------------------------------------------------------------------------


def _show(lib, fmt):
    def f(*xs):
        lib.debug.print(fmt, *xs)
        return xs[0]
    return f


def _jit_twice(lib, jit):
    def f(x):
        lib.debug.print("x={x} s={}", x.sum(), x=x)
        return x * 2
    g = jit(f)
    g(lib.numpy.arange(3.0))
    g(lib.numpy.arange(3.0) + 1)


def _vmap(lib, jit):
    jit(lib.vmap(lambda x: (lib.debug.print("row {} sum {}", x, x.sum()), x)[1]))(
        lib.numpy.arange(6.0).reshape(2, 3))


def _vmap_axis1_unbatched(lib, jit):
    jit(lib.vmap(lambda x, y, z: (lib.debug.print("x={} y={} z={}", x, y, z), x)[1], in_axes=(1, 0, None)))(
        lib.numpy.arange(6.0).reshape(2, 3), lib.numpy.arange(3), 7.0)


def _vmap_vmap(lib, jit):
    lib.vmap(lib.vmap(lambda x: (lib.debug.print("vv {}", x), x)[1]))(lib.numpy.arange(6.0).reshape(2, 3))


def _sin_printed(lib):
    def g(x):
        lib.debug.print("g {}", x)
        return lib.numpy.sin(x)
    return g


def _grad(lib, jit):
    g = _sin_printed(lib)
    lib.grad(g)(1.0)
    jit(lib.grad(g))(2.0)
    lib.jvp(g, (3.0,), (1.0,))
    _, back = lib.vjp(g, 4.0)
    print("after vjp")
    back(1.0)


def _vmap_grad(lib, jit):
    jit(lib.vmap(lib.grad(_sin_printed(lib))))(lib.numpy.arange(2.0))


def _fori(lib, jit):
    def h(i, c):
        lib.debug.print("i={} c={}", i, c)
        return c + i
    jit(lambda: lib.lax.fori_loop(0, 3, h, 0.0))()


def _scan_body(lib):
    def body(c, x):
        lib.debug.print("scan c={} x={}", c, x)
        return c + x, c
    return body


def _scan(lib, jit):
    body = _scan_body(lib)
    jit(lambda xs: lib.lax.scan(body, 0.0, xs))(lib.numpy.arange(3.0))
    # the scan's results are unused: it still runs for its prints
    jit(lambda xs: (lib.lax.scan(body, 10.0, xs), xs)[1])(lib.numpy.arange(2.0))


def _scan_grad(lib, jit):
    body = _scan_body(lib)
    jit(lib.grad(lambda x: lib.lax.scan(body, x, lib.numpy.arange(2.0))[0]))(1.0)


def _while(lib, jit):
    def wb(c):
        lib.debug.print("while {}", c)
        return c + 1
    jit(lambda x: lib.lax.while_loop(lambda c: c < 3, wb, x))(0)
    jit(lib.vmap(lambda x: lib.lax.while_loop(lambda c: c < 2, wb, x)))(lib.numpy.arange(2))


def _while_ad(lib, jit):
    def f(x):
        def body(c):
            lib.debug.print("w {} {}", c[0], c[1])
            return c[0] + 1, c[1] * 2.0
        return lib.lax.while_loop(lambda c: c[0] < 2, body, (0, x))[1]
    lib.jvp(f, (1.0,), (1.0,))
    _, f_jvp = lib.linearize(f, 1.0)
    print("linearized")
    f_jvp(1.0)  # the loop is staged whole into the linear part: it prints again


def _cond(lib, jit):
    def branch(name):
        return lambda x: (lib.debug.print(name + " {}", x), x)[1]
    f = jit(lambda x: lib.lax.cond(x > 0, branch("pos"), branch("neg"), x))
    f(1.0)
    f(-1.0)
    jit(lambda i, x: lib.lax.switch(i, [branch("b0"), branch("b1")], x))(1, 2.0)


def _nested_scan(lib, jit):
    def outer(c, _):
        def inner(d, _):
            lib.debug.print("in {} {}", c, d)
            return d + 1, None
        return lib.lax.scan(inner, 0, None, length=2)[0] + c, None
    jit(lambda: lib.lax.scan(outer, 0, None, length=2))()


def _values(lib, jit):
    jnp_ = lib.numpy
    jit(_show(lib, "{} {} {}"))(jnp_.float32(1.5), jnp_.int32(-2), True)
    jit(_show(lib, "{}"))(jnp_.arange(6.0).reshape(2, 3))
    jit(_show(lib, "e {}"))(jnp_.zeros((0, 2)))
    jit(lambda x: (lib.debug.print("{} {}", x + 1j, x > 0), x)[1])(jnp_.array([1.0, -1.0]))
    fmt = lambda x: (lib.debug.print("{:.2f} {y:>4} {}", x, 2, y=x.astype(jnp_.int32)), x)[1]
    jit(fmt)(jnp_.float32(3.0))
    jit(lambda x: (lib.debug.print("no args"), x)[1])(1.0)
    jit(lambda x: (lib.debug.print("unused result {}", x * 3), x)[1])(1.0)
    with np.printoptions(precision=2):
        jit(_show(lib, "p {}"))(jnp_.array([1 / 3, 2 / 3]))


def _custom(lib, jit):
    @lib.custom_jvp
    def cj(x):
        lib.debug.print("cj primal {}", x)
        return lib.numpy.sin(x)

    @cj.defjvp
    def cj_jvp(p, t):
        lib.debug.print("cj rule {}", p[0])
        return cj(p[0]), lib.numpy.cos(p[0]) * t[0]

    @lib.custom_vjp
    def cv(x):
        return x * 2

    def cv_fwd(x):
        lib.debug.print("cv fwd {}", x)
        return x * 2, x

    def cv_bwd(r, g):
        lib.debug.print("cv bwd {} {}", r, g)
        return (g * 2,)

    cv.defvjp(cv_fwd, cv_bwd)
    jit(cj)(1.0)
    jit(lib.grad(cj))(1.0)
    jit(lib.grad(cv))(3.0)
    lib.grad(lib.checkpoint(_sin_printed(lib)))(5.0)


def _ordered(lib, jit):
    jit(lambda x: (lib.debug.print("a {}", lib.numpy.exp(x).sum() * 2, ordered=True),
                   lib.debug.print("b {}", x, ordered=True), lib.debug.print("c", ordered=True), x)[-1])(
        lib.numpy.arange(3.0))
    lib.debug.print(ordered=True)("two-call {x}", x=lib.numpy.float32(1))


def _callbacks(lib, jit):
    def host(a, tag, b=None):
        print("cb", a, tag, b)
    jit(lambda x: (lib.debug.callback(host, x, "tag", b=x + 1), x)[1])(lib.numpy.arange(2.0))
    lib.vmap(lambda x: (lib.debug.callback(lambda a: print("vcb", a, a.shape), x), x)[1])(
        lib.numpy.arange(4.0).reshape(2, 2))
    print(lib.debug.print("returns"), lib.debug.callback(lambda: None))
    tree = {"a": lib.numpy.float32(1), "b": (lib.numpy.arange(2), None)}
    jit(lambda d: (lib.debug.print("d={}", d), d["a"])[1])(tree)


CASES = {
    "jit_twice": (_jit_twice, "x=[0. 1. 2.] s=3.0\nx=[1. 2. 3.] s=6.0\n"),
    "vmap": (_vmap, "row [0. 1. 2.] sum 3.0\nrow [3. 4. 5.] sum 12.0\n"),
    "vmap_axis1_unbatched": (_vmap_axis1_unbatched,
                             "x=[0. 3.] y=0 z=7.0\nx=[1. 4.] y=1 z=7.0\nx=[2. 5.] y=2 z=7.0\n"),
    # the inner vmap unrolls first: the outer axis varies fastest (as JAX)
    "vmap_vmap": (_vmap_vmap, "vv 0.0\nvv 3.0\nvv 1.0\nvv 4.0\nvv 2.0\nvv 5.0\n"),
    "grad": (_grad, "g 1.0\ng 2.0\ng 3.0\ng 4.0\nafter vjp\n"),
    "vmap_grad": (_vmap_grad, "g 0.0\ng 1.0\n"),
    "fori": (_fori, "i=0 c=0.0\ni=1 c=0.0\ni=2 c=1.0\n"),
    "scan": (_scan, "scan c=0.0 x=0.0\nscan c=0.0 x=1.0\nscan c=1.0 x=2.0\n"
                    "scan c=10.0 x=0.0\nscan c=10.0 x=1.0\n"),
    "scan_grad": (_scan_grad, "scan c=1.0 x=0.0\nscan c=1.0 x=1.0\n"),
    # under vmap the body runs for the whole batch while any element continues (as JAX)
    "while": (_while, "while 0\nwhile 1\nwhile 2\nwhile 0\nwhile 1\nwhile 1\nwhile 2\n"),
    "while_ad": (_while_ad, "w 0 1.0\nw 1 2.0\n" * 2 + "linearized\n" + "w 0 1.0\nw 1 2.0\n"),
    "cond": (_cond, "pos 1.0\nneg -1.0\nb1 2.0\n"),
    "nested_scan": (_nested_scan, "in 0 0\nin 0 1\nin 2 0\nin 2 1\n"),
    "values": (_values, "1.5 -2 True\n[[0. 1. 2.]\n [3. 4. 5.]]\ne []\n[ 1.+1.j -1.+1.j] [ True False]\n"
                        "3.00    3 2\nno args\nunused result 3.0\np [0.33 0.67]\n"),
    "custom": (_custom, "cj primal 1.0\ncj rule 1.0\ncj primal 1.0\ncv fwd 3.0\ncv bwd 3.0 1.0\n"
                        "g 5.0\ng 5.0\n"),
    "ordered": (_ordered, "a 22.214675903320312\nb [0. 1. 2.]\nc\ntwo-call 1.0\n"),
    "callbacks": (_callbacks,
                  "cb [0. 1.] tag [1. 2.]\nvcb [0. 1.] (2,)\nvcb [2. 3.] (2,)\nreturns\nNone None\n"
                  "d={'a': Array(1., dtype=float32), 'b': (Array([0, 1], dtype=int32), None)}\n"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_prints_expected_lines(name, backend, capsys):
    case, expected = CASES[name]
    capsys.readouterr()
    case(ember, lambda f: ember.jit(f, backend=backend))
    assert capsys.readouterr().out == expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_prints_what_jax_prints(name, capsys):
    jax = pytest.importorskip("jax", reason="comparison with what JAX prints needs jax")
    pytest.importorskip("jax.numpy", reason="comparison with what JAX prints needs jax.numpy")

    case, _ = CASES[name]
    capsys.readouterr()
    case(jax, jax.jit)
    want = capsys.readouterr().out
    case(ember, ember.jit)
    assert capsys.readouterr().out == want


def test_unordered_prints_keep_program_order(capsys):
    """Unlike JAX's unordered prints (which XLA may reorder), every print runs in program order.
    Here the native schedule could run "b" first: "a" reads a row sum fused into a kernel that also
    needs a later sort."""
    def f(x):
        y = x.sum(axis=1)
        ember.debug.print("a {}", y)
        ember.debug.print("b")
        return y + lax.sort(x[:, 0] * 3)

    for backend in BACKENDS:
        capsys.readouterr()
        out = ember.jit(f, backend=backend)(jnp.ones((4, 5)))
        np.testing.assert_array_equal(out, [8.0] * 4)
        assert capsys.readouterr().out == "a [5. 5. 5. 5.]\nb\n"


# ---------------------------------------------------------------------------------------------
# The native backend: loops stay compiled, the warm (C dispatcher) path, errors
# ---------------------------------------------------------------------------------------------


def test_loop_with_print_is_compiled_natively(capsys):
    body = lambda c, x: (ember.debug.print("{}", c), (c + x, None))[1]
    f = ember.jit(lambda xs: lax.scan(body, 0.0, xs)[0])
    xs = jnp.arange(4.0)
    text = f.lower(xs).executable.describe()
    assert "native scan" in text and "fallback scan" not in text
    capsys.readouterr()
    for k in range(3):  # the first call compiles; later ones take the warm path
        assert float(f(xs + k)) == float(np.sum(np.arange(4.0) + k))
    lines = capsys.readouterr().out.split()
    carries = [np.concatenate([[0], np.cumsum(np.arange(4.0) + k)[:-1]]) for k in range(3)]
    want = [str(np.float32(v)) for c in carries for v in c]
    assert lines == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_callback_gets_array_copies(backend):
    """Arrays kept by the callback stay as they were, although the compiled loop reuses its buffers."""
    seen = []

    def body(c, _):
        ember.debug.callback(seen.append, c)
        return c * 2, None

    out = ember.jit(lambda c: lax.scan(body, c, None, length=4)[0], backend=backend)(jnp.ones(3))
    assert all(type(a) is ember.Array and a.dtype == np.float32 for a in seen)
    np.testing.assert_array_equal(np.stack(seen), [[1] * 3, [2] * 3, [4] * 3, [8] * 3])
    np.testing.assert_array_equal(out, [16.0] * 3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("before", [True, False])
def test_large_carry_updated_in_place(backend, before):
    """A carry too large for registers may be updated in place by the compiled loop: a callback
    reading the old carry after the update (in program order) must still see the old value."""
    seen = []

    def body(c, _):
        if before:
            ember.debug.callback(lambda a: seen.append(float(a[-1])), c)
        new = c * 2
        if not before:
            ember.debug.callback(lambda a: seen.append(float(a[-1])), c)
        return new, None

    out = ember.jit(lambda c: lax.scan(body, c, None, length=3)[0], backend=backend)(jnp.ones(4096))
    assert seen == [1.0, 2.0, 4.0] and float(out[-1]) == 8.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loop", ["scan", "while", "top"])
def test_error_in_callback_stops_the_call(backend, loop):
    seen = []

    def cb(x):
        seen.append(int(x))
        if x == 1:
            raise KeyError("boom")

    if loop == "scan":
        body = lambda c, x: (ember.debug.callback(cb, x), (c + x, None))[1]
        f = ember.jit(lambda xs: lax.scan(body, 0, xs)[0], backend=backend)
        arg, ok = jnp.arange(4), jnp.arange(4) + 5
    elif loop == "while":
        step = lambda c: (ember.debug.callback(cb, c), c + 1)[1]
        f = ember.jit(lambda x: lax.while_loop(lambda c: c < 4, step, x), backend=backend)
        arg, ok = 0, 2
    else:
        f = ember.jit(lambda x: (ember.debug.callback(cb, x), ember.debug.callback(cb, x + 1), x * 3)[-1],
                      backend=backend)
        arg, ok = 1, 5
    for _ in range(2):  # again on the warm path
        seen.clear()
        with pytest.raises(KeyError, match="boom"):
            f(arg)
        assert seen == ([0, 1] if loop != "top" else [1])  # nothing runs after the failed callback
    seen.clear()
    f(ok)
    assert seen and 1 not in seen


def test_named_dynamic_axes(capsys):
    f = ember.jit(lambda xs: lax.scan(_scan_body(ember), 0.0, xs)[0], dynamic_axes={0: ("n",)})
    g = ember.jit(ember.vmap(lambda x: (ember.debug.print("v {}", x), x * 2)[1]),
                  dynamic_axes={0: ("batch",)})
    capsys.readouterr()
    assert float(f(jnp.arange(2.0))) == 1.0 and float(f(jnp.arange(3.0))) == 3.0
    np.testing.assert_array_equal(g(jnp.arange(3.0)), [0.0, 2.0, 4.0])
    assert capsys.readouterr().out == ("scan c=0.0 x=0.0\nscan c=0.0 x=1.0\n"
                                       "scan c=0.0 x=0.0\nscan c=0.0 x=1.0\nscan c=1.0 x=2.0\n"
                                       "v 0.0\nv 1.0\nv 2.0\n")


def test_native_passes_keep_every_effect():
    """dce keeps a print nothing reads, cse does not merge two equal ones, constant folding does not
    run one at compile time (its operand a captured constant), dce_loop_outputs keeps a loop whose
    results are unused but whose body prints."""
    from ember._src.native.rewrite.passes import cse, run_passes
    from ember._src.program import Program

    c = np.arange(3.0, dtype=np.float32)

    def f(x):
        ember.debug.print("same {}", x)
        ember.debug.print("same {}", x)
        ember.debug.print("const {}", c)
        lax.fori_loop(0, 2, lambda i, v: (ember.debug.print("i {}", i), v)[1], x)
        return x + 1

    prog = ember.make_program(f)(np.float32(1))
    opt = run_passes(prog)
    names = [e.prim.name for e in opt.eqns]
    assert names.count("debug_callback") == 3 and ("while" in names or "scan" in names)
    # the very same equation twice (same callback object, same operand): both calls stay
    twice = Program(prog.constvars, prog.invars, [prog.eqns[0], *prog.eqns], prog.outvars, prog.consts)
    assert [e.prim.name for e in cse(twice).eqns].count("debug_callback") == 4


def test_strict_validation_accepts_debug_callbacks(capsys):
    """A debug callback is a host call by design: strict validation neither calls it dead code nor
    fails on its fallback step."""
    f = ember.jit(lambda x: (ember.debug.print("v {}", x), lax.fori_loop(0, 2, lambda i, c: (
        ember.debug.print("i {}", i), c + 1)[1], x))[1], validate="strict")
    capsys.readouterr()
    assert int(f(1)) == 3
    assert capsys.readouterr().out == "v 1\ni 0\ni 1\n"


# ---------------------------------------------------------------------------------------------
# The API
# ---------------------------------------------------------------------------------------------


def test_bad_arguments():
    with pytest.raises(ValueError, match="unused positional"):
        ember.debug.print("x", 1.0)
    with pytest.raises(ValueError, match="f-string"):
        ember.debug.print("{x}", x=1, y=2)
    with pytest.raises(TypeError, match="fmt must be a str"):
        ember.debug.print(3)
    with pytest.raises(TypeError, match="callback must be callable"):
        ember.debug.callback(3, 1.0)
    with pytest.raises(TypeError, match="two-call"):
        ember.debug.callback(None, 1.0)


def test_weak_types_as_jax():
    """Eager calls keep the weak type of Python scalars; staged ones pass plain typed arrays."""
    seen = []
    record = lambda a, b: seen.append((a.weak_type, b.weak_type))
    ember.debug.callback(record, 2.0, jnp.float32(1))
    ember.jit(lambda x: (ember.debug.callback(record, x, 3), x)[1])(1.0)
    assert seen == [(True, False), (False, False)]


def test_skip_format_check(capsys):
    ember.jit(lambda x: (ember.debug.print("vals", 1, x, skip_format_check=True), x)[1])(jnp.arange(2))
    assert capsys.readouterr().out == "vals 1 [0 1]\n"


def test_set_debug_still_works():
    import logging

    ember.set_debug(1)
    try:
        assert logging.getLogger("ember").level == logging.DEBUG
    finally:
        ember.set_debug(0)
    assert logging.getLogger("ember").level == logging.WARNING
    assert ember.debug.__all__ == ["breakpoint", "callback", "print"]
