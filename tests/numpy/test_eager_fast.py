"""The eager fast path of elementwise functions (``_src/numpy/eager.py``) against the general
path: for every unary/binary elementwise function and every combination of operand kinds (Arrays
of each dtype and weak type, Python scalars, broadcasting shapes), both paths give the same values
bit for bit, the same dtype, weak type and shape, or the same error type."""

import itertools

import numpy as np
import pytest

import ember.numpy as jnp
from ember._src import flags
from ember._src.array import Array
from ember._src.numpy import eager, ufuncs

FLAG = "ember_eager_fast_path"


def _elementwise_functions(arity):
    out = []
    for name in sorted(dir(ufuncs)):
        fn = getattr(ufuncs, name)
        code = getattr(fn, "__code__", None)
        if callable(fn) and code is not None and code.co_name == "f" and code.co_argcount == arity \
                and fn.__module__ == ufuncs.__name__ and fn.__name__ == name:
            out.append(name)
    return out


UNARY = _elementwise_functions(1)
BINARY = _elementwise_functions(2)


def _operands():
    rng = np.random.default_rng(0)
    ops = []
    for d in ["bool", "int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
              "complex64"]:
        for shape in [(), (4,), (3, 4)]:
            raw = rng.standard_normal(shape) * 3
            if d == "bool":
                v = raw > 0
            elif d == "bfloat16":
                v = np.asarray(raw, np.float32).astype(jnp.bfloat16)
            elif d.startswith("complex"):
                v = (raw + 1j * rng.standard_normal(shape)).astype(d)
            else:
                v = raw.astype(d)
            ops.append(jnp.asarray(v))
    ops.append(Array(np.asarray(np.float32(1.5)).reshape(()), True))  # a weak float32 scalar array
    ops.append(Array(np.arange(4, dtype=np.int32).reshape(1, 4), True))  # weak int32
    ops += [True, 3, -2, 300, 2.5, 1 + 2j, -0.0, float("nan"), 2**24 + 1, 2**40]  # cached/rounded scalars
    return ops


OPS = _operands()


def _call(fn, args, fast):
    with flags.override(FLAG, fast), np.errstate(all="ignore"):
        try:
            r = fn(*args)
        except Exception as e:  # noqa: BLE001 - the error type itself is compared
            return type(e)
    return r


def _same(name, args, slow, fast):
    if isinstance(slow, type):
        assert fast is slow, (name, args, slow, fast)
        return
    assert not isinstance(fast, type), (name, args, fast)
    assert type(fast) is type(slow) is Array
    assert fast.dtype == slow.dtype and fast.shape == slow.shape, (name, args)
    assert fast._weak == slow._weak, (name, args)
    a, b = np.asarray(slow), np.asarray(fast)
    assert a.tobytes() == b.tobytes() or np.array_equal(a, b, equal_nan=True), (name, args, a, b)


@pytest.mark.parametrize("name", UNARY)
def test_unary_fast_equals_general(name):
    fn = getattr(jnp, name, None) or getattr(ufuncs, name)
    for x in OPS:
        if not isinstance(x, Array):
            continue
        _same(name, (x,), _call(fn, (x,), False), _call(fn, (x,), True))


@pytest.mark.parametrize("name", BINARY)
def test_binary_fast_equals_general(name):
    fn = getattr(jnp, name, None) or getattr(ufuncs, name)
    for x, y in itertools.product(OPS, OPS):
        if not (isinstance(x, Array) or isinstance(y, Array)):
            continue
        _same(name, (x, y), _call(fn, (x, y), False), _call(fn, (x, y), True))


def test_lists_overflow_and_plans():
    x = jnp.asarray(np.arange(4, dtype=np.uint8))
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        x + 300
    # a NumPy operand takes the general path; a list is refused, as in JAX
    np.testing.assert_array_equal(x + np.array([1, 2, 3, 4], np.uint8), np.arange(4) + np.array([1, 2, 3, 4]))
    with pytest.raises(TypeError, match="requires ndarray"):
        x + [1, 2, 3, 4]
    eager.clear_plans()
    y = x + 1
    assert len(eager._PLANS) == 1 and y.dtype == np.uint8
    np.testing.assert_array_equal(y, np.arange(1, 5))


def test_operator_methods_use_the_fast_path():
    x = jnp.asarray(np.linspace(-1, 1, 6, dtype=np.float32))
    eager.clear_plans()
    np.testing.assert_array_equal(x * 2 + 1, np.linspace(-1, 1, 6, dtype=np.float32) * 2 + 1)
    assert len(eager._PLANS) == 2
