"""Running one fuzz case on every path (eager, ``jit(backend="numpy")``, native ``jit``) in this
process and comparing the results at per-op ulp budgets, plus finite differences for float64
gradients; and the table of known open defects a finding is classified against.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ember._src.fuzz_cases import AD_LAYERS, HEADER, OPS, PRELUDE, Case, OpSpec


def _x64(on: bool) -> Any:
    """64-bit dtypes on or off inside a ``with`` block (nothing happens when already so)."""
    from ember._src import flags
    return flags.override("jax_enable_x64", on)


# -- running and comparing one case -------------------------------------------------------------

@dataclasses.dataclass
class Finding:
    """A case that failed: ``kind`` is crash / timeout / error / mismatch / gradient; ``detail``
    says which paths disagree and how."""

    kind: str
    detail: str
    case: Case
    known: str | None = None

    def title(self) -> str:
        return f"ember fuzz finding [{self.kind}] {self.detail.splitlines()[0]} (mode {self.case.mode}, " \
               f"seed {self.case.seed}, case {self.case.index})"


def _budget(case: Case) -> float:
    """The case's error budget in ulps: the sum over its ops (sums count per element), doubled per
    differentiation layer and for float32 reassociation in fused kernels."""
    b = 2.0
    for op in case.ops:
        spec = OPS.get(op.name, OpSpec(op.name, "", 1, "", 4.0))
        b += spec.ulps * (max(1, max(a.size for a in case.args)) if spec.per_element else 1)
    n_ad = sum(la.kind in AD_LAYERS for la in case.layers)
    return b * 4.0 ** n_ad


def compare(a: Any, b: Any, mode: str, budget: float, truth: Any = None, min_eps: float = 0.0,
            normwise: bool = False) -> str | None:
    """None when result ``a`` agrees with the reference ``b``: same shape and dtype, equal integers
    and booleans, the same NaN and infinity positions, finite floats within ``budget`` ulps
    (relative to each element, with the same budget as an absolute floor; ``normwise``: relative
    to the largest finite magnitude of ``b``, as eigenvalue errors are bounded). With ``truth`` (the
    reference program evaluated in float64), a finite element outside the budget still agrees when
    ``a`` is at most four times as far from the truth as ``b`` is (an ill-conditioned program
    amplifies the rounding of both paths alike)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    t = None if truth is None else np.asarray(truth)
    if t is not None and t.shape != a.shape and t.shape[1:] != a.shape:
        t = None
    if a.dtype.kind == "c":
        tr, ti = (None, None) if t is None else (t.real, t.imag)
        return (compare(a.real, b.real, mode, budget, tr, min_eps, normwise)
                or compare(a.imag, b.imag, mode, budget, ti, min_eps, normwise))
    if a.dtype.kind != "f":
        bad = a != b
        if bad.any():
            i = tuple(int(v) for v in np.argwhere(bad)[0])
            return f"value at {i}: {a[i]!r} vs {b[i]!r}"
        return None
    with np.errstate(all="ignore"):
        na, nb = np.isnan(a), np.isnan(b)
        top = float(np.finfo(a.dtype).max) / 2
        tol = budget * max(float(np.finfo(a.dtype).eps), min_eps)
        fa, fb = np.isfinite(a), np.isfinite(b)
        both = fa & fb
        err = np.abs(a.astype(np.float64) - b.astype(np.float64))
        floor = 1.0
        if normwise and both.any():
            floor = max(floor, float(np.max(np.abs(b[both]))))
        lim = tol * np.maximum(np.maximum(np.abs(a), np.abs(b)).astype(np.float64), floor)
        fin_bad = both & (err > lim)
        if t is not None:
            t64 = t.astype(np.float64)
            spread = 0.0
            if t.shape != a.shape:  # the truth, then the truths at perturbed arguments
                spread = np.max(np.abs(t64[1:] - t64[0]), axis=0)
                t64 = t64[0]
            ea, eb = np.abs(a - t64), np.abs(b - t64)
            fin_bad &= ~(np.isfinite(t64) & (ea <= 4 * eb + 8 * spread + lim))
        bad = (na != nb) | fin_bad
        # an infinity against a finite value: a mismatch unless the finite one is at the overflow edge
        inf_mis = (~na & ~nb & (fa != fb)) & ~(np.abs(np.where(fa, a, b)) > top)
        same_inf = ~fa & ~fb & ~na & ~nb & (a != b)
        if t is not None and t.shape != a.shape:
            # an infinity's sign, or an infinity against a finite value, that a run of the truth
            # reproduces (rounding moved, a reduction reversed): the program decides it by its last
            # bits or by an unspecified order
            runs = t.astype(np.float64)
            same = np.any(runs == a, axis=0)
            close = np.abs(runs - a) <= 4 * tol * np.maximum(np.abs(a), 1.0)
            near = np.any(np.isfinite(runs) & close, axis=0)
            reproduced = np.where(np.isinf(a), same, np.isfinite(a) & near)
            inf_mis &= ~reproduced
            same_inf &= ~reproduced
        bad |= inf_mis | same_inf
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        scale = float(np.finfo(a.dtype).eps) * max(abs(float(a[i])), abs(float(b[i])), 1e-300)
        ulps = float(err[i]) / scale if both[i] else float("inf")
        return f"value at {i}: {a[i]!r} vs {b[i]!r} ({ulps:.3g} ulps, budget {budget:.3g})"
    return None


