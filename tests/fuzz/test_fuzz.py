"""The differential fuzzer (``ember._src.fuzz``, ``python -m ember.fuzz``): a bounded slice of seed 0
and the fuzzer's own parts (comparison, crash isolation, gradient check, minimizer, repro).

The slice fails on any finding that is not in the fuzzer's table of known open defects
(``fuzz_check.KNOWN``); long runs are ``python -m ember.fuzz --minutes N --seed S`` (docs/fuzzing.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io

import numpy as np
import pytest

import ember
from ember._src import core, fuzz, fuzz_cases, fuzz_check, fuzz_shrink, fuzz_workers
from tests.native.conftest import requires_cc

# seed 0, cases [start, start + SLICE): four parts so that pytest-xdist spreads them
SLICE = 8


@requires_cc
@pytest.mark.parametrize("part", range(4))
def test_seed0_slice(part: int) -> None:
    st = fuzz.fuzz(0, cases=SLICE, start=part * SLICE, workers=1, shrink=False, timeout=120)
    assert st.cases == SLICE
    assert st.invalid <= SLICE // 2, "the generator should mostly draw programs every path accepts"
    new = [f.title() + "\n" + f.case.repro() for f in st.findings if f.known is None]
    assert not new, "\n\n".join(new)


def test_ops_name_primitives_and_cover_the_native_op_table() -> None:
    from ember._src.native import opinfo

    opinfo.declare()
    drawn = {s.prim for s in fuzz_cases.OPS.values()}
    assert drawn <= set(core.PRIMITIVES), drawn - set(core.PRIMITIVES)
    lowered = {p.name for p in opinfo.REGISTRY}
    assert lowered - drawn - set(fuzz_cases.NOT_DRAWN) == set()
    assert set(fuzz_cases.NOT_DRAWN) <= lowered, \
        "NOT_DRAWN names a primitive the native backend no longer has"
    assert not drawn & set(fuzz_cases.NOT_DRAWN)


def test_generated_cases_cover_modes_layers_and_edges() -> None:
    gen = fuzz_cases.Generator()
    cases = [gen.case(5, i) for i in range(60)]
    assert {c.mode for c in cases} == set(fuzz_cases.MODES)
    layers = {la.kind for c in cases for la in c.layers}
    assert {"vmap", "jit", "grad", "scan"} <= layers, layers
    assert any(c.dynamic for c in cases)
    assert any(0 in a.shape for c in cases for a in c.args)
    assert any(a.ndim == 0 for c in cases for a in c.args)
    assert any(np.isnan(a).any() for c in cases for a in c.args if a.dtype.kind == "f")
    edges = fuzz_cases._values(np.random.default_rng(0), (400,), "int32", True)
    assert (edges == np.iinfo(np.int32).min).any() and (edges == np.iinfo(np.int32).max).any()
    edges = fuzz_cases._values(np.random.default_rng(0), (400,), "float32", True)
    tiny = np.finfo(np.float32).smallest_subnormal
    assert np.isnan(edges).any() and np.isneginf(edges).any() and (edges == tiny).any()
    assert (np.signbit(edges) & (edges == 0)).any() and (edges == np.finfo(np.float32).max).any()
    # the same seed and index draw the same case
    again = gen.case(5, 7)
    assert again.function_source() == cases[7].function_source()
    assert all(np.array_equal(p, q, equal_nan=True) for p, q in zip(again.args, cases[7].args))


def test_compare_tolerances() -> None:
    f32 = np.float32
    eps = float(np.finfo(f32).eps)
    one = np.array([1.0, np.nan, np.inf, -0.0], f32)
    assert fuzz_check.compare(one, one.copy(), "float32", 4) is None
    assert fuzz_check.compare(one, np.array([1 + 3 * eps, np.nan, np.inf, 0.0], f32), "float32", 4) is None
    assert "ulps" in fuzz_check.compare(one, np.array([1 + 8 * eps, np.nan, np.inf, 0.0], f32), "float32", 4)
    lost = np.array([1.0, 0.0, np.inf, 0.0], f32)
    assert fuzz_check.compare(one, lost, "float32", 4) is not None  # NaN lost
    assert fuzz_check.compare(one, np.array([1.0, np.nan, -np.inf, 0.0], f32), "float32", 4) is not None
    # an infinity against a value at the overflow edge is rounding, not a disagreement
    assert fuzz_check.compare(np.array([np.inf], f32), np.array([3.4e38], f32), "float32", 4) is None
    assert fuzz_check.compare(np.array([np.inf], f32), np.array([1.0], f32), "float32", 4) is not None
    assert fuzz_check.compare(np.array([2, 3], np.int32), np.array([2, 4], np.int32), "int32", 99) is not None
    assert fuzz_check.compare(np.zeros(2, f32), np.zeros(3, f32), "float32", 1).startswith("shape")
    assert fuzz_check.compare(np.zeros(2, f32), np.zeros(2, np.float64), "float32", 1).startswith("shape")
    # with the float64 truth: as far from it as the reference is, the result agrees; much farther, not
    t = np.array([1000.0])
    ref, near, far = (np.array([1000.0 + d], f32) for d in (0.25, -0.25, 0.5))
    assert fuzz_check.compare(near, ref, "float32", 1) is not None
    assert fuzz_check.compare(near, ref, "float32", 1, truth=t) is None
    assert fuzz_check.compare(np.array([1000.0 + 2.0], f32), ref, "float32", 1, truth=t) is not None
    assert fuzz_check.compare(far, ref, "float32", 1, truth=np.array([1000.0 + 0.25])) is not None
    # a truth stacked with the truths at perturbed arguments: their spread widens the allowance
    spread = np.array([[1000.0], [1000.5], [999.75]])
    assert fuzz_check.compare(np.array([1000.0 + 2.0], f32), ref, "float32", 1, truth=spread) is None
    assert fuzz_check.compare(np.array([1000.0 + 8.0], f32), ref, "float32", 1, truth=spread) is not None
    z = np.array([1 + 1j], np.complex64)
    assert fuzz_check.compare(z, np.array([1 + 1.5j], np.complex64), "complex64", 4) is not None
    # eigenvalues are accurate relative to the largest one: the zero eigenvalues of x x^T, x = [-6, 1, 1]
    # (38 is the other), computed in float32, are off by ~4e-6 = 0.9 ulp of 38
    got, ref = np.array([4.06e-6, -1.2e-6, 38.0], f32), np.array([4.6e-17, 0.0, 38.0], f32)
    assert fuzz_check.compare(got, ref, "float32", 26) is not None
    assert fuzz_check.compare(got, ref, "float32", 26, normwise=True) is None
    assert fuzz_check.compare(np.array([1e-3, 0.0, 38.0], f32), ref, "float32", 26, normwise=True) is not None


def _case(code: str, args: list[np.ndarray], layers: list | None = None,
          mode: str = "float64") -> fuzz_cases.Case:
    op = fuzz_cases.Op("raw", tuple(f"x{i}" for i in range(len(args))), code=code)
    return fuzz_cases.Case(mode, len(args), [op], ["v0"], layers or [], args)


@requires_cc
def test_a_crash_is_one_finding_and_the_pool_goes_on() -> None:
    crash = _case("__import__('ctypes').string_at(0) and {0}", [np.ones(2)])
    fine = _case("jnp.sin({0})", [np.linspace(-1, 1, 5)])
    pool = fuzz_workers.Pool(1, timeout=60)
    try:
        got = dict((id(c), r) for c, r in pool.map(iter([crash, fine])))
    finally:
        pool.close()
    kind, detail = got[id(crash)]
    assert kind == "crash" and "signal 11" in detail and detail.startswith("numpy"), detail
    assert got[id(fine)] is None


@requires_cc
def test_gradient_against_finite_differences() -> None:
    x = [np.array([0.3, -1.2, 2.0])]
    good = _case("jnp.sin({0}) * {0}", x, [fuzz_cases.Layer("grad")])
    assert fuzz_check.run_case(good) is None
    # the gradient with respect to one argument of a program that indexes another (.at needs an Array)
    ops = [fuzz_cases.Op("at_set", ("x0",)), fuzz_cases.Op("mul", ("v0", "x1"))]
    two = fuzz_cases.Case("float64", 2, ops, ["v1"], [fuzz_cases.Layer("grad", argnum=1)],
                          [np.array([0.5, 2.0]), np.array([1.5, -1.0])])
    assert fuzz_check.run_case(two) is None
    # a custom derivative that is twice too large: every path agrees, finite differences do not
    wrong = ("(lambda h: (h.defjvp(lambda p, t: (jnp.sin(p[0]), 2 * t[0] * jnp.cos(p[0]))), h)[1])"
             "(ember.custom_jvp(jnp.sin))({0})")
    kind, detail = fuzz_check.run_case(_case(wrong, x, [fuzz_cases.Layer("grad")]))
    assert kind == "gradient" and "finite differences" in detail


@requires_cc
def test_finite_differences_do_not_judge_a_loss_that_swamps_the_step() -> None:
    """Seed 32, case 1754: digamma(x) / softmax(digamma(x)) summed, with one row holding 0.01, is
    about 5e49; another row's perturbation of 1e-5 leaves no digit in it, so the differences are
    0.0 against the true gradient 3 trigamma(1) = pi^2 / 2 there. Not a finding; the same program
    on rows of ones alone is still checked and agrees."""
    code = "(lambda v: v / ember.nn.softmax(v, axis=-1))(lax.digamma({0}))"
    big = np.ones((4, 3))
    big[3, 1] = 0.01
    assert fuzz_check.run_case(_case(code, [big], [fuzz_cases.Layer("grad")])) is None
    ones = np.ones((2, 3))
    assert fuzz_check.run_case(_case(code, [ones], [fuzz_cases.Layer("grad")])) is None
    # a wrong derivative on the small rows is still caught
    wrong = ("(lambda h: (h.defjvp(lambda p, t: (lax.digamma(p[0]), "
             "2 * t[0] * lax.polygamma(1, p[0]))), h)[1])(ember.custom_jvp(lax.digamma))({0})")
    kind, detail = fuzz_check.run_case(_case(wrong, [ones + 0.5], [fuzz_cases.Layer("grad")]))
    assert kind == "gradient" and "finite differences" in detail


@requires_cc
def test_mismatch_and_error_are_reported() -> None:
    # a Python branch on the concrete value: eager takes one side; jit cannot trace it
    kind, detail = fuzz_check.run_case(_case("({0} if float({0}[0]) > 0 else -{0})", [np.ones(2)]))
    assert kind == "error" and "eager ran" in detail
    vm = [fuzz_cases.Layer("vmap", in_axes=(0,), size=3)]
    assert fuzz_check.run_case(_case("jnp.cos({0})", [np.zeros((3, 2))], vm)) is None


def test_minimizer_shrinks_to_the_failing_op() -> None:
    gen = fuzz_cases.Generator()
    big = next(c for c in (gen.case(11, i) for i in range(200))
               if c.mode == "float32" and len(c.ops) >= 3 and c.layers and max(a.size for a in c.args) > 2)
    target = big.ops[1].name

    def fails(c: fuzz_cases.Case) -> bool:  # a planted failure: any case that still uses the target op
        gen.avals(c, [a.shape for a in c.args]) if not c.layers else None
        return any(op.name == target for op in c.ops)

    small = fuzz_shrink.minimize(big, fails, budget=2000)
    assert [op.name for op in small.ops] == [target]
    assert small.layers == [] and small.dynamic is None
    assert all(d <= 1 for a in small.args for d in a.shape)
    assert small.nargs == len(small.args) == len(set(small.ops[0].args)), "unused arguments are dropped"


@requires_cc
def test_repro_is_runnable_and_prints_every_path() -> None:
    case = _case("jnp.exp({0}) + {1}", [np.array([0.0, 1.0]), np.array(2.0)],
                 [fuzz_cases.Layer("vmap", in_axes=(0, None), size=2)])
    case.args = [np.array([[0.0, 1.0], [-np.inf, np.nan]]), np.array(2.0)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(case.repro("title"), {})
    text = out.getvalue()
    assert "native" in text and "eager" in text and "exp" in text
    want = np.exp(case.args[0]) + 2.0
    ns: dict = {}
    exec(case.repro().split("print(")[0], ns)
    np.testing.assert_allclose(np.asarray(ns["g"](*ns["args"])), want)


def test_known_defects_are_recognized() -> None:
    """A finding of the one documented difference is recognized; a fixed defect (INT_MIN floor
    division, fixed in the reference implementation) is no longer excused."""
    big = np.array([[-3.4e38 + 1.6j]], np.complex64)
    c = _case("{0} @ {0}.T", [big], mode="complex64")
    c.ops[0] = fuzz_cases.Op("matmul", ("x0", "x0"))
    f = fuzz_check.classify(fuzz_check.Finding("mismatch", "native vs numpy: nan vs inf", c))
    assert f.known == "complex-blas-nonfinite"
    c = _case("jnp.floor_divide({0}, {1})", [np.array([-2 ** 31], np.int32), np.array([-1], np.int32)],
              mode="int32")
    c.ops[0] = fuzz_cases.Op("floordiv", ("x0", "x1"))
    assert fuzz_check.classify(fuzz_check.Finding("mismatch", "eager vs numpy: ...", c)).known is None
    f = fuzz_check.classify(fuzz_check.Finding("mismatch", "native vs numpy: ...",
                                               _case("{0}", [np.ones(1)])))
    assert f.known is None
    assert len({k for k, _, _ in fuzz_check.KNOWN}) == len(fuzz_check.KNOWN)


def test_cholesky_of_an_overflowed_gram_matrix_is_known_and_a_finite_one_is_not() -> None:
    """Seed 31's case 2552: the float32 Gram matrix of an x holding 1e30 overflows, and the
    factorizations disagree on NaN against inf (no finite answer): known. The same op on finite
    values that stay finite is not excused."""
    big = np.array([[[1.0], [1.0000000150474662e+30]]], np.float32)
    c = _case("jnp.linalg.cholesky({0} @ jnp.swapaxes({0}, -1, -2) + 9 * jnp.eye(2))", [big], mode="float32")
    c.ops[0] = fuzz_cases.Op("cholesky", ("x0",))
    f = fuzz_check.classify(fuzz_check.Finding("mismatch", "eager vs numpy: at (0, 1, 1): nan vs inf", c))
    assert f.known == "cholesky-overflow"
    c.args = [np.array([[[1.0], [2.0]]], np.float32)]
    f = fuzz_check.classify(fuzz_check.Finding("mismatch", "eager vs numpy: at (0, 1, 1): 1.0 vs 1.5", c))
    assert f.known is None


def test_float64_conditioning_is_measured_at_float64_ulps() -> None:
    """A float64 case's allowance comes from the reference at arguments moved by float64 ulps: for
    sinh(x ** 3) at 2.59 (condition number ~3 x^3 = 52) the spread is a few hundred float64 ulps of the
    result, not the ~1e-5 relative a float32-ulp move would give."""
    case = _case("jnp.sinh(x0 ** 3)", [np.array([2.59])], mode="float64")
    ns: dict = {}
    exec(fuzz_cases.HEADER + fuzz_cases.PRELUDE + case.function_source(), ns)
    t = fuzz_check._truth(case, ns)[0]
    # the truth, two runs at moved arguments, ROUNDING_RUNS with each op's result moved, one with the
    # reductions reversed
    assert t.shape == (4 + fuzz_check.ROUNDING_RUNS, 1)
    rel = float(np.max(np.abs(t[1:] - t[0]))) / abs(float(t[0, 0]))
    assert 0 < rel < 1e-12
    # a float64 native result 16 ulps off (the 2026-12-06 finding of seed 25) is inside that allowance
    b = t[0].copy()
    a = b * (1 + 16 * np.finfo(np.float64).eps)
    assert fuzz_check.compare(a, b, "float64", 8) is not None
    assert fuzz_check.compare(a, b, "float64", 8, truth=t) is None


def test_cancelling_sum_at_float32_max_is_judged_by_its_spread() -> None:
    """Seed 35, case 898 (2026-12-07): a complex64 sum whose imaginary parts are +FLT_MAX, -FLT_MAX
    and 2.31. Summed in one order the 2.31 survives, in another it is absorbed (0.0): both are float32
    sums. The truths at moved arguments spread by about FLT_MAX * eps, so 0.0 against 2.31 agrees."""
    big = float(np.finfo(np.float32).max)
    re = np.array([[[1.0, 1.0], [-np.inf, 1.0], [1.64, 1.0], [1.1754944e-38, 1.0]]], np.float32)
    im = np.array([[[0.0, 0.0], [big, 0.0], [2.31, 0.0], [-big, 0.0]]], np.float32)
    x = (re + 1j * im).astype(np.complex64)
    case = _case("jnp.sum(x0)", [x], mode="complex64")
    ns: dict = {}
    exec(fuzz_cases.HEADER + fuzz_cases.PRELUDE + case.function_source(), ns)
    t = fuzz_check._truth(case, ns)[0]
    assert t.shape == (4 + fuzz_check.ROUNDING_RUNS,)
    assert abs(t[0].imag - 2.31) < 1e-6 and float(np.max(np.abs(t[1:].imag - t[0].imag))) > 1e30
    a = np.complex64(-np.inf + 0.0j)
    b = np.complex64(-np.inf + 2.31j)
    assert fuzz_check.compare(a, b, "complex64", 10) is not None
    assert fuzz_check.compare(a, b, "complex64", 10, truth=t) is None


def test_rounding_of_each_op_widens_the_allowance() -> None:
    """Seed 37, case 1704 (2026-12-07): digamma(erf(x)) at x = -2.92 in float32, inside a scan.
    erf(x) = -0.99996364 is 3.6e-5 from digamma's pole at -1, so one float32 ulp of erf moves the
    result by about 0.3% (native's erf was 2 ulps off: -27593.7 against NumPy's -27503.2). Moving the
    arguments shows no such spread (erf is flat there); the truth's runs that move every op's result,
    the loop body's included, do. A result twice too large is still a mismatch."""
    case = _case("_scan(lambda v: lax.digamma(lax.erf(v)))({0})",
                 [np.array([[-2.92], [0.5]], np.float32)], mode="float32")
    ns: dict = {}
    exec(fuzz_cases.HEADER + fuzz_cases.PRELUDE + case.function_source(), ns)
    t = fuzz_check._truth(case, ns)[0]
    assert t.shape == (4 + fuzz_check.ROUNDING_RUNS, 2, 1)
    assert float(np.max(np.abs(t[1:3, 0] - t[0, 0]))) < 1.0  # moved arguments: no spread
    assert float(np.max(np.abs(t[3:-1, 0] - t[0, 0]))) > 20.0  # moved results of each op
    # two float32 results from SciPy alone: digamma of erf correctly rounded to float32, and of
    # erf two float32 ulps away (as native's was)
    special = pytest.importorskip("scipy.special")
    e = np.float32(special.erf(-2.92))
    e2 = np.nextafter(np.nextafter(e, np.float32(0)), np.float32(0))
    rest = float(t[0, 1, 0])
    b = np.array([[special.digamma(np.float64(e))], [rest]], np.float32)
    a = np.array([[special.digamma(np.float64(e2))], [rest]], np.float32)
    assert abs(float(a[0, 0] - b[0, 0])) > 50.0
    assert fuzz_check.compare(a, b, "float32", 70) is not None
    assert fuzz_check.compare(a, b, "float32", 70, truth=t) is None
    assert fuzz_check.compare(2 * b, b, "float32", 70, truth=t) is not None


