"""The #include lines of generated programs: only the headers the code needs, never one too few."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.emit import c_headers
from ember._src.native.runtime import toolchain

requires_cc = pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")


def _declared_names(header: str) -> set[str]:
    """Public names (no leading underscore) that ``header`` declares under ``-std=c11``, read from
    the compiler itself: its macros (``-dM``) beyond the predefined ones, and the functions and
    typedefs in its preprocessed text."""
    cc = toolchain.find_compiler().path

    def macros(src: str) -> set[str]:
        out = subprocess.run([cc, "-std=c11", "-dM", "-E", "-x", "c", "-"], input=src, capture_output=True,
                             text=True, check=True).stdout
        return set(re.findall(r"#define (\w+)", out))

    text = subprocess.run([cc, "-std=c11", "-E", "-P", "-x", "c", "-"], input=f"#include <{header}>\n",
                          capture_output=True, text=True, check=True).stdout
    names = macros(f"#include <{header}>\n") - macros("")
    for stmt in text.split(";"):
        stmt = " ".join(stmt.split()).replace("__extension__ ", "")
        stmt = re.sub(r"__attribute__ *\(\(.*?\)\)|__asm__ *\(.*?\)", "", stmt)
        if stmt.startswith("extern "):
            names.update(re.findall(r"(\w+)\s*\(", stmt)[:1])
        elif stmt.startswith("typedef "):
            names.update(re.findall(r"(\w+)\s*$", stmt))
    return {n for n in names if not n.startswith("_")}


@requires_cc
@pytest.mark.parametrize("header,known", [("math.h", c_headers.MATH_NAMES),
                                          ("string.h", c_headers.STRING_NAMES)])
def test_every_name_the_header_declares_pulls_it_in(header, known):
    declared = _declared_names(header)
    assert len(declared) >= 20  # the extraction found the header's declarations
    assert declared <= known, sorted(declared - known)
    for name in sorted(declared):
        assert f"#include <{header}>" in c_headers.includes_for(f"x = {name}(y);\n")


def test_includes_follow_the_code():
    base = c_headers.includes_for("int f(int x) { return x + 1; }\n")
    assert base == "#include <stdint.h>\n#include <float.h>\n"
    assert "<math.h>" in c_headers.includes_for("float y = expf(x);")
    assert "<math.h>" in c_headers.includes_for("float y = x > 0 ? INFINITY : NAN;")
    assert "<math.h>" not in c_headers.includes_for("/* k0: [exp, tanh] */ float y = em_expx(x);")
    assert "<math.h>" not in c_headers.includes_for("// log\nfloat logits = x;")
    assert "<string.h>" in c_headers.includes_for("memcpy(a, b, (size_t)n);")
    assert "<string.h>" not in c_headers.includes_for("__builtin_memcpy(a, b, 4);")
    omp = c_headers.includes_for("const int64_t tid_ = omp_get_thread_num();")
    assert "#ifdef _OPENMP\n#include <omp.h>\n#endif" in omp
    assert "omp.h" not in c_headers.includes_for("#pragma omp simd\nfor (;;) {}")


def _source(fn, *args) -> str:
    return ember.jit(fn, backend="native").lower(*args).executable.source


@requires_cc
def test_relu_mlp_compiles_without_math_h_and_is_correct():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    w1, w2 = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2))
    b1 = rng.standard_normal(16).astype(np.float32)

    def mlp(x, w1, b1, w2):
        return lax.dot(jnp.maximum(lax.dot(x, w1) + b1, 0.0), w2)

    src = _source(mlp, x, w1, b1, w2)
    assert "<math.h>" not in src and "<string.h>" not in src
    assert toolchain.source_libs(src) == ()
    want = np.maximum(x @ w1 + b1, 0.0) @ w2
    np.testing.assert_allclose(np.asarray(ember.jit(mlp, backend="native")(x, w1, b1, w2)), want, rtol=1e-5,
                               atol=1e-5)


@requires_cc
def test_math_program_includes_math_h_and_is_correct():
    x = np.linspace(-3, 3, 64, dtype=np.float32)

    def f(x):
        return jnp.exp(x) * jnp.tanh(x) + jnp.floor(x * 1.5)

    src = _source(f, x)
    assert "#include <math.h>" in src and toolchain.source_libs(src) == ("-lm",)
    want = np.exp(x.astype(np.float64)) * np.tanh(x.astype(np.float64)) + np.floor(x.astype(np.float64) * 1.5)
    np.testing.assert_allclose(np.asarray(ember.jit(f, backend="native")(x)), want, rtol=2e-6, atol=2e-6)
