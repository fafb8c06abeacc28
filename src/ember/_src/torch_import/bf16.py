"""Which weights of an imported graph an ``InferenceSession(..., weights="bfloat16")`` keeps in
bfloat16: the float32 matrices used as the ``B`` operand of matrix products (``mm``, ``matmul``,
``addmm``, directly or through a 2-D transpose: linear layers, GPT-2's ``Conv1D``, a tied output
layer) and nowhere else but as an embedding table (the table tied to the output layer). Norm
weights, biases, position tables, buffers the graph mutates and anything else stay float32."""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.torch_import.graph import Graph

# op -> the argument positions that read a product's B operand
_PRODUCT_B = {"aten.mm.default": (1,), "aten.matmul.default": (1,), "aten.addmm.default": (2,)}
_TRANSPOSES = ("aten.t.default", "aten.permute.default", "aten.transpose.int", "aten.numpy_T.default")
_TABLE = {"aten.embedding.default": (0,)}


def _uses(graph: Graph) -> dict[str, list[tuple[str, int, str]]]:
    """Value name -> [(op, argument position, the node's name)] of the nodes reading it directly."""
    out: dict[str, list[tuple[str, int, str]]] = {}
    for n in graph.nodes:
        for i, a in enumerate(n.args):
            if isinstance(a, dict) and isinstance(a.get("ref"), str):
                out.setdefault(a["ref"], []).append((n.op, i, n.name))
    return out


def _is_2d_transpose(graph_node: object) -> bool:
    op, args = graph_node.op, graph_node.args  # type: ignore[attr-defined]
    if op == "aten.permute.default":
        return list(args[1]) == [1, 0]
    return op in _TRANSPOSES


def _classify(graph: Graph) -> dict[str, tuple[int, bool]]:
    """Parameter target -> (how many product ``B`` operands it is, whether every other use is an
    embedding table), for the 2-D float32 parameters the graph does not mutate."""
    uses = _uses(graph)
    nodes = {n.name: n for n in graph.nodes}
    out = {}
    for inp in graph.inputs:
        if inp.kind != "param" or inp.dtype != "float32" or len(inp.shape) != 2 \
                or inp.target in graph.mutations:
            continue
        products, ok = 0, True
        for op, pos, name in uses.get(inp.name, []):
            if pos in _PRODUCT_B.get(op, ()):
                products += 1
            elif pos in _TABLE.get(op, ()):
                continue
            elif pos == 0 and op in _TRANSPOSES and _is_2d_transpose(nodes[name]):
                inner = uses.get(name, [])
                if inner and all(p in _PRODUCT_B.get(o, ()) for o, p, _ in inner):
                    products += len(inner)
                else:
                    ok = False
            else:
                ok = False
        out[inp.target] = (products, ok)
    return out


def product_weights(graph: Graph) -> set[str]:
    """The state-dict names (``Input.target``) of the parameters kept in bfloat16 (see above)."""
    return {t for t, (products, ok) in _classify(graph).items() if ok and products}


def table_weights(graph: Graph) -> set[str]:
    """The 2-D float32 parameters used only as embedding tables: kept in bfloat16 too when they hold
    the same values as a product weight (an input embedding tied to the output layer, which the
    export lists as two parameters), sharing its bits."""
    return {t for t, (products, ok) in _classify(graph).items() if ok and not products}


def decode(bits: Any) -> Any:
    """float32 values of bfloat16 ``bits`` (a ``uint16`` array): the exact widening (the bits become
    the top half of each float32) written as the chain the native backend's ``bf16_weights`` pass
    recognizes, so the products reading it run on the bits (``native_gemm_bf16``)."""
    from ember import lax
    from ember import numpy as jnp

    wide = jnp.left_shift(jnp.asarray(bits).astype(jnp.uint32), np.uint32(16))
    return lax.bitcast_convert_type(wide, jnp.float32)
