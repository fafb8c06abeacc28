"""The Program IR: typed SSA values, literals, equations, captured constants, sub-programs.

A :class:`Program` is what ``jit`` traces a function into and what every later stage consumes
(transformations, passes, schedules, backends). It pretty-prints, and :func:`validate` type-checks
it by re-running abstract evaluation on every equation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ember._src import core
from ember._src.array import asarray_eager
from ember._src.core import Primitive, ShapedArray
from ember.errors import ShapeError, ValidationError


class Var:
    """An SSA value with an abstract value; identity is the object itself."""

    __slots__ = ("aval", "id")

    def __init__(self, aval: ShapedArray):
        self.aval = aval
        self.id = core.new_var_id()

    def __repr__(self) -> str:
        return f"Var({self.id}:{self.aval.str_short()})"


class Literal:
    """A scalar constant written inline in an equation."""

    __slots__ = ("val", "aval")

    def __init__(self, val: Any, aval: ShapedArray):
        self.val = np.asarray(val, dtype=aval.dtype)
        self.aval = aval

    def __repr__(self) -> str:
        v = self.val.item()
        return repr(v) if not isinstance(v, float) else f"{v:g}"


Atom = Var | Literal


class Eqn:
    """``outvars = prim[params](inputs)``."""

    __slots__ = ("prim", "inputs", "params", "outvars")

    def __init__(self, prim: Primitive, inputs: Sequence[Atom], params: dict, outvars: Sequence[Var]):
        self.prim = prim
        self.inputs = tuple(inputs)
        self.params = params
        self.outvars = tuple(outvars)

    def __repr__(self) -> str:
        return f"Eqn({self.prim.name})"


class Program:
    """A traced, typed program: ``{ lambda consts ; inputs . eqns ; outputs }``."""

    def __init__(self, constvars: Sequence[Var], invars: Sequence[Var], eqns: Sequence[Eqn],
                 outvars: Sequence[Atom], consts: Sequence[Any] = ()):
        self.constvars = tuple(constvars)
        self.invars = tuple(invars)
        self.eqns = tuple(eqns)
        self.outvars = tuple(outvars)
        self.consts = tuple(consts)
        if len(self.consts) not in (0, len(self.constvars)):
            raise ValidationError("number of constants does not match constvars")

    @property
    def in_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.invars]

    @property
    def out_avals(self) -> list[ShapedArray]:
        return [v.aval for v in self.outvars]

    @property
    def effectful(self) -> bool:
        """Whether running this program has effects (an effectful equation, here or in a
        sub-program); computed once."""
        eff = self.__dict__.get("_effectful")
        if eff is None:
            eff = self.__dict__["_effectful"] = any(eqn_effectful(e) for e in self.eqns)
        return eff

    def __str__(self) -> str:
        return pretty_print(self)

    __repr__ = __str__


def _has_effectful_program(v: Any) -> bool:
    if isinstance(v, Program):
        return v.effectful
    if isinstance(v, (tuple, list)):
        return any(_has_effectful_program(x) for x in v)
    return False


def eqn_effectful(e: Eqn) -> bool:
    """Whether ``e`` must run even when its outputs are unused, exactly as often as the program
    says and in program order relative to other effectful equations: its primitive is effectful
    (``Primitive.effectful``, e.g. ``debug_callback``) or a sub-program in its params (a loop or
    cond body, a call) holds such an equation. Passes must not drop, merge (CSE), constant-fold or
    reorder it."""
    return e.prim.effectful or any(_has_effectful_program(v) for v in e.params.values())


# ---------------------------------------------------------------------------------------------
# Pretty printing
# ---------------------------------------------------------------------------------------------


def _name_gen() -> Any:
    names: dict[int, str] = {}

    def name(v: Var) -> str:
        if v.id not in names:
            n = len(names)
            s = ""
            while True:
                s = chr(ord("a") + n % 26) + s
                n = n // 26 - 1
                if n < 0:
                    break
            names[v.id] = s
        return names[v.id]

    return name


def _fmt_param(v: Any) -> str:
    if isinstance(v, Program):
        return "{ ... }"
    if isinstance(v, np.dtype):
        return str(v)
    if isinstance(v, (list, tuple)) and v and isinstance(v[0], Program):
        return "[" + ", ".join("{ ... }" for _ in v) + "]"
    return repr(v)


def pretty_print(p: Program, indent: int = 0) -> str:
    name = _name_gen()

    def atom(a: Atom) -> str:
        return repr(a) if isinstance(a, Literal) else name(a)

    def decl(v: Var) -> str:
        return f"{name(v)}:{v.aval.str_short()}"

    pad = " " * indent
    head = f"{pad}{{ lambda {' '.join(decl(v) for v in p.constvars)} ; " \
           f"{' '.join(decl(v) for v in p.invars)} . let"
    lines = [head]
    for e in p.eqns:
        lhs = " ".join(decl(v) for v in e.outvars)
        params = {k: v for k, v in e.params.items()}
        ps = ("[" + " ".join(f"{k}={_fmt_param(v)}" for k, v in params.items()) + "]") if params else ""
        lines.append(f"{pad}    {lhs} = {e.prim.name}{ps} {' '.join(atom(a) for a in e.inputs)}")
        for k, v in e.params.items():
            subs = [v] if isinstance(v, Program) else list(v) if isinstance(v, (list, tuple)) and v and \
                isinstance(v[0], Program) else []
            for s in subs:
                lines.append(f"{pad}      {k} =")
                lines.append(pretty_print(s, indent + 8))
    lines.append(f"{pad}  in ( {' '.join(atom(a) for a in p.outvars)} ) }}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def definition_errors(p: Program) -> Iterator[str]:
    """Messages for every SSA violation of ``p``: a value defined twice (or a non-Var defined), an
    equation input used before it is defined, an output never defined. Shared by :func:`validate`
    (which raises on the first) and the ``producers`` validator (which reports them all)."""
    env: set[int] = set()

    def define(v: Any, where: str) -> Iterator[str]:
        if not isinstance(v, Var):
            yield f"{where}: expected a Var, got {v!r}"
        elif v.id in env:
            yield f"{where}: value {v} defined twice"
        else:
            env.add(v.id)

    for v in p.constvars:
        yield from define(v, "constvars")
    for v in p.invars:
        yield from define(v, "invars")
    for i, e in enumerate(p.eqns):
        for a in e.inputs:
            if isinstance(a, Var) and a.id not in env:
                yield (f"equation {i} ({e.prim.name}): input {a} used before it is defined "
                       "(no producer before it)")
        for v in e.outvars:
            yield from define(v, f"equation {i} ({e.prim.name})")
    for a in p.outvars:
        if isinstance(a, Var) and a.id not in env:
            yield f"output {a} is not defined (no producer)"


def validate(p: Program) -> None:
    """Type-check ``p``: every value defined once before use (:func:`definition_errors`), every
    equation's avals re-inferred."""
    for message in definition_errors(p):
        raise ValidationError(message)
    for i, e in enumerate(p.eqns):
        try:
            expected = e.prim.abstract([a.aval for a in e.inputs], e.params)
        except Exception as err:
            raise ValidationError(f"equation {i} ({e.prim.name}) fails type checking: {err}") from err
        if len(expected) != len(e.outvars):
            raise ValidationError(f"equation {i} ({e.prim.name}): {len(e.outvars)} outputs, "
                                  f"rule says {len(expected)}")
        for v, a in zip(e.outvars, expected):
            if (v.aval.shape, v.aval.dtype) != (a.shape, a.dtype):
                raise ValidationError(f"equation {i} ({e.prim.name}): output typed {v.aval.str_short()}"
                                      f" but the rule infers {a.str_short()}")


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


