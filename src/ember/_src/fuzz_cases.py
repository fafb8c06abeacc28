"""The fuzzer's cases (:mod:`ember._src.fuzz`): the op table, random values with edge cases, and
the generator of random programs wrapped in random transformation layers. A :class:`Case` is data:
its program is Python source, so what a worker runs is exactly what a repro prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

MODES = ("float32", "float64", "int32", "bool", "complex64")
_DTYPE = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "bool": np.bool_,
          "complex64": np.complex64}
_KIND = {"float32": "f", "float64": "f", "int32": "i", "bool": "b", "complex64": "c"}


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One op the generator draws: the primitive it exercises (a name of ``core.PRIMITIVES``), the
    operand kinds it accepts (``f`` float, ``c`` complex, ``i`` int, ``b`` bool), its source
    template (``{0}``, ``{1}`` the operands, ``{axis}`` a drawn axis), its error budget in ulps of
    the mode's float type (``n``: times the operand's size, for sums) and whether it is smooth
    (finite differences apply)."""

    prim: str
    kinds: str
    arity: int
    template: str
    ulps: float = 1.0
    per_element: bool = False
    smooth: bool = True
    axis: bool = False
    normwise: bool = False  # its error is bounded relative to the largest output (eigenvalues), not each


def _u(prim: str, kinds: str, template: str, ulps: float = 1.0, smooth: bool = True) -> OpSpec:
    return OpSpec(prim, kinds, 1, template, ulps, smooth=smooth)


def _b(prim: str, kinds: str, template: str, ulps: float = 1.0, smooth: bool = True) -> OpSpec:
    return OpSpec(prim, kinds, 2, template, ulps, smooth=smooth)


def _r(prim: str, kinds: str, template: str, ulps: float = 1.0, per_element: bool = True,
       smooth: bool = True) -> OpSpec:
    return OpSpec(prim, kinds, 1, template, ulps, per_element=per_element, smooth=smooth, axis=True)


