"""VSLA benchmark (issue 19): batched polynomial products of random degrees and ragged sum/Hadamard.

Products: 10,000 pairs of polynomials with random degrees 1..512 (float32). ember vsla runs one
``vsla.jit`` function (``vsla.conv`` with ``method="auto"``: one C compile for every shape; the
capacities are symbolic, and the FFT path is one ``fft_conv`` step whose transform length
``next_pow2(ca + cb - 1)`` is chosen at run time) over the pairs grouped
into batches: by the bucket ``next_pow2(max(m, n))`` of the pair, each group split into batches of
power-of-two row counts (vsla buckets the batch axis too, so this pads no rows), one native call
per batch. Peers: a NumPy loop of ``np.convolve``, a loop of ``scipy.signal.fftconvolve``, and JAX
padded to the maximum length with ``vmap`` of an FFT convolution (at the padded length ``m_max +
n_max - 1`` = 1025, and at its power of two 2048). "ember vsla, one batch" is the same function on
all pairs stacked into one VArray (padded to the longest). Grouping is done once, outside the timed
region, as the JAX inputs' padding is; its time is printed.

Ragged batches (``--ragged-only`` runs just these): row-wise ``a + b`` and ``a * b`` of two
``vsla.Ragged`` batches of 64 and 1024 float32 rows with lengths uniform in 1..4096 (two native
calls, one per op, each one pass over the stored rows; and one ``vsla.jit`` call for both) vs NumPy
on arrays padded to 4096 (padding outside and inside the timed region) and JAX jit on pre-padded
arrays; results are checked equal first; the bytes of inputs + outputs are printed (ragged storage
vs padded). Writes ``benchmarks/results/vsla_ragged.json`` / ``.md``.

Timing: interleaved rounds (``common.interleaved``), median and quartiles per implementation.
Run: ``PYTHONPATH=src python benchmarks/bench_vsla.py`` (``--n 2000`` for a shorter run). Writes
``benchmarks/results/vsla.json`` / ``vsla.md``.
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np
from common import cpu_interleaved, have, interleaved, load_text, machine, report

import ember
from ember import vsla


def polys(n: int, max_deg: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(int(d) + 1).astype(np.float32) for d in rng.integers(1, max_deg + 1, n)]


def _stacked(rows: list[np.ndarray]) -> vsla.VArray:
    """The rows as one VArray, stored at power-of-two capacities (as ``vsla.stack``, in NumPy)."""
    width = max(r.size for r in rows)
    data = np.zeros((vsla.next_pow2(len(rows)), vsla.next_pow2(width)), np.float32)
    for i, r in enumerate(rows):
        data[i, : r.size] = r
    return vsla.VArray(data, (len(rows), width))


def batches(a: list[np.ndarray], b: list[np.ndarray]) -> list[tuple[vsla.VArray, vsla.VArray, list[int]]]:
    """The pairs grouped by ``next_pow2(max(m, n))``, each group cut into power-of-two row counts."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, (x, y) in enumerate(zip(a, b)):
        groups[vsla.next_pow2(max(x.size, y.size))].append(i)
    out = []
    for _, idx in sorted(groups.items()):
        while idx:
            k = 1 << (len(idx).bit_length() - 1)
            chunk, idx = idx[:k], idx[k:]
            out.append((_stacked([a[i] for i in chunk]), _stacked([b[i] for i in chunk]), chunk))
    return out


