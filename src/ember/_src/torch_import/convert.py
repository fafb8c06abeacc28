"""``ember.torch.import_module``: a PyTorch module, through ``torch.export``, as an ember function.

The module is exported (non-strict) with the named dynamic axes as ``torch.export.Dim``s,
decomposed to core ATen, and its graph is walked once per trace: each ``call_function`` node runs
its handler from :mod:`.ops` on ember values, so the result is an ordinary ember function that
``jit`` (with the same named axes: one C compile for every sequence length), ``grad`` and ``vmap``
treat like any other. torch is imported only here, when a module is imported.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import ember
from ember._src.torch_import.ops import HANDLERS, PYTHON_OPS, np_dtype
from ember.errors import EmberError


class UnsupportedOpError(EmberError, NotImplementedError):
    """The exported graph uses ATen ops ember has no handler for; the message lists every one with
    the user source line that produced it."""


def _to_numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(np_dtype(t.dtype))
    return t.cpu().numpy()


def _op_name(target: Any) -> str:
    return str(target)


def _source_line(node: Any) -> str:
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)(?:\n[ \t]*([^\n]*))?', trace)
    import torch

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    user = [f for f in frames if not f[0].startswith(torch_dir)]
    if not user:
        return "(no source line recorded)"
    path, line, fn, code = user[-1]
    code = code.strip()
    return f"{path}:{line} in {fn}" + (f": {code}" if code and not code.startswith("File ") else "")


def _axes_to_dims(dynamic_axes: Mapping[str, Any] | None, args_by_name: dict[str, Any]) -> tuple[dict, dict]:
    """torch ``dynamic_shapes`` and ember ``dynamic_axes`` from ember-style named axes."""
    import torch

    if not dynamic_axes:
        return {}, {}
    dims: dict[str, Any] = {}
    torch_spec: dict[str, Any] = {}
    ember_spec: dict[str, Any] = {}
    for name, spec in dynamic_axes.items():
        if name not in args_by_name:
            raise ValueError(f"dynamic_axes names {name!r}, which is not an input "
                             f"(inputs: {list(args_by_name)})")
        ndim = args_by_name[name].dim()
        if isinstance(spec, Mapping):
            axes = {int(k) % ndim: v for k, v in spec.items()}
        else:
            axes = {i: v for i, v in enumerate(spec) if v is not None}
        per = {}
        for i, axis in axes.items():
            if axis not in dims:
                dims[axis] = torch.export.Dim(axis, min=1, max=2**30)
            per[i] = dims[axis]
        torch_spec[name] = per
        ember_spec[name] = tuple(axes.get(i) for i in range(ndim))
    return torch_spec, ember_spec


@dataclass
class ImportedModule:
    """An imported PyTorch module: ``fn(params, *inputs)`` is a pure ember function and ``params``
    its weights (ember Arrays named as in ``state_dict``). Calling the object runs it under
    ``ember.jit`` with the named dynamic axes; with ``weights="constants"`` the weights are
    program constants (constant folding and weight prepacking apply), with ``"arguments"`` they
    are passed to the jitted function on each call."""

    fn: Callable[..., Any]
    params: dict[str, Any]
    input_names: list[str]
    dynamic_axes: dict[str, tuple]
    weights: str
    input_dtypes: dict[str, np.dtype]
    exported: Any = field(repr=False, default=None)
    _jitted: Any = field(default=None, repr=False)

    def forward(self, *inputs: Any) -> Any:
        """The model on ``inputs`` with the weights captured (no jit)."""
        return self.fn(self.params, *inputs)

    @property
    def jitted(self) -> Any:
        """``ember.jit`` of the model, dynamic axes as named at import (built once)."""
        if self._jitted is None:
            if self.weights == "constants":
                params = self.params

                def run(*inputs: Any) -> Any:
                    return self.fn(params, *inputs)

                run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
                    [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in self.input_names])
                self._jitted = ember.jit(run, dynamic_axes=self.dynamic_axes or None)
            else:
                def run_args(params: Any, *inputs: Any) -> Any:
                    return self.fn(params, *inputs)

                run_args.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
                    [inspect.Parameter("params", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
                    + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                       for n in self.input_names])
                self._jitted = ember.jit(run_args, dynamic_axes=self.dynamic_axes or None)
        return self._jitted

    def __call__(self, *inputs: Any) -> Any:
        if len(inputs) != len(self.input_names):
            raise TypeError(f"the imported module takes {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(inputs)}")
        if self.weights == "constants":
            return self.jitted(*inputs)
        return self.jitted(self.params, *inputs)


def import_module(model: Any, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                  dynamic_axes: Mapping[str, Any] | None = None,
                  weights: str = "constants") -> ImportedModule:
    """Import a ``torch.nn.Module`` (or a ``torch.export.ExportedProgram``) as an ember function.

    ``args``/``kwargs`` are example inputs (tensors); ``dynamic_axes`` names the dims that vary,
    in ember's form: ``{"input_ids": ("batch", "seq")}`` or ``{"input_ids": {1: "seq"}}``. Axes
    with the same name are the same size. Unsupported ATen ops raise :class:`UnsupportedOpError`
    listing all of them with their source lines; data-dependent control flow raises
    torch.export's error with a hint.
    """
    import torch

    if weights not in ("constants", "arguments"):
        raise ValueError(f"weights must be 'constants' or 'arguments', got {weights!r}")
    kwargs = dict(kwargs or {})
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
        ember_axes = {k: tuple(v) for k, v in (dynamic_axes or {}).items()}
    else:
        sig = inspect.signature(model.forward)
        bound = sig.bind(*args, **kwargs)
        args_by_name = {k: v for k, v in bound.arguments.items() if isinstance(v, torch.Tensor)}
        torch_spec, ember_axes = _axes_to_dims(dynamic_axes, args_by_name)
        shapes = None
        if torch_spec:
            shapes = {k: torch_spec.get(k) for k in bound.arguments}
        try:
            ep = _export(model.eval(), tuple(args), kwargs, shapes)
        except Exception as e:  # noqa: BLE001 - torch's own message, with a hint
            text = str(e)
            if "data-dependent" in text.lower() or "GuardOnDataDependentSymNode" in type(e).__name__:
                raise RuntimeError("torch.export could not trace the model: it has control flow that depends "
                                   "on tensor values (rewrite it with torch.cond or make the condition "
                                   "static). torch.export said:\n" + text) from e
            raise
    # core ATen when torch can decompose the graph and ember handles every op of the result; the
    # export IR as it is otherwise (its ops -- linear, layer_norm, sdpa ... -- have handlers too)
    original_missing = _unsupported(ep.graph)
    try:
        decomposed = ep.run_decompositions()
    except Exception:  # noqa: BLE001 - torch cannot always decompose graphs with symbolic shapes
        decomposed = None
    if decomposed is not None and not _unsupported(decomposed.graph):
        return _from_exported(decomposed, ember_axes, weights)
    if not original_missing:
        return _from_exported(ep, ember_axes, weights)
    raise _unsupported_error(original_missing)


def _unsupported_error(missing: dict[str, list[str]]) -> UnsupportedOpError:
    lines = [f"  {op}: {len(where)} use(s), e.g. {where[0]}" for op, where in sorted(missing.items())]
    return UnsupportedOpError(f"{len(missing)} ATen op(s) have no ember handler:\n" + "\n".join(lines))


def _unsupported(graph: Any) -> dict[str, list[str]]:
    """ATen ops of ``graph`` without a handler, each with the source lines that produced it."""
    out: dict[str, list[str]] = {}
    for node in graph.nodes:
        if node.op == "call_function":
            name = _op_name(node.target)
            if name not in HANDLERS and node.target not in PYTHON_OPS:
                out.setdefault(name, []).append(_source_line(node))
    return out


def _export(model: Any, args: tuple, kwargs: dict, shapes: Any) -> Any:
    """``torch.export.export`` (non-strict); when the model bounds a named axis (a position table of
    128 rows caps ``seq`` at 128), the bounds torch suggests are applied and it exports again."""
    import torch
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    for _ in range(3):
        try:
            return torch.export.export(model, args, kwargs, dynamic_shapes=shapes, strict=False)
        except torch._dynamo.exc.UserError as e:
            if shapes is None or "Suggested fixes" not in str(e):
                raise
            text = str(e)
            fixes = [ln for ln in text[text.index("Suggested fixes"):].splitlines()[1:]
                     if re.match(r"^\s+\w+ = ", ln)]
            shapes = refine_dynamic_shapes_from_suggested_fixes("Suggested fixes:\n" + "\n".join(fixes),
                                                                shapes)
    return torch.export.export(model, args, kwargs, dynamic_shapes=shapes, strict=False)


def _from_exported(ep: Any, ember_axes: dict[str, tuple], weights: str) -> ImportedModule:
    from torch.export.graph_signature import InputKind, OutputKind

    graph = ep.graph
    sig = ep.graph_signature
    unsupported = _unsupported(graph)
    if unsupported:
        raise _unsupported_error(unsupported)
    if any(s.kind == OutputKind.BUFFER_MUTATION for s in sig.output_specs):
        mutated = [s.target for s in sig.output_specs if s.kind == OutputKind.BUFFER_MUTATION]
        raise UnsupportedOpError(f"the graph mutates buffers {mutated}: import them as session state is not "
                                 "supported yet")
    state = dict(ep.state_dict)
    params: dict[str, Any] = {}
    placeholder_source: dict[str, tuple[str, str]] = {}  # placeholder -> (kind, key)
    input_names: list[str] = []
    input_dtypes: dict[str, np.dtype] = {}
    for spec in sig.input_specs:
        pname = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            input_names.append(pname)
            placeholder_source[pname] = ("input", pname)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            tensor = state[spec.target] if spec.target in state else ep.constants[spec.target]
            params[spec.target] = ember.numpy.asarray(_to_numpy(tensor))
            placeholder_source[pname] = ("param", spec.target)
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            params[spec.target] = ember.numpy.asarray(_to_numpy(ep.constants[spec.target]))
            placeholder_source[pname] = ("param", spec.target)
        else:
            raise UnsupportedOpError(f"input {pname} of kind {spec.kind} is not supported")
    for node in graph.nodes:
        if node.op == "placeholder" and node.name in input_names:
            val = node.meta.get("val")
            if val is not None and hasattr(val, "dtype"):
                input_dtypes[node.name] = np_dtype(val.dtype)
    user_outputs = [s.arg.name for s in sig.output_specs if s.kind == OutputKind.USER_OUTPUT]
    nodes = list(graph.nodes)

    def fn(p: Mapping[str, Any], *inputs: Any) -> Any:
        if len(inputs) != len(input_names):
            raise TypeError(f"expected {len(input_names)} inputs ({', '.join(input_names)}), "
                            f"got {len(inputs)}")
        by_input = dict(zip(input_names, inputs))
        env: dict[str, Any] = {}

        def read(a: Any) -> Any:
            if isinstance(a, (list, tuple)):
                return type(a)(read(x) for x in a)
            if hasattr(a, "op") and hasattr(a, "name") and a.__class__.__name__ == "Node":
                return env[a.name]
            return a

        for node in nodes:
            if node.op == "placeholder":
                kind, key = placeholder_source[node.name]
                env[node.name] = by_input[key] if kind == "input" else p[key]
            elif node.op == "call_function":
                a, kw = read(node.args), {k: read(v) for k, v in node.kwargs.items()}
                if node.target in PYTHON_OPS:
                    env[node.name] = PYTHON_OPS[node.target](*a)
                else:
                    env[node.name] = HANDLERS[_op_name(node.target)].fn(*a, **kw)
            elif node.op == "output":
                pass
            else:
                raise UnsupportedOpError(f"graph node {node.name} of kind {node.op} is not supported")
        outs = [env[n] for n in user_outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    axes = {k: v for k, v in ember_axes.items() if k in input_names}
    return ImportedModule(fn, params, input_names, axes, weights, input_dtypes, exported=ep)


def supported_ops() -> list[tuple[str, str]]:
    """``(ATen op, how ember lowers it)`` for every op with a handler, sorted by name."""
    return sorted((h.name, h.doc) for h in HANDLERS.values())
