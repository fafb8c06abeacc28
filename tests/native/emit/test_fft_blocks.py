"""The fft step's kernels as shared libraries (emit/fft_blocks.py): programs of one precision and
reach mask call one library, the programs themselves carry no kernel code, and a program served
from the program cache in a new process finds its library."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.emit import fft_blocks
from tests.native.conftest import requires_cc

pytestmark = requires_cc
RNG = np.random.default_rng(11)


def _cdata(shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def _source(f, *args):
    return ember.jit(f, backend="native").lower(*args).executable.source


def test_programs_of_one_mask_share_a_library_and_carry_no_kernels():
    x, y = _cdata((40, 256)), _cdata((36, 512))
    sx = _source(lambda a: jnp.fft.fft(a), x)
    sy = _source(lambda a: jnp.fft.ifft(a) * 3, y)
    for src in (sx, sy):
        assert "em_fftl_axis" not in src and "em_fftk_task" not in src  # the kernels are the library's
    (lx, nx), = fft_blocks.prepare_for(sx)
    (ly, ny), = fft_blocks.prepare_for(sy)
    assert nx == ny and lx is ly  # same precision and paths: one library
    got = np.asarray(ember.jit(lambda a: jnp.fft.ifft(a) * 3, backend="native")(y))
    np.testing.assert_allclose(got, np.fft.ifft(y.astype(np.complex128)) * 3, atol=2e-6)
    # another precision is another library
    z = _cdata((4, 256), np.complex128)
    sz = _source(lambda a: jnp.fft.fft(a), z)  # (the suite runs with 64-bit dtypes on)
    got = np.asarray(ember.jit(lambda a: jnp.fft.fft(a), backend="native")(z))
    (lz, nz), = fft_blocks.prepare_for(sz)
    assert "_f64_" in nz and "_f32_" in nx and lz is not lx
    np.testing.assert_allclose(got, np.fft.fft(z), rtol=0, atol=1e-12 * np.abs(np.fft.fft(z)).max())


def test_entry_of_other_sources_is_refused():
    src = '#define EM_FFTB_SYM "ember_fftb_000000000000_f32_9"\n'
    with pytest.raises(RuntimeError, match="ember_fftb_000000000000_f32_9"):
        fft_blocks.prepare_for(src)


def test_library_source_names_its_entry_and_mask():
    src = fft_blocks.library_source("f32", 9)
    sym = fft_blocks.symbol("f32", 9)
    assert re.search(rf"#define EM_FFTB_ENTRY {sym}\n", src) and "#define EM_FFTG 9\n" in src
    assert "#define EM_FFTG " not in fft_blocks.library_source("f64", None)
    assert fft_blocks.gates_of(fft_blocks.program_block("float", "f32", 9)) == 9
    assert fft_blocks.gates_of(fft_blocks.program_block("double", "f64", None)) is None


CHILD = textwrap.dedent("""
    import numpy as np, ember, ember.numpy as jnp
    x = np.load("{x}")
    np.save("{out}", np.asarray(ember.jit(lambda a: jnp.fft.rfft(a) * 2, backend="native")(x)))
""")


def test_program_cache_hit_in_a_new_process_loads_the_library(tmp_path):
    """The second process takes the program from the program cache (no emission of its steps) and
    still finds the kernel library the source names."""
    x = RNG.standard_normal((5, 1024)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    env.pop("EMBER_PROGRAM_CACHE", None)
    for i in range(2):
        code = CHILD.format(x=tmp_path / "x.npy", out=tmp_path / f"y{i}.npy")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
    assert list((tmp_path / "cache" / "programs").glob("*.json"))  # the second run could be served from it
    want = np.fft.rfft(x.astype(np.float64)) * 2
    for i in range(2):
        np.testing.assert_allclose(np.load(tmp_path / f"y{i}.npy"), want, atol=3e-5 * np.abs(want).max())