# name -> spec. The ulp budgets are the documented bounds of the native math functions with slack
# (docs/fuzzing.md); an op whose result is exact on every path (movement, comparisons) costs 0.
OPS: dict[str, OpSpec] = {
    # elementwise, one operand
    "neg": _u("neg", "fcib", "-{0}", 0),
    "abs": _u("abs", "fci", "jnp.abs({0})", 1, smooth=False),
    "sign": _u("sign", "fi", "jnp.sign({0})", 0, smooth=False),
    "square": _u("integer_pow", "fci", "jnp.square({0})", 1),
    "cube": _u("integer_pow", "fi", "lax.integer_pow({0}, 3)", 2),
    "exp": _u("exp", "fc", "jnp.exp({0})", 4),
    "exp2": _u("exp2", "f", "jnp.exp2({0})", 4),
    "expm1": _u("expm1", "f", "jnp.expm1({0})", 4),
    "log": _u("log", "fc", "jnp.log({0})", 4),
    "log1p": _u("log1p", "f", "jnp.log1p({0})", 4),
    "sqrt": _u("sqrt", "fc", "jnp.sqrt({0})", 2),
    "rsqrt": _u("rsqrt", "f", "lax.rsqrt({0})", 4),
    "cbrt": _u("cbrt", "f", "jnp.cbrt({0})", 4),
    "sin": _u("sin", "fc", "jnp.sin({0})", 4),
    "cos": _u("cos", "fc", "jnp.cos({0})", 4),
    "tan": _u("tan", "f", "jnp.tan({0})", 8),
    "tanh": _u("tanh", "fc", "jnp.tanh({0})", 4),
    "sinh": _u("sinh", "f", "jnp.sinh({0})", 4),
    "cosh": _u("cosh", "f", "jnp.cosh({0})", 4),
    "arctan": _u("atan", "f", "jnp.arctan({0})", 4),
    "arcsinh": _u("asinh", "f", "jnp.arcsinh({0})", 4),
    "arcsin": _u("asin", "f", "jnp.arcsin({0})", 4),
    "arctanh": _u("atanh", "f", "jnp.arctanh({0})", 4),
    "arccos": _u("acos", "f", "jnp.arccos({0})", 4),
    "arccosh": _u("acosh", "f", "jnp.arccosh({0})", 4),
    "erfc": _u("erfc", "f", "lax.erfc({0})", 8),
    "erf_inv": _u("erf_inv", "f", "lax.erf_inv({0})", 16),
    "digamma": _u("digamma", "f", "lax.digamma({0})", 64),
    "bitcast": _u("bitcast_convert_type", "i", "lax.bitcast_convert_type({0}, jnp.float32)", 0, smooth=False),
    "complex": _b("complex", "f", "lax.complex({0}, {1})", 0),
    "sigmoid": _u("logistic", "f", "ember.nn.sigmoid({0})", 4),
    "erf": _u("erf", "f", "lax.erf({0})", 4),
    "lgamma": _u("lgamma", "f", "lax.lgamma({0})", 64),
    "floor": _u("floor", "f", "jnp.floor({0})", 0, smooth=False),
    "ceil": _u("ceil", "f", "jnp.ceil({0})", 0, smooth=False),
    "round": _u("round", "f", "jnp.round({0})", 0, smooth=False),
    "isfinite": _u("is_finite", "f", "jnp.isfinite({0})", 0, smooth=False),
    "conj": _u("conj", "c", "jnp.conj({0})", 0),
    "real": _u("real", "c", "jnp.real({0})", 0),
    "imag": _u("imag", "c", "jnp.imag({0})", 0),
    "invert": _u("not", "ib", "~{0}", 0, smooth=False),
    "popcount": _u("population_count", "i", "lax.population_count({0})", 0, smooth=False),
    "to_f": _u("convert_element_type", "ibf", "{0}.astype(jnp.float32)", 1, smooth=False),
    "to_i": _u("convert_element_type", "bi", "{0}.astype(jnp.int32)", 0, smooth=False),
    "clip": _u("max", "fi", "jnp.clip({0}, -2, 2)", 0, smooth=False),
    # elementwise, two operands (broadcasting)
    "add": _b("add", "fci", "{0} + {1}", 1),
    "sub": _b("sub", "fci", "{0} - {1}", 1),
    "mul": _b("mul", "fcib", "{0} * {1}", 1),
    "div": _b("div", "fc", "{0} / {1}", 2),
    "max": _b("max", "fib", "jnp.maximum({0}, {1})", 0, smooth=False),
    "min": _b("min", "fib", "jnp.minimum({0}, {1})", 0, smooth=False),
    "pow": _b("pow", "f", "jnp.power({0}, {1})", 16),
    "atan2": _b("atan2", "f", "jnp.arctan2({0}, {1})", 4),
    "rem": _b("rem", "fi", "jnp.remainder({0}, {1})", 1, smooth=False),
    "floordiv": _b("div", "fi", "jnp.floor_divide({0}, {1})", 1, smooth=False),
    "nextafter": _b("nextafter", "f", "jnp.nextafter({0}, {1})", 0, smooth=False),
    "lt": _b("lt", "fib", "{0} < {1}", 0, smooth=False),
    "le": _b("le", "fi", "{0} <= {1}", 0, smooth=False),
    "gt": _b("gt", "fi", "{0} > {1}", 0, smooth=False),
    "ge": _b("ge", "fib", "{0} >= {1}", 0, smooth=False),
    "eq": _b("eq", "fcib", "{0} == {1}", 0, smooth=False),
    "ne": _b("ne", "fcib", "{0} != {1}", 0, smooth=False),
    "and": _b("and", "ib", "{0} & {1}", 0, smooth=False),
    "or": _b("or", "ib", "{0} | {1}", 0, smooth=False),
    "xor": _b("xor", "ib", "{0} ^ {1}", 0, smooth=False),
    "shl": _b("shift_left", "i", "jnp.left_shift({0}, {1})", 0, smooth=False),
    "shr": _b("shift_right_arithmetic", "i", "jnp.right_shift({0}, {1})", 0, smooth=False),
    "shrl": _b("shift_right_logical", "i", "lax.shift_right_logical({0}, {1})", 0, smooth=False),
    "where": _b("select_n", "fi", "jnp.where({0} > {1}, {0}, {1})", 0, smooth=False),
    "bwhere": _b("select_n", "b", "jnp.where({0}, {1}, ~{1})", 0, smooth=False),
    # reductions and scans along a drawn axis
    "sum": _r("reduce_sum", "fci", "jnp.sum({0}, axis={axis})", 1),
    "sum_all": _r("reduce_sum", "fcib", "jnp.sum({0})", 1),
    "prod": _r("reduce_prod", "fi", "jnp.prod({0}, axis={axis})", 1),
    "mean": _r("reduce_sum", "fc", "jnp.mean({0}, axis={axis}, keepdims=True)", 1),
    "rmax": _r("reduce_max", "fib", "jnp.max({0}, axis={axis}, initial=-7)", 0, False, smooth=False),
    "rmin": _r("reduce_min", "fi", "jnp.min({0}, axis={axis}, initial=7)", 0, False, smooth=False),
    "argmax": _r("argmax", "fi", "jnp.argmax({0}, axis={axis})", 0, False, smooth=False),
    "argmin": _r("argmin", "fi", "jnp.argmin({0}, axis={axis})", 0, False, smooth=False),
    "any": _r("reduce_or", "b", "jnp.any({0}, axis={axis})", 0, False, smooth=False),
    "all": _r("reduce_and", "b", "jnp.all({0}, axis={axis})", 0, False, smooth=False),
    "logsumexp": _r("reduce_max", "f", "ember.nn.logsumexp({0}, axis={axis})", 4),
    "softmax": _r("exp", "f", "ember.nn.softmax({0}, axis={axis})", 8),
    "cumsum": _r("cumsum", "fi", "jnp.cumsum({0}, axis={axis})", 1),
    "cumprod": _r("cumprod", "fi", "jnp.cumprod({0}, axis={axis})", 1),
    "cummin": _r("cummin", "fi", "lax.cummin({0}, axis={axis})", 0, False, smooth=False),
    "cummax": _r("cummax", "fi", "lax.cummax({0}, axis={axis})", 0, False, smooth=False),
    "sort": _r("sort", "fi", "jnp.sort({0}, axis={axis})", 0, False, smooth=False),
    # movement
    "transpose": _u("transpose", "fcib", "jnp.transpose({0})", 0),
    "reshape": _u("reshape", "fcib", "jnp.reshape({0}, (-1,))", 0),
    "flip": OpSpec("rev", "fcib", 1, "jnp.flip({0}, axis={axis})", 0, axis=True),
    "slice": OpSpec("slice", "fcib", 1, "lax.slice_in_dim({0}, 1, None, 2, axis={axis})", 0, axis=True),
    "pad": _u("pad", "fcib", "jnp.pad({0}, 1)", 0),
    "concat": OpSpec("concatenate", "fcib", 1, "jnp.concatenate([{0}, jnp.flip({0})], axis={axis})", 0,
                     axis=True),
    "bcast": _u("broadcast_in_dim", "fcib", "jnp.broadcast_to({0}, (2,) + {0}.shape)", 0),
    "expand": _u("broadcast_in_dim", "fcib", "{0}[None]", 0),
    "squeeze": _u("squeeze", "fcib", "jnp.squeeze({0})", 0),
    # contraction
    "matmul": OpSpec("dot_general", "fci", 2, "jnp.matmul({0}, jnp.swapaxes({1}, -1, -2))", 1,
                     per_element=True),
    "gram": OpSpec("dot_general", "fci", 1, "{0} @ jnp.swapaxes({0}, -1, -2)", 1, per_element=True),
    # VSLA's product accumulating in double (rounded once: within half an ulp of the exact sum)
    "wide_matmul": OpSpec("wide_matmul", "f", 2,
                          "ember._src.prims.wide_dot.wide_matmul({0}, jnp.swapaxes({1}, -1, -2))", 1,
                          per_element=True),
    "vdot": OpSpec("dot_general", "fci", 1, "jnp.tensordot({0}, {0}, axes={0}.ndim)", 1, per_element=True),
    "fft": OpSpec("fft", "c", 1, "jnp.fft.fft({0}, axis={axis})", 4, per_element=True, axis=True),
    "cholesky": OpSpec("cholesky", "f", 1, "jnp.linalg.cholesky({0} @ jnp.swapaxes({0}, -1, -2) + "
                       "9 * jnp.eye({0}.shape[-2], dtype={0}.dtype))", 8, per_element=True),
    "eigvalsh": OpSpec("eigh", "f", 1, "jnp.linalg.eigvalsh({0} @ jnp.swapaxes({0}, -1, -2))", 8,
                       per_element=True, smooth=False, normwise=True),
    # indexing and others
    "iota": _u("iota", "fi", "{0} + jnp.arange({0}.shape[-1], dtype={0}.dtype)", 1),
    "stop_gradient": _u("stop_gradient", "fcib", "lax.stop_gradient({0})", 0, smooth=False),
    "take": OpSpec("take", "fcib", 1, "jnp.take({0}, jnp.array([0, 2, -1, 0]), axis={axis})", 0, axis=True),
    "index0": _u("slice", "fcib", "{0}[0]", 0),
    "dslice": OpSpec("dynamic_slice", "fcib", 1, "lax.dynamic_slice_in_dim({0}, 1, 1, axis={axis})", 0,
                     axis=True),
    "at_add": _u("scatter", "fci", "{0}.at[jnp.array([0, 0, -1])].add(1)", 1),
    "at_set": _u("dynamic_update_slice", "fcib", "{0}.at[-1].set({0}[0])", 0),
}