def _tree_compare(x: Any, y: Any, mode: str, budget: float, truth: Any = None,
                  min_eps: float = 0.0, normwise: bool = False) -> str | None:
    import ember
    lx, ly = ember.tree_util.tree_leaves(x), ember.tree_util.tree_leaves(y)
    if len(lx) != len(ly):
        return f"{len(lx)} outputs vs {len(ly)}"
    lt = truth if truth is not None and len(truth) == len(lx) else [None] * len(lx)
    for k, (p, q, t) in enumerate(zip(lx, ly, lt)):
        msg = compare(p, q, mode, budget, t, min_eps, normwise)
        if msg:
            return f"output {k}: {msg}"
    return None


def _fd_check(case: Case, ns: dict) -> str | None:
    """float64, a smooth program, no edge values, a stack of ``grad`` [+ jit/checkpoint] (or only
    jit/checkpoint: then the native ``jit(grad)`` of the summed outputs with respect to the first
    argument is checked): the gradient against central finite differences at up to four
    coordinates."""
    if case.mode != "float64":
        return None
    has_grad = bool(case.layers) and case.layers[0].kind == "grad"
    if any(la.kind not in ("jit", "checkpoint") for la in case.layers[int(has_grad):]):
        return None
    if not all(op.code is not None or OPS[op.name].smooth for op in case.ops):  # hand-written ops: smooth
        return None
    if any(not np.all(np.isfinite(a)) or np.any((a != 0) & (np.abs(a) < 1e-100)) or np.any(np.abs(a) > 1e3)
           for a in case.args):
        return None
    import ember
    f = ns["f"]
    k = case.layers[0].argnum if has_grad else 0
    g = ns["g"] if has_grad else ember.jit(ember.grad(lambda *a: ns["_loss"](f(*a)), argnums=0))
    with np.errstate(all="ignore"):
        grad = np.asarray(g(*[ember.numpy.asarray(a) for a in case.args]))
        if grad.shape != case.args[k].shape or not np.all(np.isfinite(grad)):
            return None
        loss = ember.jit(lambda *a: ns["_loss"](f(*a)), backend="numpy")
        rng = np.random.default_rng([case.seed, case.index, 7])
        x = case.args[k]
        # the rounding of the loss itself, over the smaller step: a loss of 1e49 (one row's
        # digamma/softmax) leaves no digit of another row's perturbation, and the differences
        # come out 0.0 whatever the gradient is
        noise = 8 * float(np.finfo(np.float64).eps) * abs(float(loss(*case.args))) / 2e-6
        for _ in range(min(4, x.size)):
            i = tuple(int(rng.integers(d)) for d in x.shape)

            def fd(h: float, i: tuple = i) -> float:
                up, dn = list(case.args), list(case.args)
                up[k] = x.copy()
                dn[k] = x.copy()
                up[k][i] += h
                dn[k][i] -= h
                return (float(loss(*up)) - float(loss(*dn))) / (2 * h)

            d1, d2 = fd(1e-5), fd(1e-6)
            if not (np.isfinite(d1) and abs(d1 - d2) <= 1e-4 * max(1.0, abs(d1))):
                continue  # not smooth enough here to judge
            if not noise <= 1e-5 * max(1.0, abs(d1), abs(float(grad[i]))):
                continue  # the loss's magnitude swamps the steps: differences cannot judge
            # Richardson: the h^2 errors of the two central differences cancel (at h = 1e-5 the
            # difference of a sum of lgamma near -198 was still 1e-4 off the gradient)
            d = (100 * d2 - d1) / 99
            if abs(grad[i] - d) > 1e-5 * max(1.0, abs(d)) + noise:
                return f"grad at {i}: {grad[i]!r} vs finite differences {d!r}"
    return None