@requires_cc
def test_finite_differences_extrapolate_the_step() -> None:
    """Seed 37, case 1878: the gradient of a sum of lgamma of a product chain whose entries reach
    -198 (lgamma's third derivative is large there): the central difference at h = 1e-5 was 2001.053
    against the gradient 2000.861 (JAX's too), at 1e-6 2000.863. The Richardson extrapolation of the
    two agrees; a derivative twice too large is still caught."""
    x = np.array([[[-2.62, 1.0, 1.0], [-1.6, 1.0, 1.0], [1.95, -0.76, -2.43]],
                  [[1.0, 1.0, 1.0], [-1.5, 1.31, 2.8], [0.07, -0.54, 1.66]]])
    gram = "(lambda v: v @ jnp.swapaxes(v, -1, -2))({0} @ jnp.swapaxes({0}, -1, -2))"
    case = _case(f"lax.lgamma({gram})", [x], [fuzz_cases.Layer("grad")])
    case.seed, case.index = 37, 1878  # the coordinates the check draws: (0, 1, 1) among them
    assert fuzz_check.run_case(case) is None
    wrong = ("(lambda h: (h.defjvp(lambda p, t: (lax.lgamma(p[0]), 2 * t[0] * lax.digamma(p[0]))), h)[1])"
             f"(ember.custom_jvp(lax.lgamma))({gram})")
    kind, detail = fuzz_check.run_case(_case(wrong, [x], [fuzz_cases.Layer("grad")]))
    assert kind == "gradient" and "finite differences" in detail


