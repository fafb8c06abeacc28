"""The compile cache never crashes or lies: a damaged library (truncated, emptied, garbage, a
directory in its place, valid header with corrupted code) is detected before anything of it is
loaded, removed and rebuilt; a compiler that exits 0 without output is an error and caches
nothing; an unwritable cache directory falls back to a private one with a warning; a cache path
that is a file is a clear error; a hand-edited program-cache entry is rebuilt. Each case runs in a
subprocess with its own ``EMBER_CACHE_DIR`` (the shared default cache is never touched)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import json, numpy as np, ember, ember.numpy as jnp
from ember._src.native.runtime import compiler, library_check
f = ember.jit(lambda x: jnp.tanh(x) * 3.0 + x.sum(), backend="native")
x = np.linspace(-1, 1, 37).astype(np.float32)
out = np.asarray(f(x))
want = np.tanh(x) * 3.0 + x.sum()
ok = bool(np.allclose(out, want, rtol=1e-5, atol=1e-5))
print(json.dumps({"ok": ok, "rejected": library_check.rejected_entries(), **compiler.cache_stats()}))
"""


def _run(cache: Path, code: str = PROGRAM, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ, EMBER_CACHE_DIR=str(cache), EMBER_PROGRAM_CACHE="0",
             PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)


def _result(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "emptied": lambda p: p.write_bytes(b""),
    "garbage": lambda p: p.write_bytes(os.urandom(4096)),
    "directory": lambda p: (p.unlink(), p.mkdir()),
    "corrupted_code": lambda p: p.write_bytes(_flip_code(p.read_bytes())),
}


def _flip_code(data: bytes) -> bytes:
    b = bytearray(data)
    for i in range(len(b) // 2, len(b) // 2 + 64):  # the middle of the file: code, not the ELF header
        b[i] ^= 0xFF
    return bytes(b)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_library_is_rebuilt(tmp_path, damage):
    first = _result(_run(tmp_path))
    assert first["ok"] and first["compiles"] >= 1
    libs = [p for p in tmp_path.glob("*.so")]
    assert libs
    for p in libs:
        DAMAGE[damage](p)
    again = _result(_run(tmp_path))
    assert again["ok"], again  # correct results, never a crash or a wrong answer
    assert again["rejected"] >= 1 and again["compiles"] >= 1
    third = _result(_run(tmp_path))  # the rebuilt entries are good again
    assert third["ok"] and third["rejected"] == 0 and third["compiles"] == 0


def test_compiler_that_writes_nothing_is_an_error_and_caches_nothing(tmp_path):
    code = """
import subprocess, numpy as np, ember, ember.numpy as jnp
from ember._src.native.runtime import toolchain
from ember.errors import CompileError
toolchain._require_compiler()  # the real compiler answers the probes
real = toolchain._run
toolchain._run = lambda cmd, timeout=None, nice=0: subprocess.CompletedProcess(cmd, 0, "", "")  # no output
try:
    ember.jit(lambda x: x * 2.0 + 1.0, backend="native")(np.ones(5, np.float32))
    print("NO ERROR")
except CompileError as e:
    print("ERROR", "wrote no output" in str(e))
toolchain._run = real
print("AFTER", float(ember.jit(lambda x: x * 2.0 + 1.0, backend="native")(np.ones(5, np.float32)).sum()))
"""
    out = _run(tmp_path, code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ERROR True" in out.stdout and "AFTER 15.0" in out.stdout


def test_unwritable_cache_dir_falls_back_with_a_warning(tmp_path):
    if os.geteuid() == 0:
        # root ignores permission bits: make the path unusable by putting it under a read-only bind
        # we cannot create; use a path inside /proc instead, which nobody can write
        cache = Path("/proc/ember-cache-test")
    else:
        cache = tmp_path / "ro"
        cache.mkdir()
        cache.chmod(0o500)
    out = _run(cache)
    res = _result(out)
    assert res["ok"]
    assert "not writable" in out.stderr and "private directory" in out.stderr


def test_cache_path_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "not-a-dir"
    f.write_text("x")
    out = _run(f)
    assert out.returncode != 0 and "EMBER_CACHE_DIR" in out.stderr and "is a file" in out.stderr


def test_hand_edited_program_cache_entry_is_rebuilt(tmp_path):
    code = PROGRAM
    first = _run(tmp_path, code, EMBER_PROGRAM_CACHE="1")
    assert _result(first)["ok"]
    entries = list((tmp_path / "programs").glob("*.json"))
    assert entries
    for e in entries:
        d = json.loads(e.read_text())
        d["arena_bytes"] = int(d.get("arena_bytes", 0)) + 4096  # a hand edit
        if "outputs" in d:
            d["outputs"] = d["outputs"][::-1]
        e.write_text(json.dumps(d))
    again = _run(tmp_path, code, EMBER_PROGRAM_CACHE="1")
    assert _result(again)["ok"], again.stderr[-2000:]
    assert "failed verification" in again.stderr or "program cache entry" in again.stderr


def test_threads_checking_a_writable_cache_dir_at_once_never_fall_back(tmp_path, monkeypatch):
    """Threads of one process check the cache directory at the same time (a background library
    build beside a program's compile). Their write probes once shared a name, so one thread could
    remove the other's probe and the ENOENT read as "not writable": a spurious fallback to a
    private directory (seen in benchmarks and demos)."""
    import threading
    import warnings

    from ember._src.native.runtime import cache_files

    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache_files, "_fallback_dirs", {})
    got, start = [], threading.Barrier(8)

    def worker():
        start.wait()
        got.extend(cache_files._usable_cache_dir() for _ in range(300))

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warns: fail instead
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(got) == 8 * 300 and set(got) == {tmp_path / "cache"} and cache_files._fallback_dirs == {}
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".write-probe-")]
