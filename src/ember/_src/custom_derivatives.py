"""User-defined derivatives (``custom_jvp``, ``custom_vjp``) and rematerialization (``checkpoint``).

Each is a primitive whose params hold Programs, so it traces into ``jit``, differentiates and
vmaps like any other primitive:

* ``custom_jvp_call[call, jvp]``: ``call`` is the traced function; ``jvp`` is the user's rule,
  traced on first use (a :class:`DeferredProgram`). Its JVP rule evaluates the rule's Program.
* ``custom_vjp_call[call, fwd, bwd]``: the JVP rule runs ``fwd`` and emits ``custom_lin`` (linear
  in the tangents, holding ``bwd``); transposing ``custom_lin`` runs ``bwd``. Forward mode over a
  ``custom_vjp`` function is an error, as in JAX.
* ``checkpoint[program]``: partial evaluation keeps only its inputs as residuals; its transpose
  linearizes ``program`` again inside the backward pass (recomputing the forward).

Values a ``custom_jvp``/``custom_vjp`` function closes over become explicit inputs of the
primitive; differentiating with respect to one raises ``TypeError``, as in JAX (the rule only
covers the explicit arguments).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ember._src import ad, batching, core
from ember._src import dtypes as dt
from ember._src import partial_eval as peval
from ember._src import tree as tu
from ember._src.ad_util import UndefPrimal, Zero, instantiate, is_zero, tangent_aval
from ember._src.batching import batch_program
from ember._src.core import Primitive, ShapedArray
from ember._src.prims.elementwise import convert_element_type
from ember._src.prims.movement import full
from ember._src.program import Program, dce, eval_program, run_numpy, trace_to_program

__all__ = ["checkpoint", "custom_jvp", "custom_vjp", "remat"]


# ---------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------


class DeferredProgram:
    """A function traced into a Program on first use, once per list of input avals."""

    def __init__(self, name: str, trace_fn: Callable[[list[ShapedArray]], Program]):
        self.name = name
        self._trace_fn = trace_fn
        self._cache: dict[tuple, Program] = {}

    def program(self, in_avals: Sequence[ShapedArray]) -> Program:
        key = tuple(in_avals)
        p = self._cache.get(key)
        if p is None:
            p = self._cache[key] = self._trace_fn(list(in_avals))
        return p

    def __repr__(self) -> str:
        return f"<{self.name}>"


def _closure_convert(prog: Program) -> tuple[Program, list]:
    """Make ``prog``'s captured constants leading inputs; returns the program and the constants."""
    if not prog.constvars:
        return prog, []
    return Program((), (*prog.constvars, *prog.invars), prog.eqns, prog.outvars), list(prog.consts)


def _run_impl(prog: Program, args: Sequence[np.ndarray]) -> list:
    consts = [core.concrete_or_error(c, "a captured constant") for c in prog.consts]
    return run_numpy(prog, consts, list(args))


def _resolve_kwargs(fun: Callable, args: tuple, kwargs: dict, what: str) -> tuple:
    if not kwargs:
        return tuple(args)
    try:
        ba = inspect.signature(fun).bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: {e}") from None
    ba.apply_defaults()
    if ba.kwargs:
        raise TypeError(f"{what} functions do not support keyword-only arguments ({sorted(ba.kwargs)})")
    return tuple(ba.args)


def _any_traced(args: Any) -> bool:
    """Whether any transformation is active (outside all of them the function just runs)."""
    return core.trace_depth() > 0 or core.dynamic_trace_active() or \
        any(isinstance(x, core.Tracer) for x in tu.leaves(args))


def _check_nondiff(nums: Sequence[int], n: int, what: str) -> None:
    for i in nums:
        if not 0 <= i < n:
            raise ValueError(f"{what}: nondiff_argnums {tuple(nums)} out of range for {n} arguments")


def _array_leaves(diff_args: tuple, what: str) -> tuple[list, tu.PyTreeDef, list[ShapedArray]]:
    leaves, tree = tu.flatten(diff_args)
    avals = ad.leaf_avals(leaves, f"{what}: argument leaf {{i}} of type {{type}} is not an array; pass "
                          "non-array arguments through nondiff_argnums")
    return leaves, tree, avals


