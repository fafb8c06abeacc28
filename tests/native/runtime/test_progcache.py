"""The program-level disk cache (:mod:`ember._src.native.runtime.progcache`): a program compiled before --
in this process or another -- is set up from its entry without passes, schedule or C generation,
gives the same results, and any change to the program, options or ember's code changes its key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native import backend as nb
from ember._src.native import pipeline as pl
from ember._src.native.emit import gemm_kernel
from ember._src.native.options import NativeOptions
from ember._src.native.runtime import gemm_library, progcache, toolchain
from tests.native.conftest import requires_cc

RNG = np.random.default_rng(7)
SRC_DIR = Path(__file__).resolve().parents[3] / "src"


def mlp(x, w1, b1, w2, b2):
    h = jnp.maximum(lax.dot(x, w1) + b1, 0.0)
    return lax.dot(h, w2) + b2


def mlp_ref(x, w1, b1, w2, b2):
    return np.maximum(x @ w1 + b1, 0.0) @ w2 + b2


def _args(batch: int = 3, width: int = 24) -> list[np.ndarray]:
    shapes = [(batch, width), (width, width), (width,), (width, 5), (5,)]
    return [RNG.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.fixture()
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(progcache.ENV_VAR, raising=False)
    return tmp_path


@pytest.fixture()
def counted(monkeypatch):
    """Counts of the pipeline stages the cache skips."""
    counts = {"passes": 0, "schedule": 0, "generate": 0}

    def wrap(name: str, key: str) -> None:
        real = getattr(pl, name) if name != "run_passes" else pl.passes_mod.run_passes

        def f(*a, **k):
            counts[key] += 1
            return real(*a, **k)

        if name == "run_passes":
            monkeypatch.setattr(pl.passes_mod, "run_passes", f)
        else:
            monkeypatch.setattr(pl, name, f)

    wrap("run_passes", "passes")
    wrap("build_schedule", "schedule")
    wrap("generate", "generate")
    return counts


@requires_cc
def test_second_build_skips_the_pipeline(fresh_cache, counted):
    args = _args()
    exe1 = nb.native_backend(ember.make_program(mlp)(*args))
    assert not exe1.program_cache_hit
    assert counted == {"passes": 1, "schedule": 1, "generate": 1}
    assert list((fresh_cache / "programs").glob("*.json"))
    exe2 = nb.native_backend(ember.make_program(mlp)(*args))  # a new trace: new variable ids
    assert exe2.program_cache_hit
    assert counted == {"passes": 1, "schedule": 1, "generate": 1}
    assert exe2.source == exe1.source
    for a in (args, _args()):
        (r1,), (r2,) = exe1(a), exe2(a)
        np.testing.assert_allclose(r2, mlp_ref(*a), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(r1, r2)
    # the stages are rebuilt on demand for inspection
    assert exe2.plan.arena_bytes == exe1.plan.arena_bytes
    assert len(exe2.schedule.steps) == len(exe1.schedule.steps)
    assert str(exe2.optimized) == str(exe1.optimized)  # variables named by position


@requires_cc
def test_new_process_skips_the_pipeline(fresh_cache):
    code = """
import json, numpy as np, ember, ember.numpy as jnp
from ember import lax
from ember._src.native import pipeline as pl
counts = {"passes": 0, "schedule": 0}
real_p, real_s = pl.passes_mod.run_passes, pl.build_schedule
def p(*a, **k):
    counts["passes"] += 1
    return real_p(*a, **k)
def s(*a, **k):
    counts["schedule"] += 1
    return real_s(*a, **k)
pl.passes_mod.run_passes, pl.build_schedule = p, s
def f(x, w, b):
    return jnp.maximum(lax.dot(x, w) + b, 0.0) * 2.0
