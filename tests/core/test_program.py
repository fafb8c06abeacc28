"""Program IR: tracing, printing, validation, constants and the reference executor."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.core import ShapedArray
from ember._src.program import Eqn, Program, Var, run_numpy, validate
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