def _trace_fun(fun: Callable, rebuild: Callable, in_tree: tu.PyTreeDef,
               avals: Sequence[ShapedArray]) -> tuple[Program, list, tu.PyTreeDef]:
    """Trace ``fun`` on the diff leaves; returns the closure-converted program, consts, out tree."""
    box: list = []

    def flat(*leaves: Any) -> list:
        out = fun(*rebuild(tu.unflatten(in_tree, leaves)))
        out_leaves, out_tree = tu.flatten(out)
        box.append(out_tree)
        return out_leaves

    prog, _ = trace_to_program(flat, list(avals))
    prog, consts = _closure_convert(prog)
    return prog, consts, box[0]


def _rule_pair(res: Any, rule: str, what: str) -> tuple:
    """The two results of a user rule that must return a pair (a TypeError naming ``rule`` if not)."""
    if not (isinstance(res, (tuple, list)) and len(res) == 2):
        raise TypeError(f"{rule} must return a pair ({what}), got {type(res).__name__}")
    return tuple(res)


def _output_leaves(out: Any, out_tree: tu.PyTreeDef, rule: str, what: str) -> list:
    """The leaves of a rule's ``out``, which must have the function's output structure."""
    leaves, tree = tu.flatten(out)
    if tree != out_tree:
        raise TypeError(f"{rule}: {what} structure {tree} differs from the function's output structure "
                        f"{out_tree}")
    return leaves


class _SplitCall(NamedTuple):
    """A traced call of a custom-derivative function: its arguments split by ``nondiff_argnums``
    and the function traced on the differentiable leaves."""

    nondiff_vals: list
    diff_args: tuple
    leaves: list
    in_tree: tu.PyTreeDef
    avals: list[ShapedArray]
    rebuild: Callable[[tuple], tuple]
    call: Program
    consts: list
    out_tree: tu.PyTreeDef
    out_avals: list[ShapedArray]


def _split_call(fun: Callable, nd: Sequence[int], args: tuple, kwargs: dict, what: str,
                has_rules: bool) -> tuple[str, tuple, _SplitCall | None]:
    """The function's name, the positional arguments of a call of ``fun`` and, under a
    transformation, the call split and traced (None outside all transformations: the function just
    runs). ``has_rules``: whether the derivative rules are set (an AttributeError if not)."""
    name = getattr(fun, "__name__", "function")
    if not has_rules:
        kind = what.split("_")[1].upper()  # JVP / VJP
        raise AttributeError(f"No {kind} defined for {what} function {name} using def{kind.lower()}.")
    args = _resolve_kwargs(fun, args, kwargs, what)
    _check_nondiff(nd, len(args), what)
    if not _any_traced(args):
        return name, args, None
    nondiff_vals = [args[i] for i in nd]
    diff_args = tuple(a for i, a in enumerate(args) if i not in nd)
    leaves, in_tree, avals = _array_leaves(diff_args, what)

    def rebuild(diff: tuple) -> tuple:
        it = iter(diff)
        return tuple(args[i] if i in nd else next(it) for i in range(len(args)))

    call, consts, out_tree = _trace_fun(fun, rebuild, in_tree, avals)
    return name, args, _SplitCall(nondiff_vals, diff_args, leaves, in_tree, avals, rebuild, call, consts,
                                  out_tree, call.out_avals)


def _match_leaves(vals: Sequence[Any], avals: Sequence[ShapedArray], what: str) -> list:
    """Check shapes of rule outputs against ``avals`` and cast dtypes (integers get zeros)."""
    res = []
    for i, (v, a) in enumerate(zip(vals, avals)):
        if v is None or isinstance(v, Zero) or (isinstance(v, np.ndarray) and v.dtype == ad.float0):
            res.append(full(a.shape, 0, a.dtype))
            continue
        va = core.get_aval(v)
        if tuple(va.shape) != tuple(a.shape):
            raise TypeError(f"{what}: output {i} has shape {va.str_short()}, expected {a.str_short()}")
        if not dt.is_inexact(a.dtype):
            res.append(full(a.shape, 0, a.dtype))
        elif va.dtype != a.dtype:
            res.append(convert_element_type(v, a.dtype))
        else:
            res.append(v)
    return res


