"""The result of an import: a pure ember function ``f(params, *inputs)`` and its parameters."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember
import ember.numpy as jnp
from ember._src.torch_import.graph import Graph
from ember._src.torch_import.guards import parse_guards
from ember._src.torch_import.interpret import build_function


class ImportedModule:
    """An imported model.

    ``fn(params, *inputs)`` is a pure ember function (jit/grad/vmap work on it) returning the model's
    output (a tuple when it has several); when the graph mutates buffers it returns
    ``(outputs, new_state)`` with ``new_state`` keyed like ``params``. ``params`` holds the weights
    (and persistent buffers) as ember Arrays named as in ``state_dict``. Calling the module runs a
    jitted form over its named dynamic axes: with ``weights="constants"`` the weights are program
    constants, with ``weights="arguments"`` they are passed in on every call.
    """

    def __init__(self, graph: Graph, params: dict[str, np.ndarray], constants: dict[str, np.ndarray],
                 weights: str = "constants"):
        if weights not in ("constants", "arguments"):
            raise ValueError(f"weights must be 'constants' or 'arguments', got {weights!r}")
        self.graph = graph
        self.weights = weights
        self.params = {k: jnp.asarray(v) for k, v in params.items()}
        self.constants = {k: jnp.asarray(v) for k, v in constants.items()}
        self._raw = build_function(graph, self.constants)
        self._jitted: Any = None

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.graph.user_inputs()]

    @property
    def output_names(self) -> list[str]:
        return list(self.graph.output_names)

    @property
    def state_names(self) -> list[str]:
        return list(self.graph.mutations)

    @property
    def dynamic_axes(self) -> dict[str, tuple]:
        """Per input: the axis name of each dim (``None`` for a static dim)."""
        return {i.name: tuple(d if isinstance(d, str) else None for d in i.shape)
                for i in self.graph.user_inputs()}

    @property
    def input_dtypes(self) -> dict[str, str]:
        return {i.name: i.dtype for i in self.graph.user_inputs()}

    def fn(self, params: dict[str, Any], *inputs: Any) -> Any:
        outs, state = self._raw(params, *inputs)
        outs = outs[0] if len(outs) == 1 else outs
        return (outs, state) if self.graph.mutations else outs

    def _axes_specs(self) -> list:
        return [self.dynamic_axes[n] if any(a is not None for a in self.dynamic_axes[n]) else None
                for n in self.input_names]

    def jit(self, **jit_kwargs: Any) -> Any:
        """The jitted function over the named dynamic axes: ``g(*inputs)`` with constant weights, or
        ``g(params, *inputs)`` with ``weights="arguments"``."""
        specs = self._axes_specs()
        if self.weights == "arguments":
            return ember.jit(self.fn, dynamic_axes=[None, *specs], **jit_kwargs)
        params = self.params

        def run(*inputs: Any) -> Any:
            return self.fn(params, *inputs)
        return ember.jit(run, dynamic_axes=specs, **jit_kwargs)

    def __call__(self, *inputs: Any) -> Any:
        """Run on ``inputs`` (arrays in ``input_names`` order). A binding that breaks a shape
        constraint of the program raises ``ShapeError``: among them the equalities torch's export
        assumed and the upper ends of its axis ranges (``guards.py``)."""
        if self._jitted is None:
            self._jitted = self.jit()
        if self.weights == "arguments":
            return self._jitted(self.params, *inputs)
        return self._jitted(*inputs)


def import_module(model: Any, args: tuple = (), kwargs: dict | None = None,
                  dynamic_axes: dict[str, Any] | None = None, weights: str = "constants") -> ImportedModule:
    """Import a ``torch.nn.Module`` (or a ``torch.export.ExportedProgram``) as an ember function.

    ``args``/``kwargs`` are example inputs for ``torch.export.export`` (non-strict);
    ``dynamic_axes`` names the dims that vary in ember's form (``{"input_ids": ("batch", "seq")}``,
    ``None`` for a static dim): they become dynamic torch dims and ember named axes, so one compile
    serves every size. The graph is decomposed to core ATen (``scaled_dot_product_attention`` is
    kept whole) and each op lowered by its handler. Raises ``UnsupportedOpError`` listing every op
    without a handler, ``ExportError`` when torch.export cannot capture the model.
    """
    import torch

    from ember._src.torch_import import export as _export
    if isinstance(model, torch.export.ExportedProgram):
        ep = model
        if dynamic_axes is None:
            dynamic_axes = _axes_from_program(ep)
    else:
        if isinstance(args, torch.Tensor):
            args = (args,)
        model_mode = model.training
        model.eval()
        try:
            ep = _export.export_program(model, tuple(args), kwargs, dynamic_axes)
        finally:
            model.train(model_mode)
    texts = [str(t) for t in getattr(ep, "_guards_code", None) or []]  # (torch's private record)
    ep = _export.decompose(ep)
    graph, params, consts = _export.to_graph(ep, dynamic_axes)
    graph.guards, _ = parse_guards(texts, graph)
    return ImportedModule(graph, params, consts, weights=weights)


def _axes_from_program(ep: Any) -> dict[str, tuple]:
    """Name the dynamic dims of an already exported program ``<input>_dim<i>``."""
    import torch
    out: dict[str, tuple] = {}
    names: dict[str, str] = {}  # torch symbol -> axis name (shared symbols share a name)
    for s in ep.graph_signature.input_specs:
        if s.kind.name != "USER_INPUT":
            continue
        node = next(n for n in ep.graph.nodes if n.name == s.arg.name)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            spec = tuple(names.setdefault(str(d.node.expr), f"{s.arg.name}_dim{i}")
                         if isinstance(d, torch.SymInt) else None for i, d in enumerate(val.shape))
            if any(spec):
                out[s.arg.name] = spec
    return out
