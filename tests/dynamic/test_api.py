"""The dynamic_axes API: spec forms, bindings and their errors, the two cache levels, ahead-of-time
specialization, debug logging, and the backend protocol for symbolic programs."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import jit as jit_mod
from ember._src import shapes as sh
from ember._src.dynamic import parse_leaf_spec
from ember.errors import ShapeError, TracerError


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- spec forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, entries", [
    ("batch, 512", ["batch", 512]),
    ("batch, _", ["batch", None]),
    ("(batch, seq, _)", ["batch", "seq", None]),
    ("batch,", ["batch"]),
    (("batch", None), ["batch", None]),
    (["batch", "_", 3], ["batch", None, 3]),
    ("batch, ...", ["batch", Ellipsis]),
])
def test_parse_leaf_spec(spec: object, entries: list) -> None:
    ls = parse_leaf_spec(spec, "x")
    named = {pos: name for pos, name, _ in ls.named}
    fixed = dict(ls.fixed)
    for i, e in enumerate(entries):
        if isinstance(e, str):
            assert named[i] == e
        elif isinstance(e, int):
            assert fixed[i] == e
    assert ls.exact == (Ellipsis not in entries)


@pytest.mark.parametrize("bad", ["batch, 5x", "batch, ..., ...", ("batch", 1.5), 3])
def test_parse_leaf_spec_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_leaf_spec(bad, "x")


def _two_input(x: object, mask: object) -> object:
    return x * mask


@pytest.mark.parametrize("spec", [
    {"x": ("batch", None), "mask": ("batch", None)},
    {"x": "batch, _", "mask": "batch, 4"},
    ["batch, _", ("batch", None)],
    ("batch, ...", "batch, ..."),
    {0: "batch, _", "mask": "batch, _"},
])
def test_spec_forms_share_one_trace(spec: object) -> None:
    f = ember.jit(_two_input, dynamic_axes=spec)
    for b in (2, 3, 7):
        x, m = _x(b, 4), _x(b, 4, seed=1)
        np.testing.assert_allclose(np.asarray(f(x, m)), x * m, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(f(x, mask=m)), x * m, rtol=1e-6)
    # positional and keyword calls are two argument structures: one trace (and 3 bindings) each
    assert f.cache_info()["compiles"] == 2 and f.cache_info()["specializations"] == 6


def test_pytree_specs() -> None:
    def f(params: dict, batch: tuple) -> object:
        x, y = batch
        return jnp.sum((x @ params["w"] + params["b"] - y) ** 2, axis=1)

    w, b = _x(3, 2), _x(2)
    f1 = ember.jit(f, dynamic_axes={"batch": ("n, _", "n, _")})
    f2 = ember.jit(f, dynamic_axes={"batch": "n, _"})  # one string applies to every leaf
    f3 = ember.jit(f, dynamic_axes={"batch": (("n", None), ("n", None)), "params": {"w": None}})
    for n in (1, 4, 6):
        x, y = _x(n, 3), _x(n, 2, seed=2)
        ref = ((x @ w + b - y) ** 2).sum(1)
        for g in (f1, f2, f3):
            np.testing.assert_allclose(np.asarray(g({"w": w, "b": b}, (x, y))), ref, rtol=1e-5)
    for g in (f1, f2, f3):
        assert g.cache_info()["compiles"] == 1 and g.cache_info()["specializations"] == 3


def test_spec_errors_at_jit_time() -> None:
    with pytest.raises(ValueError, match="'y', which is not a parameter"):
        ember.jit(_two_input, dynamic_axes={"y": "batch"})
    with pytest.raises(ValueError, match="not a bare string"):
        ember.jit(_two_input, dynamic_axes="batch, _")
    with pytest.raises(ValueError, match="static arguments and cannot have dynamic axes"):
        ember.jit(_two_input, static_argnames="mask", dynamic_axes={"mask": "n"})


def test_spec_structure_mismatch() -> None:
    f = ember.jit(lambda t: t[0] + t[1], dynamic_axes=[("n", "n", "n")])
    with pytest.raises(ValueError, match="does not match the argument's 2 entries"):
        f((_x(2), _x(2)))


# -- binding errors -----------------------------------------------------------------------------


def test_conflicting_sizes_name_both_arguments() -> None:
    f = ember.jit(_two_input, dynamic_axes={"x": "batch, _", "mask": "batch, _"})
    with pytest.raises(ShapeError, match="axis 'batch' has conflicting sizes: x has 32, mask has 64"):
        f(_x(32, 4), _x(64, 4))


def test_declared_static_dim_mismatch_names_argument_and_dim() -> None:
    f = ember.jit(_two_input, dynamic_axes={"x": "batch, 4", "mask": "batch, 4"})
    with pytest.raises(ShapeError, match=r"mask: dimension 1 must be 4, got 5"):
        f(_x(3, 4), _x(3, 5))


def test_rank_mismatch() -> None:
    f = ember.jit(_two_input, dynamic_axes={"x": "batch, _"})
    with pytest.raises(ShapeError, match=r"x: dynamic_axes spec 'batch, _' describes 2 dims, but the "
                                         r"argument has shape \(3,\)"):
        f(_x(3), _x(3))


def test_undeclared_static_dim_change_retraces_and_logs_why(caplog: pytest.LogCaptureFixture) -> None:
    f = ember.jit(_two_input, dynamic_axes={"x": "batch, _", "mask": "batch, _"})
    with caplog.at_level(logging.DEBUG, logger="ember"):
        f(_x(3, 4), _x(3, 4))
        f(_x(5, 4), _x(5, 4))
        f(_x(5, 6), _x(5, 6))
    assert f.cache_info()["compiles"] == 2
    text = caplog.text
    assert "first call with this argument structure" in text
    assert "x: dim 1 changed 4 -> 6 (a static dim" in text
    assert "specialization {batch: 5} built" in text


def test_set_debug_sets_logger_level() -> None:
    log = logging.getLogger("ember")
    old = log.level
    try:
        ember.set_debug(1)
        assert log.isEnabledFor(logging.DEBUG)
        ember.set_debug(0)
        assert not log.isEnabledFor(logging.DEBUG)
    finally:
        log.setLevel(old)


def test_data_dependent_shapes_are_rejected() -> None:
    f = ember.jit(lambda x: jnp.nonzero(x), dynamic_axes=["n"])
    with pytest.raises(TracerError, match="depends on the values"):
        f(_x(4))
    g = ember.jit(lambda x: jnp.zeros(int(x.shape[0])), dynamic_axes=["n"])
    with pytest.raises(ShapeError, match="symbolic dimension n used where a concrete integer is needed"):
        g(_x(4))


def test_binding_violating_a_shape_constraint() -> None:
    # x[:, :4] needs n >= 4; smaller sizes fail with the binding named, before anything runs
    f = ember.jit(lambda x: ember.lax.slice(x, (0, 0), (x.shape[0], 4)), dynamic_axes=["b, n"])
    np.testing.assert_array_equal(np.asarray(f(_x(2, 6))), _x(2, 6)[:, :4])
    with pytest.raises(ShapeError, match=r"binding \{b: 2, n: 3\} violates a shape constraint"):
        f(_x(2, 3))


def test_zero_size_axis_traces_statically() -> None:
    f = ember.jit(lambda x: jnp.sum(x, axis=0), dynamic_axes=["batch, _"])
    np.testing.assert_array_equal(np.asarray(f(np.zeros((0, 3), np.float32))), np.zeros(3))
    np.testing.assert_allclose(np.asarray(f(_x(4, 3))), _x(4, 3).sum(0), rtol=1e-6)
    assert f.cache_info()["compiles"] == 2


# -- caches, ahead-of-time specialization, symbolic outputs ---------------------------------------


def test_lru_evicts_and_rebuilds() -> None:
    f = ember.jit(lambda x: x + 1.0, dynamic_axes=["n"], specialization_cache_size=2)
    for n in (1, 2, 3, 1):
        np.testing.assert_array_equal(np.asarray(f(np.arange(n, dtype=np.float32))), np.arange(n) + 1)
    info = f.cache_info()
    assert info["compiles"] == 1 and info["specializations"] == 4
    assert info["evictions"] == 2 and info["specializations_cached"] == 2
    f(np.zeros(1, np.float32))  # most recent: still cached
    assert f.cache_info()["hits"] == 1


def test_specialize_ahead_of_time() -> None:
    f = ember.jit(lambda x, y: x @ y, dynamic_axes={"x": "b, k", "y": "k, _"})
    specs = f.specialize(ember.ShapeDtypeStruct(("b", "k"), np.float32),
                         ember.ShapeDtypeStruct(("k", 3), np.float32), b=[1, 2], k=4)
    assert [s.env for s in specs] == [{"b": 1, "k": 4}, {"b": 2, "k": 4}]
    assert [s.out_avals[0].shape for s in specs] == [(1, 3), (2, 3)]
    f.specialize(b=5, k=[4, 6])  # the signature traced above
    info = f.cache_info()
    assert info["compiles"] == 1 and info["specializations"] == 4
    x, y = _x(5, 6), _x(6, 3)
    np.testing.assert_allclose(np.asarray(f(x, y)), x @ y, rtol=1e-5)
    assert f.cache_info()["hits"] == 1 and f.cache_info()["specializations"] == 4
    with pytest.raises(ValueError, match="no traced signature"):
        ember.jit(lambda x: x, dynamic_axes=["n"]).specialize(n=3)


def test_output_avals_stay_symbolic_until_bound() -> None:
    f = ember.jit(lambda x: jnp.concatenate([x, x[1:]], axis=0), dynamic_axes=["n, _"])
    c = f.lower(ember.ShapeDtypeStruct(("n", 2), np.float32))
    n = sh.axis("n")
    assert c.out_avals[0].shape == (2 * n - 1, 2)
    assert c.specialize(n=4).out_avals[0].shape == (7, 2)
    # the level-1 executable binds axes from raw inputs too (the contract other modules use)
    x = _x(3, 2)
    (out,) = c.executable([x])
    np.testing.assert_array_equal(out, np.concatenate([x, x[1:]]))


def test_spec_naming_no_axis_is_static() -> None:
    f = ember.jit(_two_input, dynamic_axes={"x": None, "mask": "_"})
    for n in (2, 3):
        np.testing.assert_array_equal(np.asarray(f(_x(n), _x(n))), _x(n) * _x(n))
    assert f.cache_info()["compiles"] == 2 and f.cache_info()["specializations"] == 0


def test_static_jit_unchanged() -> None:
    f = ember.jit(lambda x: x * 2.0)
    for n in (1, 2, 2):
        np.testing.assert_array_equal(np.asarray(f(np.ones(n, np.float32))), 2 * np.ones(n))
    assert f.cache_info()["compiles"] == 2 and f.cache_info()["specializations"] == 0


# -- backend protocol -----------------------------------------------------------------------------


def test_backend_without_specialize_gets_static_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def static_only(program: object, **options: object) -> object:
        assert all(sh.is_static_shape(v.aval.shape) for v in program.invars)
        assert all(sh.is_static_shape(v.aval.shape) for e in program.eqns for v in e.outvars)
        assert not any(e.prim.name == "dim_as_value" for e in program.eqns)
        seen.append(tuple(program.invars[0].aval.shape))
        return jit_mod._numpy_backend(program)

    monkeypatch.setitem(jit_mod.BACKENDS, "static_only", static_only)

    def f(x: object) -> object:
        return jnp.sum(x, axis=0) / ember.dimension_as_value(x.shape[0])

    g = ember.jit(f, dynamic_axes=["batch, _"], backend="static_only")
    for b in (2, 3, 2):
        x = _x(b, 3)
        np.testing.assert_allclose(np.asarray(g(x)), x.mean(0), rtol=1e-6)
    assert seen == [(2, 3), (3, 3)]  # one static compile per binding
    assert g.cache_info()["compiles"] == 1 and g.cache_info()["specializations"] == 2


def test_backend_specialize_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def factory(program: object, **options: object) -> object:
        raise AssertionError("a symbolic program must go to specialize()")

    def specialize(program: object, env: dict, **options: object) -> object:
        calls.append((program, dict(env), options))
        return jit_mod._numpy_specialize(program, env)

    factory.specialize = specialize
    monkeypatch.setitem(jit_mod.BACKENDS, "symbolic", factory)
    g = ember.jit(lambda x: x - jnp.mean(x, axis=0), dynamic_axes=["batch, _"], backend="symbolic",
                  threads=2)
    for b in (4, 5, 4):
        x = _x(b, 3)
        np.testing.assert_allclose(np.asarray(g(x)), x - x.mean(0), rtol=1e-5, atol=1e-6)
    assert [c[1] for c in calls] == [{"batch": 4}, {"batch": 5}]
    assert calls[0][0] is calls[1][0]  # the same symbolic Program for every binding
    assert calls[0][2] == {"threads": 2}
