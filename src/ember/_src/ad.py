"""Automatic differentiation: forward mode, partial evaluation, linearize and transposition.

Follows JAX's autodidax design:

* **Forward mode** (:func:`jvp`) is an interpreter: a :class:`JVPTracer` carries a primal value
  and its tangent; every primitive's ``jvp`` rule maps both. Tangents known to be zero are the
  symbolic :class:`~ember._src.ad_util.Zero`; tangents of integer and boolean values are always
  ``Zero``.
* **Partial evaluation** (:func:`~ember._src.partial_eval.partial_eval_flat`, its own module) runs
  a function on partly known inputs: operations on known values run at once (on the enclosing
  level: eagerly, or recorded by an enclosing ``jit``); operations touching unknown values are
  staged into a :class:`Program`.
* **linearize** = JVP + partial evaluation with the primals known and the tangents unknown: the
  primal outputs are computed, and the tangent computation becomes a *linear* Program whose
  constants are the residuals.
* **Reverse mode** (:func:`vjp`, :func:`grad`) transposes that linear Program with
  :func:`backward_pass`: it walks the equations in reverse, accumulating cotangents and calling
  each primitive's ``transpose`` rule.

Every transformation here composes with ``jit`` (which records whatever is bound on its level)
and with ``vmap``; under ``jit`` the backward pass is itself recorded, so
``make_program(grad(f))(x)`` is the whole forward-and-backward Program. ``jacfwd``, ``jacrev`` and
``hessian`` are built on these in :mod:`ember._src.jacobians`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src import dtypes as dt
from ember._src import tree as tu
from ember._src.ad_util import UndefPrimal, Zero, add_tangents, float0, instantiate, is_zero, tangent_aval
from ember._src.core import Primitive, ShapedArray
from ember._src.partial_eval import PartialVal, _concrete, partial_eval_flat
from ember._src.prims.elementwise import convert_element_type
from ember._src.prims.movement import full
from ember._src.program import (
    Literal,
    Program,
    Var,
    eval_program,
    trace_to_program,
)

__all__ = ["grad", "jvp", "linear_transpose", "linearize", "value_and_grad", "vjp"]


def _is_diff_dtype(dtype: np.dtype) -> bool:
    return dt.is_inexact(dtype)


def _zero_like_aval(aval: ShapedArray) -> Zero:
    return Zero(tangent_aval(aval))


def _rule_missing(prim: Primitive, kind: str, what: str) -> NotImplementedError:
    why = prim.not_applicable.get(kind)
    return NotImplementedError(f"{what} rule for primitive '{prim.name}' is not implemented"
                               + (f" ({why})" if why else ""))


# =============================================================================================
# Forward mode
# =============================================================================================


def leaf_avals(leaves: Sequence[Any], message: str) -> list[ShapedArray]:
    """The abstract values of ``leaves``; ``TypeError(message)`` for the first leaf that is not an
    array, ``message`` formatted with the leaf's index ``i`` and its ``type`` name."""
    avals = []
    for i, x in enumerate(leaves):
        try:
            avals.append(core.get_aval(x))
        except TypeError:
            raise TypeError(message.format(i=i, type=type(x).__name__)) from None
    return avals


class JVPTracer(core.Tracer):
    """A primal value together with its tangent (possibly a symbolic :class:`Zero`)."""

    __slots__ = ("_trace", "primal", "tangent")

    def __init__(self, trace: JVPTrace, primal: Any, tangent: Any):
        self._trace = trace
        self.primal = primal
        self.tangent = tangent

    @property
    def aval(self) -> ShapedArray:
        return core.get_aval(self.primal)

    def full_lower(self) -> Any:
        if is_zero(self.tangent):
            return core.full_lower(self.primal)
        return self

    def to_concrete(self) -> np.ndarray:
        return _concrete(self.primal)


