"""Per-machine libraries built in the background (native/runtime/background.py) and the counter-free disk
tier they build through (compiler.build_library)."""

from __future__ import annotations

import ctypes
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ember._src.native.runtime import compiler, dispatch, gemm_library, toolchain
from ember._src.native.runtime.background import BackgroundLibrary
from ember.errors import CompileError

requires_cc = pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")
SRC_DIR = Path(__file__).resolve().parents[3] / "src"
SOURCE = "int ember_bg_triple(int x) { return 3 * x; }\n"


class _Gate:
    """A build function that blocks until released and counts its runs."""

    def __init__(self, result: object = "lib", error: Exception | None = None) -> None:
        self.result, self.error = result, error
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        self.started.set()
        assert self.release.wait(600), "the test never released the build"
        if self.error is not None:
            raise self.error
        return self.result


# ----------------------------------------------------------------------------------------------
# BackgroundLibrary


def test_concurrent_callers_share_one_build():
    gate = _Gate(result="the-lib")
    lib = BackgroundLibrary("test-bg-shared", gate)
    seen: list[object] = []
    callers = [threading.Thread(target=lambda: seen.append(lib.get())) for _ in range(16)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert gate.started.wait(600)
    assert seen == [None] * 16 and not lib.done  # all asked while it was building
    gate.release.set()
    assert lib.get(wait=True) == "the-lib"
    assert lib.get() == "the-lib" and lib.done and lib.failure is None
    assert gate.calls == 1
    assert not any(t.name == "test-bg-shared" for t in threading.enumerate())


def test_wait_blocks_until_the_build_ends():
    gate = _Gate(result=42)
    lib = BackgroundLibrary("test-bg-wait", gate)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(lib.get(wait=True)))
    waiter.start()
    assert gate.started.wait(600)
    waiter.join(0.2)
    assert waiter.is_alive() and got == []  # still waiting for the build
    gate.release.set()
    waiter.join(600)
    assert not waiter.is_alive() and got == [42]


def test_failed_build_reports_its_reason_and_is_not_retried():
    gate = _Gate(error=ValueError("no headers here"))
    reasons: list[str] = []
    lib = BackgroundLibrary("test-bg-fail", gate, on_failure=reasons.append)
    gate.release.set()
    assert lib.get(wait=True) is None
    for _ in range(5):
        assert lib.get() is None and lib.get(wait=True) is None
    assert lib.failure == "ValueError: no headers here" and lib.done
    assert reasons == ["ValueError: no headers here"]
    assert gate.calls == 1


def test_build_thread_is_a_daemon():
    gate = _Gate()
    lib = BackgroundLibrary("test-bg-daemon", gate)
    lib.get()
    assert gate.started.wait(600)
    (thread,) = [t for t in threading.enumerate() if t.name == "test-bg-daemon"]
    assert thread.daemon  # an exiting process does not wait for a build
    gate.release.set()
    assert lib.get(wait=True) == "lib"


# ----------------------------------------------------------------------------------------------
# The users' public functions keep their meaning


def test_gemm_load_reports_building_loaded_and_failed(monkeypatch, caplog):
    warn = gemm_library._library._on_failure  # the module's hook: a warning
    monkeypatch.setattr(gemm_library, "kernel_symbol", lambda: "ember_sgemm_small_test")
    gate = _Gate(result=object())
    monkeypatch.setattr(gemm_library, "_library", BackgroundLibrary("test-gemm", gate))
    assert gemm_library.load() is None  # building
    gate.release.set()
    assert gemm_library.load(wait=True) is True and gemm_library.load() is True

    failing = _Gate(error=CompileError("cc exploded"))
    failing.release.set()
    monkeypatch.setattr(gemm_library, "_library",
                        BackgroundLibrary("test-gemm-fail", failing, on_failure=warn))
    with caplog.at_level(logging.WARNING):
        assert gemm_library.load(wait=True) is False and gemm_library.load() is False
    assert failing.calls == 1
    assert "GEMM kernel library failed" in caplog.text and "CompileError: cc exploded" in caplog.text


def test_gemm_load_is_false_where_the_kernel_cannot_run(monkeypatch):
    gate = _Gate()
    monkeypatch.setattr(gemm_library, "kernel_symbol", lambda: None)
    monkeypatch.setattr(gemm_library, "_library", BackgroundLibrary("test-gemm-none", gate))
    assert gemm_library.load(wait=True) is False and gate.calls == 0  # nothing built


def test_dispatch_module_and_unavailable_reason(monkeypatch):
    failing = _Gate(error=OSError("Python.h not found"))
    failing.release.set()
    monkeypatch.setattr(dispatch, "_library", BackgroundLibrary("test-dispatch", failing))
    monkeypatch.setenv("EMBER_DISPATCH", "1")
    assert dispatch.unavailable_reason() is None  # not failed (yet)
    assert dispatch.module(wait=True) is None
    assert dispatch.unavailable_reason() == "OSError: Python.h not found"
    monkeypatch.setenv("EMBER_DISPATCH", "0")
    assert dispatch.unavailable_reason() == "EMBER_DISPATCH is off" and dispatch.module() is None
    assert failing.calls == 1


# ----------------------------------------------------------------------------------------------
# compiler.build_library: the disk tier without the counters


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    compiler.clear_memory_cache()
    yield tmp_path / "cache"
    compiler.clear_memory_cache()


