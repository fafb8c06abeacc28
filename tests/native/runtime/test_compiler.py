"""Tests for the native compiler driver and its content-addressed cache."""

from __future__ import annotations

import ctypes
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ember._src.native.runtime import cache_files, compiler, toolchain
from ember.errors import CompileError
from tests.helpers import child_env

ADD_SOURCE = """\
#include <stdint.h>
int64_t add(int64_t a, int64_t b) { return a + b; }
"""

requires_cc = pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    compiler.clear_memory_cache()
    yield
    compiler.clear_memory_cache()


def _load_add(lib: ctypes.CDLL):
    fn = lib.add
    fn.argtypes = [ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int64
    return fn


@requires_cc
def test_compiler_info_flags():
    info = toolchain.find_compiler()
    assert info is not None and info.identity
    for flag in ("-O3", "-fPIC", "-shared", "-std=c11", "-fno-math-errno"):
        assert flag in info.flags
    assert "-ffast-math" not in info.flags and "-ffinite-math-only" not in info.flags


@requires_cc
def test_compile_load_and_call(tmp_path):
    add = _load_add(compiler.load_library(ADD_SOURCE, name_hint="add"))
    assert add(2, 40) == 42
    assert add(-(2**40), 1) == -(2**40) + 1
    key = compiler.cache_key(ADD_SOURCE)
    cache = tmp_path / "cache"
    assert (cache / f"{key}.so").exists()
    assert (cache / f"{key}.c").read_text() == ADD_SOURCE
    assert not list(cache.glob("*.tmp")), "temporary files left behind"
    assert compiler.cache_stats() == {"compiles": 1, "disk_hits": 0, "memory_hits": 0}


@requires_cc
def test_second_compile_hits_memory_tier():
    first = compiler.compile_shared(ADD_SOURCE)
    second = compiler.compile_shared(ADD_SOURCE)
    assert first == second
    stats = compiler.cache_stats()
    assert stats["compiles"] == 1 and stats["memory_hits"] == 1
    lib1 = compiler.load_library(ADD_SOURCE)
    lib2 = compiler.load_library(ADD_SOURCE)
    assert lib1 is lib2


@requires_cc
def test_different_source_different_key():
    other = ADD_SOURCE.replace("a + b", "a - b")
    assert compiler.cache_key(ADD_SOURCE) != compiler.cache_key(other)
    assert compiler.compile_shared(ADD_SOURCE) != compiler.compile_shared(other)
    assert compiler.cache_stats()["compiles"] == 2


@requires_cc
def test_new_process_loads_from_disk(tmp_path):
    compiler.compile_shared(ADD_SOURCE)
    child = (
        "import json, sys, ctypes\n"
        "from ember._src.native.runtime import compiler\n"
        "fn = compiler.load_library(sys.argv[1]).add\n"
        "fn.argtypes = [ctypes.c_int64, ctypes.c_int64]; fn.restype = ctypes.c_int64\n"
        "print(json.dumps({'result': fn(5, 6), **compiler.cache_stats()}))\n"
    )
    env = child_env(tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "-c", child, ADD_SOURCE], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"result": 11, "compiles": 0, "disk_hits": 1, "memory_hits": 0}


@requires_cc
def test_disk_hit_after_memory_cleared():
    path = compiler.compile_shared(ADD_SOURCE)
    compiler.clear_memory_cache()
    assert compiler.compile_shared(ADD_SOURCE) == path
    assert compiler.cache_stats() == {"compiles": 0, "disk_hits": 1, "memory_hits": 0}


@requires_cc
def test_syntax_error_raises_compile_error(tmp_path):
    bad = "int broken(int x) { return x +; }\n"
    with pytest.raises(CompileError) as info:
        compiler.compile_shared(bad, name_hint="broken")
    message = str(info.value)
    saved = tmp_path / "cache" / f"{compiler.cache_key(bad)}.c"
    assert str(saved) in message
    assert saved.read_text() == bad
    assert "error" in message.lower() and "expected" in message.lower()
    assert not (tmp_path / "cache" / f"{compiler.cache_key(bad)}.so").exists()
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_bad_ember_cc_is_reported(monkeypatch):
    monkeypatch.setenv("EMBER_CC", "definitely-not-a-compiler-xyz")
    toolchain.find_compiler.cache_clear()
    try:
        with pytest.raises(CompileError, match="EMBER_CC"):
            toolchain.find_compiler()
    finally:
        monkeypatch.delenv("EMBER_CC")
        toolchain.find_compiler.cache_clear()