class JVPTrace(core.Trace):
    """Pushes tangents through each primitive with its ``jvp`` rule."""

    def pure(self, val: Any) -> JVPTracer:
        return JVPTracer(self, val, Zero.from_value(val))

    lift = pure

    def process_primitive(self, prim: Primitive, tracers: list, params: dict) -> list:
        primals = [t.primal for t in tracers]
        tangents = [t.tangent for t in tracers]
        if all(is_zero(t) for t in tangents):
            out = prim.bind(*primals, **params)
            outs = out if prim.multiple_results else [out]
            return [JVPTracer(self, o, Zero.from_value(o)) for o in outs]
        if prim.jvp is None:
            raise _rule_missing(prim, "jvp", "Differentiation (JVP)")
        primals_out, tangents_out = prim.jvp(primals, tangents, **params)
        res = []
        for p, t in zip(primals_out, tangents_out):
            aval = core.get_aval(p)
            if t is None or not _is_diff_dtype(aval.dtype):
                t = _zero_like_aval(aval)
            res.append(JVPTracer(self, p, t))
        return res


def jvp_flat(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[list, list]:
    """Forward mode on a flat function ``fun(*xs) -> list``; tangents may be :class:`Zero`.

    Returns ``(primals_out, tangents_out)``; output tangents may be :class:`Zero`.
    """
    with core.new_main(JVPTrace) as main:
        trace = JVPTrace(main)
        tracers_in = [JVPTracer(trace, p, t) for p, t in zip(primals, tangents)]
        outs = fun(*tracers_in)
        tracers_out = [trace.full_raise(o) for o in outs]
        primals_out = [t.primal for t in tracers_out]
        tangents_out = [t.tangent for t in tracers_out]
    return primals_out, tangents_out


def _float0_zeros(aval: ShapedArray) -> np.ndarray:
    return np.zeros(tuple(int(d) for d in aval.shape), dtype=float0)


def _instantiate_out(t: Any, aval: ShapedArray) -> Any:
    """A user-facing tangent/cotangent: zeros for :class:`Zero`, float0 zeros for integer values."""
    if not _is_diff_dtype(aval.dtype):
        return _float0_zeros(aval)
    return instantiate(t)


def _check_tangent(p: Any, t: Any, i: int, what: str) -> Any:
    """Validate a user-supplied tangent for primal ``p``; returns the tangent or a :class:`Zero`."""
    pa = core.get_aval(p)
    if isinstance(t, np.ndarray) and t.dtype == float0:
        if tuple(t.shape) != tuple(pa.shape):
            raise ValueError(f"{what}: tangent {i} has shape {t.shape}, its primal has {pa.str_short()}")
        return _zero_like_aval(pa)
    ta = core.get_aval(t)
    if tuple(ta.shape) != tuple(pa.shape):
        raise ValueError(f"{what}: primal {i} has shape {pa.shape} but its tangent has shape {ta.shape}; "
                         "primal and tangent arguments must have equal shapes")
    if not _is_diff_dtype(pa.dtype):
        return _zero_like_aval(pa)
    if ta.dtype != pa.dtype:
        if isinstance(t, (int, float, complex)) or ta.weak_type:
            return convert_element_type(t, pa.dtype)
        raise TypeError(f"{what}: primal {i} has dtype {pa.dtype} but its tangent has dtype {ta.dtype}; "
                        "tangents must have the dtype of their primal")
    return t


def jvp(fun: Callable, primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False) -> Any:
    """Forward-mode derivative: ``(fun(*primals), J(primals) @ tangents)``.

    ``primals`` and ``tangents`` are tuples (or lists) of pytrees with equal structure, shapes and
    dtypes. Tangents of integer/boolean primals are ignored (pass float0 zeros as JAX does, or any
    array of the right shape). With ``has_aux=True``, ``fun`` returns ``(out, aux)`` and the result
    is ``(out, tangent_out, aux)``.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primal and tangent arguments must be tuples or lists; found "
                        f"{type(primals).__name__} and {type(tangents).__name__}")
    if len(primals) != len(tangents):
        raise TypeError(f"jvp: {len(primals)} primal arguments but {len(tangents)} tangent arguments")
    p_leaves, p_tree = tu.flatten(tuple(primals))
    t_leaves, t_tree = tu.flatten(tuple(tangents))
    if p_tree != t_tree:
        raise TypeError(f"jvp: primal and tangent arguments must have the same tree structure; got {p_tree} "
                        f"and {t_tree}")
    t_leaves = [_check_tangent(p, t, i, "jvp") for i, (p, t) in enumerate(zip(p_leaves, t_leaves))]
    flat, store = _flatten_fun(fun, p_tree, has_aux)
    outs, touts = jvp_flat(flat, p_leaves, t_leaves)
    out_tree, aux_tree, n_aux = store[0]
    n_main = len(outs) - n_aux
    main_t = [_instantiate_out(t, core.get_aval(o)) for o, t in zip(outs[:n_main], touts[:n_main])]
    out = tu.unflatten(out_tree, outs[:n_main])
    tout = tu.unflatten(out_tree, main_t)
    if has_aux:
        return out, tout, tu.unflatten(aux_tree, outs[n_main:])
    return out, tout


def _flatten_fun(fun: Callable, in_tree: tu.PyTreeDef, has_aux: bool,
                 kwargs: dict | None = None) -> tuple[Callable, list]:
    """``flat(*leaves) -> out_leaves + aux_leaves``; the store receives (out_tree, aux_tree, n_aux)."""
    store: list = []

    def flat(*leaves: Any) -> list:
        args = tu.unflatten(in_tree, leaves)
        res = fun(*args, **(kwargs or {}))
        if has_aux:
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise TypeError("a function differentiated with has_aux=True must return a pair "
                                f"(output, auxiliary data); got {type(res).__name__}")
            out, aux = res
            aux_leaves, aux_tree = tu.flatten(aux)
        else:
            out, aux_leaves, aux_tree = res, [], None
        out_leaves, out_tree = tu.flatten(out)
        out_leaves = [_from_float0(o) for o in out_leaves]
        leaf_avals(out_leaves, "output leaf {i} of the differentiated function has type {type}, "
                   "which is not an array")
        store.append((out_tree, aux_tree, len(aux_leaves)))
        return out_leaves + list(aux_leaves)

    return flat, store


def _from_float0(x: Any) -> Any:
    """float0 outputs (cotangents of integers) travel as boolean zeros: they are never differentiated."""
    if isinstance(x, np.ndarray) and x.dtype == float0:
        return np.zeros(x.shape, dtype=bool)
    return x


# =============================================================================================
# linearize
# =============================================================================================


class Linearized:
    """The result of :func:`linearize_flat`: primal outputs and the linear tangent Program.

    ``program`` maps the tangents of the differentiable inputs (``in_diff``) to the tangents of
    the outputs with a non-zero tangent (``out_nonzero``); its constants are the residuals.
    """

    def __init__(self, primals_out: list, program: Program, in_avals: list, in_diff: list,
                 out_avals: list, out_nonzero: list, n_aux: int):
        self.primals_out = primals_out
        self.program = program
        self.in_avals = in_avals
        self.in_diff = in_diff
        self.out_avals = out_avals
        self.out_nonzero = out_nonzero
        self.n_aux = n_aux

    def jvp(self, tangents: Sequence[Any]) -> list:
        """Evaluate the linear map on one tangent per input (``Zero`` allowed); returns output tangents."""
        ts = [instantiate(t) for t, d in zip(tangents, self.in_diff) if d]
        outs = iter(eval_program(self.program, self.program.consts, ts))
        return [next(outs) if nz else _zero_like_aval(a) for a, nz in zip(self.out_avals, self.out_nonzero)]

    def transpose(self, cts: Sequence[Any]) -> list:
        """Cotangents of the inputs (``Zero`` possible) for one cotangent per (non-aux) output."""
        cts_nz = [ct for ct, nz in zip(cts, self.out_nonzero) if nz]
        args = [UndefPrimal(v.aval) for v in self.program.invars]
        res = iter(backward_pass(self.program, self.program.consts, args, cts_nz))
        return [next(res) if d else _zero_like_aval(a) for a, d in zip(self.in_avals, self.in_diff)]


def linearize_flat(fun: Callable, primals: Sequence[Any], n_aux: int | Callable[[], int] = 0) -> Linearized:
    """JVP of the flat ``fun`` with known primals and unknown tangents, partially evaluated.

    The last ``n_aux`` outputs (a number, or a function returning it once ``fun`` has run) are
    auxiliary: they are returned as primal outputs and never differentiated.
    """
    primals = list(primals)
    n = len(primals)
    avals = [core.get_aval(p) for p in primals]
    diff = [_is_diff_dtype(a.dtype) for a in avals]
    box: dict = {}

    def f_jvp(*args: Any) -> list:
        ps = args[:n]
        it = iter(args[n:])
        ts = [next(it) if d else _zero_like_aval(a) for a, d in zip(avals, diff)]
        outs, touts = jvp_flat(fun, ps, ts)
        k = n_aux() if callable(n_aux) else n_aux
        n_main = len(outs) - k
        nz = [not is_zero(t) for t in touts[:n_main]]
        box.update(nz=nz, out_avals=[core.get_aval(o) for o in outs[:n_main]], n_aux=k,
                   n_primal=len(outs))
        return list(outs) + [t for t, z in zip(touts[:n_main], nz) if z]

    pvals = [PartialVal.known(p) for p in primals] + \
        [PartialVal.unknown(tangent_aval(a)) for a, d in zip(avals, diff) if d]

    def inst(n_out: int) -> list[bool]:
        return [i >= box["n_primal"] for i in range(n_out)]

    prog, pvals_out = partial_eval_flat(f_jvp, pvals, inst)
    primal_pvals = pvals_out[:box["n_primal"]]
    if not all(pv.is_known for pv in primal_pvals):  # pragma: no cover - a broken jvp rule
        raise AssertionError("linearize: a primal output depends on the tangents (a broken JVP rule)")
    return Linearized([pv.const for pv in primal_pvals], prog, avals, diff, box["out_avals"], box["nz"],
                      box["n_aux"])


def linearize(fun: Callable, *primals: Any) -> tuple[Any, Callable]:
    """``(fun(*primals), f_jvp)`` where ``f_jvp(*tangents)`` evaluates the JVP at ``primals``.

    The primal computation runs once; ``f_jvp`` evaluates a linear Program over stored residuals.
    """
    leaves, in_tree = tu.flatten(primals)
    flat, store = _flatten_fun(fun, in_tree, False)
    lin = linearize_flat(flat, leaves)
    out_tree = store[0][0]

    def f_jvp(*tangents: Any) -> Any:
        t_leaves, t_tree = tu.flatten(tangents)
        if t_tree != in_tree:
            raise TypeError(f"linearize: tangent tree {t_tree} does not match the primal tree {in_tree}")
        ts = [_check_tangent(p, t, i, "linearize") for i, (p, t) in enumerate(zip(leaves, t_leaves))]
        outs = lin.jvp(ts)
        return tu.unflatten(out_tree, [_instantiate_out(t, a) for t, a in zip(outs, lin.out_avals)])

    return tu.unflatten(out_tree, lin.primals_out), f_jvp


# =============================================================================================
# Transposition
# =============================================================================================


def backward_pass(prog: Program, consts: Sequence[Any], args: Sequence[Any],
                  cts_out: Sequence[Any]) -> list:
    """Transpose ``prog`` with respect to its :class:`UndefPrimal` inputs.

    ``args`` holds :class:`UndefPrimal` for the linear inputs and values for the others;
    ``cts_out`` one cotangent per output (``Zero`` allowed). Equations whose inputs are all
    known are evaluated forward first; the others (linear in the undefined inputs) are
    transposed in reverse order. Returns one cotangent per input: ``None`` for defined inputs,
    a value or :class:`Zero` for undefined ones.
    """
    env: dict[int, Any] = {}
    linear: set[int] = set()
    for v, c in zip(prog.constvars, consts):
        env[v.id] = c
    for v, a in zip(prog.invars, args):
        if isinstance(a, UndefPrimal):
            linear.add(v.id)
        else:
            env[v.id] = a

    def read(a: Any) -> Any:
        return a.val if isinstance(a, Literal) else env[a.id]

    def is_lin(a: Any) -> bool:
        return isinstance(a, Var) and a.id in linear

    lin_eqns = []
    for e in prog.eqns:
        if any(is_lin(a) for a in e.inputs):
            lin_eqns.append(e)
            linear.update(o.id for o in e.outvars)
        else:  # a non-linear equation on known values: evaluate it forward
            outs = e.prim.bind(*(read(a) for a in e.inputs), **e.params)
            for o, val in zip(e.outvars, outs if e.prim.multiple_results else [outs]):
                env[o.id] = val

    cts: dict[int, Any] = {}

    def accum(v: Var, ct: Any, where: str) -> None:
        if ct is None or is_zero(ct):
            return
        ca = core.get_aval(ct)
        if tuple(ca.shape) != tuple(v.aval.shape):
            raise AssertionError(f"transpose rule of {where} produced a cotangent of shape "
                                 f"{ca.str_short()} for a value of type {v.aval.str_short()}")
        if ca.dtype != v.aval.dtype:
            ct = convert_element_type(ct, v.aval.dtype)
        prev = cts.get(v.id)
        cts[v.id] = ct if prev is None else add_tangents(prev, ct)

    for v, ct in zip(prog.outvars, cts_out):
        if is_lin(v):
            accum(v, ct, "the program outputs")

    for e in reversed(lin_eqns):
        ct_outs = [cts.pop(o.id, None) for o in e.outvars]
        if all(c is None for c in ct_outs):
            continue
        ct_outs = [Zero(o.aval) if c is None else c for o, c in zip(e.outvars, ct_outs)]
        invals = [UndefPrimal(a.aval) if is_lin(a) else read(a) for a in e.inputs]
        if e.prim.transpose is None:
            raise _rule_missing(e.prim, "transpose", "Transpose (reverse-mode differentiation)")
        cts_in = e.prim.transpose(ct_outs if e.prim.multiple_results else ct_outs[0], *invals, **e.params)
        for a, ct in zip(e.inputs, cts_in):
            if is_lin(a):
                accum(a, ct, f"'{e.prim.name}'")

    res = []
    for v, a in zip(prog.invars, args):
        ct = cts.get(v.id)
        res.append(None if not isinstance(a, UndefPrimal) else Zero(v.aval) if ct is None else ct)
    return res


def linear_transpose(fun: Callable, *primals: Any, reduce_axes: Sequence = ()) -> Callable:
    """The transpose of the linear function ``fun``, traced at the shapes/dtypes of ``primals``.

    Returns ``f_t(out_cotangent) -> tuple`` of input cotangents (one per primal argument).
    """
    del reduce_axes
    leaves, in_tree = tu.flatten(primals)
    in_avals = []
    for i, x in enumerate(leaves):
        a = _abstractify(x)
        if not _is_diff_dtype(a.dtype):
            raise TypeError(f"linear_transpose only supports float and complex inputs; input {i} has "
                            f"dtype {a.dtype}")
        in_avals.append(a.strip_weak())
    flat, store = _flatten_fun(fun, in_tree, False)
    prog, _ = trace_to_program(flat, in_avals)
    out_tree = store[0][0]

    def transposed(out_cotangent: Any) -> tuple:
        ct_leaves = _cts_for(out_cotangent, out_tree, prog.out_avals, "linear_transpose")
        res = backward_pass(prog, prog.consts, [UndefPrimal(a) for a in in_avals], ct_leaves)
        return tu.unflatten(in_tree, [instantiate(r) for r in res])

    return transposed


def _abstractify(x: Any) -> ShapedArray:
    aval = getattr(x, "aval", None)
    if isinstance(aval, ShapedArray):
        return aval
    if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.ndarray):
        return ShapedArray(tuple(x.shape), x.dtype)
    return core.get_aval(x)


def _cts_for(ct_tree: Any, out_tree: tu.PyTreeDef, out_avals: Sequence[ShapedArray], what: str) -> list:
    """Flatten user cotangents against the output structure, checking shapes and casting dtypes."""
    try:
        leaves = tu.flatten_up_to(out_tree, ct_tree)[0]
    except ValueError as e:
        raise TypeError(f"{what}: the cotangent does not match the structure of the function's output "
                        f"({out_tree}): {e}") from None
    res = []
    for i, (ct, a) in enumerate(zip(leaves, out_avals)):
        if not _is_diff_dtype(a.dtype):
            res.append(_zero_like_aval(a))
            continue
        if isinstance(ct, Zero):
            res.append(ct)
            continue
        ca = core.get_aval(ct)
        if tuple(ca.shape) != tuple(a.shape):
            raise ValueError(f"{what}: cotangent {i} has shape {ca.shape} but the output has shape "
                             f"{a.shape}")
        if ca.dtype != a.dtype:
            if ca.weak_type or isinstance(ct, (int, float, complex)) or \
                    (dt.is_complex(ca.dtype) == dt.is_complex(a.dtype) and dt.is_inexact(ca.dtype)):
                ct = convert_element_type(ct, a.dtype)
            else:
                raise TypeError(f"{what}: cotangent {i} has dtype {ca.dtype} but the output has dtype "
                                f"{a.dtype}")
        res.append(ct)
    return res


# =============================================================================================
# vjp, grad and friends
# =============================================================================================


def vjp(fun: Callable, *primals: Any, has_aux: bool = False) -> Any:
    """``(fun(*primals), f_vjp)`` where ``f_vjp(cotangent)`` returns one cotangent per primal.

    Integer and boolean primals get float0 zero cotangents, as in JAX. With ``has_aux=True``,
    ``fun`` returns ``(out, aux)`` and the result is ``(out, f_vjp, aux)``.
    """
    leaves, in_tree = tu.flatten(primals)
    for i, x in enumerate(leaves):
        try:
            core.get_aval(x)
        except TypeError:
            raise TypeError(f"vjp: primal argument leaf {i} of type {type(x).__name__} is not an array") \
                from None
    flat, store = _flatten_fun(fun, in_tree, has_aux)
    lin = linearize_flat(flat, leaves, n_aux=lambda: store[0][2])
    out_tree, aux_tree, n_aux = store[0]
    n_main = len(lin.primals_out) - n_aux
    out = tu.unflatten(out_tree, lin.primals_out[:n_main])
    in_avals = lin.in_avals

    def f_vjp(cotangent: Any) -> tuple:
        cts = _cts_for(cotangent, out_tree, lin.out_avals, "vjp")
        res = lin.transpose(cts)
        return tu.unflatten(in_tree, [_instantiate_out(r, a) for r, a in zip(res, in_avals)])

    if has_aux:
        return out, f_vjp, tu.unflatten(aux_tree, lin.primals_out[n_main:])
    return out, f_vjp


def _arg_name(fun: Callable, i: int) -> str:
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = []
    if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
        return f"argument {params[i].name!r} (argnums={i})"
    return f"positional argument {i}"


def _split_argnums(fun: Callable, argnums: int | Sequence[int], args: tuple,
                   what: str) -> tuple[tuple[int, ...], Callable]:
    """Normalize ``argnums``; returns them and ``fun_of(dyn_args)`` closing over the other args."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"{what}: argnums must be an int or a tuple of ints, got {argnums!r}")
        if not -len(args) <= a < len(args):
            raise TypeError(f"{what}: differentiating with respect to argnums={argnums} requires at least "
                            f"{(a if a >= 0 else -a - 1) + 1} positional arguments to be passed by the "
                            f"caller, but got only {len(args)} positional arguments")
    nums = tuple(a % len(args) for a in nums)
    return nums, lambda dyn: tuple(dyn[nums.index(i)] if i in nums else a for i, a in enumerate(args))


def _check_input_dtypes(fun: Callable, nums: Sequence[int], dyn: Sequence[Any], what: str,
                        holomorphic: bool, allow_int: bool) -> None:
    for i, x in zip(nums, dyn):
        for leaf in tu.leaves(x):
            try:
                a = core.get_aval(leaf)
            except TypeError:
                raise TypeError(f"{what}: {_arg_name(fun, i)} contains a leaf of type "
                                f"{type(leaf).__name__}, which is not an array") from None
            if holomorphic:
                if not dt.is_complex(a.dtype):
                    raise TypeError(f"{what} with holomorphic=True requires inputs with complex dtype, but "
                                    f"{_arg_name(fun, i)} has dtype {a.dtype}")
            elif not dt.is_inexact(a.dtype) and not allow_int:
                raise TypeError(f"{what} requires real- or complex-valued inputs (input dtype that is a "
                                f"sub-dtype of np.inexact), but {_arg_name(fun, i)} has dtype {a.dtype}. "
                                "If you want to use integer-valued inputs, use vjp or set allow_int=True.")


def _check_scalar_output(out: Any, what: str, holomorphic: bool) -> None:
    leaves = tu.leaves(out)
    if len(leaves) != 1:
        raise TypeError(f"{what} requires a function returning a single scalar array, got a pytree with "
                        f"{len(leaves)} leaves ({tu.structure(out)})")
    a = core.get_aval(leaves[0])
    if a.shape != ():
        raise TypeError(f"Gradient only defined for scalar-output functions. Output had shape: {a.shape}. "
                        f"({what}; use vjp or jacrev for non-scalar outputs)")
    if holomorphic:
        if not dt.is_complex(a.dtype):
            raise TypeError(f"{what} with holomorphic=True requires outputs with complex dtype, but got "
                            f"{a.dtype}")
    elif not dt.is_float(a.dtype):
        raise TypeError(f"{what} requires real-valued outputs (output dtype that is a sub-dtype of "
                        f"np.floating), but got {a.dtype}. For holomorphic differentiation, pass "
                        "holomorphic=True. For differentiation of non-holomorphic functions involving "
                        "complex outputs, use vjp directly.")


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   holomorphic: bool = False, allow_int: bool = False) -> Callable:
    """A function returning ``(fun(*args), grad)`` (``((value, aux), grad)`` with ``has_aux``).

    ``fun`` must return a real scalar (complex with ``holomorphic=True``). The gradient has the
    structure of the argument(s) selected by ``argnums`` (a tuple of them when ``argnums`` is a
    tuple). Keyword arguments are passed through and not differentiated.
    """

    @functools.wraps(fun)
    def value_and_grad_f(*args: Any, **kwargs: Any) -> Any:
        nums, rebuild = _split_argnums(fun, argnums, args, "grad")
        dyn = tuple(args[i] for i in nums)
        _check_input_dtypes(fun, nums, dyn, "grad", holomorphic, allow_int)
        f_dyn = lambda *d: fun(*rebuild(d), **kwargs)
        if has_aux:
            out, f_vjp, aux = vjp(f_dyn, *dyn, has_aux=True)
        else:
            out, f_vjp = vjp(f_dyn, *dyn)
        _check_scalar_output(out, "grad", holomorphic)
        leaf = tu.leaves(out)[0]
        a = core.get_aval(leaf)
        ct = tu.unflatten(tu.structure(out), [full((), 1, a.dtype)])
        g = f_vjp(ct)
        g = g[0] if isinstance(argnums, int) else g
        return ((out, aux) if has_aux else out), g

    return value_and_grad_f


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         holomorphic: bool = False, allow_int: bool = False) -> Callable:
    """The gradient of the scalar-valued ``fun`` with respect to the arguments in ``argnums``.

    ``grad(f)(x)`` is ``vjp(f, x)[1](1.0)``. Non-scalar or non-float outputs (complex ones need
    ``holomorphic=True``) and integer inputs (``allow_int=True`` gives float0 zeros for them) raise
    ``TypeError``. A complex input of a real-valued ``f`` gets JAX's convention, the conjugate of
    the steepest-ascent direction: ``df/dx - i df/dy`` for ``z = x + iy``. With ``has_aux=True``,
    returns ``(grad, aux)``.
    """
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int)

    @functools.wraps(fun)
    def grad_f(*args: Any, **kwargs: Any) -> Any:
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return grad_f