def _unbatch(avals: Sequence[ShapedArray]) -> list[ShapedArray]:
    return [ShapedArray(a.shape[1:], a.dtype, a.weak_type) for a in avals]


def _batch_all(vals: Sequence[Any], dims: Sequence[Any]) -> tuple[list, Any]:
    """Move every batch dim to 0 and broadcast unbatched values (returns values and the size)."""
    size = next(core.get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
    out = [batching.matchaxis(v, d, 0, size) for v, d in zip(vals, dims)]
    return out, size


def _batched_deferred(d: DeferredProgram, size: Any) -> DeferredProgram:
    """``d`` vmapped over a leading axis of every input; every output batched at 0."""

    def trace(avals: list[ShapedArray]) -> Program:
        return batch_program(d.program(_unbatch(avals)), [0] * len(avals), size, instantiate=True)[0]

    return DeferredProgram(f"batched {d.name}", trace)


# ---------------------------------------------------------------------------------------------
# custom_jvp
# ---------------------------------------------------------------------------------------------

custom_jvp_call_p = Primitive("custom_jvp_call", multiple_results=True)


def _cjvp_abstract(*avals: ShapedArray, call: Program, jvp: DeferredProgram, num_consts: int) -> list:
    return list(call.out_avals)


def _cjvp_impl(*args: np.ndarray, call: Program, jvp: DeferredProgram, num_consts: int) -> list:
    return _run_impl(call, args)


def _check_closed_over(tangents: Sequence[Any], k: int, kind: str) -> None:
    if any(not is_zero(t) for t in tangents[:k]):
        raise TypeError(f"Detected differentiation of a {kind} function with respect to a closed-over "
                        f"value. That isn't supported because the custom {kind[7:].upper()} rule only "
                        f"specifies how to differentiate the {kind} function with respect to explicit "
                        "input parameters; pass the value as an argument instead.")


def _cjvp_jvp(primals: list, tangents: list, *, call: Program, jvp: DeferredProgram,
              num_consts: int) -> tuple[list, list]:
    k = num_consts
    _check_closed_over(tangents, k, "custom_jvp")
    xs = primals[k:]
    x_avals = [v.aval for v in call.invars[k:]]
    ts = [instantiate(Zero(tangent_aval(a))) if is_zero(t) else t for t, a in zip(tangents[k:], x_avals)]
    jprog = jvp.program([*x_avals, *(tangent_aval(a) for a in x_avals)])
    outs = eval_program(jprog, jprog.consts, [*xs, *ts])
    n = len(call.outvars)
    return outs[:n], outs[n:]


def _cjvp_batch(vals: list, dims: list, *, call: Program, jvp: DeferredProgram,
                num_consts: int) -> tuple[list, list]:
    vals, size = _batch_all(vals, dims)
    bcall, _ = batch_program(call, [0] * len(vals), size, instantiate=True)
    outs = custom_jvp_call_p.bind(*vals, call=bcall, jvp=_batched_deferred(jvp, size), num_consts=num_consts)
    return outs, [0] * len(outs)


custom_jvp_call_p.impl = _cjvp_impl
custom_jvp_call_p.abstract_eval = _cjvp_abstract
custom_jvp_call_p.jvp = _cjvp_jvp
custom_jvp_call_p.batch = _cjvp_batch
custom_jvp_call_p.na("transpose", "custom_jvp_call is not linear; its JVP rule is transposed instead")


_NOT_EAGER = object()


class custom_jvp:  # noqa: N801 - JAX's name
    """A function with a user-defined forward-mode derivative (reverse mode transposes it).

    ::

        @custom_jvp
        def f(x, y):
            return jnp.sin(x) * y

        @f.defjvp
        def f_jvp(primals, tangents):
            (x, y), (tx, ty) = primals, tangents
            return f(x, y), jnp.cos(x) * tx * y + jnp.sin(x) * ty

    The rule must be linear in the tangents for ``grad`` to work. ``nondiff_argnums`` marks
    arguments (any Python values) that are passed first to the rule and not differentiated.
    Zero tangents are passed to the rule as zero arrays.
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)

    def defjvp(self, jvp: Callable, symbolic_zeros: bool = False) -> Callable:
        """Set the rule ``jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)``."""
        if symbolic_zeros:
            raise NotImplementedError("custom_jvp: symbolic_zeros=True is not supported")
        self.jvp = jvp
        return jvp

    def defjvps(self, *jvps: Callable | None) -> None:
        """One rule per argument: ``jvp_i(tangent_i, primal_out, *primals) -> tangent contribution``
        (``None`` for an argument with zero derivative); the contributions are summed."""

        def jvp(primals: tuple, tangents: tuple) -> tuple:
            out = self.fun(*primals)
            contrib = [rule(t, out, *primals) for rule, t in zip(jvps, tangents) if rule is not None]
            if not contrib:
                return out, tu.tree_map(lambda o: o * 0, out)
            total = contrib[0]
            for c in contrib[1:]:
                total = tu.tree_map(lambda a, b: a + b, total, c)
            return out, total

        self.defjvp(jvp)

    def _eager_jvp(self, name: str, args: tuple) -> Any:
        """The call under ``jvp``/``grad`` outside ``jit`` with concrete primals, as JAX runs it: the
        rule gets the concrete primal values (Python ``if x > 0`` works) and the primal function
        is not run. ``_NOT_EAGER`` when the call is not of that kind (the traced path handles it)."""
        if core.dynamic_trace_active() or self.jvp is None:
            return _NOT_EAGER
        nd = self.nondiff_argnums
        nondiff_vals = [args[i] for i in nd]
        if any(isinstance(x, core.Tracer) for x in tu.leaves(nondiff_vals)):
            return _NOT_EAGER
        diff_args = tuple(a for i, a in enumerate(args) if i not in nd)
        leaves, in_tree = tu.flatten(diff_args)
        tracers = [x for x in leaves if isinstance(x, core.Tracer)]
        if not tracers:
            return _NOT_EAGER
        trace = tracers[0]._trace
        if not isinstance(trace, ad.JVPTrace) or trace.main.level != core.trace_depth() - 1:
            return _NOT_EAGER
        primals, tangents = [], []
        for x in leaves:
            if isinstance(x, core.Tracer):
                if not isinstance(x, ad.JVPTracer) or x._trace.main is not trace.main:
                    return _NOT_EAGER
                p, t = x.primal, x.tangent
            else:
                p, t = x, Zero(tangent_aval(core.get_aval(x)))
            if isinstance(p, peval.PartialEvalTracer) and p.pval.is_known:  # grad: a known primal
                p = p.pval.const
            if isinstance(p, core.Tracer):  # nested transformations: their derivatives are needed
                return _NOT_EAGER
            primals.append(p)
            tangents.append(instantiate(t) if is_zero(t) else t)
        rule = f"custom_jvp rule of {name}"
        ps, ts = tu.unflatten(in_tree, primals), tu.unflatten(in_tree, tangents)
        po, to = _rule_pair(self.jvp(*nondiff_vals, tuple(ps), tuple(ts)), rule, "primal_out, tangent_out")
        po_leaves, out_tree = tu.flatten(po)
        try:
            to_leaves = tu.flatten_up_to(out_tree, to)[0]
        except ValueError as e:
            raise TypeError(f"{rule}: tangent output structure does not match the primal output: "
                            f"{e}") from None
        out_avals = [core.get_aval(p) for p in po_leaves]
        to_leaves = _match_leaves(to_leaves, [tangent_aval(a) for a in out_avals], f"{rule} (tangent)")
        outs = [ad.JVPTracer(trace, p, t if dt.is_inexact(a.dtype) else Zero(tangent_aval(a)))
                for p, t, a in zip(po_leaves, to_leaves, out_avals)]
        return tu.unflatten(out_tree, outs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.jvp is not None and kwargs == {} and core.trace_depth() > 0:
            _check_nondiff(self.nondiff_argnums, len(args), "custom_jvp")
            out = self._eager_jvp(getattr(self.fun, "__name__", "function"), args)
            if out is not _NOT_EAGER:
                return out
        name, args, sp = _split_call(self.fun, self.nondiff_argnums, args, kwargs, "custom_jvp",
                                     self.jvp is not None)
        if sp is None:
            return self.fun(*args)
        nondiff_vals, _, leaves, in_tree, _, _, call, consts, out_tree, out_avals = sp
        user_jvp = self.jvp
        n = len(leaves)

        def trace_jvp(in_avals: list[ShapedArray]) -> Program:
            def f(*xs: Any) -> list:
                ps = tu.unflatten(in_tree, xs[:n])
                ts = tu.unflatten(in_tree, xs[n:])
                rule = f"custom_jvp rule of {name}"
                res = user_jvp(*nondiff_vals, tuple(ps), tuple(ts))
                po, to = _rule_pair(res, rule, "primal_out, tangent_out")
                po_leaves = _output_leaves(po, out_tree, rule, "primal output")
                try:
                    to_leaves = tu.flatten_up_to(out_tree, to)[0]
                except ValueError as e:
                    raise TypeError(f"custom_jvp rule of {name}: tangent output structure does not match "
                                    f"the primal output: {e}") from None
                po_leaves = _match_leaves(po_leaves, out_avals, f"custom_jvp rule of {name} (primal)")
                to_leaves = _match_leaves(to_leaves, [tangent_aval(a) for a in out_avals],
                                          f"custom_jvp rule of {name} (tangent)")
                return po_leaves + to_leaves

            return trace_to_program(f, in_avals)[0]

        rule = DeferredProgram(f"jvp of {name}", trace_jvp)
        outs = custom_jvp_call_p.bind(*consts, *leaves, call=call, jvp=rule, num_consts=len(consts))
        return tu.unflatten(out_tree, outs)


# ---------------------------------------------------------------------------------------------
# custom_vjp
# ---------------------------------------------------------------------------------------------

custom_vjp_call_p = Primitive("custom_vjp_call", multiple_results=True)
custom_lin_p = Primitive("custom_lin", multiple_results=True, linear=True)


def _cvjp_abstract(*avals: ShapedArray, call: Program, fwd: DeferredProgram, bwd: DeferredProgram,
                   num_consts: int) -> list:
    return list(call.out_avals)


def _cvjp_impl(*args: np.ndarray, call: Program, fwd: DeferredProgram, bwd: DeferredProgram,
               num_consts: int) -> list:
    return _run_impl(call, args)


def _cvjp_jvp(primals: list, tangents: list, *, call: Program, fwd: DeferredProgram,
              bwd: DeferredProgram, num_consts: int) -> tuple[list, list]:
    k = num_consts
    _check_closed_over(tangents, k, "custom_vjp")
    xs = primals[k:]
    x_avals = [v.aval for v in call.invars[k:]]
    fprog = fwd.program(x_avals)
    res_all = eval_program(fprog, fprog.consts, xs)
    n = len(call.outvars)
    outs, res = res_all[:n], res_all[n:]
    out_tavals = tuple(tangent_aval(a) for a in call.out_avals)
    ts = tangents[k:]
    if all(is_zero(t) for t in ts):
        return outs, [Zero(a) for a in out_tavals]
    ts = [instantiate(Zero(tangent_aval(a))) if is_zero(t) else t for t, a in zip(ts, x_avals)]
    res_avals = tuple(a.aval for a in fprog.outvars[n:])
    touts = custom_lin_p.bind(*res, *ts, bwd=bwd, num_res=len(res), res_avals=res_avals,
                              out_avals=out_tavals)
    return outs, list(touts)


def _cvjp_batch(vals: list, dims: list, *, call: Program, fwd: DeferredProgram, bwd: DeferredProgram,
                num_consts: int) -> tuple[list, list]:
    vals, size = _batch_all(vals, dims)
    bcall, _ = batch_program(call, [0] * len(vals), size, instantiate=True)
    outs = custom_vjp_call_p.bind(*vals, call=bcall, fwd=_batched_deferred(fwd, size),
                                  bwd=_batched_deferred(bwd, size), num_consts=num_consts)
    return outs, [0] * len(outs)


def _lin_abstract(*avals: ShapedArray, bwd: DeferredProgram, num_res: int, res_avals: tuple,
                  out_avals: tuple) -> list:
    return list(out_avals)


def _lin_impl(*args: Any, **params: Any) -> list:
    raise TypeError("can't apply forward-mode autodiff (jvp) to a custom_vjp function.")


def _lin_transpose(cts: list, *args: Any, bwd: DeferredProgram, num_res: int, res_avals: tuple,
                   out_avals: tuple) -> list:
    res = args[:num_res]
    if any(isinstance(r, UndefPrimal) for r in res):
        raise TypeError("custom_lin is not linear in its residuals")
    cts = [instantiate(Zero(a)) if is_zero(c) else c for c, a in zip(cts, out_avals)]
    bprog = bwd.program([*res_avals, *out_avals])
    cts_in = eval_program(bprog, bprog.consts, [*res, *cts])
    return [None] * num_res + list(cts_in)


custom_vjp_call_p.impl = _cvjp_impl
custom_vjp_call_p.abstract_eval = _cvjp_abstract
custom_vjp_call_p.jvp = _cvjp_jvp
custom_vjp_call_p.batch = _cvjp_batch
custom_vjp_call_p.na("transpose", "custom_vjp_call is not linear; its JVP emits custom_lin, which is")
custom_lin_p.impl = _lin_impl
custom_lin_p.abstract_eval = _lin_abstract
custom_lin_p.transpose = _lin_transpose
custom_lin_p.na("lowering", "never reaches a backend: grad transposes it into the bwd program; its forward "
                "evaluation is an error (forward-mode of a custom_vjp function)")
custom_lin_p.na("jvp", "custom_lin only lives in linearized programs, which are transposed, never "
                "differentiated (forward mode over custom_vjp is unsupported, as in JAX)")
custom_lin_p.na("batch", "custom_lin only lives in linearized programs; vmap of its transpose batches "
                "the bwd program's primitives instead")


class custom_vjp:  # noqa: N801 - JAX's name
    """A function with a user-defined reverse-mode derivative.

    ::

        @custom_vjp
        def f(x):
            return jnp.log1p(jnp.exp(x))

        def f_fwd(x):
            return f(x), x            # (output, residuals)

        def f_bwd(res, g):
            return (g * jax.nn.sigmoid(res),)   # one cotangent per argument

        f.defvjp(f_fwd, f_bwd)

    ``bwd(*nondiff_args, residuals, cotangent)`` returns a tuple with one entry per
    differentiable argument (``None`` for a zero cotangent). Forward mode (``jvp``) over a
    ``custom_vjp`` function raises ``TypeError``, as in JAX.
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)

    def defvjp(self, fwd: Callable, bwd: Callable, symbolic_zeros: bool = False) -> None:
        """Set ``fwd(*args) -> (out, residuals)`` and ``bwd(*nondiff_args, residuals, ct) -> tuple``."""
        if symbolic_zeros:
            raise NotImplementedError("custom_vjp: symbolic_zeros=True is not supported")
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name, args, sp = _split_call(self.fun, self.nondiff_argnums, args, kwargs, "custom_vjp",
                                     self.fwd is not None and self.bwd is not None)
        if sp is None:
            return self.fun(*args)
        nondiff_vals, diff_args, leaves, in_tree, avals, rebuild, call, consts, out_tree, out_avals = sp
        n_args = len(diff_args)
        user_fwd, user_bwd = self.fwd, self.bwd
        box: dict = {}

        def trace_fwd(in_avals: list[ShapedArray]) -> Program:
            def f(*xs: Any) -> list:
                rule = f"custom_vjp fwd rule of {name}"
                out, residuals = _rule_pair(user_fwd(*rebuild(tu.unflatten(in_tree, xs))), rule,
                                            "output, residuals")
                o_leaves = _output_leaves(out, out_tree, rule, "output")
                r_leaves, r_tree = tu.flatten(residuals)
                ad.leaf_avals(r_leaves, f"{rule}: residual leaf {{i}} of type {{type}} is not an array")
                box["res_tree"] = r_tree
                return _match_leaves(o_leaves, out_avals, f"custom_vjp fwd rule of {name}") + r_leaves

            return trace_to_program(f, in_avals)[0]

        def trace_bwd(in_avals: list[ShapedArray]) -> Program:
            res_tree = box["res_tree"]
            n_res = res_tree.num_leaves

            def f(*xs: Any) -> list:
                residuals = tu.unflatten(res_tree, xs[:n_res])
                ct = tu.unflatten(out_tree, xs[n_res:])
                cts = user_bwd(*nondiff_vals, residuals, ct)
                if not isinstance(cts, (tuple, list)):
                    raise TypeError(f"custom_vjp bwd rule of {name} must return a tuple with one "
                                    f"cotangent per differentiable argument, got {type(cts).__name__}")
                if len(cts) != n_args:
                    raise TypeError(f"custom_vjp bwd rule of {name} returned {len(cts)} cotangents for "
                                    f"{n_args} differentiable arguments")
                ct_leaves = []
                for i, (c, a) in enumerate(zip(cts, diff_args)):
                    sub = tu.structure(a)
                    if c is None:
                        ct_leaves.extend([None] * sub.num_leaves)
                        continue
                    try:
                        ct_leaves.extend(tu.flatten_up_to(sub, c)[0])
                    except ValueError as e:
                        raise TypeError(f"custom_vjp bwd rule of {name}: cotangent {i} does not match the "
                                        f"structure of its argument: {e}") from None
                return _match_leaves(ct_leaves, [tangent_aval(a) for a in avals],
                                     f"custom_vjp bwd rule of {name}")

            return trace_to_program(f, in_avals)[0]

        outs = custom_vjp_call_p.bind(*consts, *leaves, call=call,
                                      fwd=DeferredProgram(f"fwd of {name}", trace_fwd),
                                      bwd=DeferredProgram(f"bwd of {name}", trace_bwd),
                                      num_consts=len(consts))
        return tu.unflatten(out_tree, outs)