PRELUDE = '''\
def _leaves(t):
    return [x for x in ember.tree_util.tree_leaves(t)]


def _loss(t):
    """Sum of the floating leaves of t (the scalar that grad-like layers differentiate)."""
    fl = [jnp.sum(x) for x in _leaves(t) if jnp.issubdtype(jnp.result_type(x), jnp.floating)]
    return sum(fl[1:], fl[0]) if fl else jnp.zeros(())


def _flat(t):
    fl = [jnp.ravel(x) for x in _leaves(t) if jnp.issubdtype(jnp.result_type(x), jnp.floating)]
    return jnp.concatenate(fl) if fl else jnp.zeros((1,))


def _scan(g):
    return lambda *a: lax.scan(lambda c, s: (c + 1, g(*s)), 0, a)[1]


def _while(g):
    return lambda *a: lax.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, g(*a)), (0, g(*a)))[1]


def _cond(g):
    def h(*a):
        pred = jnp.sum(jnp.isfinite(jnp.ravel(a[0]).astype(jnp.float32))) % 2 == 0
        zeros = lambda *b: ember.tree_util.tree_map(jnp.zeros_like, g(*b))
        return lax.cond(pred, g, zeros, *a)
    return h


def _jvp(g):
    return lambda *a: ember.jvp(lambda *b: _flat(g(*b)), a, tuple(jnp.ones_like(x) for x in a))
'''

