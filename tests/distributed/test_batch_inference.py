"""Batch inference across processes: a PyTorch model imported with a dynamic batch axis and saved
as an InferenceSession is loaded by every process of an ``mpirun`` (without torch), each runs its
shard of a data set whose size the process count does not divide, and process 0 gathers the
outputs in order; they must equal PyTorch's outputs on the whole data set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.distributed.mpi_launch import mpirun_or_skip, run

MPIRUN = mpirun_or_skip()
torch = pytest.importorskip("torch", reason="the session is built from a PyTorch model")
WORKER = Path(__file__).with_name("inference_worker.py")


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 16), torch.nn.Linear(16, 3)

    def forward(self, x):
        return torch.softmax(self.b(torch.nn.functional.gelu(self.a(x))), dim=-1)


@pytest.mark.parametrize("n", [2, 3])
def test_sharded_batch_inference_gathered_in_order(n, tmp_path):
    import ember
    import ember.torch as et

    torch.manual_seed(0)
    model = _Net().eval()
    m = et.import_module(model, (torch.zeros(4, 6),), dynamic_axes={"x": ("batch", None)})
    session = ember.InferenceSession(m)
    session.save(str(tmp_path / "session"))
    data = np.random.default_rng(1).standard_normal((23, 6)).astype(np.float32)  # 23 = 12+11 = 8+8+7
    np.save(tmp_path / "data.npy", data)
    out = run(MPIRUN, n, [str(WORKER), str(tmp_path / "session"), str(tmp_path / "data.npy"),
                          str(tmp_path / "out.npy")])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = sorted(int(line.split()[2]) for line in out.stdout.splitlines() if line.startswith("OK "))
    assert len(rows) == n and sum(rows) == 23 and max(rows) - min(rows) == 1
    with torch.inference_mode():
        want = model(torch.from_numpy(data)).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, atol=1e-6)
