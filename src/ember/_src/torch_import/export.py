"""``torch.export`` -> :class:`~ember._src.torch_import.graph.Graph` (with ``recurrent.py``, ``ssm.py``,
``tf_padding.py``, ``funnel_positions.py``, ``mobilevit_patches.py`` and ``longformer_attention.py``,
the only modules that import torch)."""

from __future__ import annotations

import copy
import inspect
import json
import math
import operator
import re
from typing import Any

import numpy as np
import torch

from ember._src.torch_import import funnel_positions, longformer_attention, mobilevit_patches, tf_padding
from ember._src.torch_import.graph import Graph, Input, Node
from ember._src.torch_import.patching import patched_functions
from ember._src.torch_import.recurrent import whole_recurrent_layers
from ember._src.torch_import.ssm import whole_ssm_scans
from ember.errors import EmberError


class ExportError(EmberError, RuntimeError):
    """``torch.export`` could not capture the model; the message is torch's, plus a hint."""


_HINT = ("\nember imports a model through torch.export, which cannot capture Python control flow that "
         "depends on tensor values (`if x.sum() > 0`, `.item()`, a shape computed from values). Rewrite "
         "it with torch.where / torch.cond, or make the value a constant argument of the model.")

_SPECIALIZED_HINT = (
    "\nThe model's code fixes the size of a named dynamic axis to the example's: a Python loop over "
    "that axis (`for t in range(x.shape[1])`, which unrolls), a reshape or view to a constant size, or "
    "a Python branch on the size. nn.LSTM, nn.GRU and nn.RNN are lowered whole (a scan over the "
    "sequence), but a hand-written loop over time is not: express it with a recurrent module, "
    "compute sizes with -1 / x.shape, or leave the axis static (drop it from dynamic_axes).")

_SYM_OPS = {operator.mul: "sym.mul", operator.add: "sym.add", operator.sub: "sym.sub",
            operator.floordiv: "sym.floordiv", operator.mod: "sym.mod", operator.neg: "sym.neg",
            operator.getitem: "getitem"}
# ops torch's default table decomposes that have an ember handler: attention, and bicubic
# upsampling (its decomposition computes the scale in double precision and builds the taps from
# index arithmetic; the handler gathers four taps with torch's float32 weights)
_KEEP = (torch.ops.aten.scaled_dot_product_attention.default, torch.ops.aten.upsample_bicubic2d.vec)


def _dtype_name(dt: Any) -> str:
    return str(dt).replace("torch.", "")