def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("EMBER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_files.cache_dir() == tmp_path / "xdg" / "ember"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_files.cache_dir() == tmp_path / "home" / ".cache" / "ember"


@requires_cc
def test_concurrent_processes_compile_once(tmp_path):
    source = ADD_SOURCE + "/* concurrency */\n"
    child = (
        "import json, sys\n"
        "from ember._src.native.runtime import compiler\n"
        "compiler.compile_shared(sys.argv[1])\n"
        "print(json.dumps(compiler.cache_stats()))\n"
    )
    env = child_env(tmp_path / "cache")
    procs = [
        subprocess.Popen([sys.executable, "-c", child, source], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    assert sum(o["compiles"] for o in outs) == 1
    assert sum(o["disk_hits"] for o in outs) == 2


@requires_cc
def test_vectorization_report_mentions_vectorized():
    info = toolchain.find_compiler()
    if info.family != "gcc":
        pytest.skip(f"vectorization report format checked for gcc only (compiler: {info.identity})")
    source = """\
#include <stdint.h>
void scale_add(float *restrict out, const float *restrict x, const float *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = 2.0f * x[i] + y[i];
}
"""
    report = compiler.vectorization_report(source)
    assert "vectorized" in report


@requires_cc
def test_compiler_probe_is_remembered_on_disk(monkeypatch):
    toolchain.find_compiler.cache_clear()
    first = toolchain.find_compiler()  # probes and records the result in the cache directory
    toolchain.find_compiler.cache_clear()

    def no_subprocess(*a, **k):
        raise AssertionError("the compiler was run although its probe is cached")

    monkeypatch.setattr(toolchain, "_run", no_subprocess)
    try:
        assert toolchain.find_compiler() == first
    finally:
        toolchain.find_compiler.cache_clear()


@requires_cc
def test_openmp_runtime_linked_only_for_threaded_sources():
    info = toolchain.find_compiler()
    threaded = "#include <omp.h>\nint nt(void) { int n = 0;\n#pragma omp parallel\n{\n#pragma omp atomic\n" \
               "n += 1; }\nreturn n; }\n"
    plain = "int sq(int x) { int s = 0;\n#pragma omp simd reduction(+:s)\n" \
            "for (int i = 0; i < x; ++i) s += x;\nreturn s; }\n"
    assert toolchain.OPENMP_FLAG not in toolchain.source_flags(plain, info)
    assert "-fopenmp-simd" in toolchain.source_flags(plain, info)
    assert compiler.cache_key(plain, info) != compiler.cache_key(threaded, info)
    sq = compiler.load_library(plain, name_hint="sq").sq
    assert sq(7) == 49
    if toolchain.OPENMP_FLAG in info.flags:
        assert toolchain.OPENMP_FLAG in toolchain.source_flags(threaded, info)
        assert compiler.load_library(threaded, name_hint="nt").nt() >= 1


@requires_cc
def test_cache_key_ignores_comments_but_not_code():
    a = "/* k0: (v0:f32[4]) -> (v3:f32[4]) */\nint f(int x) { return x + 1; }\n"
    b = "/* k0: (v13:f32[4]) -> (v19:f32[4]) */\nint f(int x) { return x + 1; }\n"
    c = "/* k0: (v0:f32[4]) -> (v3:f32[4]) */\nint f(int x) { return x + 2; }\n"
    assert compiler.cache_key(a) == compiler.cache_key(b) != compiler.cache_key(c)
    assert compiler.load_library(a).f(1) == 2
    assert compiler.load_library(b).f(1) == 2  # served from the cache: no second compile
    assert compiler.load_library(c).f(1) == 3
    assert compiler.cache_stats()["compiles"] == 2


def test_same_program_after_other_work_reuses_the_compiled_code(monkeypatch):
    import numpy as np

    import ember
    import ember.numpy as jnp

    if toolchain.find_compiler() is None:
        pytest.skip("no C compiler available")
    monkeypatch.setenv("EMBER_PROGRAM_CACHE", "0")  # the C source is generated again, not reused

    def f(x):
        return jnp.sum(jnp.tanh(x) * 2, axis=0) + jnp.max(x)

    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    first = ember.jit(f, backend="native")
    first(x)
    ember.jit(lambda v: jnp.exp(v) + jnp.cos(v) * 3, backend="native")(x)  # other variables traced
    before = compiler.cache_stats()["compiles"]
    # a new function object, so a new trace (jit of one function shares its traces): new variable
    # ids in the source comments
    again = ember.jit(lambda v: f(v), backend="native")
    np.testing.assert_allclose(again(x), np.sum(np.tanh(x) * 2, axis=0) + np.max(x), rtol=1e-5)
    assert again.lower(x).executable.source != first.lower(x).executable.source
    assert compiler.cache_stats()["compiles"] == before


# ----------------------------------------------------------------------------------------------
# The compiler probe: per machine (user cache dir), optimistic, with fallbacks


def _probe_fresh(monkeypatch, tmp_path, cc: str | None = None) -> toolchain.CompilerInfo | None:
    """find_compiler() with an empty user cache (so it really probes) and ``$EMBER_CC=cc``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if cc is not None:
        monkeypatch.setenv("EMBER_CC", cc)
    toolchain.find_compiler.cache_clear()
    try:
        return toolchain.find_compiler()
    finally:
        toolchain.find_compiler.cache_clear()


@requires_cc
def test_probe_is_kept_in_the_user_cache_not_the_compile_cache(monkeypatch, tmp_path):
    info = _probe_fresh(monkeypatch, tmp_path)
    # identity is the compiler's own --version line (asked independently here)
    version = subprocess.run([info.path, "--version"], capture_output=True, text=True).stdout
    assert info.identity == version.splitlines()[0].strip()
    records = list((tmp_path / "xdg" / "ember" / "compilers").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["flags"] == list(info.flags)
    assert not (tmp_path / "cache" / "compilers").exists()
    # a new, empty compile cache does not repeat the probe
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "another-cache"))

    def no_subprocess(*a, **k):
        raise AssertionError("the compiler was run although its probe is cached")

    monkeypatch.setattr(toolchain, "_run", no_subprocess)
    toolchain.find_compiler.cache_clear()
    try:
        assert toolchain.find_compiler() == info
    finally:
        toolchain.find_compiler.cache_clear()


def _reference_flags(cc: str, tmp_path: Path) -> list[str] | None:
    """The probe's contract, checked step by step: every base flag if a shared object builds with
    them (else without -march=native), plus -fopenmp if an OpenMP program builds and loads."""
    src = tmp_path / "ref.c"
    src.write_text(toolchain._OPENMP_PROBE_SOURCE)

    def builds(flags: list[str], openmp: bool) -> bool:
        out = tmp_path / "ref.so"
        if out.exists():
            out.unlink()
        code = src if openmp else tmp_path / "plain.c"
        if not openmp:
            code.write_text("int f(int x) { return x; }\n")
        ok = subprocess.run([cc, *flags, "-o", str(out), str(code)], capture_output=True).returncode == 0
        if ok and openmp:
            ctypes.CDLL(str(out))
        return ok

    flags = list(toolchain.BASE_FLAGS)
    if not builds(flags, False):
        flags.remove("-march=native")
        if not builds(flags, False):
            return None
    if builds([*flags, toolchain.OPENMP_FLAG], True):
        flags.append(toolchain.OPENMP_FLAG)
    return flags


def _wrapper(tmp_path: Path, rejected: str) -> str:
    """A compiler that fails whenever it is given ``rejected`` and is the system cc otherwise."""
    real = toolchain.find_compiler().path
    script = tmp_path / f"cc-without{rejected}"
    script.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = "{rejected}" ] && exit 1; done\n'
                      f'exec {real} "$@"\n')
    script.chmod(0o755)
    return str(script)


@requires_cc
@pytest.mark.parametrize("rejected", [None, "-fopenmp", "-march=native"])
def test_probe_finds_the_flags_the_compiler_accepts(monkeypatch, tmp_path, rejected):
    cc = toolchain.find_compiler().path if rejected is None else _wrapper(tmp_path, rejected)
    info = _probe_fresh(monkeypatch, tmp_path, cc)
    assert info is not None and info.path == cc
    assert list(info.flags) == _reference_flags(cc, tmp_path)
    if rejected is not None:
        assert rejected not in info.flags
    if rejected == "-march=native":
        assert info.target == ""  # no native target in the cache key when it is not used
    else:
        assert "-march=native" in info.flags and info.target
    # the probed flags build working code
    monkeypatch.setattr(toolchain, "find_compiler", lambda: info)
    compiler.clear_memory_cache()
    assert _load_add(compiler.load_library(ADD_SOURCE, name_hint="wrapped"))(20, 22) == 42


def test_libm_is_linked_only_for_sources_that_include_math():
    assert toolchain.source_libs("#include <math.h>\ndouble f(double x) { return exp(x); }\n") == ("-lm",)
    assert toolchain.source_libs("#include <stdint.h>\n  #  include <complex.h>\n") == ("-lm",)
    assert toolchain.source_libs(ADD_SOURCE) == ()
    assert toolchain.source_libs("/* #include <math.h> in a comment */ int x;\n") == ()


@requires_cc
def test_sources_with_and_without_libm_compile_and_run():
    mathy = "#include <math.h>\ndouble ex(double x) { return exp(x) + erf(x); }\n"
    fn = compiler.load_library(mathy, name_hint="mathy").ex
    fn.argtypes, fn.restype = [ctypes.c_double], ctypes.c_double
    assert fn(0.7) == pytest.approx(math.exp(0.7) + math.erf(0.7), rel=1e-15)
    assert _load_add(compiler.load_library(ADD_SOURCE))(3, 4) == 7


def test_background_builds_run_niced(monkeypatch):
    """build_library's compiles (the per-machine libraries built in the background) run at a lower
    scheduling priority, so a compile the caller waits for keeps the CPU. The priority is set before
    the command starts (``nice -n``, which execs it), never after ``Popen`` returns: with the late
    ``setpriority`` made impossible here, the command and a process it starts still report the
    background niceness (issue 38: a busy machine once let the driver print 0 before the change)."""
    if toolchain._nice_executable() is None:
        pytest.skip("no nice executable on PATH (the late setpriority fallback is tested separately)")
    if os.getpriority(os.PRIO_PROCESS, 0) >= toolchain.BACKGROUND_NICE:
        pytest.skip("this process already runs at or above the background niceness")

    def no_late_change(*args):
        raise AssertionError(f"setpriority{args} after the start: the priority came too late")

    monkeypatch.setattr(os, "setpriority", no_late_change)
    code = "import os, subprocess, sys; print(os.getpriority(os.PRIO_PROCESS, 0)); sys.stdout.flush(); " \
           "subprocess.run([sys.executable, '-c', 'import os; print(os.getpriority(os.PRIO_PROCESS, 0))'])"
    proc = toolchain._run([sys.executable, "-c", code], nice=toolchain.BACKGROUND_NICE)
    assert proc.stdout.split() == [str(toolchain.BACKGROUND_NICE)] * 2  # the driver and a pass it starts
    assert proc.args == [sys.executable, "-c", code]  # the result names the command, not the wrapper
    mine = str(os.getpriority(os.PRIO_PROCESS, 0))
    assert toolchain._run([sys.executable, "-c", code]).stdout.split() == [mine] * 2  # nice=0: as we are


def test_nice_increment_is_relative_to_our_own_niceness(monkeypatch):
    """``nice -n`` adds to the caller's niceness: the increment brings it to BACKGROUND_NICE, and a
    process already at or above it starts its compiles unchanged."""
    monkeypatch.setattr(toolchain, "_nice_executable", lambda: "/usr/bin/nice")
    monkeypatch.setattr(os, "getpriority", lambda which, who: 3)
    assert toolchain._nice_prefix(10) == ["/usr/bin/nice", "-n", "7"]
    assert toolchain._nice_prefix(0) == []
    monkeypatch.setattr(os, "getpriority", lambda which, who: 12)
    assert toolchain._nice_prefix(10) == []


def test_without_nice_the_group_priority_is_lowered_after_the_start(monkeypatch):
    """The fallback where no ``nice`` executable exists: the new process group's priority is set
    right after the start (the command runs at the caller's priority until then)."""
    if os.getpriority(os.PRIO_PROCESS, 0) >= toolchain.BACKGROUND_NICE:
        pytest.skip("this process already runs at or above the background niceness")
    calls = []
    monkeypatch.setattr(toolchain, "_nice_executable", lambda: None)
    monkeypatch.setattr(os, "setpriority", lambda which, who, prio: calls.append((which, who, prio)))
    proc = toolchain._run([sys.executable, "-c", "pass"], nice=toolchain.BACKGROUND_NICE)
    assert proc.returncode == 0
    assert len(calls) == 1 and calls[0][0] == os.PRIO_PGRP and calls[0][2] == toolchain.BACKGROUND_NICE
