"""The GPU kernel cache on disk (CUDA PTX from NVRTC): a second compile of the same source reads the
PTX from disk; damaged, truncated, swapped or untrusted entries are refused and compiled again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ember._src import cache_files
from ember._src.gpu import cuda_runtime, kernel_cache

_NO_NVRTC = cuda_runtime.nvrtc_unavailable_reason()
pytestmark = pytest.mark.skipif(_NO_NVRTC is not None, reason=f"no NVRTC: {_NO_NVRTC}")

SRC = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 2.0f * x[threadIdx.x] + %d.0f; }\n'


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(d))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(kernel_cache.ENV_VAR, raising=False)
    monkeypatch.setattr(cache_files, "_fallback_dirs", {})
    monkeypatch.setattr(cuda_runtime, "_PTX", {})  # the memory tier starts empty
    return d


def _compile(src: str, arch: str = "compute_80") -> tuple[bytes, int]:
    """PTX of ``src`` with the memory tier cleared first, and the NVRTC compiles it took."""
    cuda_runtime._PTX.clear()
    before = cuda_runtime.COMPILES["nvrtc"]
    ptx = cuda_runtime.compile_ptx(src, arch)
    return ptx, cuda_runtime.COMPILES["nvrtc"] - before


def _entry(cache: Path) -> Path:
    (f,) = (cache / "gpu").glob("ptx-*.json")
    return f


def test_a_second_compile_reads_ptx_from_disk(cache: Path) -> None:
    ptx, n = _compile(SRC % 1)
    assert n == 1 and b".entry k(" in ptx
    again, n = _compile(SRC % 1)
    assert n == 0 and again == ptx  # byte for byte, NVRTC not called
    _, n = _compile(SRC % 1, "compute_90")  # the architecture is part of the key
    assert n == 1 and b".target sm_90" in cuda_runtime.compile_ptx(SRC % 1, "compute_90")
    assert oct(_entry_mode(cache)) == oct(0o600)


def _entry_mode(cache: Path) -> int:
    return min(os.stat(f).st_mode & 0o777 for f in (cache / "gpu").glob("ptx-*.json"))


def test_another_process_reads_the_ptx(cache: Path) -> None:
    ptx, _ = _compile(SRC % 2)
    code = ("import sys; from ember._src.gpu import cuda_runtime as c; "
            f"p = c.compile_ptx({SRC % 2!r}, 'compute_80'); "
            "sys.stdout.write(str(c.COMPILES['nvrtc']) + ' ' + str(len(p)))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", str(len(ptx))]


@pytest.mark.parametrize("damage", ["truncated", "bit flipped", "not json", "other key"])
def test_a_damaged_entry_is_detected_and_recompiled(cache: Path, damage: str) -> None:
    ptx, _ = _compile(SRC % 3)
    f = _entry(cache)
    text = f.read_text()
    if damage == "truncated":
        text = text[: len(text) // 2]
    elif damage == "bit flipped":
        body = json.loads(text)
        body["data"] = body["data"].replace(".entry k(", ".entry j(")
        text = json.dumps(body)
    elif damage == "not json":
        text = "\0" * 40
    else:  # a valid entry of another source copied over this one
        _compile(SRC % 4)
        other = [g for g in (cache / "gpu").glob("ptx-*.json") if g != f][0]
        text = other.read_text()
    f.write_text(text)
    rejected = kernel_cache.STATS["rejected"]
    again, n = _compile(SRC % 3)
    assert n == 1 and again == ptx and kernel_cache.STATS["rejected"] == rejected + 1
    _, n = _compile(SRC % 3)  # the rewritten entry is good again
    assert n == 0


def test_untrusted_entries_are_refused(cache: Path) -> None:
    ptx, _ = _compile(SRC % 5)
    f = _entry(cache)
    for mode in (0o620, 0o602):  # group-writable, world-writable
        os.chmod(f, mode)
        again, n = _compile(SRC % 5)
        assert n == 1 and again == ptx  # refused, compiled again and stored afresh (mode 0600)
        assert os.stat(f).st_mode & 0o777 == 0o600
    if os.getuid() != 0:
        return  # (only root can give a file to another user; the mode checks above still ran)
    os.chown(f, 4242, 4242)
    _, n = _compile(SRC % 5)
    assert n == 1 and os.stat(f).st_uid == 0


def test_an_untrusted_cache_directory_is_not_used(cache: Path, tmp_path: Path) -> None:
    _compile(SRC % 6)
    os.chmod(cache / "gpu", 0o777)
    _, n = _compile(SRC % 6)
    assert n == 1


def test_the_cache_can_be_turned_off(cache: Path, monkeypatch) -> None:
    monkeypatch.setenv(kernel_cache.ENV_VAR, "0")
    _compile(SRC % 7)
    _, n = _compile(SRC % 7)
    assert n == 1 and not (cache / "gpu").exists()
