"""ember.random's default scheme: JAX's partitionable threefry (``jax_threefry_partitionable=True``,
JAX's default since 0.5), bit for bit.

Reference values were recorded with jax 0.10.2 on CPU at its defaults (float32 results with
``jax_enable_x64=False``; the 64-bit ones with it enabled). 100001-element samples are stored as a
fingerprint (the wrapping uint64 sum of the raw bit patterns and the first three patterns). When
JAX is installed, a live comparison covers more shapes and dtypes. The classic scheme's known
answers are in ``test_random.py``, which runs with the flag off.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.numpy as jnp
import ember.random as er
from ember._src import flags
from ember._src.prims import random_bits as rb
from tests.library.random_samples import fingerprint, sample


def test_default_is_partitionable():
    assert flags.get("jax_threefry_partitionable") is True
    assert rb.PARTITIONABLE.env == "EMBER_THREEFRY_PARTITIONABLE"


def test_keys_and_bits_known_answers():
    k0 = er.PRNGKey(0)
    np.testing.assert_array_equal(er.split(k0), [[1797259609, 2579123966], [928981903, 3453687069]])
    np.testing.assert_array_equal(
        er.split(er.PRNGKey(42), 3),
        [[1832780943, 270669613], [64467757, 2916123636], [2465931498, 255383827]],
    )
    np.testing.assert_array_equal(
        er.split(k0, (2, 3)),
        [[[1797259609, 2579123966], [928981903, 3453687069], [4146024105, 2718843009]],
         [[2467461003, 3840466878], [2285895361, 433833334], [1524306142, 1887795613]]],
    )
    # fold_in is the same in both schemes
    np.testing.assert_array_equal(er.fold_in(k0, 7), [2716826189, 292468403])
    np.testing.assert_array_equal(
        er.bits(k0, (7,)), [4070199207, 4202968722, 1427181096, 2012915765, 2447653815, 710830403, 1332275837]
    )
    np.testing.assert_array_equal(
        er.bits(er.PRNGKey(42), (2, 3)),
        [[2098992034, 2919706841, 2646866425], [2409546199, 1935504149, 2516274904]],
    )
    np.testing.assert_array_equal(er.bits(k0, (5,), jnp.uint8), [167, 146, 40, 53, 183])
    np.testing.assert_array_equal(er.bits(k0, (5,), jnp.uint16), [20391, 13970, 3624, 43061, 15287])
    np.testing.assert_array_equal(
        er.bits(k0, (3,), jnp.uint64),
        np.array([7719171245655871230, 3989946895414531357, 17807037942121513089], np.uint64),
    )


def test_samplers_known_answers():
    k0 = er.PRNGKey(0)
    u = np.asarray(er.uniform(k0, (2, 3))).view(np.uint32)
    np.testing.assert_array_equal(
        u.ravel(), [0x3F729A4E, 0x3F7A8436, 0x3EAA221C, 0x3EEFF550, 0x3F11E43A, 0x3E2979A0]
    )
    n = np.asarray(er.normal(k0, (5,))).view(np.uint32)
    np.testing.assert_array_equal(n, [0x3FCFB2BD, 0x40019DF0, 0xBEDE0017, 0xBDA10222, 0x3E34512C])
    np.testing.assert_array_equal(er.randint(k0, (8,), 0, 10), [9, 0, 2, 3, 1, 7, 2, 3])
    np.testing.assert_array_equal(er.permutation(k0, 10), [0, 1, 8, 5, 6, 4, 3, 2, 7, 9])


FINGERPRINTS = {
    "bits_u32": (214564471606351, (3715183467, 3461522409, 1578076316)),
    "bits_u8": (12777807, (107, 233, 156)),
    "bits_u16": (3283717199, (13163, 41961, 34972)),
    "uniform_f32": (192330369608913, (1075105150, 1073866570, 3190212960)),
    "uniform_f16": (1381975492, (12904, 14622, 14404)),
    "uniform_bf16": (1594982700, (16084, 16232, 16156)),
    "normal_f32": (213002443060955, (1066218095, 1063055782, 3199035335)),
    "normal_c64": (425826751278974, (3207358218, 1065852429, 1048227916)),
    "randint": (2813253264334, (234, 929, 421)),
    "bernoulli": (29943, (0, 0, 0)),
    "categorical": (200184, (3, 2, 2)),
    "permutation": (499500, (25, 654, 769)),
    "split": (21339977725527, (1264997412, 2518116175, 2877103387)),
    "exponential": (105787455185521, (1073752491, 1070718830, 1055553834)),
    "bits_u64": (12824346003807970658, (5433122516582754127, 12357064956073459442, 9077809342324232988)),
    "uniform_f64": (10700023444363883059, (13826297195640533348, 4608755927725612775, 4601968063828259492)),
    "randint_i64": (55121700988253944, (1019608654451, 605757553828, 102092082958)),
}
@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_large_samples_bit_identical_to_jax(name):
    assert fingerprint(sample(name)) == FINGERPRINTS[name]


@pytest.mark.parametrize("name", ["bits_u32", "uniform_f32", "split", "bits_u64"])
def test_large_samples_jit(name):
    assert fingerprint(ember.jit(lambda: sample(name))()) == FINGERPRINTS[name]


def test_vmap_over_keys_matches_loop():
    keys = er.split(er.PRNGKey(3), 4)
    fns = (lambda k: er.normal(k, (3, 5)), lambda k: er.split(k, 3), lambda k: er.bits(k, (7,), jnp.uint8))
    for f in fns:
        stacked = np.stack([np.asarray(f(keys[i])) for i in range(4)])
        np.testing.assert_array_equal(ember.vmap(f)(keys), stacked)
        np.testing.assert_array_equal(ember.jit(ember.vmap(f))(keys), stacked)


def test_flag_switches_scheme_and_classic_differs():
    k = er.PRNGKey(0)
    with flags.override("jax_threefry_partitionable", False):
        classic = np.asarray(er.split(k))
        classic_bits = np.asarray(er.bits(k, (7,)))
    np.testing.assert_array_equal(classic, [[4146024105, 967050713], [2718843009, 1272950319]])
    assert not np.array_equal(classic_bits, er.bits(k, (7,)))
    assert flags.get("jax_threefry_partitionable") is True
    with pytest.raises(KeyError, match="unknown configuration flag"):
        flags.get("jax_no_such_flag")
    with pytest.raises(TypeError, match="takes a bool"):
        flags.set_flag("jax_threefry_partitionable", "yes")


def test_environment_variable_selects_classic():
    code = ("import ember.random as er, numpy as np; "
            "print(np.asarray(er.split(er.PRNGKey(0))).ravel().tolist())")
    env = dict(os.environ, EMBER_THREEFRY_PARTITIONABLE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([4146024105, 967050713, 2718843009, 1272950319])


SHAPES = [(), (1,), (5,), (3, 7), (2, 3, 4)]


def test_against_installed_jax():
    jax = pytest.importorskip("jax", reason="optional live comparison; jax is not installed")
    with jax.threefry_partitionable(True):  # (JAX's default since 0.5; set for older versions)
        jr = jax.random
        for seed in (0, 7, 123456):
            jk, ek = jr.PRNGKey(seed), er.PRNGKey(seed)
            np.testing.assert_array_equal(np.asarray(jr.split(jk, 5)), er.split(ek, 5))
            np.testing.assert_array_equal(np.asarray(jr.fold_in(jk, 99)), er.fold_in(ek, 99))
            for shape in SHAPES:
                for d in ("uint8", "uint16", "uint32"):
                    np.testing.assert_array_equal(np.asarray(jr.bits(jk, shape, d)), er.bits(ek, shape, d))
                for d in ("float32", "float16", "bfloat16"):
                    for fj, fe in ((jr.uniform, er.uniform), (jr.normal, er.normal)):
                        a, b = np.asarray(fj(jk, shape, d)), np.asarray(fe(ek, shape, d))
                        assert a.dtype == b.dtype
                        np.testing.assert_array_equal(a.view(np.uint16 if a.itemsize == 2 else np.uint32),
                                                      b.view(np.uint16 if b.itemsize == 2 else np.uint32))
                np.testing.assert_array_equal(np.asarray(jr.randint(jk, shape, -5, 1000)),
                                              er.randint(ek, shape, -5, 1000))
            np.testing.assert_array_equal(np.asarray(jr.permutation(jk, 20)), er.permutation(ek, 20))
            np.testing.assert_array_equal(np.asarray(jr.poisson(jk, np.array([0.5, 3.0, 40.0], np.float32))),
                                          er.poisson(ek, np.array([0.5, 3.0, 40.0], np.float32)))
            np.testing.assert_allclose(np.asarray(jr.gamma(jk, np.array([0.3, 1.0, 4.0], np.float32))),
                                       er.gamma(ek, np.array([0.3, 1.0, 4.0], np.float32)), rtol=2e-6)
