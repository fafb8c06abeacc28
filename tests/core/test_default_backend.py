"""Choosing the default backend of ``jit``: native when a C compiler works, the reference
backend with a one-time warning otherwise, ``$EMBER_BACKEND`` and ``set_default_backend``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import jit as jit_mod
from ember._src.native.backend import NativeExecutable
from ember._src.native.runtime import toolchain


@pytest.fixture
def fresh_choice(monkeypatch):
    """Forget the probed automatic choice and any override; restore both afterwards."""
    monkeypatch.setattr(jit_mod, "_auto_default", None)
    monkeypatch.setattr(jit_mod, "_default_override", None)
    monkeypatch.delenv("EMBER_BACKEND", raising=False)
    yield
    ember.set_default_backend(None)


def _runs_on(f, x) -> str:
    exe = f.lower(x).executable
    if isinstance(exe, NativeExecutable) and exe.fallback_reason is None:
        return "native"
    return "numpy"


def test_native_is_the_default_when_a_compiler_works(fresh_choice):
    if toolchain.find_compiler() is None:
        pytest.skip("no C compiler available")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ember.default_backend() == "native"
    x = np.linspace(-2, 2, 7, dtype=np.float32)
    f = ember.jit(lambda v: jnp.tanh(v) * 2 + 1)
    np.testing.assert_allclose(f(x), np.tanh(x) * 2 + 1, rtol=1e-6, atol=1e-6)
    assert _runs_on(f, x) == "native"


def test_no_compiler_falls_back_with_one_warning(fresh_choice, monkeypatch):
    monkeypatch.setattr(toolchain, "find_compiler", lambda: None)
    with pytest.warns(RuntimeWarning, match="no working C compiler"):
        assert ember.default_backend() == "numpy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is given once
        assert ember.default_backend() == "numpy"
        f = ember.jit(lambda v: v * 3)
        x = np.arange(4, dtype=np.float32)
        np.testing.assert_array_equal(f(x), x * 3)
        assert not isinstance(f.lower(x).executable, NativeExecutable)


def test_broken_explicit_compiler_falls_back_with_its_reason(fresh_choice, monkeypatch):
    def broken():
        raise ember.errors.CompileError("EMBER_CC='nope' is not an executable on PATH")

    monkeypatch.setattr(toolchain, "find_compiler", broken)
    with pytest.warns(RuntimeWarning, match="EMBER_CC='nope'"):
        assert ember.default_backend() == "numpy"


def test_environment_variable_and_setter_override(fresh_choice, monkeypatch):
    x = np.arange(5, dtype=np.float32)
    monkeypatch.setenv("EMBER_BACKEND", "numpy")
    assert ember.default_backend() == "numpy"
    f = ember.jit(lambda v: v - 1)
    np.testing.assert_array_equal(f(x), x - 1)
    assert _runs_on(f, x) == "numpy"
    monkeypatch.setenv("EMBER_BACKEND", "fortran")
    with pytest.raises(ValueError, match="EMBER_BACKEND"):
        ember.default_backend()
    ember.set_default_backend("numpy")  # the setter wins over the environment
    assert ember.default_backend() == "numpy"
    with pytest.raises(ValueError, match="unknown backend"):
        ember.set_default_backend("fortran")
    ember.set_default_backend(None)
    monkeypatch.setenv("EMBER_BACKEND", "native")
    assert ember.default_backend() == "native"


def test_explicit_backend_argument_wins(fresh_choice):
    ember.set_default_backend("numpy")
    x = np.arange(3, dtype=np.float32)
    f = ember.jit(lambda v: v + 2, backend="native")
    np.testing.assert_array_equal(f(x), x + 2)
    if toolchain.find_compiler() is not None:
        assert _runs_on(f, x) == "native"
    g = ember.jit(lambda v: v + 2)
    np.testing.assert_array_equal(g(x), x + 2)
    assert _runs_on(g, x) == "numpy"


def test_unsupported_program_falls_back_per_program_with_reason(fresh_choice):
    if toolchain.find_compiler() is None:
        pytest.skip("no C compiler available")
    f = ember.jit(lambda v: v * 2)
    x = np.ones(3, np.float16)
    np.testing.assert_array_equal(f(x), np.full(3, 2, np.float16))
    exe = f.lower(x).executable
    assert isinstance(exe, NativeExecutable) and "float16" in exe.fallback_reason
