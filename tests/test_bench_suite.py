"""The benchmark suite's helpers (benchmarks/common.py, run_all.py goal checks) without any peer
library: result checking of peers, interleaved timing, ratio and goal logic."""

import os
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
_env = dict(os.environ)
import common  # noqa: E402
import run_all  # noqa: E402

os.environ.clear()  # common sets OMP_WAIT_POLICY for benchmark processes; keep the test env as it was
os.environ.update(_env)


def test_is_peer_excludes_ember_variants_and_limits():
    assert common.is_peer("numpy") and common.is_peer("onnxruntime") and common.is_peer("jax jit")
    assert not common.is_peer("ember native")
    assert not common.is_peer("ember native (1 thread)")
    assert not common.is_peer("memory copy")


def test_peer_runners_check_results_and_drop_a_wrong_peer():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    w = common.Workload("double", [x], [np.float32(0.5)], numpy=lambda a, s: a * 2 + s)
    ok = common.peer_runners(w, peers=("numpy",), reference=x * 2 + 0.5)
    np.testing.assert_array_equal(ok["numpy"](), x * 2 + 0.5)
    bad = common.peer_runners(w, peers=("numpy",), reference=x * 3)
    assert "numpy" not in bad
    assert "disagrees" in common.skipped_peers()["numpy"]


class _Clock:
    """A stand-in for ``time.perf_counter``: it moves only when a timed callable says it worked, so
    the timings are exact whatever the load on the machine."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.calls: dict[str, int] = {}

    def perf_counter(self) -> float:
        return self.now

    def work(self, name: str, seconds: float):
        def fn() -> None:
            self.calls[name] = self.calls.get(name, 0) + 1
            self.now += seconds
        return fn


def test_interleaved_medians_rank_work_correctly(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(common, "time", clock)
    slow, fast = 2e-3, 1e-6
    stats = common.interleaved({"slow": clock.work("slow", slow), "fast": clock.work("fast", fast)},
                               rounds=9, max_seconds=0.5, min_rounds=5)
    # a round takes ~2 ms per implementation (one 2 ms call, ~2000 calls of 1 us): 9 rounds fit 0.5 s
    assert stats["slow"]["rounds"] == stats["fast"]["rounds"] == 9
    assert stats["slow"]["calls_per_sample"] == 1 and 1990 <= stats["fast"]["calls_per_sample"] <= 2000
    for name, seconds in (("slow", slow), ("fast", fast)):
        for key in ("q1", "median", "q3"):
            assert abs(stats[name][key] - seconds) <= 1e-9 * seconds / fast, (name, key, stats[name])
    assert stats["fast"]["median"] < stats["slow"]["median"]
    # 3 warm-up calls each, then per round an untimed lead-in (5 ms of calls) and the timed sample
    assert clock.calls["slow"] == 3 + 9 * (3 + 1)
    lead_ins = clock.calls["fast"] - 3 - 9 * stats["fast"]["calls_per_sample"]
    assert abs(lead_ins - 9 * 5000) <= 9  # (rounding of the sums of 1 us steps: 5000 or 5001 calls)


def test_goals_use_the_best_peer():
    """Issue #20's goals: below the best peer on every row (a memory copy is a limit, not a peer),
    below 0.9x of it on the row softmax and the MLP at batch 128, and the call overhead also under
    3 us."""
    rows = [
        {"workload": "elementwise chain 2^24",
         "times": {"ember native": 10e-3, "jax jit": 12e-3, "numpy": 50e-3, "memory copy": 4e-3}},
        {"workload": "mlp 512 batch 32", "times": {"ember native": 0.5e-3, "onnxruntime": 0.4e-3,
                                                   "numpy": 0.3e-3}},
        {"workload": "mlp 512 batch 128", "times": {"ember native": 0.95e-3, "onnxruntime": 1.0e-3}},
        {"workload": "row softmax 1024x1024", "times": {"ember native": 0.85e-3, "onnxruntime": 1.0e-3}},
        {"workload": "matmul 1024^3 float32", "times": {"ember native": 20e-3, "numpy": 19.5e-3}},
        {"workload": "call overhead (x + 1 on 4 floats)", "times": {"ember native": 2e-6, "numpy": 1e-6}},
        {"workload": "call overhead (x + 1 on 4 floats)", "times": {"ember native": 0.5e-6, "numpy": 1e-6}},
    ]
    table = run_all.summarize(rows)
    chain, mlp, mlp128, softmax, matmul, slow_call, call = rows
    assert chain["best_peer"] == "jax jit" and chain["goal_met"] is True  # 0.83x JAX; the copy is no peer
    assert mlp["best_peer"] == "numpy" and mlp["goal_met"] is False and "1.67x numpy" in mlp["goal_detail"]
    assert mlp128["goal_met"] is False and "0.95x onnxruntime" in mlp128["goal_detail"]  # not < 0.9x
    assert softmax["goal_met"] is True and "< 0.9x best peer" in table
    assert matmul["goal_met"] is False and "1.03x numpy" in matmul["goal_detail"]
    assert slow_call["goal_met"] is False
    assert call["goal_met"] is True and "0.50x numpy" in call["goal_detail"]
    assert "| mlp 512 batch 32 |" in table and "1.67x" in table  # 0.5 / 0.3 vs the best peer