HEADER = '''\
import numpy as np
import ember
import ember.numpy as jnp
from ember import lax

nan, inf = np.nan, np.inf


def _c(re, im):
    z = np.empty(np.shape(re), np.complex64)
    z.real, z.imag = re, im
    return z
'''


@dataclasses.dataclass
class Op:
    """``v<k> = template.format(*args, axis=axis)`` in the program's source."""

    name: str
    args: tuple[str, ...]
    axis: int | None = None
    code: str | None = None  # a hand-written template in place of the spec's (tests, replays)

    def render(self) -> str:
        return (self.code or OPS[self.name].template).format(*self.args, axis=self.axis)


@dataclasses.dataclass
class Layer:
    """One transformation around the function (innermost first in :attr:`Case.layers`)."""

    kind: str
    argnum: int = 0
    in_axes: tuple | None = None  # vmap: one entry per argument (None: not mapped)
    size: int = 2  # vmap / scan: the mapped length

    def render(self) -> str:
        k = self.kind
        if k == "jit":
            return "g = ember.jit(g)"
        if k == "checkpoint":
            return "g = ember.checkpoint(g)"
        if k == "vmap":
            return f"g = ember.vmap(g, in_axes={tuple(self.in_axes)!r})"
        if k in ("scan", "while", "cond", "jvp"):
            return f"g = _{k}(g)"
        if k == "grad":
            return f"g = ember.grad(lambda *a, g=g: _loss(g(*a)), argnums={self.argnum})"
        if k == "value_and_grad":
            return f"g = ember.value_and_grad(lambda *a, g=g: _loss(g(*a)), argnums={self.argnum})"
        if k in ("jacfwd", "jacrev"):
            return f"g = ember.{k}(lambda *a, g=g: _flat(g(*a)), argnums={self.argnum})"
        if k == "hessian":
            return f"g = ember.hessian(lambda *a, g=g: _loss(g(*a)), argnums={self.argnum})"
        raise ValueError(k)


