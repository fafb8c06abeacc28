"""Data-parallel training step over 1 and 2 processes (weak scaling: the per-process batch is fixed):
ember ``jit(spmd(step))`` with the gradient ``pmean`` as an MPI step inside the one native call,
against PyTorch DistributedDataParallel (gloo) on the same model and data, when torch is installed.

The model is an MLP 2-256-256-3 (67 K parameters, 0.27 MB of float32 gradients) on spirals data,
512 examples per process, one SGD step per call; every process uses one thread, so one process is
the single-process baseline and two processes share the machine's two cores. Each (library,
process count) runs under its own ``mpirun`` (the libraries are not mixed in one process: gloo's
threads slowed ember's steps about 17x when they were), and the runs alternate over ``--rounds`` rounds;
the table gives the median over the runs of each run's median step, its range, and the ratio of
the 2-process step to the 1-process step (1.0 is perfect weak scaling).

    python benchmarks/bench_ddp.py [--procs 1,2] [--steps 40] [--rounds 3]

Writes ``benchmarks/results/ddp.{json,md}``. Needs mpi4py and an MPI runtime (``ember[distributed]``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WIDTH, BATCH, LR = 256, 512, 0.05


def _spirals(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    r = rng.uniform(0.05, 1.0, n)
    t = 4.0 * r + y * (2 * np.pi / 3) + rng.normal(0, 0.15, n)
    return np.stack([r * np.cos(t), r * np.sin(t)], 1).astype(np.float32), y.astype(np.int32)


def _init(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = [2, WIDTH, WIDTH, 3]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32)]
    return params


def _ember_step():
    import ember
    import ember.numpy as jnp
    from ember import nn
    from ember._src.distributed.spmd import pmean, spmd

    def loss(params, x, y):
        h = x
        for i in range(0, len(params) - 2, 2):
            h = jnp.tanh(h @ params[i] + params[i + 1])
        logits = h @ params[-2] + params[-1]
        return -jnp.mean(jnp.sum(nn.log_softmax(logits) * nn.one_hot(y, 3), axis=-1))

    def step(params, x, y):
        value, grads = ember.value_and_grad(loss)(params, x, y)
        grads = [pmean(g, "data") for g in grads]
        return [p - LR * g for p, g in zip(params, grads)], pmean(value, "data")

    return ember.jit(spmd(step, "data"), num_threads=1)


def _torch_step(rank: int, size: int):
    import torch
    import torch.distributed as td

    torch.set_num_threads(1)
    td.init_process_group("gloo", rank=rank, world_size=size)
    layers = []
    sizes = [2, WIDTH, WIDTH, 3]
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():  # the same initial parameters as ember's
        init = _init()
        for k, lin in enumerate(m for m in model if isinstance(m, torch.nn.Linear)):
            lin.weight.copy_(torch.from_numpy(init[2 * k].T.copy()))
            lin.bias.copy_(torch.from_numpy(init[2 * k + 1]))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    lossf = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = lossf(ddp(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def worker(lib: str, steps: int) -> None:
    """One process of an ``mpirun``: time ``steps`` training steps of ``lib`` ("ember" or "torch")."""
    from mpi4py import MPI

    import ember.distributed as dist

    dist.initialize()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    x, y = _spirals(BATCH, seed=rank)
    if lib == "ember":
        f = _ember_step()
        state = {"params": [np.asarray(p) for p in _init()]}

        def one() -> float:
            state["params"], value = f(state["params"], x, y)
            return float(value)
    else:
        import torch
        step, tx, ty = _torch_step(rank, size), torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

        def one() -> float:
            return float(step(tx, ty))
    times, loss = [], 0.0
    for i in range(steps + 5):  # five warm-up steps
        comm.Barrier()
        t = time.perf_counter()
        loss = one()
        dt = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)  # a step ends with its slowest process
        if i >= 5:
            times.append(dt)
    if rank == 0:
        print(json.dumps({"procs": size, "lib": lib, "loss": loss, "median_s": float(np.median(times))}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpirun(lib: str, procs: int, steps: int) -> dict:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    cmd = ["mpirun", "-n", str(procs), "--oversubscribe", sys.executable, __file__, "--worker", lib,
           "--steps", str(steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"mpirun -n {procs} ({lib}) failed:\n{out.stderr[-3000:]}")
    return json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", default="1,2")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--worker", choices=("ember", "torch"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker, a.steps)
        return 0
    libs = {"ember": "ember spmd (native MPI step)"}
    if not a.no_torch:
        try:
            import torch.distributed as td
            if td.is_available() and td.is_gloo_available():
                libs["torch"] = "torch DDP (gloo)"
        except ImportError:
            pass
    procs = [int(p) for p in a.procs.split(",")]
    runs: dict[tuple[str, int], list[float]] = {(lib, p): [] for lib in libs for p in procs}
    for _ in range(a.rounds):
        for p in procs:
            for lib in libs:
                runs[lib, p].append(_mpirun(lib, p, a.steps)["median_s"])
    med = {k: float(np.median(v)) for k, v in runs.items()}
    head = " | ".join(libs.values())
    lines = ["## Data-parallel training step (MLP 2-256-256-3, 512 examples per process, 1 thread each)",
             "", f"load average {os.getloadavg()[0]:.2f}; median over {a.rounds} runs of each run's median "
             f"of {a.steps} steps [range of the run medians]; a step is timed to its slowest process", "",
             f"| processes | {head} | " + " | ".join(f"{n}: vs 1 process" for n in libs.values()) + " |",
             "|---" * (1 + 2 * len(libs)) + "|"]
    for p in procs:
        cells = [f"{med[lib, p] * 1e3:.3f} ms [{min(runs[lib, p]) * 1e3:.2f}, {max(runs[lib, p]) * 1e3:.2f}]"
                 for lib in libs]
        ratios = [f"{med[lib, p] / med[lib, procs[0]]:.2f}x" for lib in libs]
        lines.append(f"| {p} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    md = "\n".join(lines) + "\n"
    print(md)
    res = HERE / "results"
    res.mkdir(exist_ok=True)
    table = {f"{lib} x{p}": v for (lib, p), v in runs.items()}
    (res / "ddp.json").write_text(json.dumps(table, indent=1) + "\n")
    (res / "ddp.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