x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
w = np.cos(np.arange(20, dtype=np.float32)).reshape(4, 5)
b = np.linspace(-1, 1, 5).astype(np.float32)
r = np.asarray(ember.jit(f, backend="native")(x, w, b))
print(json.dumps({"counts": counts, "err": float(np.abs(r - np.maximum(x @ w + b, 0) * 2).max())}))
"""
    env = dict(os.environ, EMBER_CACHE_DIR=str(fresh_cache), PYTHONPATH=str(SRC_DIR))
    env.pop(progcache.ENV_VAR, None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert runs[0]["counts"] == {"passes": 1, "schedule": 1}
    assert runs[1]["counts"] == {"passes": 0, "schedule": 0}
    assert runs[0]["err"] < 1e-5 and runs[1]["err"] < 1e-5


def _key(f, *args, options: dict | None = None) -> str | None:
    info = toolchain.find_compiler()
    return progcache.program_key(ember.make_program(f)(*args), NativeOptions.parse(options), info, "normal")


@requires_cc
def test_key_depends_on_what_changes_the_code(monkeypatch):
    x = np.ones((2, 3), np.float32)
    k = _key(lambda a: a * 2.0 + 1.0, x)
    assert k is not None
    assert k == _key(lambda a: a * 2.0 + 1.0, x)  # same program, new trace
    assert k != _key(lambda a: a * 2.0 + 1.5, x)  # a literal
    assert k != _key(lambda a: a * 2.0 - 1.0, x)  # a primitive
    assert k != _key(lambda a: a * 2.0 + 1.0, np.ones((3, 2), np.float32))  # a shape
    assert k != _key(lambda a: a * 2.0 + 1.0, np.ones((2, 3), np.float64))  # a dtype
    assert k != _key(lambda a: a * 2.0 + 1.0, x, options={"simd": False})  # an option
    assert k != _key(lambda a: jnp.sum(a, axis=0), x) != _key(lambda a: jnp.sum(a, axis=1), x)  # a param

    monkeypatch.setattr(gemm_library, "BLAS_ONLY", not gemm_library.BLAS_ONLY)  # changes emitted C
    assert k != _key(lambda a: a * 2.0 + 1.0, x)
    monkeypatch.undo()
    monkeypatch.setattr(progcache, "source_fingerprint", lambda: "edited")  # ember's code
    assert k != _key(lambda a: a * 2.0 + 1.0, x)


def test_programs_with_constants_have_no_key():
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = np.ones((2, 3), np.float32)
    assert _key(lambda a: a + c, x) is None or toolchain.find_compiler() is None


def test_source_fingerprint_follows_file_stats(tmp_path, monkeypatch):
    pkg = tmp_path / "ember"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("x = 1\n")
    monkeypatch.setattr(ember, "__file__", str(pkg / "__init__.py"))
    progcache.source_fingerprint.cache_clear()
    try:
        a = progcache.source_fingerprint()
        (pkg / "mod.py").write_text("x = 22\n")
        progcache.source_fingerprint.cache_clear()
        b = progcache.source_fingerprint()
    finally:
        progcache.source_fingerprint.cache_clear()
    assert a != b


@requires_cc
def test_bad_entries_are_ignored_and_disabling_works(fresh_cache, counted, monkeypatch):
    args = _args(batch=2, width=16)
    nb.native_backend(ember.make_program(mlp)(*args))
    (entry,) = (fresh_cache / "programs").glob("*.json")
    data = json.loads(entry.read_text())
    data["out_bufs"] = "garbage"
    entry.write_text(json.dumps(data))
    exe = nb.native_backend(ember.make_program(mlp)(*args))
    assert not exe.program_cache_hit and counted["passes"] == 2
    np.testing.assert_allclose(exe(args)[0], mlp_ref(*args), rtol=1e-5, atol=1e-5)
    entry.write_text("{not json")
    exe = nb.native_backend(ember.make_program(mlp)(*args))
    assert not exe.program_cache_hit and counted["passes"] == 3
    assert nb.native_backend(ember.make_program(mlp)(*args)).program_cache_hit  # rewritten
    monkeypatch.setenv(progcache.ENV_VAR, "0")
    exe = nb.native_backend(ember.make_program(mlp)(*args))
    assert not exe.program_cache_hit and counted["passes"] == 4
    monkeypatch.delenv(progcache.ENV_VAR)
    exe = nb.native_backend(ember.make_program(mlp)(*args), validate="strict")  # strict: never cached
    assert not exe.program_cache_hit


def _twice(child: str, cache) -> tuple[dict, list[list[str]]]:
    """Run ``child`` in two new processes sharing the program cache ``cache`` (the first builds,
    the second reads the cache); their environment and the words each printed."""
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache), PYTHONPATH=str(SRC_DIR))
    env.pop(progcache.ENV_VAR, None)
    outs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(proc.stdout.split())
    return env, outs


_GEMM_CHILD = """
import numpy as np, ember
from ember._src.native.emit import gemm_kernel
from ember._src.native.runtime import gemm_library
rng = np.random.default_rng(0)
a = rng.standard_normal((96, 200)).astype(np.float32)
b = rng.standard_normal((200, 120)).astype(np.float32)
f = ember.jit(lambda a, b: a @ b)
states = [gemm_library._library.started]
outs = [np.asarray(f(a, b))]
states.append(gemm_library._library.started)
outs.append(np.asarray(f(a, b)))
states.append(gemm_library._library.started)
exe = f.lower(a, b).executable
assert gemm_kernel.load(wait=True)
outs.append(np.asarray(f(a, b)))  # on the kernel now
want = a.astype(np.float64) @ b
assert all(np.abs(o - want).max() < 1e-3 for o in outs)
print(*states, exe.program_cache_hit, "em_sk_fn()" in exe.source)
"""


@requires_cc
def test_a_cached_gemm_program_loads_the_kernel_at_its_second_call(tmp_path):
    """A program read from the disk cache that calls the GEMM kernel starts loading the kernel's
    library at its second call (its first runs BLAS; a loader thread's Python would hold the GIL in
    the first call), where generating the program starts it at once; the products are right
    before and after the kernel loads."""
    if gemm_kernel.kernel_symbol() is None:
        pytest.skip("no GEMM kernel on this machine")
    env, outs = _twice(_GEMM_CHILD, tmp_path)
    assert outs[0] == ["False", "True", "True", "False", "True"]  # built here: C generation starts it
    assert outs[1] == ["False", "False", "True", "True", "True"]  # from the cache: at the second call


_POOLED_CHILD = """
import numpy as np, ember
from ember import lax
from ember._src.native.runtime import threadpool
x = np.ones((2, 20, 20, 16), np.float32)
w = np.full((3, 3, 16, 24), 0.5, np.float32)
f = ember.jit(lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                    dimension_numbers=("NHWC", "HWIO", "NHWC")))
before = threadpool._library.started
y = np.asarray(f(x, w))
first = threadpool._library.started
y = np.asarray(f(x, w))
exe = f.lower(x, w).executable
assert abs(float(y[0, 5, 5, 0]) - 9 * 16 * 0.5) < 1e-4 and abs(float(y[0, 0, 0, 0]) - 4 * 16 * 0.5) < 1e-4
print(before, first, exe.program_cache_hit, threadpool.LOOKUP in exe.source, threadpool._library.started)
"""


@requires_cc
def test_a_cached_pooled_program_loads_the_pool(tmp_path):
    """A program read from the disk cache whose loops run on the thread pool starts loading the
    pool library at its second call (not during the first: the loader's Python would hold the GIL
    there), as generating it does at once (before, such a process ran every loop under OpenMP)."""
    env, outs = _twice(_POOLED_CHILD, tmp_path)
    assert outs[0] == ["False", "True", "False", "True", "True"]  # built here: C generation starts it
    assert outs[1] == ["False", "False", "True", "True", "True"]  # from the cache: at the second call
    # the C dispatcher loaded before (another function warmed up): the cached program's calls after
    # the second go straight to C, so the second must still run the Python path that starts the pool
    warm_first = ("import numpy as np, ember\nfrom ember._src.native.runtime import dispatch\n"
                  "g = ember.jit(lambda v: v + 1.0)\nv = np.ones(3, np.float32)\n"
                  "[g(v) for _ in range(3)]\nassert dispatch.module(wait=True) is not None\n"
                  "[g(v) for _ in range(3)]\n")
    code = warm_first + _POOLED_CHILD + "for _ in range(3): f(x, w)\nprint(threadpool._library.started)\n"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "True" and proc.stdout.split()[2] == "True"  # a cache hit
