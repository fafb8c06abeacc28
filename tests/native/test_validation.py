"""Phase validation (``ember._src.validation``): each validator catches a hand-broken object,
the modes ``strict | normal | off`` and their sources (``set_validation``, ``$EMBER_VALIDATE``,
``jit(validate=...)``), and the compile / call counters of ``cache_info``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src import validation as val
from ember._src.native.runtime import compiler
from ember._src.program import Program
from ember.errors import ValidationError
from tests.native.conftest import requires_cc
from tests.native.util import without_calls

SRC_DIR = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(autouse=True)
def _default_mode(monkeypatch):
    monkeypatch.delenv(val.ENV_VAR, raising=False)
    ember.set_validation(None)
    yield
    ember.set_validation(None)


def _f(x, y):
    a = jnp.exp(x) * 2.0
    b = jnp.tanh(y) + a
    return b * a


def _args():
    rng = np.random.default_rng(0)
    return rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)


def _want(x, y):
    a = np.exp(x) * 2.0
    return (np.tanh(y) + a) * a


def _use_before_def() -> Program:
    p = ember.make_program(_f)(*_args())
    eqns = list(p.eqns)
    eqns[0], eqns[-1] = eqns[-1], eqns[0]  # the last equation now reads values defined later
    return Program(p.constvars, p.invars, eqns, p.outvars, p.consts)


# ---------------------------------------------------------------------------------------------
# program validators
# ---------------------------------------------------------------------------------------------


def test_traced_validators_pass_a_good_program():
    p = ember.make_program(_f)(*_args())
    assert val.run_validators("traced", p, "strict") == []
    names = [n for n, _ in val.validators("traced")]
    assert {"ssa", "producers", "avals"} <= set(names)


def test_use_before_def_is_caught_by_ssa_and_producers():
    bad = _use_before_def()
    with pytest.raises(ValidationError) as ei:
        val.run_validators("traced", bad, "normal")
    msg = str(ei.value)
    assert "traced/ssa" in msg and "traced/producers" in msg and "no producer" in msg
    # off runs nothing
    assert val.run_validators("traced", bad, "off") == []


def test_missing_producer_of_an_output():
    p = ember.make_program(_f)(*_args())
    broken = Program(p.constvars, p.invars, p.eqns[:-1], p.outvars, p.consts)
    findings = val._producers(broken)
    assert len(findings) == 1 and "output" in findings[0].message


def test_aval_mismatch_reported_by_avals_validator():
    from ember._src.core import ShapedArray
    from ember._src.program import Eqn, Var

    p = ember.make_program(_f)(*_args())
    e = p.eqns[0]
    wrong = Var(ShapedArray((64,), np.dtype(np.float64)))  # exp of float32 typed float64
    eqns = [Eqn(e.prim, e.inputs, e.params, [wrong])] + list(p.eqns[1:])
    # rewire users of the old outvar to the new one
    old = e.outvars[0]
    fixed = [eqns[0]] + [Eqn(q.prim, [wrong if a is old else a for a in q.inputs], q.params, q.outvars)
                         for q in eqns[1:]]
    bad = Program(p.constvars, p.invars, fixed, p.outvars, p.consts)
    f = val._avals(bad)
    assert len(f) >= 1 and "f64[64]" in f[0].message and "f32[64]" in f[0].message
    assert f[0].severity == "error"
    assert val._producers(bad) == []  # well-formed SSA, only the type is wrong
    # the avals validator is expensive: normal mode relies on ssa (which also type-checks)
    with pytest.raises(ValidationError, match="ssa"):
        val.run_validators("traced", bad, "normal")
    with pytest.raises(ValidationError, match="avals"):
        val.run_validators("traced", bad, "strict")


def test_dead_code_warning(caplog):
    p = ember.make_program(_f)(*_args())
    x = p.invars[0]
    from ember._src.program import Eqn, Var

    e = p.eqns[0]  # exp(x): add a second, unused exp
    dead = Eqn(e.prim, e.inputs, e.params, [Var(e.outvars[0].aval)])
    bad = Program(p.constvars, p.invars, [dead, *p.eqns], p.outvars, p.consts)
    assert x in p.invars
    with caplog.at_level(logging.INFO, logger="ember"):
        found = val.run_validators("optimized", bad, "normal")
    assert [f.validator for f in found] == ["dead_code"] and found[0].severity == "warning"
    assert "equation 0" in found[0].message and "dead_code" in caplog.text
    with pytest.raises(ValidationError, match="dead_code"):
        val.run_validators("optimized", bad, "strict")
    assert val.run_validators("optimized", p, "strict") == []


# ---------------------------------------------------------------------------------------------
# plan validators
# ---------------------------------------------------------------------------------------------


def _g(x, w1, w2):
    h = jnp.tanh(x @ w1)
    z = h @ w2
    return jnp.exp(z) / jnp.sum(jnp.exp(z), axis=1, keepdims=True) + jnp.mean(h)


def _g_exe():
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32, 8)]]
    jf = ember.jit(_g, backend="native")
    x, w1, w2 = args
    h = np.tanh(x @ w1)
    z = h @ w2
    want = np.exp(z) / np.exp(z).sum(1, keepdims=True) + h.mean()
    np.testing.assert_allclose(np.asarray(jf(*args)), want, rtol=1e-4, atol=1e-5)
    return jf.lower(*args).executable


@requires_cc
def test_overlapping_live_buffers_caught_in_strict_mode():
    import copy

    exe = _g_exe()
    assert val.run_validators("planned", exe, "strict") == []
    plan = copy.deepcopy(exe.plan)
    arena = [b for b in plan.buffers if b.in_arena and b.nbytes > 0]
    a, b = next((a, b) for i, a in enumerate(arena) for b in arena[i + 1:]
                if a.start <= b.end and b.start <= a.end)
    b.offset = a.offset  # the same bytes while both are live
    broken = val.Planned(exe.schedule, plan)
    assert val.run_validators("planned", broken, "normal") == []  # the overlap check is expensive
    with pytest.raises(ValidationError, match="arena_overlap.*overlap"):
        val.run_validators("planned", broken, "strict")


@requires_cc
def test_unaligned_offset_caught_in_normal_mode():
    import copy

    exe = _g_exe()
    plan = copy.deepcopy(exe.plan)
    b = next(b for b in plan.buffers if b.in_arena and b.nbytes > 0)
    b.offset += 8
    with pytest.raises(ValidationError, match="alignment.*unaligned"):
        val.run_validators("planned", val.Planned(exe.schedule, plan), "normal")


def _slice_fn(x, i):
    return lax.dynamic_slice(jnp.exp(x), [i], (2,)) + 1.0


@requires_cc
def test_fallback_step_warns_in_normal_and_raises_in_strict(monkeypatch, caplog):
    without_calls(monkeypatch, "dynamic_slice")
    x = np.arange(5, dtype=np.float32)
    with caplog.at_level(logging.INFO, logger="ember"):
        jf = ember.jit(_slice_fn, backend="native", validate="normal")
        got = np.asarray(jf(x, np.int32(1)))
    np.testing.assert_allclose(got, np.exp(x[1:3]) + 1, rtol=1e-6)
    assert "lowerings" in caplog.text and "dynamic_slice" in caplog.text
    with pytest.raises(ValidationError, match="dynamic_slice"):
        ember.jit(_slice_fn, backend="native", validate="strict")(x, np.int32(1))
    # set_validation applies when jit has no validate= option
    ember.set_validation("strict")
    with pytest.raises(ValidationError, match="fallback"):
        ember.jit(_slice_fn, backend="native")(x, np.int32(1))


# ---------------------------------------------------------------------------------------------
# execute phase and modes
# ---------------------------------------------------------------------------------------------


@requires_cc
def test_execute_phase_only_in_strict_mode():
    x, y = _args()
    exe = ember.jit(_f, backend="native", validate="strict").lower(x, y).executable
    np.testing.assert_allclose(exe.run_trusted([x, y])[0], _want(x, y), rtol=1e-5)
    with pytest.raises(ValidationError, match="input_avals.*input 1"):
        exe.run_trusted([x, y[:10]])
    normal = ember.jit(_f, backend="native").lower(x, y).executable
    assert "run_trusted" not in vars(normal)  # the default call path is untouched
    f = val.ExecuteCheck([((3,), np.dtype(np.float32))], [np.zeros(3, np.float64)])
    assert "float64" in val._input_avals(f)[0].message


def test_mode_sources(monkeypatch):
    assert val.validation_mode() == "normal"
    assert val.validation_mode(True) == "normal" and val.validation_mode(False) == "off"
    monkeypatch.setenv(val.ENV_VAR, "strict")
    assert val.validation_mode() == "strict"
    ember.set_validation("off")
    assert val.validation_mode() == "off"  # set_validation overrides the environment
    assert val.validation_mode("normal") == "normal"  # the jit option overrides both
    with pytest.raises(ValueError, match="validation mode"):
        ember.set_validation("loud")
    monkeypatch.setenv(val.ENV_VAR, "bogus")
    ember.set_validation(None)
    with pytest.raises(ValueError, match="EMBER_VALIDATE"):
        val.validation_mode()


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=requires_cc)])
def test_env_var_and_off_at_trace(monkeypatch, backend):
    """A program with a bad trace rule is rejected at the traced phase unless validation is off."""
    from ember._src.prims import elementwise  # noqa: F401  (exp is declared there)
    x, y = _args()
    jf = ember.jit(_f, backend=backend)
    np.testing.assert_allclose(np.asarray(jf(x, y)), _want(x, y), rtol=1e-5)
    bad = _use_before_def()
    monkeypatch.setenv(val.ENV_VAR, "off")
    assert val.run_validators("traced", bad) == []
    monkeypatch.setenv(val.ENV_VAR, "normal")
    with pytest.raises(ValidationError):
        val.run_validators("traced", bad)


@requires_cc
def test_validate_true_false_accepted():
    x, y = _args()
    for v in (True, False, "off", "strict"):
        got = np.asarray(ember.jit(_f, backend="native", validate=v)(x, y))
        np.testing.assert_allclose(got, _want(x, y), rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# cache_info counters
# ---------------------------------------------------------------------------------------------


def test_cache_info_counts_calls():
    x, y = _args()
    jf = ember.jit(_f, backend="numpy")
    jf.clear_cache()  # jit(_f) of other tests shares this cache (JAX caches on the function)
    for _ in range(5):
        out = jf(x, y)
    jf(ember.numpy.asarray(x), ember.numpy.asarray(y))  # fast path
    jf.lower(x, y)  # not a call
    np.testing.assert_allclose(np.asarray(out), _want(x, y), rtol=1e-5)
    info = jf.cache_info()
    assert info["calls"] == 6 and info["traces"] == 1
    assert info["compiler_runs"] == 0 and info["disk_cache_hits"] == 0


_CHILD = """
import json, sys
import numpy as np
import ember, ember.numpy as jnp
def f(x, y):
    a = jnp.exp(x) * 2.0
    return (jnp.tanh(y) + a) * a