def eval_program(p: Program, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
    """Evaluate ``p`` by binding each primitive, so it works under any active transformation."""
    env: dict[int, Any] = {}

    def read(a: Atom) -> Any:
        return a.val if isinstance(a, Literal) else env[a.id]

    for v, x in zip(p.constvars, consts):
        env[v.id] = x
    for v, x in zip(p.invars, args):
        env[v.id] = x
    for e in p.eqns:
        outs = e.prim.bind(*(read(a) for a in e.inputs), **e.params)
        if not e.prim.multiple_results:
            outs = [outs]
        for v, o in zip(e.outvars, outs):
            env[v.id] = o
    return [read(a) for a in p.outvars]


def run_numpy(p: Program, consts: Sequence[np.ndarray], args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The reference executor: run ``p`` on NumPy values with each primitive's implementation."""
    env: dict[int, Any] = {}
    for v, x in zip(p.constvars, consts):
        env[v.id] = x
    for v, x in zip(p.invars, args):
        env[v.id] = x
    for e in p.eqns:
        vals = [a.val if isinstance(a, Literal) else env[a.id] for a in e.inputs]
        outs = e.prim.impl(*vals, **e.params)
        if not e.prim.multiple_results:
            outs = (outs,)
        for v, o in zip(e.outvars, outs):
            o = np.asarray(o)
            if o.dtype != v.aval.dtype:
                o = o.astype(v.aval.dtype)
            env[v.id] = o
    return [a.val if isinstance(a, Literal) else env[a.id] for a in p.outvars]


# ---------------------------------------------------------------------------------------------
# Building programs by tracing
# ---------------------------------------------------------------------------------------------


class ProgramTracer(core.Tracer):
    __slots__ = ("_trace", "_aval")

    def __init__(self, trace: ProgramTrace, aval: ShapedArray):
        self._trace = trace
        self._aval = aval

    @property
    def aval(self) -> ShapedArray:
        return self._aval


class ProgramBuilder:
    """Collects equations, inputs and captured constants while a function is traced."""

    def __init__(self) -> None:
        self.eqns: list[Eqn] = []
        self.tracer_to_var: dict[int, Var] = {}
        self.const_tracers: dict[int, ProgramTracer] = {}
        self.const_vals: dict[int, Any] = {}
        self.tracers: list[ProgramTracer] = []

    def new_tracer(self, trace: ProgramTrace, aval: ShapedArray) -> ProgramTracer:
        t = ProgramTracer(trace, aval)
        self.tracers.append(t)
        return t

    def add_var(self, t: ProgramTracer) -> Var:
        v = self.tracer_to_var.get(id(t))
        if v is None:
            v = self.tracer_to_var[id(t)] = Var(t.aval)
        return v

    def get_var(self, t: ProgramTracer) -> Var:
        return self.tracer_to_var[id(t)]

    def build(self, in_tracers: Sequence[ProgramTracer], out_tracers: Sequence[ProgramTracer]) -> Program:
        constvars, consts = [], []
        for cid, val in self.const_vals.items():
            constvars.append(self.tracer_to_var[cid])
            consts.append(val)
        invars = [self.get_var(t) for t in in_tracers]
        outvars = []
        for t in out_tracers:
            if id(t) not in self.tracer_to_var:
                raise core.TracerError("an output of the traced function was not computed from its "
                                       "inputs in this trace (a leaked tracer?)")
            outvars.append(self.tracer_to_var[id(t)])
        prog = Program(constvars, invars, self.eqns, outvars, consts)
        return inline_literals(prog)


class ProgramTrace(core.Trace):
    """Records each primitive as an equation instead of running it."""

    @property
    def builder(self) -> ProgramBuilder:
        return self.main.global_data

    def new_arg(self, aval: ShapedArray) -> ProgramTracer:
        t = self.builder.new_tracer(self, aval)
        self.builder.add_var(t)
        return t

    def pure(self, val: Any) -> ProgramTracer:
        b = self.builder
        arr = val if isinstance(val, core.Tracer) else asarray_eager(val)
        key = id(arr)
        t = b.const_tracers.get(key)
        if t is None:
            t = b.new_tracer(self, core.get_aval(arr))
            b.add_var(t)
            b.const_tracers[key] = t
            b.const_vals[id(t)] = arr
        return t

    lift = pure

    def process_primitive(self, prim: Primitive, tracers: list, params: dict) -> list:
        avals_in = [t.aval for t in tracers]
        avals_out = prim.abstract(avals_in, params)
        b = self.builder
        invars = [b.get_var(t) for t in tracers]
        outs = [b.new_tracer(self, a) for a in avals_out]
        outvars = [b.add_var(t) for t in outs]
        b.eqns.append(Eqn(prim, invars, params, outvars))
        return outs


def dce(p: Program, used: Sequence[bool] | None = None) -> Program:
    """``p`` without the equations and captured constants no kept output depends on. ``used``
    flags the outputs to keep (all when None); the others are dropped from ``p.outvars``.
    An equation whose results are unused is dropped unless it is effectful (:func:`eqn_effectful`:
    a debug callback, or a loop/branch/call whose body holds one), which always runs."""
    kept_outs = list(p.outvars) if used is None else [a for a, u in zip(p.outvars, used) if u]
    live: set[int] = {a.id for a in kept_outs if isinstance(a, Var)}
    eqns = []
    for e in reversed(p.eqns):
        if any(o.id in live for o in e.outvars) or eqn_effectful(e):
            eqns.append(e)
            live.update(a.id for a in e.inputs if isinstance(a, Var))
    eqns.reverse()
    keep = [(v, c) for v, c in zip(p.constvars, p.consts) if v.id in live] if p.consts else []
    constvars = [v for v, _ in keep] if p.consts else [v for v in p.constvars if v.id in live]
    return Program(constvars, p.invars, eqns, kept_outs, [c for _, c in keep])


def inline_literals(p: Program) -> Program:
    """Turn 0-d constants (Python scalars and scalar arrays) into literals inside equations."""
    lit: dict[int, Literal] = {}
    constvars, consts = [], []
    for v, c in zip(p.constvars, p.consts):
        val = getattr(c, "value", c)
        if isinstance(val, np.ndarray) and val.ndim == 0 and not isinstance(c, core.Tracer):
            lit[v.id] = Literal(val, v.aval)
        else:
            constvars.append(v)
            consts.append(c)
    if not lit:
        return p

    def sub(a: Atom) -> Atom:
        return lit.get(a.id, a) if isinstance(a, Var) else a

    eqns = [Eqn(e.prim, [sub(a) for a in e.inputs], e.params, e.outvars) for e in p.eqns]
    return Program(constvars, p.invars, eqns, [sub(a) for a in p.outvars], consts)


def trace_to_program(fun: Any, in_avals: Sequence[ShapedArray]) -> tuple[Program, list]:
    """Trace the flat function ``fun(*tracers) -> list`` into a Program.

    Returns the program and the list of output tracers' lowered values (for diagnostics).
    Captured constants that are tracers of an enclosing transformation are kept as constants
    (the caller binds them).
    """
    builder = ProgramBuilder()
    with core.new_main(ProgramTrace, builder) as main, core.new_dynamic(main):
        trace = ProgramTrace(main)
        tracers_in = [trace.new_arg(a) for a in in_avals]
        outs = fun(*tracers_in)
        tracers_out = [trace.full_raise(o) for o in outs]
        prog = builder.build(tracers_in, tracers_out)
    return prog, outs


# ---------------------------------------------------------------------------------------------
# Resolving symbolic dimensions under an axis binding
# ---------------------------------------------------------------------------------------------


from ember._src import shapes as _sh  # noqa: E402


def resolve_value(v: Any, env: dict[str, int], memo: dict | None = None) -> Any:
    """``v`` (a dim, a tuple/list/dict of params, a Program) with every symbolic dim evaluated
    under ``env``; containers without symbolic content are returned as the same object."""
    t = type(v)
    if t is _sh.DimExpr:
        if memo is None:
            return _sh.evaluate(v, env)
        d = memo.get(v)
        if d is None:
            d = memo[v] = _sh.evaluate(v, env)
        return d
    if t is tuple or t is list:
        items = [resolve_value(x, env, memo) for x in v]
        return v if all(a is b for a, b in zip(items, v)) else t(items)
    if t is dict:
        new = {k: resolve_value(x, env, memo) for k, x in v.items()}
        return v if all(new[k] is x for k, x in v.items()) else new
    if t is Program:
        return resolve_program(v, env, memo)
    return v


def resolve_program(p: Program, env: dict[str, int], memo: dict | None = None) -> Program:
    """The statically shaped Program of ``p`` under the axis binding ``env`` (``{"batch": 32}``).

    Every symbolic dim in the avals of ``p``'s values and in equation params (shapes, slice
    bounds, padding, sub-programs) is replaced by its value under ``env``. Values whose aval is
    already static keep their :class:`Var`; equations without symbolic content keep their params
    dict. A ``dim_as_value`` equation (a symbolic size used as a number) becomes a literal.
    Raises :class:`~ember.errors.ShapeError` when an axis is unbound or a value's size comes out
    negative (the binding violates a shape constraint of the program).
    """

    memo = {} if memo is None else memo
    atoms: dict[int, Atom] = {}

    def var(v: Var) -> Var:
        shape = resolve_value(v.aval.shape, env, memo)
        if shape is v.aval.shape:
            return v
        if any(d < 0 for d in shape):
            raise ShapeError(f"a value of type {v.aval.str_short()} gets the negative shape {shape} "
                             f"under the binding {_fmt_env(env)}: the binding violates a shape "
                             "constraint of the program")
        nv = atoms[v.id] = Var(ShapedArray(shape, v.aval.dtype, v.aval.weak_type))
        return nv

    def read(a: Atom) -> Atom:
        return atoms.get(a.id, a) if isinstance(a, Var) else a

    constvars = [var(v) for v in p.constvars]
    invars = [var(v) for v in p.invars]
    eqns = []
    for e in p.eqns:
        params = resolve_value(e.params, env, memo)
        if e.prim.name == "dim_as_value":
            (out,) = e.outvars
            atoms[out.id] = Literal(params["dim"], out.aval)
            continue
        eqns.append(Eqn(e.prim, [read(a) for a in e.inputs], params, [var(v) for v in e.outvars]))
    return Program(constvars, invars, eqns, [read(a) for a in p.outvars], p.consts)


def _fmt_env(env: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in env.items()) + "}"
