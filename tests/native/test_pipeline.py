"""The one lowering pipeline (native/pipeline.py) under static and symbolic shapes, its options
(native/options.py: parsed once, bad names/types/values rejected), named scratch
(native/plan/scratch.py) and the fns table (native/abi.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native import abi, specialize
from ember._src.native import pipeline as pl
from ember._src.native.emit import calls
from ember._src.native.options import NativeOptions
from ember._src.native.plan import scratch
from ember._src.native.runtime import blas, progcache
from ember._src.native.scheduling import blockreduce
from tests.native.conftest import requires_cc
from tests.native.util import without_calls

RNG = np.random.default_rng(7)


def _rnn(h, xs, w):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, jnp.sum(h)
    return lax.scan(step, h, xs)


def _rnn_ref(h, xs, w):
    ys = []
    for x in xs:
        h = np.tanh(h @ w + x)
        ys.append(h.sum())
    return h, np.array(ys)


def _rnn_args(n: int = 3):
    w = RNG.standard_normal((16, 16)) * 0.3
    return RNG.standard_normal((n, 16)), RNG.standard_normal((5, n, 16)), w


# -- options ----------------------------------------------------------------------------------
def test_parse_defaults_and_normalization():
    assert NativeOptions.parse({}) == NativeOptions() == NativeOptions.parse(None)
    assert NativeOptions().parallel_threshold == calls.DEFAULT_PARALLEL_THRESHOLD
    o = NativeOptions.parse({"passes": ["dce", "cse"], "num_threads": np.int64(2), "fuse": np.bool_(False),
                             "validate": True, "parallel_threshold": 1000})
    assert o.passes == ("dce", "cse") and o.num_threads == 2 and type(o.num_threads) is int
    assert o.fuse is False and o.validate == "normal" and o.parallel_threshold == 1000
    assert NativeOptions.parse({"num_threads": 0}).num_threads is None  # 0: the default
    assert NativeOptions.parse({"validate": False}).validate == "off"
    assert NativeOptions.parse(o) is o
    # hashable and equal for equal options (the symbolic build cache's key)
    assert hash(o) == hash(NativeOptions.parse({"passes": ("dce", "cse"), "num_threads": 2, "fuse": False,
                                                "validate": "normal", "parallel_threshold": 1000}))
    assert NativeOptions(num_threads=3).threads(openmp=True) == 3
    assert NativeOptions(num_threads=3).threads(openmp=False) == 1
    names = [k for k, _ in NativeOptions().items()]
    assert names == sorted(names) and "prepack" in names and "grads_from" in names and len(names) == 11


def test_parse_is_memoized_by_value_and_type():
    """A symbolic program's every binding parses the same options: the parse is reused, but only
    for values of the same type (``fuse=1`` is still an error after ``fuse=True``)."""
    a = NativeOptions.parse({"fuse": True, "num_threads": 2})
    assert NativeOptions.parse({"fuse": True, "num_threads": 2}) is a
    with pytest.raises(TypeError, match="fuse= must be a bool"):
        NativeOptions.parse({"fuse": 1, "num_threads": 2})
    with pytest.raises(TypeError, match="num_threads= must be an int"):
        NativeOptions.parse({"fuse": True, "num_threads": 2.0})
    assert NativeOptions.parse({"passes": ["dce"]}) == NativeOptions.parse({"passes": ("dce",)})


@pytest.mark.parametrize("options, error, match", [
    ({"fusee": True}, TypeError, "unknown option 'fusee'.*known options: fuse"),
    ({"fuse": 1}, TypeError, "fuse= must be a bool"),
    ({"inplace": "yes"}, TypeError, "inplace= must be a bool"),
    ({"parallel_threshold": 1.5}, TypeError, "parallel_threshold= must be an int"),
    ({"max_kernel_inputs": True}, TypeError, "max_kernel_inputs= must be an int"),
    ({"num_threads": -1}, ValueError, "num_threads= must be at least 0"),
    ({"max_kernel_inputs": 0}, ValueError, "max_kernel_inputs= must be at least 1"),
    ({"passes": "dce"}, TypeError, "passes= must be a list or tuple"),
    ({"passes": ["dce", "nope"]}, ValueError, "unknown pass 'nope'"),
    ({"validate": "loud"}, ValueError, "validation mode"),
    ({"validate": 2}, TypeError, "validate= must be"),
])
def test_bad_options_raise_naming_the_option(options, error, match):
    with pytest.raises(error, match=match):
        NativeOptions.parse(options)


@requires_cc
@pytest.mark.parametrize("dynamic", [False, True])
def test_bad_option_raises_on_both_paths(dynamic):
    """An unknown option is an error on the static and the symbolic path (the symbolic one used
    to drop it, the static one to log and ignore it)."""
    x = np.ones((3, 4), np.float32)
    axes = {"dynamic_axes": {0: ("n", None)}} if dynamic else {}
    with pytest.raises(TypeError, match="parallel_treshold"):
        ember.jit(lambda a: a * 2.0, backend="native", parallel_treshold=10, **axes)(x)


# -- one pipeline -----------------------------------------------------------------------------
@requires_cc
def test_static_and_symbolic_builds_run_the_same_pipeline(monkeypatch):
    monkeypatch.setenv(progcache.ENV_VAR, "0")  # a program-cache hit skips the pipeline
    calls_seen = []
    real = pl.lower

    def spy(program, options, **kw):
        calls_seen.append((options, kw.get("axes", ())))
        return real(program, options, **kw)

    monkeypatch.setattr(pl, "lower", spy)
    monkeypatch.setattr(specialize, "lower", spy)
    from ember._src.native import backend
    monkeypatch.setattr(backend, "lower", spy)
    args = _rnn_args()
    h_ref, ys_ref = _rnn_ref(*args)
    for dyn in (None, {1: (None, "n", None), 0: ("n", None)}):
        f = ember.jit(_rnn, backend="native", num_threads=1, dynamic_axes=dyn)
        h, ys = f(*args)
        np.testing.assert_allclose(np.asarray(h), h_ref, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(ys), ys_ref, rtol=1e-12)
    assert [ax for _, ax in calls_seen] == [(), ("n",)]
    assert all(o == NativeOptions(num_threads=1) for o, _ in calls_seen)


@requires_cc
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("mode", ["off", "normal"])
def test_loop_bodies_are_validated_as_the_option_says(monkeypatch, dynamic, mode):
    """Loop bodies are checked with ``program.validate`` unless validation is off, on the static
    and the symbolic path alike (the symbolic path used to check them even when it was off)."""
    checked = []
    real = pl.validate

    def spy(p):
        checked.append(p)
        return real(p)

    monkeypatch.setattr(pl, "validate", spy)
    args = _rnn_args(4)
    dyn = {1: (None, "n", None), 0: ("n", None)} if dynamic else None
    f = ember.jit(_rnn, backend="native", validate=mode, dynamic_axes=dyn)
    h, ys = f(*args)
    h_ref, ys_ref = _rnn_ref(*args)
    np.testing.assert_allclose(np.asarray(h), h_ref, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(ys), ys_ref, rtol=1e-12)
    if dynamic:
        assert specialize.symbolic_executable(f.lower(*args).program, validate=mode).fallback_reason is None
    assert (len(checked) > 0) == (mode != "off")


@requires_cc
def test_lowered_exposes_every_stage():
    x = RNG.standard_normal((64, 33)).astype(np.float32)
    prog = ember.make_program(lambda a: jnp.sum(jnp.exp(a), axis=0))(x)
    low = pl.lower(prog, NativeOptions(num_threads=2), openmp=True)
    assert low.program is not prog and low.schedule.program is low.program
    assert low.threads == 2 and low.codegen.num_threads == 2 and low.layout is None
    assert low.source.startswith("#") and "ember_main" in low.source
    assert low.mode in ("strict", "normal", "off")


# -- named scratch ----------------------------------------------------------------------------
@requires_cc
def test_scratch_is_named_by_its_owner():
    # a column sum: per-row accumulators of reduction 0
    x = RNG.standard_normal((300, 70)).astype(np.float32)
    exe = ember.jit(lambda a: jnp.sum(jnp.exp(a), axis=0), backend="native").lower(x).executable
    np.testing.assert_allclose(exe([x])[0], np.exp(x).sum(axis=0), rtol=1e-5)
    names = {name for _, name in exe.plan.scratch}
    assert scratch.accumulators(0) in names
    (s, _), = [k for k in exe.plan.scratch if k[1] == scratch.accumulators(0)]
    assert exe.plan.scratch[(s, scratch.accumulators(0))].nbytes == 70 * 4
    # a whole-array sum in blocks: one partial per block
    y = RNG.standard_normal(3 * blockreduce.BLOCK + 5)
    exe = ember.jit(lambda a: jnp.sum(a * a), backend="native").lower(y).executable
    np.testing.assert_allclose(exe([y])[0], np.sum(y * y), rtol=1e-12)
    (b,) = [b for (_, n), b in exe.plan.scratch.items() if n == blockreduce.partial_key(0)]
    assert b.nbytes == 4 * 8
    # a LAPACK call's workspace and a scan's workspace
    a = RNG.standard_normal((6, 4))
    exe = ember.jit(lambda m: jnp.linalg.qr(m)[1], backend="native").lower(a).executable
    np.testing.assert_allclose(np.abs(exe([a])[0]), np.abs(np.linalg.qr(a)[1]), rtol=1e-10, atol=1e-12)
    assert any(n == scratch.CALL_WORKSPACE for _, n in exe.plan.scratch)
    args = _rnn_args()
    exe = ember.jit(_rnn, backend="native").lower(*args).executable
    assert any(n == scratch.LOOP_WORKSPACE for _, n in exe.plan.scratch)
    assert all(isinstance(s, int) and isinstance(n, str) for s, n in exe.plan.scratch)


def test_scratch_request_alignment_must_divide_the_arena_alignment():
    assert scratch.ScratchRequest("x", 8, align=16).align == 16
    with pytest.raises(ValueError, match="alignment 48"):
        scratch.ScratchRequest("x", 8, align=48)


# -- the fns table ----------------------------------------------------------------------------
def test_abi_slots():
    assert abi.SLOT_NAMES[:5] == ("sgemm", "dgemm", "callback", "sgemv", "dgemv")
    assert abi.slot("callback") == abi.CALLBACK == 2 and abi.fn_ref("callback") == "fns[2]"
    assert abi.N_FIXED_FNS == 5 + len(abi.LINALG_NAMES) + 1  # ..., LAPACK, blas_threads
    assert abi.slot("zgeev") == abi.N_FIXED_FNS - 2 and abi.slot("blas_threads") == abi.N_FIXED_FNS - 1
    assert abi.const_ref(3) == f"fns[{abi.N_FIXED_FNS + 3}]"
    with pytest.raises(ValueError, match="'nope'"):
        abi.slot("nope")
    consts = [np.zeros(2), np.ones(3)]
    table = abi.fn_table(None, consts)
    assert len(table) == abi.N_FIXED_FNS + 2 and table[abi.CALLBACK] is None
    assert table[abi.DGEMM] == blas.blas_pointer("dgemm")
    assert table[abi.slot("spotrf")] == blas.blas_pointer("spotrf")
    assert table[abi.N_FIXED_FNS + 1] == consts[1].ctypes.data


def _slice_fn(x, i):
    return lax.dynamic_slice(jnp.exp(x), [i], (2,)) + 1.0


@requires_cc
@pytest.mark.parametrize("dynamic", [False, True])
def test_fallback_steps_call_the_callback_slot(monkeypatch, dynamic):
    without_calls(monkeypatch, "dynamic_slice")
    x = np.arange(5, dtype=np.float32)
    f = ember.jit(_slice_fn, backend="native", validate="off", dynamic_axes={0: ("n",)} if dynamic else None)
    np.testing.assert_allclose(np.asarray(f(x, np.int32(1))), np.exp(x[1:3]) + 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(f(x, np.int32(3))), np.exp(x[3:5]) + 1, rtol=1e-6)
    c = f.lower(x, np.int32(1))
    src = specialize.symbolic_executable(c.program, validate="off").source if dynamic else c.executable.source
    assert f"((em_cb_t){abi.fn_ref('callback')})(" in src