# ---------------------------------------------------------------------------------------------
# checkpoint / remat
# ---------------------------------------------------------------------------------------------

checkpoint_p = Primitive("checkpoint", multiple_results=True)


def _ckpt_abstract(*avals: ShapedArray, program: Program, prevent_cse: bool) -> list:
    if len(avals) != len(program.invars):
        raise TypeError(f"checkpoint: {len(avals)} operands for a program with {len(program.invars)} inputs")
    return list(program.out_avals)


def _ckpt_impl(*args: np.ndarray, program: Program, prevent_cse: bool) -> list:
    return _run_impl(program, args)


_jvp_cache: dict[tuple, tuple] = {}


def _ckpt_jvp(primals: list, tangents: list, *, program: Program, prevent_cse: bool) -> tuple[list, list]:
    nz = tuple(not is_zero(t) for t in tangents)
    key = (id(program), nz)
    hit = _jvp_cache.get(key)
    if hit is None or hit[0] is not program:
        jprog, out_nz = ad.jvp_program(program, nz)
        hit = _jvp_cache[key] = (program, jprog, out_nz)
        if len(_jvp_cache) > 256:
            _jvp_cache.pop(next(iter(_jvp_cache)))
    _, jprog, out_nz = hit
    outs = checkpoint_p.bind(*primals, *(t for t, z in zip(tangents, nz) if z), program=jprog,
                             prevent_cse=prevent_cse)
    n = len(program.outvars)
    it = iter(outs[n:])
    touts = [next(it) if z else Zero(tangent_aval(a)) for a, z in zip(program.out_avals, out_nz)]
    return list(outs[:n]), touts


