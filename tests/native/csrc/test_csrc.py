"""The hand-written C of the native backend lives in ``native/csrc/*.c|h`` package resources: the
loader finds every file, each compiles on its own with the defines it is built with (nothing is
spliced into it by text replacement), and the sources the backend assembles contain them."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from ember._src.native import csrc
from ember._src.native.csrc import load
from ember._src.native.emit import fft
from ember._src.native.runtime import dispatch, threadpool

CC = shutil.which("gcc") or shutil.which("cc")


def test_loader_finds_every_resource():
    names = csrc.names()
    want = {"dispatch.c", "threadpool.c", "fft_core.h", "fft_typed.h", "fft_runtime.h"}
    assert want <= set(names)
    for n in names:
        assert load(n).strip()


def _syntax(tmp_path: Path, text: str, *flags: str) -> subprocess.CompletedProcess:
    f = tmp_path / "unit.c"
    f.write_text(text)
    return subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror=implicit-function-declaration", *flags,
                           str(f)], capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_threadpool_and_dispatcher_compile_standalone(tmp_path):
    out = _syntax(tmp_path, threadpool._library_source()[0], "-pthread")
    assert out.returncode == 0, out.stderr
    out = _syntax(tmp_path, '#define EMBER_DISPATCH_ABI "test"\n' + load("dispatch.c"),
                  f"-I{sysconfig.get_paths()['include']}", f"-I{np.get_include()}")
    assert out.returncode == 0, out.stderr
    assert load("dispatch.c") in dispatch.source()


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
@pytest.mark.parametrize("real_t,suffix", [("float", "f32"), ("double", "f64")])
def test_fft_headers_compile_for_each_precision(tmp_path, real_t, suffix):
    """With the thread pool's program-side helpers (the typed header's chunk function runs on it)
    and the runtime-length plan cache."""
    unit = ("#include <stdint.h>\n#include <string.h>\n#include <math.h>\n#include <stdlib.h>\n"
            + threadpool.c_helpers() + fft._CORE + fft._RUNTIME
            + f"#define ELT {real_t}\n#define EM_T(name) name##_{suffix}\n" + load("fft_typed.h"))
    out = _syntax(tmp_path, unit)
    assert out.returncode == 0, out.stderr


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
@pytest.mark.parametrize("target", [["-mavx512f", "-mfma"], ["-mavx2", "-mfma"], ["-mno-avx"]],
                         ids=["avx512", "avx2", "scalar"])
def test_row_exp_compiles_for_each_target(tmp_path, target):
    """vexp.h (each variant: AVX-512F, AVX2+FMA, the scalar fallback) after the prelude that
    defines em_expf, as the generated code includes it; no warnings."""
    from ember._src.native.emit import c_ops

    use = "float use(float *d, const float *s, int64_t n) { return em_exp_row_f32(d, s, 0.5f, n); }\n"
    body = load("vexp.h") + use
    # -fopenmp-simd as the backend compiles (toolchain.BASE_FLAGS): vexp.h has `omp simd` loops
    out = _syntax(tmp_path, c_ops.prelude_for(body) + body, "-std=c11", "-fopenmp-simd", "-Werror", *target)
    assert out.returncode == 0, out.stderr


def test_prelude_math_sections():
    """csrc/prelude_math.h is the op table's library of inline math functions: one section per
    function with the sections it calls, and the whole file compiles after the prelude head."""
    from ember._src.native.emit import c_ops
    secs = csrc.sections("prelude_math.h")
    assert {"em_expf", "em_logf", "em_tanhf", "em_erff", "em_digamma", "em_polygamma"} <= set(secs)
    assert secs["em_logisticf"][0] == ("em_expf",)
    assert secs["em_polygamma"][0] == ("em_digamma", "em_hzeta")
    for name, (deps, text) in secs.items():
        assert f" {name}(" in text and "/*@" not in text, name
        assert set(deps) <= set(secs)
        assert c_ops.PRELUDE_FUNCS[name] == (deps, text)
    # a function's section comes with its dependencies, each before its callers
    assert c_ops.prelude_closure(["em_polygamma"]) == ["em_digamma", "em_hzeta", "em_polygamma"]


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_prelude_math_compiles_standalone(tmp_path):
    from ember._src.native.emit import c_ops
    unit = ("#include <stdint.h>\n#include <float.h>\n#include <math.h>\n" + c_ops.PRELUDE_HEAD
            + load("prelude_math.h"))
    out = _syntax(tmp_path, unit, "-std=c11", "-Werror")
    assert out.returncode == 0, out.stderr


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_prelude_complex_compiles_for_each_precision(tmp_path):
    """Every complex helper section, instantiated for complex64 and complex128 (with its
    dependencies first), compiles after the prelude head."""
    from ember._src.native.emit import c_ops
    names = [f"em_{n}{sfx}" for n in csrc.sections("prelude_complex.h") for sfx in ("f", "")]
    body = "".join(c_ops.PRELUDE_FUNCS[n][1] for n in c_ops.prelude_closure(names))
    assert c_ops.prelude_closure(["em_cpowf"]) == ["em_cmulf", "em_cdivf", "em_cpowf"]
    unit = ("#include <stdint.h>\n#include <float.h>\n#include <math.h>\n#include <complex.h>\n"
            + c_ops.PRELUDE_HEAD + body)
    out = _syntax(tmp_path, unit, "-std=c11", "-Werror")
    assert out.returncode == 0, out.stderr
