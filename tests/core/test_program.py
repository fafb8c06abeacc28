"""Program IR: tracing, printing, validation, constants and the reference executor."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.core import ShapedArray
from ember._src.program import Eqn, Program, Var, dce, run_numpy, validate
from ember.errors import ValidationError


def f(x, y):
    return jnp.tanh(x @ y + 1.0).sum(axis=-1) if hasattr(jnp, "matmul") else lax.tanh(lax.add(x, y))


def test_make_program_prints_typed_ssa():
    x = np.ones((2, 3), np.float32)
    prog = ember.make_program(lambda a, b: lax.tanh(lax.add(a, b)) * 2.0)(x, x)
    text = str(prog)
    assert "a:f32[2,3] b:f32[2,3]" in text
    assert "add a b" in text and "tanh" in text and "mul" in text
    validate(prog)
    out = run_numpy(prog, [np.asarray(c) for c in prog.consts], [x, x])[0]
    np.testing.assert_allclose(out, np.tanh(x + x) * 2, rtol=1e-6)


def test_closed_over_arrays_become_constants():
    w = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    prog = ember.make_program(lambda a: lax.mul(a, w))(np.ones((2, 3), np.float32))
    assert len(prog.constvars) == 1 and len(prog.consts) == 1
    assert "lambda a:f32[2,3] ;" in str(prog)


def test_validate_catches_bad_programs():
    a = Var(ShapedArray((2,), np.float32))
    b = Var(ShapedArray((3,), np.float32))
    out = Var(ShapedArray((2,), np.float32))
    prim = ember._src.core.PRIMITIVES["add"]
    with pytest.raises(ValidationError, match="fails type checking"):
        validate(Program([], [a, b], [Eqn(prim, [a, b], {}, [out])], [out]))
    c = Var(ShapedArray((2,), np.float32))
    with pytest.raises(ValidationError, match="used before it is defined"):
        validate(Program([], [a], [Eqn(prim, [a, c], {}, [out])], [out]))
    wrong = Var(ShapedArray((2,), np.int32))
    with pytest.raises(ValidationError, match="typed"):
        validate(Program([], [a], [Eqn(prim, [a, a], {}, [wrong])], [wrong]))


def test_literals_inline_scalars():
    prog = ember.make_program(lambda a: a * 3.0 + 1)(np.ones(4, np.float32))
    assert not prog.constvars
    assert "3" in str(prog) and "1" in str(prog)


def test_dce_drops_dead_equations_and_constants():
    """``program.dce`` (the native ``dce`` pass and autodiff's output selection): unused work and
    captured constants go, kept outputs compute the same values as before."""
    w = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    dead = np.full((2, 3), 7.0, np.float32)

    def g(x):
        a = jnp.sin(x) * w
        b = jnp.exp(x) + dead  # only feeds the second output
        return a + 1.0, b.sum()

    x = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)
    prog = ember.make_program(g)(x)
    full = dce(prog)
    assert [e.prim.name for e in full.eqns] == [e.prim.name for e in prog.eqns]
    first = dce(prog, [True, False])
    validate(first)
    names = [e.prim.name for e in first.eqns]
    assert "exp" not in names and "reduce_sum" not in names and "sin" in names
    assert len(first.outvars) == 1 and len(first.constvars) == len(prog.constvars) - 1
    (got,) = run_numpy(first, [np.asarray(c) for c in first.consts], [x])
    np.testing.assert_allclose(got, np.sin(x) * w + 1.0, rtol=1e-6)
    second = dce(prog, [False, True])
    assert "sin" not in [e.prim.name for e in second.eqns]
    (s,) = run_numpy(second, [np.asarray(c) for c in second.consts], [x])
    np.testing.assert_allclose(s, (np.exp(x) + dead).sum(), rtol=1e-5)
