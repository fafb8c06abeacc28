"""VSLA benchmark (issue 19): batched polynomial products of random degrees and ragged sum/Hadamard.

ember vsla (one ``vsla.jit`` program over the stacked batch; its capacity bucket is static so the
conv can use the FFT) vs a NumPy loop of ``np.convolve``, a loop of ``scipy.signal.fftconvolve``
and JAX padded to the maximum length with ``vmap`` of an FFT convolution. The ragged part runs
pairs of every length through one ``vsla.jit`` function (one compile: lengths are runtime values
over symbolic capacities) against ``ember.jit`` (a trace and compile per shape pair), first pass
(compiles included) and warm.
Run: ``PYTHONPATH=src python benchmarks/bench_vsla.py --n 2000`` (timings are medians; noisy on a
loaded machine).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from common import have, timeit

import ember
from ember import vsla


def polys(n: int, max_deg: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(int(d) + 1).astype(np.float32) for d in rng.integers(1, max_deg + 1, n)]


def bench_products(n: int, max_deg: int) -> dict[str, float]:
    a, b = polys(n, max_deg, 0), polys(n, max_deg, 1)
    va, vb = vsla.stack(a), vsla.stack(b)
    f = vsla.jit(lambda x, y: vsla.conv(x, y, method="fft"), capacity="static")
    want = np.convolve(a[0], b[0])
    got = np.asarray(f(va, vb).logical()[0, : want.size])
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    out = {"ember vsla": timeit(lambda: ember.block_until_ready(f(va, vb)), min_runs=3)}
    out["numpy loop"] = timeit(lambda: [np.convolve(x, y) for x, y in zip(a, b)], min_runs=3)
    if have("scipy"):
        from scipy.signal import fftconvolve
        out["scipy fftconvolve loop"] = timeit(lambda: [fftconvolve(x, y) for x, y in zip(a, b)], min_runs=3)
    if have("jax"):
        import jax
        import jax.numpy as jnp
        m = max(x.size for x in a) + max(x.size for x in b) - 1
        pa = jnp.asarray(np.stack([np.pad(x, (0, m - x.size)) for x in a]))
        pb = jnp.asarray(np.stack([np.pad(x, (0, m - x.size)) for x in b]))
        g = jax.jit(jax.vmap(lambda x, y: jnp.fft.irfft(jnp.fft.rfft(x) * jnp.fft.rfft(y), n=m)))
        out["jax padded vmap fft"] = timeit(lambda: g(pa, pb).block_until_ready(), min_runs=3)
    return out


def bench_ragged(n: int, max_len: int) -> dict[str, float]:
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(int(k)).astype(np.float32) for k in rng.integers(1, max_len + 1, n)]
    vs = [vsla.array(x) for x in xs]
    size = max(xs[0].size, xs[1].size)
    want = np.pad(xs[0], (0, size - xs[0].size)) * np.pad(xs[1], (0, size - xs[1].size))
    out = {}
    for name, jit in (("ember vsla (per pair, vsla.jit)", vsla.jit), ("ember.jit per shape", ember.jit)):
        f = jit(lambda u, v: (u + v, u * v))
        t0 = time.perf_counter()
        got = [f(vs[i], vs[i + 1]) for i in range(0, n - 1, 2)]
        first = time.perf_counter() - t0
        np.testing.assert_allclose(np.asarray(got[0][1].logical()), want, rtol=1e-6)
        out[name] = timeit(lambda f=f: [f(vs[i], vs[i + 1]) for i in range(0, n - 1, 2)], min_runs=3)
        print(f"  {name}: first pass {first * 1e3:.1f} ms, {f.cache_info()['compiles']} compiles")
    m = max_len
    pad = np.stack([np.pad(x, (0, m - x.size)) for x in xs])
    out["numpy padded"] = timeit(lambda: (pad[0::2] + pad[1::2], pad[0::2] * pad[1::2]), min_runs=3)
    stored = sum(v.capacity[0] for v in vs) * 4
    print(f"  bytes: vsla capacity storage {stored:,} vs padded {pad.nbytes:,}")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--max-deg", type=int, default=512)
    p.add_argument("--ragged-n", type=int, default=64)
    p.add_argument("--max-len", type=int, default=4096)
    args = p.parse_args()
    print(f"polynomial products: n={args.n}, degrees 1..{args.max_deg}")
    for k, t in bench_products(args.n, args.max_deg).items():
        print(f"  {k:28s} {t * 1e3:9.2f} ms")
    print(f"ragged sum + Hadamard: n={args.ragged_n}, lengths 1..{args.max_len}")
    for k, t in bench_ragged(args.ragged_n, args.max_len).items():
        print(f"  {k:28s} {t * 1e3:9.2f} ms")


if __name__ == "__main__":
    main()
