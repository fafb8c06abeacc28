"""Named dynamic axes for ``jit``: specs, axis bindings and the specialization cache.

``jit(f, dynamic_axes={"x": ("batch", None)})`` traces ``f`` once per *symbolic* signature: the
named dims of the inputs become :class:`~ember._src.shapes.DimExpr` axes, so the Program's shapes
and shape-carrying params (``broadcast_in_dim(shape=(batch, 512))``, ``reshape(new_sizes=
(batch*seq, d))``, slice limits, ``iota(shape=(seq,))``) are symbolic. A call binds the axes from
the concrete input shapes (``{batch: 32}``) and runs a :class:`Specialization` for that binding:
the Program resolved to static sizes and handed to the backend (level 2), kept in an LRU cache.

Backend protocol (see ``docs/INTERNALS.md``): a ``BACKENDS[name]`` factory may carry an attribute
``specialize(program, env, **options) -> run`` that accepts a symbolic Program and a binding;
without it, the Program is resolved to a static one (:func:`program.resolve_program`) and given to
the factory itself, which is correct but compiles once per binding.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ember._src import ad_util as ad
from ember._src import dtypes as dt
from ember._src import shapes as sh
from ember._src import tree as tu
from ember._src.core import Primitive, ShapedArray
from ember._src.debug import logger
from ember._src.program import Program, resolve_program, resolve_value
from ember.errors import BindingError, ShapeError

# ---------------------------------------------------------------------------------------------
# Symbolic sizes as values
# ---------------------------------------------------------------------------------------------


dim_as_value_p = Primitive("dim_as_value")
dim_as_value_p.impl = lambda *, dim, dtype: np.asarray(sh.evaluate(dim, {}), dtype)
dim_as_value_p.abstract_eval = lambda *, dim, dtype: ShapedArray((), dtype, True)
dim_as_value_p.jvp = lambda primals, tangents, **p: (
    [dim_as_value_p.bind(**p)], [ad.Zero(ShapedArray((), p["dtype"], True))])
dim_as_value_p.na("transpose", "dim_as_value has no operands")
dim_as_value_p.na("batch", "dim_as_value has no operands, so it is never batched")


def dimension_as_value(d: sh.Dim, dtype: Any = None) -> Any:
    """A (possibly symbolic) size as a weakly typed integer scalar usable in arithmetic.

    ``x.sum(0) / dimension_as_value(x.shape[0])`` divides by the size of a named axis; for an
    ``int`` it returns the ``int`` itself.
    """
    if not isinstance(d, sh.DimExpr):
        return sh.canonical_dim(d)
    return dim_as_value_p.bind(dim=d, dtype=dt.canonicalize(dtype or dt.default_int))


# ---------------------------------------------------------------------------------------------
# Parsing dynamic_axes
# ---------------------------------------------------------------------------------------------


class LeafSpec:
    """The parsed spec of one array argument: named dims, declared static dims, rank."""

    __slots__ = ("text", "named", "fixed", "rank", "exact")

    def __init__(self, entries: Sequence[Any], text: str):
        self.text = text
        if sum(1 for e in entries if e is Ellipsis) > 1:
            raise ValueError(f"dynamic_axes spec {text}: '...' may appear once")
        cut = next((i for i, e in enumerate(entries) if e is Ellipsis), None)
        self.exact = cut is None
        head = list(entries if cut is None else entries[:cut])
        tail = [] if cut is None else list(entries[cut + 1:])
        positioned = list(enumerate(head)) + [(i - len(tail), e) for i, e in enumerate(tail)]
        self.rank = len(head) + len(tail)
        self.named = tuple((pos, e, sh.axis(e)) for pos, e in positioned if isinstance(e, str))
        self.fixed = tuple((pos, e) for pos, e in positioned if isinstance(e, int))

    def __repr__(self) -> str:
        return f"LeafSpec({self.text})"


def _parse_token(tok: Any, where: str) -> Any:
    if tok is None or tok is Ellipsis:
        return tok
    if isinstance(tok, sh.DimExpr):
        tok = str(tok)
    if isinstance(tok, (int, np.integer)) and not isinstance(tok, bool):
        if tok < 0:
            raise ValueError(f"{where}: negative static size {tok}")
        return int(tok)
    if isinstance(tok, str):
        t = tok.strip()
        if t in ("", "_", "None", "?"):
            return None
        if t == "...":
            return Ellipsis
        if t.isdigit():
            return int(t)
        if t.isidentifier():
            return t
    raise ValueError(f"{where}: cannot read {tok!r} as a dim (an axis name, an int, None, '_' or '...')")


def parse_leaf_spec(spec: Any, where: str) -> LeafSpec | None:
    """``"batch, 512"``, ``("batch", None)``, ``["batch", "_"]``, ``"batch, ..."`` or ``None``."""
    if spec is None:
        return None
    if isinstance(spec, str):
        body = spec.strip()
        if body[:1] in "([" and body[-1:] in ")]":
            body = body[1:-1]
        toks = [t for t in body.split(",")]
        if toks and not toks[-1].strip() and len(toks) > 1:
            toks = toks[:-1]  # "batch," is a 1-d spec
        if not body.strip():
            toks = []
        if any(not t.strip() for t in toks):
            raise ValueError(f"{where}: dynamic_axes spec {spec!r} has an empty entry; write '_' (or '?', "
                             "'None') for a dim without a name")
    elif isinstance(spec, (tuple, list)):
        toks = list(spec)
    else:
        raise ValueError(f"{where}: a dynamic_axes spec is a string like 'batch, 512' or a tuple like "
                         f"('batch', None), got {spec!r}")
    entries = [_parse_token(t, where) for t in toks]
    return LeafSpec(entries, repr(spec))


def _is_leaf_spec(spec: Any) -> bool:
    return isinstance(spec, str) or (isinstance(spec, (tuple, list)) and all(
        e is None or e is Ellipsis or isinstance(e, (str, int, sh.DimExpr)) for e in spec))


def _node(x: Any) -> Any:
    return tu._node_of(x)


def _child_name(name: str, node: Any, aux: Any, i: int) -> str:
    if isinstance(aux, tuple) and len(aux) > i and isinstance(node, type) and issubclass(node, dict):
        return f"{name}[{aux[i]!r}]"
    fields = getattr(node, "_fields", None)
    if fields is not None and i < len(fields):
        return f"{name}.{fields[i]}"
    return f"{name}[{i}]"


def _match(spec: Any, arg: Any, name: str, specs: list, names: list) -> None:
    """Append one parsed spec and one name per leaf of ``arg`` (in ``tree.flatten`` order)."""
    n = _node(arg)
    if n is None:
        specs.append(parse_leaf_spec(spec, f"dynamic_axes for {name}"))
        names.append(name)
        return
    node, children, aux = n
    if spec is None or isinstance(spec, str):
        sub = [spec] * len(children)
    elif isinstance(spec, Mapping) and isinstance(node, type) and issubclass(node, dict):
        unknown = set(spec) - set(aux)
        if unknown:
            raise ValueError(f"dynamic_axes for {name}: keys {sorted(map(str, unknown))} are not in the "
                             f"argument (keys {list(aux)})")
        sub = [spec.get(k) for k in aux]
    elif node in (tuple, list) or hasattr(node, "_fields"):
        if not isinstance(spec, (tuple, list)) or len(spec) != len(children):
            raise ValueError(f"dynamic_axes for {name}: spec {spec!r} does not match the argument's "
                             f"{len(children)} entries (use a string like 'batch, _' to apply one "
                             "spec to every leaf)")
        sub = list(spec)
    elif _node(spec) is not None and _node(spec)[0] is node:
        sub = _node(spec)[1]
    elif _is_leaf_spec(spec):
        sub = [spec] * len(children)
    else:
        raise ValueError(f"dynamic_axes for {name}: spec {spec!r} does not match the structure of the "
                         f"argument ({tu.structure(arg)})")
    for i, (s, c) in enumerate(zip(sub, children)):
        _match(s, c, _child_name(name, node, aux, i), specs, names)


class DynamicAxes:
    """The ``dynamic_axes=`` of one jitted function, matched against its parameters."""

    def __init__(self, spec: Any, sig: Any, fun_name: str):
        self.fun_name = fun_name
        params = list(sig.parameters.values()) if sig is not None else []
        self.positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        has_var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
        if isinstance(spec, str):
            raise ValueError("dynamic_axes takes a dict by parameter name ({'x': 'batch, _'}) or a "
                             "sequence with one spec per positional argument, not a bare string")
        if isinstance(spec, Mapping):
            names = {p.name for p in params}
            for k in spec:
                if isinstance(k, int):
                    continue
                if sig is not None and k not in names and not has_var_kw:
                    raise ValueError(f"{fun_name}: dynamic_axes names {k!r}, which is not a parameter "
                                     f"(parameters: {', '.join(p.name for p in params)})")
        elif not isinstance(spec, (tuple, list)):
            raise ValueError(f"dynamic_axes must be a dict or a sequence, got {type(spec).__name__}")
        self.spec = spec
        self._cache: dict[Any, tuple[list, list]] = {}

    def _for_position(self, i: int) -> Any:
        if isinstance(self.spec, Mapping):
            if i < len(self.positional) and self.positional[i] in self.spec:
                return self.spec[self.positional[i]]
            return self.spec.get(i)
        return self.spec[i] if i < len(self.spec) else None

    def _for_keyword(self, k: str) -> Any:
        if isinstance(self.spec, Mapping):
            return self.spec.get(k)
        if k in self.positional:
            return self._for_position(self.positional.index(k))
        return None

    def leaf_specs(self, in_tree: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                   static_pos: Mapping[int, Any]) -> tuple[list, list]:
        """Per-leaf specs and names for dynamic ``args``/``kwargs`` (cached per structure)."""
        key = (in_tree, tuple(static_pos))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        specs: list = []
        names: list = []
        positions = [i for i in range(len(args) + len(static_pos)) if i not in static_pos]
        for i, a in zip(positions, args):
            name = self.positional[i] if i < len(self.positional) else f"args[{i}]"
            _match(self._for_position(i), a, name, specs, names)
        for k in sorted(kwargs):
            _match(self._for_keyword(k), kwargs[k], k, specs, names)
        self._cache[key] = (specs, names)
        return specs, names

    @staticmethod
    def bind(specs: Sequence[LeafSpec | None], names: Sequence[str], avals: Sequence[ShapedArray],
             keep_symbolic: bool = False) -> tuple[tuple, dict[str, int]]:
        """Symbolic avals (named dims replaced by axes) and the binding ``{axis: size}``."""
        env: dict[str, int] = {}
        out = []
        for spec, name, a in zip(specs, names, avals):
            if spec is None or (keep_symbolic and not sh.is_static_shape(a.shape)):
                out.append(a)
                continue
            shape = a.shape
            nd = len(shape)
            if nd != spec.rank if spec.exact else nd < spec.rank:
                raise ShapeError(f"{name}: dynamic_axes spec {spec.text} describes "
                                 f"{'' if spec.exact else 'at least '}{spec.rank} dims, but the "
                                 f"argument has shape {sh.shape_str(shape)}")
            new = list(shape)
            for pos, ax, expr in spec.named:
                size = shape[pos]
                prev = env.setdefault(ax, size)
                if prev != size:
                    _raise_binding_error(specs, names, avals)
                new[pos] = expr
            for pos, val in spec.fixed:
                if shape[pos] != val:
                    _raise_binding_error(specs, names, avals)
            out.append(ShapedArray(tuple(new), a.dtype, a.weak_type))
        return tuple(out), env


def _raise_binding_error(specs: Sequence[LeafSpec | None], names: Sequence[str],
                         avals: Sequence[ShapedArray]) -> None:
    """Raise ``shapes.bind_axes``'s error (conflicting sizes or a declared static dim)."""
    triples = []
    for spec, name, a in zip(specs, names, avals):
        if spec is None:
            continue
        sym = list(a.shape)
        for pos, _, expr in spec.named:
            sym[pos] = expr
        for pos, val in spec.fixed:
            sym[pos] = val
        triples.append((name, tuple(sym), a.shape))
    sh.bind_axes(triples)
    raise AssertionError("internal error: binding failed but bind_axes found no conflict")  # pragma: no cover