@requires_cc
def test_complex_division_by_a_signed_zero_is_known() -> None:
    """Seed 37, case 606: x0 / (x1 / x0) with x0 = inf + 2.8j divides by -0 - 0j. The native backend
    gives -inf - inf j, as JAX gives for that division; the NumPy backend inf + inf j. The finding
    is the known difference; the same program on finite values is no finding."""
    x0 = np.array([np.inf + 2.8j, 1.5 - 0.5j], np.complex64)
    x1 = np.array([-2.03 - 1.08j, 0.25 + 2j], np.complex64)
    c = _case("{0} / ({1} / {0})", [x0, x1], mode="complex64")
    c.ops[0] = fuzz_cases.Op("div", ("x0", "x1"), code="{0} / ({1} / {0})")
    kind, detail = fuzz_check.run_case(c)
    assert kind == "mismatch" and "inf" in detail
    native = np.asarray(ember.jit(lambda a, b: a / (b / a))(x0, x1))
    assert native[0] == complex(-np.inf, -np.inf)
    jax = pytest.importorskip("jax")
    a, z = np.complex64(complex(np.inf, 2.8)), np.complex64(complex(-0.0, -0.0))  # the last division
    assert complex(np.asarray(jax.jit(lambda a, b: a / b)(a, z))) == complex(-np.inf, -np.inf)
    assert complex(np.asarray(ember.jit(lambda a, b: a / b)(a, z))) == complex(-np.inf, -np.inf)
    assert fuzz_check.classify(fuzz_check.Finding(kind, detail, c)).known == "complex-div-signed-zero"
    fine = _case("{0} / ({1} / {0})", [x0[1:], x1[1:]], mode="complex64")
    assert fuzz_check.run_case(fine) is None


