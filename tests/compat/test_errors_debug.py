"""JAX's error classes under ``ember.errors`` (raised where JAX raises them, checked against JAX)
and ``debug.breakpoint`` (no waiting without a terminal; a ``pdb`` prompt over traced values)."""

import io
import sys

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import errors

jax = pytest.importorskip("jax", reason="the reference is JAX")

NAMES = ["TracerBoolConversionError", "ConcretizationTypeError", "TracerArrayConversionError",
         "TracerIntegerConversionError", "UnexpectedTracerError", "KeyReuseError",
         "NonConcreteBooleanIndexError"]

CASES = [  # (function of the numpy namespace, argument)
    (lambda m: lambda x: bool(x), 1.0),
    (lambda m: lambda x: int(x), 1.0),
    (lambda m: lambda x: float(x), 1.0),
    (lambda m: lambda x: complex(x), 1.0),
    (lambda m: lambda x: [1, 2, 3][x], 1),
    (lambda m: lambda x: range(x), 1),
    (lambda m: lambda x: np.asarray(x), 1.0),
    (lambda m: lambda x: m.arange(x), 1),
    (lambda m: lambda x: x.item(), 1.0),
    (lambda m: lambda x: x[x > 0], np.ones(3, np.float32)),
    (lambda m: lambda x: m.sum(x[m.isfinite(x)]), np.ones(3, np.float32)),
    (lambda m: lambda x: 1.0 if x > 0 else 2.0, 1.0),
]


def test_classes_and_bases():
    for name in NAMES:
        ours, theirs = getattr(errors, name), getattr(jax.errors, name)
        assert issubclass(ours, errors.EmberError)
        for base in (TypeError, IndexError):
            if issubclass(theirs, base):
                assert issubclass(ours, base), (name, base)
    # ember's tracer errors stay TypeErrors (TracerError), the boolean-mask one is an IndexError too
    assert issubclass(errors.TracerBoolConversionError, errors.ConcretizationTypeError)
    assert all(issubclass(getattr(errors, n), errors.TracerError) for n in NAMES if n != "KeyReuseError")


@pytest.mark.parametrize("case", range(len(CASES)))
def test_raised_where_jax_raises(case):
    make, x = CASES[case]
    with pytest.raises(Exception) as jinfo:
        jax.jit(make(jax.numpy))(x)
    want = type(jinfo.value).__name__
    with pytest.raises(getattr(errors, want)) as info:
        ember.jit(make(jnp))(x)
    assert type(info.value).__name__ == want


def test_leaked_tracer_is_unexpected_tracer_error():
    for transform, x in ((ember.jit, 1.0), (ember.grad, 1.0), (ember.vmap, jnp.ones(2))):
        leak = []
        transform(lambda v, leak=leak: leak.append(v) or v * 1.0)(x)
        with pytest.raises(errors.UnexpectedTracerError, match="leaked"):
            leak[0] + 1
    jleak = []
    jax.jit(lambda v: jleak.append(v) or v)(1.0)
    with pytest.raises(jax.errors.UnexpectedTracerError):
        jleak[0] + 1


def _f(x):
    y = jnp.sin(x) * 2.0
    ember.debug.breakpoint()
    return y + 1.0


def test_breakpoint_without_terminal_continues(capsys):
    out = ember.jit(_f)(np.float32(0.5))
    np.testing.assert_allclose(out, 2 * np.sin(0.5) + 1, rtol=1e-6)
    assert "stdin is not a terminal" in capsys.readouterr().err
    np.testing.assert_allclose(_f(np.float32(0.5)), 2 * np.sin(0.5) + 1, rtol=1e-6)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_breakpoint_prompt_sees_traced_values(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", _Terminal("p float(y)\np x.shape\nc\n"))
    out = ember.jit(_f)(np.float32(0.25))
    np.testing.assert_allclose(out, 2 * np.sin(0.25) + 1, rtol=1e-6)
    text = capsys.readouterr().out
    assert repr(float(np.float32(2 * np.sin(np.float32(0.25))))) in text and "()" in text
    monkeypatch.setattr(sys, "stdin", _Terminal("p float(y)\nc\n"))
    ember.vmap(_f)(np.array([0.0, 1.0], np.float32))  # one stop per element
    text = capsys.readouterr().out
    assert text.count("ember.debug.breakpoint at") == 2 and "0.0" in text


SHAPE_CASES = [
    lambda m: m.numpy.dot(np.ones((2, 3)), np.ones((4, 2))),
    lambda m: m.numpy.reshape(np.ones(6), (4, 2)),
    lambda m: m.lax.add(np.ones(3, np.float32), np.ones(4, np.float32)),
    lambda m: m.numpy.concatenate([np.ones((2, 3)), np.ones((2, 4))]),
    lambda m: m.numpy.matmul(np.ones((2, 3)), np.ones((4, 2))),
    lambda m: m.lax.dot_general(np.ones((2, 3)), np.ones((4, 2)), (((1,), (0,)), ((), ()))),
    lambda m: m.numpy.add(np.ones(3), np.ones(4)),
    lambda m: m.lax.reshape(np.ones(6), (4, 2)),
    lambda m: m.lax.concatenate([np.ones((2, 3)), np.ones((3, 3))], 1),
    lambda m: m.lax.broadcast_in_dim(np.ones(3), (4,), (0,)),
    lambda m: m.numpy.broadcast_to(np.ones(3), (4,)),
]


@pytest.mark.parametrize("case", range(len(SHAPE_CASES)))
def test_shape_errors_catchable_as_jax_class(case):
    with pytest.raises(Exception) as jinfo:
        SHAPE_CASES[case](jax)
    builtin = next(c for c in type(jinfo.value).__mro__ if c in (TypeError, ValueError, IndexError))
    with pytest.raises(builtin) as info:
        SHAPE_CASES[case](ember)
    assert isinstance(info.value, errors.ShapeError)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