def run_case(case: Case, stage: Callable[[str], None] = lambda s: None) -> tuple[str, str] | None:
    """Run a case on every path in this process; ``(kind, detail)`` of a finding, or None.
    ``("invalid", reason)`` when every path rejects the program the same way."""
    with _x64(case.x64):
        return _run_case(case, stage)


def _run_case(case: Case, stage: Callable[[str], None]) -> tuple[str, str] | None:
    import ember
    ns: dict[str, Any] = {}
    exec(HEADER + PRELUDE + case.function_source(), ns)
    g = ns["g"]
    paths: dict[str, Callable] = {
        "numpy": eval(case.jit_source("numpy"), ns),
        "eager": lambda *a: g(*[ember.numpy.asarray(x) for x in a]),
        "native": eval(case.jit_source(None), ns),
    }
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, fn in paths.items():
        stage(name)
        try:
            with np.errstate(all="ignore"):
                results[name] = ember.tree_util.tree_map(np.asarray, fn(*case.args))
        except Exception as e:  # noqa: BLE001 -- every failure is recorded and compared
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    if case.dynamic is not None and "eager" not in errors and errors.keys() == {"numpy", "native"} \
            and errors["numpy"].split(":")[0] == errors["native"].split(":")[0]:
        return "invalid", "dynamic axes: " + errors["native"]  # a program jit cannot trace symbolically
    if len(errors) == len(paths):
        kinds = {e.split(":")[0] for e in errors.values()}
        return ("invalid", errors["eager"]) if len(kinds) == 1 else ("error", _fmt(errors))
    if errors:
        return "error", _fmt(errors)
    budget = _budget(case)
    truth: Any = None
    # a float64 program that computes in float32 on the way (astype, bitcast) is judged in float32 ulps
    narrow = any(op.name in ("to_f", "bitcast") for op in case.ops)
    min_eps = float(np.finfo(np.float32).eps) if narrow else 0.0
    normwise = any(OPS[op.name].normwise for op in case.ops if op.name in OPS)
    for a, b in (("native", "numpy"), ("eager", "numpy")):
        msg = _tree_compare(results[a], results[b], case.mode, budget, truth, min_eps, normwise)
        if msg and truth is None and case.mode in ("float32", "complex64", "float64") and "ulps" in msg:
            stage("truth")
            truth = _truth(case, ns)
            msg = _tree_compare(results[a], results[b], case.mode, budget, truth, min_eps, normwise)
        if msg:
            return "mismatch", f"{a} vs {b}: {msg}"
    stage("fd")
    msg = _fd_check(case, ns)
    if msg:
        return "gradient", msg
    return None