def _ckpt_fun(program: Program) -> Callable:
    return lambda *xs: eval_program(program, program.consts, xs)


def _ckpt_partial_eval(trace: peval.PartialEvalTrace, tracers: list, *, program: Program,
                       prevent_cse: bool) -> list:
    # Which outputs are known is decided by partial evaluation of the body itself, so equations
    # with their own partial-evaluation rules (scan, cond, ...) split primal from tangent work.
    _, pvals_out = peval.partial_eval_flat(_ckpt_fun(program), [t.pval for t in tracers])
    unknown = [not pv.is_known for pv in pvals_out]
    known_vals = [pv.const for pv in pvals_out if pv.is_known]  # computed now; nothing else kept ...
    if not any(unknown):
        return known_vals
    # ... because the staged equation takes the (known) inputs and recomputes from them
    staged = dce(program, unknown)
    ins = [trace.instantiate_const(t) for t in tracers]
    outs = iter(trace.new_staged(checkpoint_p, ins, {"program": staged, "prevent_cse": prevent_cse},
                                 staged.out_avals))
    kv = iter(known_vals)
    return [next(outs) if u else next(kv) for u in unknown]


def _ckpt_transpose(cts: list, *args: Any, program: Program, prevent_cse: bool) -> list:
    undef = [isinstance(a, UndefPrimal) for a in args]
    pvals = [peval.PartialVal.unknown(a.aval) if u else peval.PartialVal.known(a)
             for a, u in zip(args, undef)]
    lin, pvals_out = peval.partial_eval_flat(_ckpt_fun(program), pvals)  # re-runs the forward here
    cts_unknown = [ct for ct, pv in zip(cts, pvals_out) if not pv.is_known]
    res = iter(ad.backward_pass(lin, lin.consts, [UndefPrimal(v.aval) for v in lin.invars], cts_unknown))
    return [next(res) if u else None for u in undef]


