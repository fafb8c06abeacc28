"""The strict schema of a saved graph (``program.json``, format ``ember.torch_graph``).

A saved graph is untrusted input: :func:`check_graph` checks every field's type, that there are no
unknown fields, every op against the handler registry (and its arguments against the handler's
signature), every reference against the names defined before it, every dim expression's axis
names and operators, and bounds every static size, before a :class:`Graph` is built. A violation
raises :class:`SchemaError` naming the field as a JSON path (``nodes[12].shape[1]``).

Nothing here allocates by a size read from the file; the tensors' sizes are checked against the
weights file by the session loader.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from typing import Any

from ember._src.torch_import.graph import FORMAT, FORMAT_VERSION, Graph, Input, Node
from ember._src.torch_import.ops import OPS, Ctx

#: the largest static size of one dimension a saved graph may record
MAX_DIM = 2 ** 31 - 1
#: the largest bound of an axis's range (torch records larger ones as unbounded: ``null``)
MAX_RANGE = 2 ** 62
#: the largest static element count of one value a saved graph may record
MAX_ELEMENTS = 2 ** 34
#: the deepest nesting of lists in an argument, and of operators in a dim expression
MAX_DEPTH = 16
#: the longest name (node, input, axis, output) a saved graph may hold
MAX_NAME = 1024
#: integer literals in arguments must fit int64 (torch records ``sys.maxsize`` as "to the end")
INT64 = (-(2 ** 63), 2 ** 63 - 1)

DTYPES = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
                    "float64", "complex64", "complex128"})
INPUT_KINDS = frozenset({"user", "param", "constant", "literal", "state"})
DIM_OPS = frozenset({"add", "mul", "floordiv", "mod", "max", "min"})
GUARD_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})  # (guards.COMPARISONS)
MAX_GUARDS = 4096
_AXIS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_GRAPH_KEYS = ("format", "version", "inputs", "nodes", "outputs", "output_names", "mutations", "ranges")
_INPUT_KEYS = ("name", "kind", "target", "shape", "dtype")
_NODE_KEYS = ("name", "op", "args", "kwargs", "shape", "dtype", "source")


class SchemaError(ValueError):
    """A saved document that does not follow its schema: ``path`` is the JSON path of the field."""

    def __init__(self, path: str, msg: str):
        self.path = path
        self.msg = msg
        super().__init__(f"{path}: {msg}" if path else msg)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_version(obj: Any, fmt: str, version: int, what: str) -> None:
    """Check ``obj["format"]`` and ``obj["version"]`` (a newer version is named as such)."""
    if not isinstance(obj, dict):
        raise SchemaError("", f"not a JSON object (got {type(obj).__name__}): not an {fmt} document")
    if "format" not in obj:
        raise SchemaError("format", f"is missing: not an {fmt} document")
    if obj.get("format") != fmt:
        raise SchemaError("format", f"is {_show(obj.get('format'))}, expected {fmt!r}")
    v = obj.get("version")
    if not _is_int(v):
        raise SchemaError("version", f"must be an integer, got {_show(v)}")
    if v > version:
        raise SchemaError("version", f"{what} was written in {fmt} version {v}, newer than this ember "
                                     f"reads (version {version}): upgrade ember or re-export the model")
    if v != version:
        raise SchemaError("version", f"{fmt} version {v} is not supported (this ember reads version "
                                     f"{version}): re-export the model")


def check_keys(obj: Any, path: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    """``obj`` must be an object with exactly ``keys`` (plus any of ``optional``)."""
    if not isinstance(obj, dict):
        raise SchemaError(path, f"must be an object, got {_show(obj)}")
    for k in keys:
        if k not in obj:
            raise SchemaError(_join(path, k), "is missing")
    for k in obj:
        if k not in keys and k not in optional:
            raise SchemaError(_join(path, str(k)), "is not a field of this format")
    return obj


def check_list(obj: Any, path: str) -> list:
    if not isinstance(obj, list):
        raise SchemaError(path, f"must be a list, got {_show(obj)}")
    return obj


def check_name(obj: Any, path: str) -> str:
    if not isinstance(obj, str) or not obj:
        raise SchemaError(path, f"must be a non-empty string, got {_show(obj)}")
    if len(obj) > MAX_NAME:
        raise SchemaError(path, f"is longer than {MAX_NAME} characters")
    return obj


def check_axis(obj: Any, path: str) -> str:
    if not isinstance(obj, str) or not _AXIS.match(obj) or len(obj) > MAX_NAME:
        raise SchemaError(path, f"an axis name must be an identifier, got {_show(obj)}")
    return obj


def check_dtype(obj: Any, path: str) -> str:
    if not isinstance(obj, str) or obj not in DTYPES:
        raise SchemaError(path, f"unknown dtype {_show(obj)} (one of {', '.join(sorted(DTYPES))})")
    return obj


def check_size(obj: Any, path: str) -> int:
    if not _is_int(obj) or not 0 <= obj <= MAX_DIM:
        raise SchemaError(path, f"a size must be an integer in [0, {MAX_DIM}], got {_show(obj)}")
    return obj


def check_dim(obj: Any, path: str, axes: set[str], depth: int = 0) -> Any:
    """A dim expression: a size, a known axis name or ``{"op": ..., "args": [...]}``."""
    if _is_int(obj):
        if abs(obj) > MAX_DIM:
            raise SchemaError(path, f"a size must be at most {MAX_DIM} in magnitude, got {obj}")
        return obj
    if isinstance(obj, str):
        if obj not in axes:
            raise SchemaError(path, f"axis {_show(obj)} is not an axis of the inputs ({sorted(axes)})")
        return obj
    if not isinstance(obj, dict):
        raise SchemaError(path, 'a dim must be a size, an axis name or {"op": ..., "args": [...]}, '
                                f"got {_show(obj)}")
    if depth >= MAX_DEPTH:
        raise SchemaError(path, f"dim expression nested deeper than {MAX_DEPTH}")
    check_keys(obj, path, ("op", "args"))
    if not isinstance(obj["op"], str) or obj["op"] not in DIM_OPS:
        raise SchemaError(_join(path, "op"), f"unknown operator {_show(obj['op'])}")
    args = check_list(obj["args"], _join(path, "args"))
    if not 1 <= len(args) <= 64:
        raise SchemaError(_join(path, "args"), "must hold 1 to 64 operands")
    for i, a in enumerate(args):
        check_dim(a, f"{path}.args[{i}]", axes, depth + 1)
    if obj["op"] in ("floordiv", "mod") and any(a == 0 for a in args[1:] if _is_int(a)):
        raise SchemaError(_join(path, "args"), "divides by zero")
    return obj


def check_shape(obj: Any, path: str, axes: set[str]) -> list:
    dims = check_list(obj, path)
    if len(dims) > 64:
        raise SchemaError(path, "more than 64 dimensions")
    for i, d in enumerate(dims):
        check_dim(d, f"{path}[{i}]", axes)
        if _is_int(d) and d < 0:
            raise SchemaError(f"{path}[{i}]", f"a size must not be negative, got {d}")
    static = [d for d in dims if _is_int(d)]
    if math.prod(static) > MAX_ELEMENTS:
        raise SchemaError(path, f"more than {MAX_ELEMENTS} elements ({math.prod(static)})")
    return dims


def check_value(obj: Any, path: str, defined: set[str], axes: set[str], depth: int = 0) -> None:
    """An argument value: a JSON scalar, a list of values or a tagged object (``ref``, ``float``,
    ``dtype``, ``dim``)."""
    if obj is None or isinstance(obj, (bool, str)):
        if isinstance(obj, str) and len(obj) > MAX_NAME:
            raise SchemaError(path, f"a string argument longer than {MAX_NAME} characters")
        return
    if _is_int(obj):
        if not INT64[0] <= obj <= INT64[1]:
            raise SchemaError(path, f"integer {obj} does not fit int64")
        return
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise SchemaError(path, f"{obj} is not allowed (non-finite numbers are written "
                                    '{"float": "inf"|"-inf"|"nan"})')
        return
    if depth >= MAX_DEPTH:
        raise SchemaError(path, f"nested deeper than {MAX_DEPTH}")
    if isinstance(obj, list):
        for i, x in enumerate(obj):
            check_value(x, f"{path}[{i}]", defined, axes, depth + 1)
        return
    if not isinstance(obj, dict) or len(obj) != 1:
        raise SchemaError(path, f"must be a value or a one-key tagged object, got {_show(obj)}")
    (tag, v), = obj.items()
    sub = _join(path, tag)
    if tag == "ref":
        if not isinstance(v, str) or v not in defined:
            raise SchemaError(sub, f"{_show(v)} is not an input or an earlier node")
    elif tag == "float":
        if v not in ("inf", "-inf", "nan"):
            raise SchemaError(sub, f"must be 'inf', '-inf' or 'nan', got {_show(v)}")
    elif tag == "dtype":
        check_dtype(v, sub)
    elif tag == "dim":
        check_dim(v, sub, axes)
    else:
        raise SchemaError(sub, "unknown tag (one of ref, float, dtype, dim)")


def check_graph(obj: Any) -> Graph:
    """Validate a ``program.json`` document and build its :class:`Graph` (raises :class:`SchemaError`)."""
    check_version(obj, FORMAT, FORMAT_VERSION, "the graph")
    check_keys(obj, "", _GRAPH_KEYS, optional=("guards",))
    inputs_json = check_list(obj["inputs"], "inputs")
    # the axis names: those of the user inputs' shapes
    axes: set[str] = set()
    for i, spec in enumerate(inputs_json):
        p = f"inputs[{i}]"
        check_keys(spec, p, _INPUT_KEYS)
        if spec["kind"] == "user":
            for j, d in enumerate(check_list(spec["shape"], f"{p}.shape")):
                if isinstance(d, str):
                    axes.add(check_axis(d, f"{p}.shape[{j}]"))
    defined: set[str] = set()
    targets: dict[str, set[str]] = {"param": set(), "state": set(), "constant": set()}
    inputs = []
    for i, spec in enumerate(inputs_json):
        p = f"inputs[{i}]"
        name = check_name(spec["name"], f"{p}.name")
        if name in defined:
            raise SchemaError(f"{p}.name", f"{name!r} is defined twice")
        kind = spec["kind"]
        if not isinstance(kind, str) or kind not in INPUT_KINDS:
            raise SchemaError(f"{p}.kind", f"must be one of {sorted(INPUT_KINDS)}, got {_show(kind)}")
        if not isinstance(spec["target"], str):
            raise SchemaError(f"{p}.target", f"must be a string, got {_show(spec['target'])}")
        if kind == "literal":
            try:
                literal = json.loads(spec["target"])
            except (ValueError, RecursionError):
                raise SchemaError(f"{p}.target", "a literal input's target must hold JSON") from None
            check_value(literal, f"{p}.target", set(), axes)
            if spec["shape"] != [] or spec["dtype"] != "":
                raise SchemaError(p, 'a literal input has shape [] and dtype ""')
        else:
            if kind == "user":  # sizes, axis names, or expressions over the axes other dims name
                for j, d in enumerate(spec["shape"]):
                    if _is_int(d):
                        check_size(d, f"{p}.shape[{j}]")
                check_shape(spec["shape"], f"{p}.shape", axes)
            else:
                check_name(spec["target"], f"{p}.target")
                if spec["target"] in targets[kind]:
                    raise SchemaError(f"{p}.target", f"{spec['target']!r} is used twice")
                targets[kind].add(spec["target"])
                for j, d in enumerate(check_list(spec["shape"], f"{p}.shape")):
                    check_size(d, f"{p}.shape[{j}]")  # weights have static shapes
                check_shape(spec["shape"], f"{p}.shape", axes)
            check_dtype(spec["dtype"], f"{p}.dtype")
        defined.add(name)
        inputs.append(Input(name, kind, spec["target"], list(spec["shape"]), spec["dtype"]))
    if targets["param"] & targets["state"]:
        both = sorted(targets["param"] & targets["state"])
        raise SchemaError("inputs", f"{both} are both params and state")
    nodes = []
    for i, n in enumerate(check_list(obj["nodes"], "nodes")):
        p = f"nodes[{i}]"
        check_keys(n, p, _NODE_KEYS)
        name = check_name(n["name"], f"{p}.name")
        if name in defined:
            raise SchemaError(f"{p}.name", f"{name!r} is defined twice")
        op = n["op"]
        if not isinstance(op, str) or op not in OPS:
            raise SchemaError(f"{p}.op", f"{_show(op)} is not an op ember has a handler for")
        args = check_list(n["args"], f"{p}.args")
        check_value(args, f"{p}.args", defined, axes)
        kwargs = n["kwargs"]
        if not isinstance(kwargs, dict):
            raise SchemaError(f"{p}.kwargs", f"must be an object, got {_show(kwargs)}")
        for k, v in kwargs.items():
            if not k.isidentifier():
                raise SchemaError(_join(f"{p}.kwargs", k), "is not a keyword name")
            check_value(v, _join(f"{p}.kwargs", k), defined, axes)
        try:
            inspect.signature(OPS[op].fn).bind(Ctx(None, None, op), *args, **kwargs)
        except TypeError as e:
            raise SchemaError(f"{p}.args", f"do not fit {op}: {e}") from None
        if n["shape"] is not None:
            check_shape(n["shape"], f"{p}.shape", axes)
        if n["dtype"] is not None:
            check_dtype(n["dtype"], f"{p}.dtype")
        if not isinstance(n["source"], str):
            raise SchemaError(f"{p}.source", f"must be a string, got {_show(n['source'])}")
        defined.add(name)
        nodes.append(Node(name, op, args, dict(kwargs), n["shape"], n["dtype"], n["source"]))
    outputs = check_list(obj["outputs"], "outputs")
    check_value(outputs, "outputs", defined, axes)
    output_names = check_list(obj["output_names"], "output_names")
    if len(output_names) != len(outputs):
        raise SchemaError("output_names", f"names {len(output_names)} outputs, the graph has {len(outputs)}")
    for i, o in enumerate(output_names):
        check_name(o, f"output_names[{i}]")
    if len(set(output_names)) != len(output_names):
        raise SchemaError("output_names", "names an output twice")
    mutations = obj["mutations"]
    if not isinstance(mutations, dict):
        raise SchemaError("mutations", f"must be an object, got {_show(mutations)}")
    node_names = {n.name for n in nodes}
    for t, v in mutations.items():
        if t not in targets["state"]:
            raise SchemaError(_join("mutations", t), "is not the target of a state input")
        if not isinstance(v, str) or v not in node_names:
            raise SchemaError(_join("mutations", t), f"{_show(v)} is not a node")
    if set(mutations) != targets["state"]:
        raise SchemaError("mutations", f"must give a value for each state input {sorted(targets['state'])}")
    ranges = obj["ranges"]
    if not isinstance(ranges, dict):
        raise SchemaError("ranges", f"must be an object, got {_show(ranges)}")
    for a, r in ranges.items():
        rp = _join("ranges", a)
        if a not in axes:
            raise SchemaError(rp, "is not an axis of the inputs")
        if not isinstance(r, list) or len(r) != 2:
            raise SchemaError(rp, f"must be [min, max], got {_show(r)}")
        for j, b in enumerate(r):
            if b is not None and not (_is_int(b) and 0 <= b <= MAX_RANGE):
                raise SchemaError(f"{rp}[{j}]", f"a bound must be null or an integer in [0, {MAX_RANGE}], "
                                                f"got {_show(b)}")
    guards = check_list(obj.get("guards", []), "guards")
    if len(guards) > MAX_GUARDS:
        raise SchemaError("guards", f"holds {len(guards)} guards, at most {MAX_GUARDS}")
    for i, g in enumerate(guards):
        gp = f"guards[{i}]"
        check_keys(g, gp, ("op", "args"))
        if not isinstance(g["op"], str) or g["op"] not in GUARD_OPS:
            raise SchemaError(f"{gp}.op", f"unknown comparison {_show(g['op'])}")
        args = check_list(g["args"], f"{gp}.args")
        if len(args) != 2:
            raise SchemaError(f"{gp}.args", f"must hold 2 operands, got {len(args)}")
        for j, a in enumerate(args):
            check_dim(a, f"{gp}.args[{j}]", axes)
    return Graph(inputs, nodes, list(outputs), list(output_names), dict(mutations),
                 {k: list(v) for k, v in ranges.items()}, [dict(g) for g in guards])


def _join(path: str, key: str) -> str:
    if _AXIS.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)[:60]}]"


def _show(v: Any) -> str:
    """A short, safe rendering of a value read from a file (for error messages)."""
    s = json.dumps(v) if isinstance(v, (str, int, float, bool, type(None))) else type(v).__name__
    return s if len(s) <= 60 else s[:57] + "..."