class _Dims:
    """Encodes torch's sympy size expressions as graph dim expressions over ember axis names."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def encode(self, d: Any) -> Any:
        if isinstance(d, int):
            return d
        if isinstance(d, torch.SymInt):
            d = d.node.expr
        return self._expr(d)

    def _expr(self, e: Any) -> Any:
        import sympy
        if isinstance(e, (int, sympy.Integer)):
            return int(e)
        if isinstance(e, sympy.Symbol):
            if str(e) not in self.names:
                raise ExportError(f"the exported graph has a size {e} that is not one of the named "
                                  f"dynamic axes ({', '.join(self.names.values()) or 'none'})")
            return self.names[str(e)]
        fname = type(e).__name__
        if fname == "Pow" and isinstance(e.args[1], sympy.Integer) and 1 <= int(e.args[1]) <= 8:
            # a size squared (DINOv2's patch count (h // 8) ** 2) as a product
            return {"op": "mul", "args": [self._expr(e.args[0])] * int(e.args[1])}
        if fname in ("TruncToInt", "FloorToInt", "CeilToInt", "RoundToInt"):
            whole = self._integral_multiple(e.args[0])
            if whole is not None:  # int(2.0 * h): upsampling a dynamic axis by an integer factor
                return whole
        op = {"Add": "add", "Mul": "mul", "FloorDiv": "floordiv", "Mod": "mod", "PythonMod": "mod",
              "Max": "max", "Min": "min"}.get(fname)
        if op is None:
            raise ExportError(f"unsupported size expression {e} ({fname})")
        return {"op": op, "args": [self._expr(a) for a in e.args]}

    def _integral_multiple(self, e: Any) -> Any:
        """``c * ToFloat(x)`` with an integral float ``c`` as the size ``c * x``, else None."""
        import sympy
        if type(e).__name__ != "Mul" or len(e.args) != 2:
            return None
        c, f = e.args if isinstance(e.args[0], sympy.Number) else e.args[::-1]
        if not isinstance(c, sympy.Number) or not float(c).is_integer() or type(f).__name__ != "ToFloat":
            return None
        return {"op": "mul", "args": [int(c), self._expr(f.args[0])]}

    def shape(self, t: Any) -> list:
        return [self.encode(d) for d in t.shape]


def _source(node: Any) -> str:
    st = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', st)
    if not frames:
        return ""
    f, line, fn, code = frames[-1]
    return f"{f}:{line} in {fn}: {code.strip()}"


def _encode_arg(a: Any, dims: _Dims) -> Any:
    if isinstance(a, torch.fx.Node):
        return {"ref": a.name}
    if isinstance(a, (list, tuple)):
        return [_encode_arg(x, dims) for x in a]
    if isinstance(a, torch.dtype):
        return {"dtype": _dtype_name(a)}
    if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
        return None
    if isinstance(a, float) and not math.isfinite(a):
        return {"float": str(a)}
    if isinstance(a, torch.SymInt):
        return {"dim": dims.encode(a)}
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    raise ExportError(f"cannot encode the argument {a!r} of type {type(a).__name__}")


def _contiguous(a: Any) -> bool:
    """Whether graph value ``a`` is a contiguous tensor at storage offset 0 (its storage holds its
    values in row-major order, as ember's array does)."""
    v = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
    if not isinstance(v, torch.Tensor):
        return False
    try:
        return bool(v.is_contiguous()) and v.storage_offset() == 0
    except Exception:  # (a symbolic stride torch cannot decide)
        return False


def _output_names(ep: Any, n: int) -> list[str]:
    spec = ep.call_spec.out_spec
    ctx = getattr(spec, "context", None)
    if n == 1 and getattr(spec, "num_children", 0) == 0:
        return ["output"]
    if isinstance(ctx, (list, tuple)) and len(ctx) == n and all(isinstance(c, str) for c in ctx):
        return list(ctx)
    return [f"output_{i}" for i in range(n)]


def _bound(v: Any) -> int | None:
    try:
        return int(v) if bool(getattr(v, "is_finite", True)) and abs(int(v)) < 2 ** 62 else None
    except (TypeError, ValueError, AttributeError, OverflowError):
        return None


def export_program(model: Any, args: tuple, kwargs: dict | None,
                   dynamic_axes: dict[str, Any] | None) -> Any:
    """``torch.export.export`` (non-strict) with ``dynamic_axes`` (ember names) as dynamic dims."""
    kwargs = dict(kwargs or {})
    dynamic_axes = dict(dynamic_axes or {})
    sig = inspect.signature(model.forward)
    bound = sig.bind(*args, **kwargs)
    unknown = set(dynamic_axes) - set(bound.arguments)
    if unknown:
        raise ValueError(f"dynamic_axes names {sorted(unknown)} that are not arguments of the call "
                         f"(arguments: {list(bound.arguments)})")
    ds: dict[str, Any] = {}
    for name, val in bound.arguments.items():
        spec = dynamic_axes.get(name)
        if spec is None or not isinstance(val, torch.Tensor):
            ds[name] = None
            continue
        spec = tuple(spec)
        if len(spec) != val.ndim:
            raise ValueError(f"dynamic_axes[{name!r}] describes {len(spec)} dims, but the argument has "
                             f"shape {tuple(val.shape)}")
        ds[name] = {i: torch.export.Dim.DYNAMIC for i, s in enumerate(spec) if s is not None}
    widened = widen_examples(bound, dynamic_axes)
    try:
        patches = (tf_padding.PATCHES + funnel_positions.PATCHES + mobilevit_patches.PATCHES
                   + longformer_attention.PATCHES)
        with whole_recurrent_layers(model), whole_ssm_scans(), patched_functions(patches):
            ep = torch.export.export(model, tuple(widened.args), widened.kwargs,
                                     dynamic_shapes=ds or None, strict=False)
    except Exception as e:  # noqa: BLE001 - torch raises many types; keep its message
        hint = ""  # an error of the model's own code (a wrong argument, ...) needs no hint
        if "data-dependent" in str(e) or "DataDependent" in type(e).__name__:
            hint = _HINT
        elif "0/1 specialized" in str(e):
            hint = ("\ntorch.export treats sizes 0 and 1 as special: give example inputs whose size "
                    "along each named dynamic axis is at least 2 (ember still runs size 1).")
        elif "specialized it to be a constant" in str(e) or "Constraints violated" in str(e):
            hint = _SPECIALIZED_HINT
        elif "Cache" in str(e) and "in output, which is not a known type" in str(e):
            hint = ("\nThe model returns its key/value or state cache: import it without one "
                    "(kwargs={..., 'use_cache': False}), or pass the cache tensors as inputs "
                    "(InferenceSession's state_inputs, docs/torch.md).")
        raise ExportError(f"torch.export.export failed: {type(e).__name__}: {e}{hint}") from e
    check_dynamic(ep, widened.arguments, dynamic_axes)
    return ep


def widen_examples(bound: inspect.BoundArguments, dynamic_axes: dict[str, Any]) -> inspect.BoundArguments:
    """The example arguments with every named dynamic axis of size 1 widened to 2 (the rows
    repeated): torch.export specializes an example size of 0 or 1, so a batch-1 example would make
    the axis static. Axes with the same name are widened together; the graph traced on the wider
    example holds for every size, 1 included (ember runs it; :func:`check_dynamic` confirms each
    named dim stayed symbolic)."""
    names = set()
    for name, spec in dynamic_axes.items():
        val = bound.arguments.get(name)
        if isinstance(val, torch.Tensor):
            names |= {a for a, n in zip(tuple(spec), val.shape) if a is not None and n == 1}
    out = dict(bound.arguments)
    for name, spec in dynamic_axes.items():
        val = out.get(name)
        if not isinstance(val, torch.Tensor):
            continue
        for i, (a, n) in enumerate(zip(tuple(spec), val.shape)):
            if a in names and n == 1:
                val = torch.cat([val, val], dim=i)
        out[name] = val
    wide = copy.copy(bound)
    wide.arguments = out
    return wide


def check_dynamic(ep: Any, arguments: dict[str, Any], dynamic_axes: dict[str, Any]) -> None:
    """Raise :class:`ExportError` when a dim named in ``dynamic_axes`` came out of the export static
    (the model fixes that size, e.g. by reshaping to a constant)."""
    sig = ep.graph_signature
    vals = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    users = [s.arg.name for s in sig.input_specs if s.kind.name == "USER_INPUT"]
    tensors = [n for n, v in arguments.items() if isinstance(v, torch.Tensor)]
    for name, ph in zip(tensors, [u for u in users if isinstance(vals.get(u), torch.Tensor)]):
        spec = dynamic_axes.get(name)
        if spec is None:
            continue
        for i, (a, d) in enumerate(zip(tuple(spec), vals[ph].shape)):
            if a is not None and not isinstance(d, torch.SymInt):
                raise ExportError(f"the named axis {a!r} (dim {i} of {name!r}) is static in the exported "
                                  f"graph (size {d}): the model fixes that size")


def decompose(ep: Any) -> Any:
    table = torch.export.default_decompositions()
    for op in _KEEP:
        table.pop(op, None)
    return ep.run_decompositions(table)


def to_graph(ep: Any, dynamic_axes: dict[str, Any] | None) -> tuple[Graph, dict[str, np.ndarray],
                                                                    dict[str, np.ndarray]]:
    """Convert a decomposed ExportedProgram: returns the graph, the parameters (state-dict names)
    and the constants (non-persistent buffers and lifted tensors)."""
    dynamic_axes = dict(dynamic_axes or {})
    sig = ep.graph_signature
    dims = _Dims()
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    mutated = {s.target: s.arg.name for s in sig.output_specs if s.kind.name == "BUFFER_MUTATION"}
    user_names = [s.arg.name for s in sig.input_specs if s.kind.name == "USER_INPUT"]
    # axis names: from the user's spec of the input with that placeholder name (or position)
    for pos, name in enumerate(user_names):
        spec = dynamic_axes.get(name, dynamic_axes.get(pos))
        val = placeholders[name].meta.get("val")
        if spec is None or val is None:
            continue
        for d, axis in zip(val.shape, tuple(spec)):
            if axis is not None and isinstance(d, torch.SymInt):
                dims.names.setdefault(str(d.node.expr), str(axis))
    inputs, params, consts = [], {}, {}
    for s in sig.input_specs:
        ph = placeholders[s.arg.name]
        val = ph.meta.get("val")
        kind = {"USER_INPUT": "user", "PARAMETER": "param", "BUFFER": "param",
                "CONSTANT_TENSOR": "constant"}.get(s.kind.name)
        if kind is None or (kind != "user" and not isinstance(val, torch.Tensor)):
            raise ExportError(f"unsupported graph input {s.arg.name} ({s.kind.name})")
        target = s.target or s.arg.name
        if kind == "user" and not isinstance(val, torch.Tensor):
            inputs.append(Input(s.arg.name, "literal", json.dumps(_encode_arg(val, dims)), [], ""))
            continue
        if kind == "param" and s.kind.name == "BUFFER" and not s.persistent:
            kind = "constant"
        if target in mutated:
            kind = "state"
        if kind in ("param", "state"):
            params[target] = ep.state_dict[target].detach().cpu().numpy().copy()
        elif kind == "constant":
            consts[target] = ep.constants[target].detach().cpu().numpy().copy()
        inputs.append(Input(s.arg.name, kind, target, dims.shape(val), _dtype_name(val.dtype)))
    nodes = []
    for n in ep.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        op = _SYM_OPS.get(t) or (str(t) if isinstance(t, torch._ops.OpOverload)
                                 else f"python.{getattr(t, '__name__', t)}")
        val = n.meta.get("val")
        shape = dims.shape(val) if isinstance(val, torch.Tensor) else None
        dtype = _dtype_name(val.dtype) if isinstance(val, torch.Tensor) else None
        kwargs = {k: _encode_arg(v, dims) for k, v in n.kwargs.items()}
        if t is torch.ops.aten.as_strided.default:  # its strides index the input's storage
            kwargs["input_contiguous"] = _contiguous(n.args[0])
        nodes.append(Node(n.name, op, _encode_arg(list(n.args), dims), kwargs, shape, dtype, _source(n)))
    outputs = [{"ref": s.arg.name} if hasattr(s.arg, "name") else _encode_arg(s.arg.value, dims)
               for s in sig.output_specs if s.kind.name == "USER_OUTPUT"]
    ranges = {}
    for sym, vr in ep.range_constraints.items():
        if str(sym) in dims.names:
            hi = vr.upper
            ranges[dims.names[str(sym)]] = [_bound(vr.lower), _bound(hi)]
    graph = Graph(inputs, nodes, outputs, _output_names(ep, len(outputs)), mutated, ranges)
    return graph, params, consts
