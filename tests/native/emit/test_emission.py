"""The emission writer (``native/emit/support.py``): emitters record the headers, inline math
functions and support blocks their C uses; ``codegen.generate`` assembles the translation unit from
that record and, with ``native_check_emission`` on (the suite's conftest sets it), raises when
something was used without being recorded."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import flags
from ember._src.native import pipeline
from ember._src.native.emit import support
from ember._src.native.options import NativeOptions


def _generated(f, *args, **options):
    """The generated translation unit of ``f`` (lowered directly: no program cache in between)."""
    return pipeline.lower(ember.make_program(f)(*args), NativeOptions(**options), openmp=True).generated


def _needs(f, *args, **options) -> dict:
    return _generated(f, *args, **options).needs


def test_the_suite_checks_emission():
    assert flags.get("native_check_emission"), "tests/conftest.py sets EMBER_CHECK_EMISSION=1"


def test_record_follows_what_the_program_uses():
    x = np.linspace(-2.0, 2.0, 24, dtype=np.float32).reshape(4, 6)
    plain = _needs(lambda a: jnp.maximum(a * 2.0 + 1.0, 0.0), x)
    assert "math.h" not in plain and "em_expf" not in plain
    sin = _needs(lambda a: jnp.sin(a) + 1.0, x)
    assert "math.h" in sin
    exp32 = _needs(lambda a: jnp.exp(a) * 3.0, x)
    assert "em_expf" in exp32  # float32 exp: the inline implementation, not libm
    exp64 = _needs(lambda a: jnp.exp(a) * 3.0, x.astype(np.float64))
    assert "math.h" in exp64 and "em_expf" not in exp64
    nan_max = _needs(lambda a: jnp.max(a, axis=1), x)  # NaN-propagating max writes NAN
    assert "math.h" in nan_max


def test_source_is_assembled_from_the_record():
    x = np.linspace(-2.0, 2.0, 24, dtype=np.float32).reshape(4, 6)
    gen = _generated(lambda a: jnp.sin(a).sum(), x)
    assert "#include <math.h>" in gen.source and "math.h" in gen.needs
    src = _generated(lambda a: jnp.maximum(a, 0.0) * 2.0, x).source
    assert "#include <math.h>" not in src and "em_expf" not in src


def test_blocks_are_included_only_when_recorded():
    x = np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float32)
    pooled = _generated(lambda a: jnp.tanh(a) * 2.0 + a, x, num_threads=2)
    assert "threadpool" in pooled.needs and "main_ctx" in pooled.needs  # a pooled kernel
    assert "EM_TASK_ATTR" in pooled.source and "em_main_ctx em_mctx_" in pooled.source
    serial = _generated(lambda a: a + 1.0, x[:2, :3], num_threads=1)
    needs, src = serial.needs, serial.source
    assert "threadpool" not in needs and "EM_TASK_ATTR" not in src
    assert "em_cb_failed_" not in src


def test_product_records_its_blas_wrapper():
    a = np.random.default_rng(1).standard_normal((3, 5))
    b = np.random.default_rng(2).standard_normal((5, 4))
    gen = _generated(lambda x, y: x @ y, a, b)
    wrappers = [n for n in gen.needs if n.startswith("em_gemm_")]
    assert wrappers == ["em_gemm_f64"]  # float64 goes to BLAS through the wrapper
    assert "#define EM_FN em_gemm_f64\n" in gen.source and "em_gemm_f32" not in gen.source
    np.testing.assert_allclose(ember.jit(lambda x, y: x @ y, backend="native")(a, b), a @ b, rtol=1e-12)


def test_check_fails_when_an_emitter_does_not_record(monkeypatch):
    """Drop every record of <math.h>: generate must refuse the unit that calls sinf."""
    real_need, real_fragment = support.need, support._fragment_needs

    def forgetful(*names: str) -> None:
        real_need(*(n for n in names if n != "math.h"))

    monkeypatch.setattr(support, "need", forgetful)
    monkeypatch.setattr(support, "_fragment_needs",
                        lambda text: tuple(n for n in real_fragment(text) if n != "math.h"))
    x = np.linspace(0.0, 1.0, 8, dtype=np.float32)
    with pytest.raises(AssertionError, match="math.h"):
        _generated(lambda a: jnp.sin(a) * 2.0 + 0.5, x)


def test_recording_is_scoped():
    outer: dict[str, None] = {}
    inner: dict[str, None] = {}
    support.need("math.h")  # outside any recording: nothing to record into, no error
    with support.recording(outer):
        support.need("string.h")
        with support.recording(inner):
            support.need("omp.h")
        support.need("em_expf")
    assert list(outer) == ["string.h", "em_expf"] and list(inner) == ["omp.h"]