def bench_products(n: int, max_deg: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    a, b = polys(n, max_deg, 0), polys(n, max_deg, 1)
    t0 = time.perf_counter()
    groups = batches(a, b)
    prep = time.perf_counter() - t0
    f = vsla.jit(lambda x, y: vsla.conv(x, y))
    for va, vb, idx in groups:  # every batch against np.convolve, a few rows each
        out = f(va, vb).to_numpy()
        for r in (0, len(idx) - 1):
            want = np.convolve(a[idx[r]], b[idx[r]])
            got = np.zeros(want.size, np.float32)
            got[: min(want.size, out.shape[1])] = out[r, : want.size]
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * max(1.0, np.abs(want).max()))
    whole = (_stacked(a), _stacked(b))
    impls = {
        "ember vsla (batched, one compile)":
            lambda: ember.block_until_ready([f(va, vb) for va, vb, _ in groups]),
        "ember vsla, one batch": lambda: ember.block_until_ready(f(*whole)),
        "numpy loop": lambda: [np.convolve(x, y) for x, y in zip(a, b)],
    }
    if have("scipy"):
        from scipy.signal import fftconvolve
        impls["scipy fftconvolve loop"] = lambda: [fftconvolve(x, y) for x, y in zip(a, b)]
    if have("jax"):
        import jax
        import jax.numpy as jnp
        m = max(x.size for x in a) + max(x.size for x in b) - 1
        for size, name in ((m, "jax padded vmap fft"), (vsla.next_pow2(m), "jax padded vmap fft (pow2)")):
            pa = jnp.asarray(np.stack([np.pad(x, (0, m - x.size)) for x in a]))
            pb = jnp.asarray(np.stack([np.pad(x, (0, m - x.size)) for x in b]))
            def conv(x: object, y: object, s: int = size) -> object:
                return jnp.fft.irfft(jnp.fft.rfft(x, n=s) * jnp.fft.rfft(y, n=s), n=s)[:m]

            g = jax.jit(jax.vmap(conv))
            want = np.convolve(a[0], b[0])
            np.testing.assert_allclose(np.asarray(g(pa, pb))[0, : want.size], want, rtol=1e-3, atol=1e-3)
            impls[name] = lambda g=g, pa=pa, pb=pb: g(pa, pb).block_until_ready()
    stats = interleaved(impls, rounds=9, sample_time=0.0, max_seconds=60.0, min_rounds=5)
    info = {"batches": len(groups), "grouping_s": prep, "compiles": f.cache_info()["compiles"]}
    return stats, info


def _ragged_rows(rows: int, max_len: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(int(k)).astype(np.float32) for k in rng.integers(1, max_len + 1, rows)]


def _pad_rows(xs: list[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(xs), width), np.float32)
    for i, x in enumerate(xs):
        out[i, : x.size] = x
    return out