def _count_builds(monkeypatch) -> list[str]:
    built: list[str] = []
    real = compiler._build

    def counting(info, src, so, name_hint, *args, **kwargs):
        built.append(name_hint)
        return real(info, src, so, name_hint, *args, **kwargs)

    monkeypatch.setattr(compiler, "_build", counting)
    return built


@requires_cc
def test_build_library_leaves_the_counters_alone(cache):
    zero = {"compiles": 0, "disk_hits": 0, "memory_hits": 0}
    path = compiler.build_library(SOURCE, name_hint="triple")
    assert compiler.cache_stats() == zero
    assert ctypes.CDLL(path).ember_bg_triple(5) == 15
    assert compiler.build_library(SOURCE, name_hint="triple") == path
    assert compiler.cache_stats() == zero
    # compile_shared counts: the same .so is a disk hit, then a memory hit; a new source compiles
    assert compiler.compile_shared(SOURCE, name_hint="triple") == path
    assert compiler.cache_stats() == {"compiles": 0, "disk_hits": 1, "memory_hits": 0}
    compiler.compile_shared(SOURCE, name_hint="triple")
    compiler.compile_shared(SOURCE.replace("3 *", "4 *"), name_hint="quad")
    assert compiler.cache_stats() == {"compiles": 1, "disk_hits": 1, "memory_hits": 1}


@requires_cc
def test_second_build_library_reuses_the_shared_object(cache, monkeypatch):
    built = _count_builds(monkeypatch)
    path = compiler.build_library(SOURCE, name_hint="triple")
    assert built == ["triple"]
    assert path == str(cache / f"{compiler.cache_key(SOURCE)}.so")
    assert compiler.build_library(SOURCE, name_hint="triple") == path
    assert built == ["triple"]  # no second compile
    flags = ("-DEMBER_BG_UNUSED=1",)  # extra flags are part of the key: another library
    other = compiler.build_library(SOURCE, name_hint="triple", extra_flags=flags)
    assert other != path and built == ["triple", "triple"]
    assert other == str(cache / f"{compiler.cache_key(SOURCE, extra_flags=flags)}.so")


@requires_cc
def test_dispatcher_build_does_not_count_as_a_compile(monkeypatch):
    try:
        dispatch.include_dirs()
    except OSError as exc:
        pytest.skip(f"no C headers for the dispatcher: {exc}")
    before = compiler.cache_stats()
    built = _count_builds(monkeypatch)
    mod = dispatch.build()
    assert mod.abi and compiler.cache_stats() == before
    assert len(built) <= 1  # at most the one compile, and it was not counted


@requires_cc
def test_failed_build_library_leaves_no_temporary_files(cache):
    bad = "int broken(int x) { return x +; }\n"
    with pytest.raises(CompileError, match="broken"):
        compiler.build_library(bad, name_hint="broken")
    assert not (cache / f"{compiler.cache_key(bad)}.so").exists()
    assert not list(cache.glob("*.tmp")) and not list(cache.glob(".*.tmp"))
    assert compiler.cache_stats()["compiles"] == 0


_KILLED_CHILD = """
import os, signal
from pathlib import Path
from ember._src.native.runtime import compiler, toolchain

def killed_mid_compile(cmd, timeout=None, nice=0):  # a partial output, then the process dies
    Path(cmd[cmd.index("-o") + 1]).write_bytes(b"half an ELF")
    os.kill(os.getpid(), signal.SIGKILL)

toolchain._run = killed_mid_compile
compiler.build_library({source!r}, name_hint="triple")
"""


@requires_cc
def test_temporaries_of_a_killed_build_do_not_break_later_builds(cache, monkeypatch):
    key = compiler.cache_key(SOURCE)
    env = {"EMBER_CACHE_DIR": str(cache), "PYTHONPATH": str(SRC_DIR)}
    proc = subprocess.run([sys.executable, "-c", _KILLED_CHILD.format(source=SOURCE)], timeout=600,
                          env={**os.environ, **env}, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    stale = list(cache.glob(f".{key}*.tmp"))
    assert stale and stale[0].read_bytes() == b"half an ELF"  # left behind, as by a real crash
    assert not (cache / f"{key}.so").exists()
    built = _count_builds(monkeypatch)
    path = compiler.build_library(SOURCE, name_hint="triple")
    assert built == ["triple"] and ctypes.CDLL(path).ember_bg_triple(7) == 21
    assert not list(cache.glob("*.tmp")) and not list(cache.glob(".*.tmp"))  # the stale ones removed


def test_a_build_in_progress_finishes_before_the_interpreter_exits(tmp_path):
    """A process that exits while its background build runs waits for the build (so a library
    reaches the disk cache instead of being rebuilt by every new process). The build cannot end
    before the interpreter's exit has begun: it waits for an exit handler registered after the
    module's own (exit handlers run last registered first)."""
    marker = tmp_path / "built"
    code = (
        "import atexit, threading, time\n"
        "from ember._src.native.runtime.background import BackgroundLibrary\n"
        "exiting = threading.Event()\n"
        "atexit.register(exiting.set)\n"
        "def build():\n"
        "    if exiting.wait(600):\n"
        "        time.sleep(0.2)  # (without the wait at exit, the interpreter would stop it here)\n"
        f"        open({str(marker)!r}, 'w').write('ok')\n"
        "    return 1\n"
        "lib = BackgroundLibrary('slow', build)\n"
        "assert lib.get() is None and not lib.done  # started, not finished\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
    assert marker.read_text() == "ok"