def _truth(case: Case, ns: dict) -> list | None:
    """Per output leaf, the reference backend's result for the arguments in float64 / complex128,
    stacked with its results for the arguments moved by up to two ulps of the case's float type, and
    for runs whose every intermediate float value is moved so (the spread says how much the program
    amplifies rounding: of its inputs, and of each op's result, as an ill-conditioned op after
    another amplifies the first one's last-bit error, ``digamma(erf(x))`` near ``erf(x) = -1``; a
    float64 case has no wider type, so its "truth" is the reference itself and only the spread
    widens the allowance); None when the program does not run or changes meaning."""
    import ember
    rng = np.random.default_rng([case.seed, case.index, 3])
    eps = float(np.finfo(np.float64 if case.mode == "float64" else np.float32).eps)
    wide = [a.astype(np.complex128 if a.dtype.kind == "c" else np.float64) for a in case.args]
    runs = [wide] + [[_moved(w, rng, eps) for w in wide] for _ in range(2)]
    try:
        with _x64(True), np.errstate(all="ignore"):
            jf = ember.jit(ns["g"], backend="numpy")
            outs = [[np.asarray(x) for x in ember.tree_util.tree_leaves(jf(*args))] for args in runs]
            for _ in range(ROUNDING_RUNS):
                with _rounding(rng, eps):  # (a new function: a jit of g would reuse its first build)
                    jr = ember.jit(lambda *a: ns["g"](*a), backend="numpy")
                    outs.append([np.asarray(x) for x in ember.tree_util.tree_leaves(jr(*wide))])
            with _reversed_reductions():
                jr = ember.jit(lambda *a: ns["g"](*a), backend="numpy")
                outs.append([np.asarray(x) for x in ember.tree_util.tree_leaves(jr(*wide))])
            return [np.stack(leaves) for leaves in zip(*outs)]
    except Exception:  # noqa: BLE001 -- no truth to judge by; the plain comparison stands
        return None


# Runs of the truth with every op's result moved (_rounding). Two missed a sign that four ulps
# decide: sin(a + bi) with cosh(b) infinite and cos(a) = 0.03 at a = 134097.28 (seed 40, case 302).
ROUNDING_RUNS = 6


@contextlib.contextmanager
def _wrapped_impls(wrap: Callable[[Callable], Callable],
                   names: tuple[str, ...] | None = None) -> Iterator[None]:
    """Meanwhile, the reference implementation of each primitive named (every one: None) is
    ``wrap(impl)``; the originals come back on exit."""
    from ember._src import core
    prims = core.PRIMITIVES.values() if names is None else \
        [p for n in names if (p := core.PRIMITIVES.get(n)) is not None]
    saved = {p: p.impl for p in prims if p.impl is not None}
    try:
        for p, impl in saved.items():
            p.impl = wrap(impl)
        yield
    finally:
        for p, impl in saved.items():
            p.impl = impl


def _reversed_reductions() -> contextlib.AbstractContextManager:
    """The reference's sums and products, meanwhile, fold their operands in the reverse order: the
    order of a reduction is unspecified, and where it overflows it decides between a finite result
    and an infinity (``prod([DBL_MAX, 2.7, -0.23])`` is -inf left to right, -1.1e308 right to left:
    seed 40, case 1882)."""
    def reversed_impl(impl: Callable) -> Callable:
        def run(x: Any, *rest: Any, **params: Any) -> Any:
            axes = tuple(params.get("axes") or ())
            return impl(np.flip(np.asarray(x), axis=axes) if axes else x, *rest, **params)
        return run
    return _wrapped_impls(reversed_impl, ("reduce_sum", "reduce_prod"))