# =============================================================================================
# Helpers for primitives that hold Programs (custom derivatives, checkpoint)
# =============================================================================================


def jvp_program(prog: Program, nonzero: Sequence[bool]) -> tuple[Program, list[bool]]:
    """The JVP of ``prog`` as a Program.

    Inputs: ``prog``'s inputs, then the tangents of the inputs flagged in ``nonzero``. Outputs:
    ``prog``'s outputs, then the tangents of the outputs flagged in the returned list (the others
    are symbolically zero).
    """
    n = len(prog.invars)
    in_avals = [v.aval for v in prog.invars]
    t_avals = [tangent_aval(a) for a, nz in zip(in_avals, nonzero) if nz]
    box: list = []

    def f(*args: Any) -> list:
        ps = args[:n]
        it = iter(args[n:])
        ts = [next(it) if nz else _zero_like_aval(a) for a, nz in zip(in_avals, nonzero)]
        outs, touts = jvp_flat(lambda *xs: eval_program(prog, prog.consts, xs), ps, ts)
        out_nz = [not is_zero(t) for t in touts]
        box.append(out_nz)
        return list(outs) + [t for t, z in zip(touts, out_nz) if z]

    jprog, _ = trace_to_program(f, [*in_avals, *t_avals])
    return jprog, box[0]