def test_an_overflow_that_the_reduction_order_decides_is_judged_by_the_reversed_run() -> None:
    """Seed 40, case 1882 (2026-12-07): arcsinh(prod([DBL_MAX, 2.7, -0.23])) in float64. Left to right
    the product overflows (-inf); in another order it is -1.116e308 and arcsinh gives -709.9994. A
    reduction's order is unspecified: the truth's run with reversed reductions gives the finite value,
    so native's -709.9994 agrees with NumPy's -inf; +709.9994 or +inf does not."""
    x = np.array([[[np.finfo(np.float64).max, 2.7, -0.23]]])
    case = _case("jnp.arcsinh(jnp.prod({0}, axis=2))", [x], mode="float64")
    ns: dict = {}
    exec(fuzz_cases.HEADER + fuzz_cases.PRELUDE + case.function_source(), ns)
    t = fuzz_check._truth(case, ns)[0]
    assert np.isneginf(t[0, 0, 0])
    finite = float(np.arcsinh(2.7 * -0.23 * np.finfo(np.float64).max))
    assert abs(float(t[-1, 0, 0]) - finite) < 1e-9  # the reversed run
    b = np.array([[-np.inf]])
    assert fuzz_check.compare(np.array([[finite]]), b, "float64", 9) is not None
    assert fuzz_check.compare(np.array([[finite]]), b, "float64", 9, truth=t) is None
    assert fuzz_check.compare(np.array([[-finite]]), b, "float64", 9, truth=t) is not None
    assert fuzz_check.compare(np.array([[np.inf]]), b, "float64", 9, truth=t) is not None