def _rounding(rng: np.random.Generator, eps: float) -> contextlib.AbstractContextManager:
    """Every primitive's reference implementation, meanwhile, returns its float results moved by
    up to two ``eps`` relative (:func:`_moved`): a rounding error at each op, loop bodies included."""
    def move(o: Any) -> Any:
        if isinstance(o, (tuple, list)):
            return type(o)(move(x) for x in o)
        a = np.asarray(o)
        return _moved(a, rng, eps).astype(a.dtype) if a.dtype.kind in "fc" and a.size else o

    return _wrapped_impls(lambda impl: lambda *args, **params: move(impl(*args, **params)))


def _moved(w: np.ndarray, rng: np.random.Generator, eps: float) -> np.ndarray:
    """``w`` with each float (each real and imaginary part) moved by up to two ``eps`` relative, by
    continuous amounts (integer ones moved two equal terms alike often enough, 1 in 25 per run, that
    a sum of +-FLT_MAX and 2.31 kept its exact cancellation and showed no spread), the parts of a
    complex value apart (a complex product would make ``-inf * 0`` a NaN imaginary part)."""
    if w.dtype.kind != "c":
        return w * (1 + eps * rng.uniform(-2, 2, w.shape))
    out = np.empty_like(w)
    out.real = w.real * (1 + eps * rng.uniform(-2, 2, w.shape))
    out.imag = w.imag * (1 + eps * rng.uniform(-2, 2, w.shape))
    return out


def _fmt(errors: dict[str, str]) -> str:
    return "; ".join(f"{k} raised {v}" for k, v in errors.items()) + \
        "; " + ", ".join(k for k in ("numpy", "eager", "native") if k not in errors) + " ran"


# -- known open defects -------------------------------------------------------------------------

def _ops_of(case: Case) -> set[str]:
    return {op.name for op in case.ops}


# (id, what it is, predicate over a finding). A finding that matches is reported as known, not as a
# failure, so the CI slice stays green while the defect is open; remove the row with the fix.
KNOWN: list[tuple[str, str, Callable[[Finding], bool]]] = [
    ("complex-blas-nonfinite",
     "complex products through BLAS ?gemm give NaN where NumPy's loop gives an infinity (the BLAS scales "
     "by alpha = 1 + 0i, and 0 * inf is NaN): a documented difference (docs/reliability.md)",
     lambda f: f.kind == "mismatch" and f.case.mode == "complex64" and "nan" in f.detail
     and bool(_ops_of(f.case) & {"matmul", "gram", "vdot"})
     and any(not np.all(np.isfinite(a)) or np.any(np.abs(a) > 1e18) for a in f.case.args)),
    ("cholesky-overflow",
     "the Cholesky factor of a Gram matrix whose entries overflow: infinities subtracted in a "
     "different order give NaN on one path and an infinity on another; no finite answer exists "
     "(docs/reliability.md)",
     lambda f: f.kind == "mismatch" and "cholesky" in _ops_of(f.case)
     and ("nan" in f.detail or "inf" in f.detail)
     and any(np.any(np.abs(np.asarray(a, np.float64)) > 1e18) or not np.all(np.isfinite(a))
             for a in f.case.args)),
    ("complex-div-signed-zero",
     "a complex division by a zero whose sign is set: the native backend and JAX give the infinity the "
     "zero divisor's sign (C Annex G), the NumPy backend's reference does not (docs/reliability.md)",
     lambda f: f.kind == "mismatch" and f.case.mode == "complex64" and "inf" in f.detail
     and "div" in _ops_of(f.case) and any(not np.all(np.isfinite(a)) for a in f.case.args)),
]


def classify(f: Finding) -> Finding:
    """Set ``f.known`` to the id of the first row of :data:`KNOWN` that matches it."""
    for key, _, pred in KNOWN:
        try:
            if pred(f):
                f.known = key
                return f
        except Exception:  # noqa: BLE001
            pass
    return f