def program_axes(program: Program) -> tuple[str, ...]:
    """Axis names of the Program's inputs, in order of first appearance."""
    seen: dict[str, None] = {}
    for v in program.invars:
        for d in v.aval.shape:
            if isinstance(d, sh.DimExpr):
                for a in sorted(d.axes()):
                    seen.setdefault(a, None)
    return tuple(seen)


def is_symbolic_program(program: Program) -> bool:
    return any(not sh.is_static_shape(v.aval.shape) for v in (*program.invars, *program.constvars))


# ---------------------------------------------------------------------------------------------
# Level 2: specializations and their LRU cache
# ---------------------------------------------------------------------------------------------


class Specialization:
    """A symbolic Program made runnable for one binding: ``spec(list_of_np) -> list_of_np``."""

    __slots__ = ("env", "out_avals", "run", "program", "build_us")

    def __init__(self, env: dict[str, int], out_avals: list[ShapedArray], run: Callable,
                 program: Program | None, build_us: float):
        self.env = env
        self.out_avals = out_avals
        self.run = run
        self.program = program  # the resolved static Program, when one was built
        self.build_us = build_us

    def __call__(self, vals: list) -> list:
        return self.run(vals)

    def __repr__(self) -> str:
        return f"Specialization({_fmt_env(self.env)}, built in {self.build_us:.1f} us)"


