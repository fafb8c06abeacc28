"""Chaos: random programs run in fresh processes while the compile cache between runs is damaged
at random (truncated, emptied, garbage, a directory, flipped code bytes, a deleted or wrong digest,
a hand-edited program entry). Every run must give NumPy's answer or rebuild cleanly -- never a
crash, a hang or a wrong result. Bounded: ``EMBER_CHAOS_ROUNDS`` rounds (default 6), with a seed
that ``EMBER_CHAOS_SEED`` can set."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAMS = """
import json, sys, numpy as np, ember, ember.numpy as jnp
k = int(sys.argv[1])
x = np.linspace(-2, 2, 48).astype(np.float32).reshape(6, 8)
progs = [
    (lambda a: jnp.tanh(a) * 2 + a.sum(), lambda a: np.tanh(a) * 2 + a.sum()),
    (lambda a: (a @ a.T).max(1), lambda a: (a @ a.T).max(1)),
    (lambda a: jnp.cumsum(a, 1) - a.mean(0), lambda a: np.cumsum(a, 1) - a.mean(0)),
    (lambda a: jnp.exp(-a * a).sum(0), lambda a: np.exp(-a * a).sum(0)),
]
f, ref = progs[k % len(progs)]
out = np.asarray(ember.jit(f, backend="native")(x))
print(json.dumps({"ok": bool(np.allclose(out, ref(x.astype(np.float64)), rtol=1e-4, atol=1e-4))}))
"""


def _damage(path: Path, how: str) -> None:
    if how == "truncate":
        path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 3)])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(os.urandom(2048))
    elif how == "directory":
        path.unlink()
        path.mkdir()
    elif how == "flip":
        b = bytearray(path.read_bytes())
        for i in range(len(b) // 2, min(len(b), len(b) // 2 + 32)):
            b[i] ^= 0x5A
        path.write_bytes(bytes(b))
    elif how == "delete":
        path.unlink()


def test_random_cache_damage_between_runs(tmp_path):
    rounds = int(os.environ.get("EMBER_CHAOS_ROUNDS", "6"))
    rng = random.Random(int(os.environ.get("EMBER_CHAOS_SEED", "2026")))
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path), EMBER_PROGRAM_CACHE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    for r in range(rounds):
        files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".so", ".sha256", ".json")]
        for p in rng.sample(files, min(len(files), rng.randint(1, 4))):
            how = rng.choice(["truncate", "empty", "garbage", "directory", "flip", "delete"])
            if how == "directory" and p.suffix != ".so":
                how = "garbage"
            _damage(p, how)
        prog = rng.randrange(8)
        out = subprocess.run([sys.executable, "-c", PROGRAMS, str(prog)], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, f"round {r}: {out.stderr[-2000:]}"
        assert json.loads(out.stdout.strip().splitlines()[-1])["ok"], f"round {r}: wrong result"