AD_LAYERS = ("grad", "value_and_grad", "jvp", "jacfwd", "jacrev", "hessian")
LAYER_KINDS = ("jit", "checkpoint", "vmap", "scan", "while", "cond") + AD_LAYERS


@dataclasses.dataclass
class Case:
    """A fuzz case: dtype mode, the program (ops over ``x0..``), its outputs, the transformation
    stack, the concrete arguments (after vmap/scan axes) and the named dynamic axes of the jit."""

    mode: str
    nargs: int
    ops: list[Op]
    outs: list[str]
    layers: list[Layer]
    args: list[np.ndarray]
    dynamic: tuple | None = None
    seed: int = 0
    index: int = 0

    @property
    def x64(self) -> bool:
        return self.mode == "float64"

    def function_source(self) -> str:
        params = ", ".join(f"x{i}" for i in range(self.nargs))
        lines = [f"def f({params}):"]
        lines += [f"    v{k} = {op.render()}" for k, op in enumerate(self.ops)]
        out = self.outs[0] if len(self.outs) == 1 else "(" + ", ".join(self.outs) + ")"
        lines.append(f"    return {out}")
        lines.append("")
        lines.append("g = f")
        lines += [la.render() for la in self.layers]
        return "\n".join(lines) + "\n"

    def jit_source(self, backend: str | None) -> str:
        b = "" if backend is None else f", backend={backend!r}"
        d = "" if self.dynamic is None else f", dynamic_axes={list(self.dynamic)!r}"
        return f"ember.jit(g{b}{d})"

    def args_source(self) -> str:
        return "args = (" + "".join(_array_source(a) + ", " for a in self.args) + ")"

    def repro(self, title: str = "") -> str:
        """The case as a runnable Python script that prints each path's result."""
        head = f"# {title}\n" if title else ""
        return (head + HEADER + f'ember.config.update("jax_enable_x64", {self.x64})\n\n\n' + PRELUDE
                + "\n\n" + self.function_source() + "\n" + self.args_source() + "\n"
                + "print(ember.make_program(g)(*args))\n"
                + f"print('numpy  ', {self.jit_source('numpy')}(*args))\n"
                + "print('eager  ', g(*[jnp.asarray(a) for a in args]))\n"
                + f"print('native ', {self.jit_source(None)}(*args))\n")


def _array_source(a: np.ndarray) -> str:
    if a.dtype.kind == "c":
        return f"_c({_array_source(a.real.copy())}, {_array_source(a.imag.copy())})"
    return f"np.array({a.tolist()!r}, dtype=np.{a.dtype.name}).reshape({a.shape!r})"