def test_an_infinity_whose_sign_the_last_bits_decide_is_judged_by_the_moved_runs() -> None:
    """Seed 40, case 302 (2026-12-07): sin(z) of a complex64 z = 134097.28 + 143700.72j (a chain of
    products): cosh(143700) overflows, so the imaginary part is cos(134097.28) * inf, and
    cos(134097.28) = 0.030 changes sign four float32 ulps of the real part away. Native's products
    landed 3 ulps off (inf - inf j against NumPy's inf + inf j). A run of the truth with each op's
    result moved gives -inf too, so the sign is not judged; a NaN still is."""
    def c(re, im):
        z = np.empty(np.shape(re), np.complex64)
        z.real, z.imag = re, im
        return z
    x = c(np.array([2.13, 2.01, -0.18], np.float32), np.array([2.13, 2.81, -0.68], np.float32))
    dot = "jnp.tensordot({0}, {0}, axes=1)"
    sq = f"jnp.tensordot({dot}, {dot}, axes=0)"
    code = f"jnp.sin(jnp.tensordot({sq}, {sq}, axes=0))"
    case = dataclasses.replace(_case(code, [x], mode="complex64"), seed=40, index=302)
    ns: dict = {}
    exec(fuzz_cases.HEADER + fuzz_cases.PRELUDE + case.function_source(), ns)
    t = fuzz_check._truth(case, ns)[0]
    assert np.isposinf(t[0].imag) and np.isneginf(t[1:].imag).any()
    a, b = np.complex64(complex(np.inf, -np.inf)), np.complex64(complex(np.inf, np.inf))
    assert fuzz_check.compare(a, b, "complex64", 15) is not None
    assert fuzz_check.compare(a, b, "complex64", 15, truth=t) is None
    nan_part = np.complex64(complex(np.inf, np.nan))
    assert fuzz_check.compare(nan_part, b, "complex64", 15, truth=t) is not None
