"""benchmarks/bench_gpu.py: the goal arithmetic on hand-made timings, and a ``--quick`` run end to
end on WebGPU (Mesa's lavapipe where there is no GPU): every row present, each implementation's
result checked before timing, bfloat16 on WebGPU a skipped cell with its reason."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
_env = dict(os.environ)
import bench_gpu  # noqa: E402

os.environ.clear()  # common (imported by bench_gpu) sets OMP_WAIT_POLICY; keep the test env as it was
os.environ.update(_env)


def test_goals_from_hand_made_timings():
    n = 1 << 24
    copy = {"key": "copy", "title": "copy", "bytes": 8 * n, "skipped": {},
            "times": {"ember cuda": 50e-6, "torch eager": 40e-6, "cupy": 41e-6}}
    chain = {"key": "chain", "title": "chain", "bytes": 8 * n, "skipped": {},
             "times": {"ember cuda": 48e-6, "ember webgpu": 60e-6, "torch eager": 100e-6}}
    bw = 8 * n / 40e-6  # the best copy column
    g, res = bench_gpu.goal(chain, bw)
    assert g == ">= 80% of copy bandwidth"
    assert res["ember cuda"].startswith("yes (83% of copy bandwidth; 0.48x torch eager")  # 40/48
    assert res["ember webgpu"].startswith("**no** (67% of copy")  # 40/60
    mm = {"key": "matmul_bf16", "title": "mm", "skipped": {}, "times": {
        "ember cuda": 12e-3, "torch eager": 10e-3, "torch.compile": 11e-3, "jax": 9e-3}}
    assert bench_gpu.goal(mm, None)[1]["ember cuda"] == "**no** (1.20x torch eager)"  # JAX is no goal here
    mlp = {"key": "mlp", "title": "mlp", "skipped": {}, "times": {"ember cuda": 9e-3, "jax": 10e-3,
                                                                 "torch eager": 5e-3}}
    assert bench_gpu.goal(mlp, None)[1]["ember cuda"] == "yes (0.90x jax)"
    gpt = {"key": "gpt2", "title": "gpt2", "skipped": {}, "times": {"ember cuda": 9e-3, "torch eager": 10e-3}}
    assert bench_gpu.goal(gpt, None)[1]["ember cuda"].startswith("n/a (no torch.compile measured")
    lat = {"key": "latency", "title": "lat", "skipped": {}, "times": {"ember cuda": 12e-6, "jax": 30e-6}}
    assert bench_gpu.goal(lat, None)[1]["ember cuda"] == "**no** (12.0 us; 0.40x jax)"
    assert bench_gpu.goal(copy, None)[0] == "none (reference)"


def test_unknown_row_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        bench_gpu.main(["--rows", "chain,fft"])
    assert "--rows: unknown row(s) fft" in capsys.readouterr().err


def test_quick_run_on_webgpu(tmp_path):
    from ember._src.gpu import cuda_runtime, webgpu

    why = webgpu.unavailable_reason()
    if why is not None:
        pytest.skip(f"no WebGPU adapter: {why}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    env.pop("EMBER_ENABLE_X64", None)  # the suite's 64-bit mode; the script runs in x32 as users do
    r = subprocess.run([sys.executable, str(BENCH / "bench_gpu.py"), "--quick", "--backends", "webgpu,cuda",
                        "--no-compile", "--out", str(tmp_path), "--budget", "300"],
                       capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    info = json.loads((tmp_path / "gpu.json").read_text())
    rows = {row["key"]: row for row in info["rows"]}
    assert list(rows) == list(bench_gpu.ROWS)
    for key, row in rows.items():
        if key == "matmul_bf16":
            assert row["times"]["ember webgpu"] is None
            assert list(row["skipped"]) == ["ember webgpu"] and "bfloat16" in row["skipped"]["ember webgpu"]
        else:  # a result that disagreed with its reference would be a skipped cell
            assert row["skipped"] == {}, (key, row["skipped"])
            assert 0 < row["times"]["ember webgpu"] < 5, key
            assert row["max_error"]["ember webgpu"] is not None, key  # compared with its reference
        assert "ember cuda" in row["times"] or "ember cuda" in info["backends_left_out"]
    copy_s = rows["copy"]["times"]["ember webgpu"]  # the only copy column here: 2^16 floats read + written
    assert info["copy_bandwidth_bytes_per_s"] == pytest.approx(8 * (1 << 16) / copy_s)
    md = (tmp_path / "gpu.md").read_text()
    assert "| matmul 256^3 bfloat16 | " in md and " | skipped | <= 1.1x torch |" in md
    if cuda_runtime.unavailable_reason() is not None:  # said once, not in every row
        assert "ember cuda left out: cuda" in md and "/ ember cuda" not in md
    assert "of copy bandwidth" in md and "cublas" in info and "peers_left_out" in info


def test_peers_code_paths_on_cpu(tmp_path):
    """``--cpu-peers`` runs torch eager and JAX on the CPU (columns marked): each peer's result is
    checked against the same NumPy reference as ember's, and timed."""
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    from ember._src.gpu import webgpu

    why = webgpu.unavailable_reason()
    if why is not None:
        pytest.skip(f"no WebGPU adapter: {why}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    env.pop("EMBER_ENABLE_X64", None)
    r = subprocess.run([sys.executable, str(BENCH / "bench_gpu.py"), "--quick", "--backends", "webgpu",
                        "--cpu-peers", "--no-compile", "--rows", "copy,chain,matmul_bf16,mlp",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {row["key"]: row for row in json.loads((tmp_path / "gpu.json").read_text())["rows"]}
    for key, row in rows.items():
        for peer in ("torch eager (cpu)", "jax (cpu)"):
            assert row["times"][peer] > 0 and row["max_error"][peer] is not None, (key, peer, row["skipped"])
    assert rows["copy"]["max_error"]["torch eager (cpu)"] == 0.0  # a copy is exact
    assert list(rows["mlp"]["skipped"]) == [] and list(rows["matmul_bf16"]["skipped"]) == ["ember webgpu"]
    md = (tmp_path / "gpu.md").read_text()
    assert "(cpu))" in md and "of copy bandwidth" in md  # ratios name the CPU peer