# primitives of the native op table the generator does not draw, and why (tests/fuzz checks that
# every other one is drawn by some op of OPS)
NOT_DRAWN: dict[str, str] = {
    "scan": "a transformation layer (_scan), not an op", "while": "a transformation layer (_while)",
    "cond": "a transformation layer (_cond)", "checkpoint": "a transformation layer",
    "custom_jvp_call": "reached through ember.nn functions with custom derivatives",
    "custom_vjp_call": "reached through ember.nn functions with custom derivatives",
    "copy": "removed by the passes before the schedule", "native_gemm": "made by the passes from dot_general",
    "native_gemm_bf16": "made by the bf16_weights pass from a product with bfloat16 weight bits "
                        "(tests/native/emit/test_gemm_bf16.py)",
    "native_threefry_hi": "made by the passes from threefry2x32",
    "native_threefry_lo": "made by the passes from threefry2x32",
    "threefry2x32": "random bits: the same bits on every path by construction, tested in tests/library",
    "dim_as_value": "only under dynamic axes in user code (dimension_as_value)",
    "ensure_shape": ("an identity that restates symbolic sizes; only under dynamic axes "
                     "(tests/dynamic/test_ensure_shape.py)"),
    "attention": "a fused call with its own tests (tests/nn); its operands need a 4-d layout",
    "conv": "needs NCHW operands and kernels; tested against PyTorch in tests/nn",
    "check_index": "the torch importer's bounds check: raises IndexError by design "
                   "(tests/torch/test_gather_bounds.py)",
    "check": "a run-time assertion with no results: raises CheckError by design (tests/core/test_check.py)",
    "fft_conv": "made from long 1-d convolutions only", "polygamma": "order operand must be an integer array",
    "eig": "eigenvector order and phase are not unique", "qr": "signs of the factors are not unique",
    "svd": "signs of the singular vectors are not unique", "lu": "pivoting ties differ legitimately",
    "triangular_solve": "reached through linalg.solve in tests/numpy",
    **{p: "needs several processes (MPI)" for p in ("process_all_gather", "process_allreduce",
                                                     "process_permute", "process_reduce_scatter")},
    "ragged_binary": "ember.vsla has its own fuzz (tests/vsla)", "ragged_rowbroadcast": "as ragged_binary",
    "ragged_rowsum": "as ragged_binary",
}


# -- values -------------------------------------------------------------------------------------

def _edges(mode: str) -> list:
    if mode in ("float32", "float64", "complex64"):
        ft = np.float64 if mode == "float64" else np.float32
        fi = np.finfo(ft)
        sub = float(fi.smallest_subnormal)
        huge = 1e30 if ft is np.float32 else 1e300
        return [np.nan, np.inf, -np.inf, -0.0, 0.0, sub, -sub, float(fi.tiny), float(fi.max), -float(fi.max),
                huge, 1.0, -1.0]
    if mode == "int32":
        return [-2 ** 31, 2 ** 31 - 1, 0, -1, 1, 31, 32]
    return [True, False]


def _values(rng: np.random.Generator, shape: tuple, mode: str, edge: bool) -> np.ndarray:
    dt = _DTYPE[mode]
    if mode == "bool":
        return rng.random(shape) < 0.5
    if mode == "int32":
        out = rng.integers(-9, 10, shape).astype(dt)
    else:
        out = np.round(rng.uniform(-3, 3, shape), 2)
        if mode == "complex64":
            out = out + 1j * np.round(rng.uniform(-3, 3, shape), 2)
        out = out.astype(dt)
    if edge and out.size:
        return _with_edges(rng, out, mode)
    return np.asarray(out, dtype=dt)