class SpecializationCache:
    """An LRU of specializations shared by the signatures of one jitted function."""

    def __init__(self, maxsize: int = 64):
        if maxsize < 1:
            raise ValueError(f"specialization_cache_size must be >= 1, got {maxsize}")
        self.maxsize = int(maxsize)
        self._d: OrderedDict[Any, Specialization] = OrderedDict()
        self.built = 0
        self.hits = 0
        self.evictions = 0

    def get(self, key: Any) -> Specialization | None:
        s = self._d.get(key)
        if s is not None:
            self._d.move_to_end(key)
            self.hits += 1
        return s

    def put(self, key: Any, s: Specialization) -> None:
        self.built += 1
        self._d[key] = s
        if len(self._d) > self.maxsize:
            self._d.popitem(last=False)
            self.evictions += 1

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        self._d.clear()


def _fmt_env(env: Mapping[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in env.items()) + "}"


def has_dim_expr(v: Any) -> bool:
    """Whether params (or any nested value) hold a symbolic size or a sub-program."""
    if isinstance(v, sh.DimExpr):
        return True
    if isinstance(v, (tuple, list)):
        return any(has_dim_expr(x) for x in v)
    if isinstance(v, dict):
        return any(has_dim_expr(x) for x in v.values())
    if isinstance(v, Program):
        return True
    return False


# Primitives whose symbolic shape checks hold for every binding once they pass at trace time
# (equalities of canonical polynomials); other primitives with symbolic params are re-checked.
_BINDING_INDEPENDENT = {"broadcast_in_dim", "iota", "dim_as_value"}
# Primitives re-checked per binding even when their params hold no symbolic size (ensure_shape
# restating a symbolic shape as a static one)
_BINDING_DEPENDENT = {"ensure_shape"}


# Reductions without an identity: an axis that may be empty under some binding is re-checked per
# binding, so every backend raises the same ShapeError instead of returning an identity.
_NO_IDENTITY = {"reduce_max", "reduce_min", "argmax", "argmin"}


def _at_least_one(d: Any) -> bool:
    if not isinstance(d, sh.DimExpr):
        return d >= 1
    try:
        return sh._compare(d, 1, ">=")
    except ShapeError:
        return False


def _may_reduce_empty(e: Any) -> bool:
    if e.prim.name not in _NO_IDENTITY:
        return False
    shape = e.inputs[0].aval.shape
    axes = e.params["axes"] if "axes" in e.params else (e.params["axis"],)
    return any(not _at_least_one(shape[a]) for a in axes)


def _always_valid(e: Any) -> bool:
    if e.prim.name in _BINDING_INDEPENDENT:
        return True
    if e.prim.name == "reshape":  # size equality of polynomials without opaque atoms
        return all(a.kind == "var" for d in e.params["new_sizes"] if isinstance(d, sh.DimExpr)
                   for a in d.atoms())
    return False


def _sub_programs(v: Any) -> list[Program]:
    if isinstance(v, Program):
        return [v]
    if isinstance(v, (tuple, list)):
        return [p for x in v for p in _sub_programs(x)]
    if isinstance(v, dict):
        return [p for x in v.values() for p in _sub_programs(x)]
    return []


def _collect_checks(program: Program, exprs: dict, checked: list, seen: set) -> None:
    """The symbolic sizes of ``program``'s values and the equations to re-check per binding,
    nested programs (loop bodies, branches) included. An equation holding sub-programs is not
    re-checked itself: its typing (operands against the sub-programs' inputs, a scan's length
    against its xs) is equalities of canonical polynomials, true for every binding, and
    re-checking it would resolve the whole sub-program at every new binding; its sub-programs'
    own equations are checked instead."""
    for e in program.eqns:
        for v in e.outvars:
            for d in v.aval.shape:
                if isinstance(d, sh.DimExpr):
                    exprs.setdefault(d, None)
        subs = _sub_programs(e.params)
        if subs:
            for p in subs:
                if id(p) not in seen:
                    seen.add(id(p))
                    _collect_checks(p, exprs, checked, seen)
            continue
        if ((has_dim_expr(e.params) or e.prim.name in _BINDING_DEPENDENT) and not _always_valid(e)) \
                or _may_reduce_empty(e):
            checked.append(e)


class SymbolicExecutable:
    """Level 1 for a Program with symbolic dims: ``exe(list_of_np)`` binds the axes from the input
    shapes and runs the specialization for that binding (building it on first use)."""

    def __init__(self, program: Program, factory: Callable, backend: str, options: dict,
                 cache: SpecializationCache, label: str = "jit"):
        self.program = program
        self.factory = factory
        self.backend = backend
        self.options = options
        self.cache = cache
        self.label = label
        self.axes = program_axes(program)
        self._backend_specialize = getattr(factory, "specialize", None)
        self._in_shapes = [v.aval.shape for v in program.invars]
        # sizes that must come out >= 0 under a binding, and the equations whose shape checks
        # depend on the binding (slice bounds, ...), re-run at each binding
        exprs: dict[sh.DimExpr, None] = {}
        self._checked: list = []
        _collect_checks(program, exprs, self._checked, set())
        self._sizes = list(exprs)
        self._warned_fallback = False

    def env_from_shapes(self, shapes: Sequence[tuple]) -> dict[str, int]:
        names = [f"input {i}" for i in range(len(shapes))]
        return sh.bind_axes(list(zip(names, self._in_shapes, shapes)))

    def __call__(self, vals: Sequence[np.ndarray]) -> list:
        env = self.env_from_shapes([np.shape(v) for v in vals])
        return self.specialization(env).run(list(vals))

    def specialization(self, env: Mapping[str, int]) -> Specialization:
        key = (self, tuple(map(env.__getitem__, self.axes)))
        s = self.cache.get(key)
        if s is None:
            s = self.build(env)
            self.cache.put(key, s)
        return s

    def _check(self, env: dict[str, int]) -> None:
        memo: dict = {}
        for a in self.axes:
            if env[a] < 1:
                raise ShapeError(f"axis {a!r} must be >= 1 for a symbolic specialization, got {env[a]}")
        for d in self._sizes:
            n = memo[d] = sh.evaluate(d, env)
            if n < 0:
                raise BindingError(f"{self.label}: the binding {_fmt_env(env)} violates a shape constraint "
                                 f"of the program: size {d} would be {n}")
        for e in self._checked:
            ins = [ShapedArray(resolve_value(a.aval.shape, env, memo), a.aval.dtype, a.aval.weak_type)
                   for a in e.inputs]
            params = resolve_value(e.params, env, memo)
            try:
                outs = e.prim.abstract(ins, params)
            except ShapeError as err:
                raise BindingError(f"{self.label}: the binding {_fmt_env(env)} violates a shape "
                                 f"constraint of the program: {err}") from None
            for v, o in zip(e.outvars, outs):
                want = resolve_value(v.aval.shape, env, memo)
                if o.shape != want:
                    raise BindingError(f"{self.label}: the binding {_fmt_env(env)} violates a shape "
                                     f"constraint: {e.prim.name} gives {sh.shape_str(o.shape)}, the "
                                     f"program expects {v.aval.str_short()} = {sh.shape_str(want)}")

    def build(self, env: Mapping[str, int]) -> Specialization:
        t0 = time.perf_counter()
        env = {a: int(env[a]) for a in self.axes}
        self._check(env)
        resolved = None
        if self._backend_specialize is not None:
            run = self._backend_specialize(self.program, env, **self.options)
        else:
            if not self._warned_fallback:
                logger.debug("%s: backend %r has no symbolic support (no `specialize`): compiling a "
                              "static program for each binding", self.label, self.backend)
                self._warned_fallback = True
            resolved = resolve_program(self.program, env)
            run = self.factory(resolved, **self.options)
        out_avals = [ShapedArray(sh.evaluate_shape(a.shape, env), a.dtype, a.weak_type)
                     for a in self.program.out_avals]
        us = (time.perf_counter() - t0) * 1e6
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: specialization %s built in %.1f us (backend %s)", self.label,
                         _fmt_env(env), us, self.backend)
        return Specialization(env, out_avals, run, resolved, us)