def _ckpt_batch(vals: list, dims: list, *, program: Program, prevent_cse: bool) -> tuple[list, list]:
    size = next(core.get_aval(v).shape[d] for v, d in zip(vals, dims) if d is not None)
    bprog, out_dims = batch_program(program, dims, size)
    outs = checkpoint_p.bind(*vals, program=bprog, prevent_cse=prevent_cse)
    return list(outs), list(out_dims)


checkpoint_p.impl = _ckpt_impl
checkpoint_p.abstract_eval = _ckpt_abstract
checkpoint_p.jvp = _ckpt_jvp
checkpoint_p.transpose = _ckpt_transpose
checkpoint_p.batch = _ckpt_batch
peval.partial_eval_rules[checkpoint_p] = _ckpt_partial_eval


def checkpoint(fun: Callable, *, prevent_cse: bool = True, policy: Callable | None = None,
               static_argnums: int | Sequence[int] = ()) -> Callable:
    """Rematerialize ``fun`` under reverse mode: keep only its inputs as residuals, and recompute
    its intermediates inside the backward pass instead of storing them.

    ``fun`` is traced (like ``jit``): Python control flow may only depend on ``static_argnums``.
    ``policy`` (which intermediates may be saved) is accepted for JAX compatibility and ignored:
    nothing is saved. ``prevent_cse`` is accepted and recorded.
    """
    del policy
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def remat_f(*args: Any, **kwargs: Any) -> Any:
        static = {i % len(args): args[i] for i in nums} if args else {}
        dyn = tuple(a for i, a in enumerate(args) if i not in static)
        leaves, in_tree = tu.flatten((dyn, kwargs))
        avals = ad.leaf_avals(leaves, "checkpoint: argument leaf {i} of type {type} is not an array; mark it "
                              "with static_argnums")
        box: list = []

        def flat(*xs: Any) -> list:
            d, kw = tu.unflatten(in_tree, xs)
            it = iter(d)
            full_args = [static[i] if i in static else next(it) for i in range(len(args))]
            out_leaves, out_tree = tu.flatten(fun(*full_args, **kw))
            box.append(out_tree)
            return out_leaves

        prog, _ = trace_to_program(flat, avals)
        prog, consts = _closure_convert(prog)
        outs = checkpoint_p.bind(*consts, *leaves, program=prog, prevent_cse=bool(prevent_cse))
        return tu.unflatten(box[0], outs)

    return remat_f


remat = checkpoint