def _with_edges(rng: np.random.Generator, out: np.ndarray, mode: str) -> np.ndarray:
    dt, shape = out.dtype, out.shape
    with np.errstate(all="ignore"):
        ed = _edges(mode)
        mask = rng.random(shape) < 0.3
        table = np.array(ed, dtype=np.float64 if mode != "int32" else np.int64)
        pick = table[rng.integers(0, len(ed), shape)]
        if mode == "complex64":
            pick2 = np.array(ed)[rng.integers(0, len(ed), shape)]
            z = np.empty(shape, np.complex64)
            z.real, z.imag = pick, np.where(rng.random(shape) < 0.5, pick2, out.imag)
            pick = z
        out = np.where(mask, pick.astype(dt), out)
    return np.asarray(out, dtype=dt)


# -- generation ---------------------------------------------------------------------------------

class Generator:
    """Draws cases; shapes and dtypes are checked with ``ember.eval_shape`` as ops are added."""

    def __init__(self) -> None:
        import ember
        self.ember = ember
        self.ns: dict[str, Any] = {}
        exec(HEADER + PRELUDE, self.ns)

    def _build(self, case: Case) -> Callable:
        ns = dict(self.ns)
        exec(case.function_source(), ns)
        return ns["g"]

    def avals(self, case: Case, shapes: list[tuple]) -> Any:
        """Abstract outputs of the whole case (raises when it does not type-check)."""
        g = self._build(case)
        # float64 cases are checked as float32: the shapes and dtype kinds are the same, and the
        # process's 64-bit flag is not switched (each switch clears every cache)
        dt = np.float32 if case.mode == "float64" else _DTYPE[case.mode]
        specs = [self.ember.ShapeDtypeStruct(s, dt) for s in shapes]
        return self.ember.eval_shape(g, *specs)

    def _vars_avals(self, case: Case, shapes: list[tuple]) -> list:
        probe = dataclasses.replace(case, outs=[f"v{k}" for k in range(len(case.ops))] or ["x0"], layers=[])
        out = self.avals(probe, shapes)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def case(self, seed: int, index: int) -> Case:
        rng = np.random.default_rng([seed, index])
        mode = MODES[int(rng.integers(len(MODES)))]
        # one case in eight is a gradient case: float64, smooth ops, no edge values, grad outermost
        # but for jit/checkpoint, so that it is checked against finite differences
        smooth = rng.random() < 0.125
        if smooth:
            mode = "float64"
        kind = _KIND[mode]
        nargs = int(rng.integers(1, 4))
        rank = int(rng.choice([0, 1, 1, 2, 2, 2, 3]))
        full = tuple(int(rng.choice([0, 1, 2, 3, 4, 5], p=[.04, .16, .2, .3, .15, .15])) for _ in range(rank))
        shapes = []
        for _ in range(nargs):
            s = tuple(1 if rng.random() < 0.2 else d for d in full)
            s = s[int(rng.integers(0, 2)) if s and rng.random() < 0.3 else 0:]
            shapes.append(s)
        case = Case(mode, nargs, [], ["x0"], [], [], seed=seed, index=index)
        avs: list = []
        names = [f"x{i}" for i in range(nargs)]
        kinds = [kind] * nargs
        nops = int(rng.integers(1, 7))
        tries = 0
        while len(case.ops) < nops and tries < 60:
            tries += 1
            name = list(OPS)[int(rng.integers(len(OPS)))]
            spec = OPS[name]
            if smooth and not spec.smooth:
                continue
            pool = [i for i, k in enumerate(kinds) if k in spec.kinds]
            if not pool:
                continue
            recent = [i for i in pool if i >= len(kinds) - 3] or pool
            args = []
            for j in range(spec.arity):
                src = recent if (j == 0 and rng.random() < 0.7) else pool
                args.append(names[int(rng.choice(src))])
            if spec.arity == 2 and kinds[names.index(args[0])] != kinds[names.index(args[1])]:
                continue
            axis = None
            if spec.axis:
                r = self._rank(names.index(args[0]), nargs, shapes, avs)
                if r == 0:
                    continue
                axis = int(rng.integers(-r, r))
            trial = dataclasses.replace(case, ops=case.ops + [Op(name, tuple(args), axis)])
            try:
                new = self._vars_avals(trial, shapes)
            except Exception:
                continue
            av = new[-1]
            if int(np.prod(av.shape)) > 400 or len(av.shape) > 5:
                continue
            case, avs = trial, new
            names.append(f"v{len(case.ops) - 1}")
            kinds.append(np.dtype(av.dtype).kind.replace("u", "i"))
        if not case.ops:
            case.ops = [Op("neg", ("x0",))]
            avs = self._vars_avals(case, shapes)
        case.outs = [f"v{len(case.ops) - 1}"]
        if len(case.ops) > 1 and rng.random() < 0.25:
            case.outs.append(f"v{int(rng.integers(len(case.ops) - 1))}")
        case.layers = self._grad_layers(rng, case) if smooth else self._layers(rng, case, shapes)
        case.args, shapes_final = self._args(rng, case, shapes, edge=not smooth and rng.random() < 0.5)
        case.dynamic = self._dynamic(rng, shapes_final)
        return case

    def _rank(self, i: int, nargs: int, shapes: list, avs: list) -> int:
        return len(shapes[i]) if i < nargs else len(avs[i - nargs].shape)

    def _layers(self, rng: np.random.Generator, case: Case, shapes: list) -> list[Layer]:
        depth = int(rng.choice([0, 1, 1, 2, 2, 3]))
        allowed = [k for k in LAYER_KINDS if case.mode in ("float32", "float64") or k not in AD_LAYERS]
        layers: list[Layer] = []
        for _ in range(depth):
            k = allowed[int(rng.integers(len(allowed)))]
            la = Layer(k, argnum=int(rng.integers(case.nargs)))
            if k == "vmap":
                axes: list = [None if rng.random() < 0.3 else int(rng.choice([0, 1, -1]))
                              for _ in range(case.nargs)]
                if all(a is None for a in axes):
                    axes[0] = 0
                la.in_axes, la.size = tuple(axes), int(rng.choice([1, 2, 3]))
            if k == "scan":
                la.size = int(rng.choice([1, 2, 3]))
            trial = dataclasses.replace(case, layers=layers + [la])
            try:
                out = self.avals(trial, _final_shapes(trial, shapes))
                big = sum(int(np.prod(x.shape)) for x in self.ember.tree_util.tree_leaves(out))
            except Exception:
                continue
            if big <= 2000:
                layers.append(la)
        return layers

    def _grad_layers(self, rng: np.random.Generator, case: Case) -> list[Layer]:
        layers = [Layer("grad", argnum=int(rng.integers(case.nargs)))]
        return layers + [Layer(str(rng.choice(["jit", "checkpoint"])))] * int(rng.integers(0, 2))

    def _args(self, rng: np.random.Generator, case: Case, shapes: list, edge: bool) -> tuple[list, list]:
        final = _final_shapes(case, shapes)
        return [_values(rng, s, case.mode, edge) for s in final], final

    def _dynamic(self, rng: np.random.Generator, shapes: list) -> tuple | None:
        if rng.random() > 0.2:
            return None
        # only dims of size >= 2 are named: a named axis bound to 1 neither broadcasts nor squeezes
        # like a static 1 (as in JAX), so eager and jit legitimately differ there
        lead = [s[0] for s in shapes if len(s) and s[0] >= 2]
        if not lead:
            return None
        n = max(set(lead), key=lead.count)
        return tuple("n, ..." if len(s) and s[0] == n else None for s in shapes)


def _final_shapes(case: Case, shapes: list) -> list[tuple]:
    """The argument shapes after the vmap and scan layers add their axes."""
    out = [list(s) for s in shapes]
    for la in case.layers:
        if la.kind == "vmap":
            for i, ax in enumerate(la.in_axes):
                if ax is not None:
                    out[i].insert(ax if ax >= 0 else len(out[i]) + 1 + ax, la.size)
        elif la.kind == "scan":
            for s in out:
                s.insert(0, la.size)
    return [tuple(s) for s in out]