def _both(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return p + q, p * q


def bench_ragged(rows: int, max_len: int,
                 cpu: bool = False) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Row-wise sum and Hadamard product of two ragged batches (float32, lengths uniform in
    1..max_len): ember ``vsla.Ragged`` (``a + b`` and ``a * b``: two native calls, one per op; and
``vsla.jit`` of a function returning both: one native call) vs
    NumPy on arrays already padded to ``max_len``, NumPy including the padding step, and JAX jit on
    pre-padded arrays. Returns the interleaved timings and the bytes of inputs + outputs."""
    xs, ys = _ragged_rows(rows, max_len, 2 * rows), _ragged_rows(rows, max_len, 2 * rows + 1)
    a, b = vsla.ragged(xs), vsla.ragged(ys)
    pa, pb = _pad_rows(xs, max_len), _pad_rows(ys, max_len)
    s, m = a + b, a * b
    want_s, want_m = pa + pb, pa * pb
    for got, want in ((s, want_s), (m, want_m)):  # every row against the padded NumPy result
        vals = np.asarray(got.values)
        for i, (o, n) in enumerate(zip(got.offsets[:-1], got.lengths)):
            np.testing.assert_array_equal(vals[o:o + n], want[i, :n])
            assert not want[i, n:].any()

    def ember_ragged() -> object:
        return ember.block_until_ready(((a + b).values, (a * b).values))

    both = vsla.jit(lambda u, v: (u + v, u * v))
    js, jm = both(a, b)
    for got, want in ((js, s), (jm, m)):
        assert got.lengths.tolist() == want.lengths.tolist()
        np.testing.assert_array_equal(np.asarray(got.values)[: got.offsets[-1]], np.asarray(want.values))

    def ember_jit_ragged() -> object:
        u, v = both(a, b)
        return ember.block_until_ready((u.values, v.values))

    impls = {
        "ember Ragged (2 native calls)": ember_ragged,
        "ember vsla.jit Ragged (1 native call)": ember_jit_ragged,
        "numpy padded": lambda: _both(pa, pb),
        "numpy incl. padding": lambda: _both(_pad_rows(xs, max_len), _pad_rows(ys, max_len)),
    }
    if have("jax"):
        import jax
        import jax.numpy as jnp
        ja, jb = jnp.asarray(pa), jnp.asarray(pb)
        g = jax.jit(lambda x, y: (x + y, x * y))
        js, jm = g(ja, jb)
        np.testing.assert_array_equal(np.asarray(js), want_s)
        np.testing.assert_array_equal(np.asarray(jm), want_m)
        impls["jax jit padded"] = lambda: jax.block_until_ready(g(ja, jb))
    if cpu:  # process CPU time (every thread), for a loaded machine
        stats = cpu_interleaved(impls, rounds=15, sample_time=0.05)
    else:
        stats = interleaved(impls, rounds=25, sample_time=0.02, max_seconds=20.0, min_rounds=9)
    nbytes = {"ragged": a.nbytes + b.nbytes + s.nbytes + m.nbytes, "padded": 4 * pa.nbytes}
    return stats, nbytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--max-deg", type=int, default=512)
    p.add_argument("--ragged-rows", type=int, nargs="+", default=[64, 1024])
    p.add_argument("--ragged-only", action="store_true", help="skip the polynomial products")
    p.add_argument("--cpu", action="store_true", help="ragged rows: time process CPU time, not wall")
    p.add_argument("--max-len", type=int, default=4096)
    args = p.parse_args()
    if not args.ragged_only:
        products(args)
    ragged(args)


def products(args: argparse.Namespace) -> None:
    print(f"polynomial products: n={args.n}, degrees 1..{args.max_deg}; {machine()}; load {load_text()}")
    stats, info = bench_products(args.n, args.max_deg)
    print(f"  {info['batches']} batches (grouping {info['grouping_s'] * 1e3:.0f} ms, untimed), "
          f"{info['compiles']} compile")
    for k, v in stats.items():
        print(f"  {k:36s} median {v['median'] * 1e3:8.2f} ms  (quartiles {v['q1'] * 1e3:.2f} .. "
              f"{v['q3'] * 1e3:.2f}, {v['rounds']} rounds)")
    ours = stats["ember vsla (batched, one compile)"]["median"]
    for k, v in stats.items():
        if not k.startswith("ember"):
            print(f"  {k} / ember vsla: {v['median'] / ours:.2f}x")
    rows = [{"workload": f"{args.n} polynomial products, degrees 1..{args.max_deg}",
             "times": {("ember native" if k.startswith("ember vsla (") else k): v["median"]
                       for k, v in stats.items()}}]
    report("VSLA polynomial products (issue 19)", rows, "vsla", {"stats": stats, **info})


def ragged(args: argparse.Namespace) -> None:
    ragged_rows = []
    for rows in args.ragged_rows:
        stats, nbytes = bench_ragged(rows, args.max_len, args.cpu)
        clock = "process CPU time" if args.cpu else "wall"
        print(f"ragged sum + Hadamard: {rows} rows, lengths 1..{args.max_len} (float32, {clock}); "
              f"load {load_text()}")
        for k, v in stats.items():
            print(f"  {k:32s} median {v['median'] * 1e3:8.3f} ms  (quartiles {v['q1'] * 1e3:.3f} .. "
                  f"{v['q3'] * 1e3:.3f}, {v['rounds']} rounds)")
        print(f"  bytes of inputs + outputs: ragged {nbytes['ragged']:,} vs padded {nbytes['padded']:,} "
              f"({nbytes['ragged'] / nbytes['padded']:.2f}x)")
        ragged_rows.append({"workload": f"ragged a + b and a * b, {rows} rows, lengths 1..{args.max_len}",
                            "times": {("ember native" if k.startswith("ember Ragged") else k): v["median"]
                                      for k, v in stats.items()},
                            "bytes": nbytes})
    report("VSLA ragged batches (issue 19)" + (", process CPU time" if args.cpu else ""), ragged_rows,
           "vsla_ragged_cpu" if args.cpu else "vsla_ragged")


if __name__ == "__main__":
    main()