# ---------------------------------------------------------------------------------------------
# Explaining retraces
# ---------------------------------------------------------------------------------------------


def explain_retrace(avals: Sequence[ShapedArray], names: Sequence[str], statics: Any,
                    old: Sequence[tuple[Sequence[ShapedArray], Any]]) -> str:
    """Why a signature missed the cache, against the closest earlier one with the same structure."""
    if not old:
        return "first call with this argument structure"
    best: list[str] | None = None
    for o_avals, o_statics in old:
        diffs = []
        if o_statics != statics:
            diffs.append(f"static arguments changed from {o_statics} to {statics}")
        for name, a, b in zip(names, o_avals, avals):
            if a == b:
                continue
            if a.dtype != b.dtype or a.weak_type != b.weak_type:
                diffs.append(f"{name}: dtype {a.str_short()} -> {b.str_short()}")
            elif a.ndim != b.ndim:
                diffs.append(f"{name}: rank {a.ndim} -> {b.ndim} ({a.str_short()} -> {b.str_short()})")
            else:
                for i, (x, y) in enumerate(zip(a.shape, b.shape)):
                    if x != y:
                        diffs.append(f"{name}: dim {i} changed {x} -> {y} (a static dim; name it in "
                                     "dynamic_axes to share one trace)")
        if best is None or len(diffs) < len(best):
            best = diffs
    return "; ".join(best or ["argument structure changed"])