x = np.linspace(-1, 1, 64, dtype=np.float32); y = x[::-1].copy()
jf = ember.jit(f, backend="native")
out = np.asarray(jf(x, y)); jf(x, y)
a = np.exp(x) * 2.0
assert np.allclose(out, (np.tanh(y) + a) * a, rtol=1e-5)
info = jf.cache_info()
print(json.dumps({k: info[k] for k in ("calls", "compiler_runs", "disk_cache_hits")}))
"""


@requires_cc
def test_cache_info_compiler_runs_and_disk_hits(tmp_path):
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(SRC_DIR))
    outs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outs[0] == {"calls": 2, "compiler_runs": 1, "disk_cache_hits": 0}
    assert outs[1] == {"calls": 2, "compiler_runs": 0, "disk_cache_hits": 1}


@requires_cc
def test_cache_info_in_process_memory_hit_is_neither(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "c2"))
    compiler.clear_memory_cache()
    x, y = _args()
    # two function objects: jit(_f) twice would share one cache and never reach the compiler tiers
    a = ember.jit(lambda x, y: _f(x, y), backend="native")
    b = ember.jit(lambda x, y: _f(x, y), backend="native")
    np.testing.assert_allclose(np.asarray(a(x, y)), _want(x, y), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(b(x, y)), _want(x, y), rtol=1e-5)
    ia, ib = a.cache_info(), b.cache_info()
    assert (ia["compiler_runs"], ia["disk_cache_hits"]) == (1, 0)
    assert (ib["compiler_runs"], ib["disk_cache_hits"]) == (0, 0)  # the in-memory tier served it


@requires_cc
def test_cache_info_counts_the_symbolic_compile_once(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "c3"))
    compiler.clear_memory_cache()
    jf = ember.jit(lambda x: jnp.tanh(x) * 2.0, backend="native", dynamic_axes=["n"])
    for n in (3, 5, 7, 5):
        x = np.arange(n, dtype=np.float32)
        np.testing.assert_allclose(np.asarray(jf(x)), np.tanh(x) * 2, rtol=1e-6)
    info = jf.cache_info()
    assert (info["calls"], info["specializations"]) == (4, 3)
    assert (info["compiler_runs"], info["disk_cache_hits"]) == (1, 0)  # one symbolic library
