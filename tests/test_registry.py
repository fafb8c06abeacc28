"""The registry completeness test: every primitive has every rule or says why it does not apply."""

from __future__ import annotations

import ember  # noqa: F401  (declares the core primitives)
from ember._src import core
from ember._src import registry_report as rr

# Rule kinds every primitive must provide (``transpose`` only for linear primitives) unless it
# declares ``prim.na(kind, reason)``. Extend this (e.g. with "lowering") as new kinds become required.
REQUIRED_KINDS: tuple[str, ...] = rr.REQUIRED_KINDS

IMPORT_ERRORS = rr.import_all_namespaces()


def test_every_namespace_imports() -> None:
    assert not IMPORT_ERRORS, "modules failed to import:\n" + "\n".join(IMPORT_ERRORS)


def test_registry_is_populated() -> None:
    assert len(core.PRIMITIVES) > 50
    for name, p in core.PRIMITIVES.items():
        assert p.name == name
        for kind, reason in p.not_applicable.items():
            assert kind in core.RULE_KINDS, f"{name}: unknown rule kind {kind!r} declared not applicable"
            assert isinstance(reason, str) and reason.strip(), f"{name}.{kind}: empty reason"


def test_no_rule_both_present_and_not_applicable() -> None:
    both = [f"{n}.{k}" for n, p in core.PRIMITIVES.items() for k in p.not_applicable
            if getattr(p, k, None) is not None]
    assert not both, "rules both present and declared not applicable: " + ", ".join(both)


def test_every_primitive_has_every_rule() -> None:
    missing = rr.missing_rules(REQUIRED_KINDS)
    if missing:
        lines = [f"  {name}: {kind}" for name, kind in missing]
        raise AssertionError(f"{len(missing)} missing rules (add the rule or declare "
                             f"prim.na(kind, reason)):\n" + "\n".join(lines)
                             + "\n\n" + rr.rule_table(REQUIRED_KINDS))


def test_rule_table_lists_every_primitive() -> None:
    table = rr.rule_table(REQUIRED_KINDS, reasons=True)
    for name in core.PRIMITIVES:
        assert any(line.split()[:1] == [name] for line in table.splitlines()), name
    assert "primitives" in table.splitlines()[-1] or "not applicable:" in table


def test_every_primitive_has_a_native_lowering_or_a_stated_reason() -> None:
    """Issue 17: ``lowering`` is a required rule too. Every primitive has an entry in the native
    backend's op-info registry (keyed by the Primitive object) or declares
    ``na("lowering", reason)``, never both; ``Primitive.lowering`` is the entry's description."""
    from ember._src.native import opinfo

    opinfo.declare()
    missing = [n for n, p in core.PRIMITIVES.items()
               if p not in opinfo.REGISTRY and "lowering" not in p.not_applicable]
    assert not missing, f"primitives with no native op-info entry and no stated reason: {missing}"
    both = [n for n, p in core.PRIMITIVES.items() if p in opinfo.REGISTRY and "lowering" in p.not_applicable]
    assert not both, f"primitives with an op-info entry that also declare no lowering: {both}"
    for p, info in opinfo.REGISTRY.items():
        assert core.PRIMITIVES.get(p.name) is p, f"op-info entry for an undeclared primitive {p.name}"
        assert info.primitive is p and p.lowering == info.description, p.name
        assert opinfo.native_kind(p) != "never lowered", p.name


def test_op_info_entries_carry_their_lowering() -> None:
    """Each category's entries hold what that category needs: elementwise ops a renderer (real or
    complex), calls a call lowering, reductions a kind, inlined calls their sub-program's param."""
    from ember._src.native import opinfo
    from ember._src.native.opinfo import OpCategory

    for p, info in opinfo.REGISTRY.items():
        cat = info.category
        renders = info.render is not None or info.complex_render is not None
        assert (cat is OpCategory.ELEMENTWISE) <= renders, p.name
        assert (cat is OpCategory.CALL) == (info.call is not None), p.name
        assert (cat is OpCategory.REDUCTION) == (info.reduce_kind is not None), p.name
        assert (cat is OpCategory.INLINED) == (info.inline_param is not None), p.name
        assert info.inplace is None or cat is OpCategory.CALL, p.name
        assert not info.alias or cat is OpCategory.MOVEMENT, p.name
    # the groups the passes test are derived from the registry
    assert {"exp", "add", "select_n", "real"} <= opinfo.names(OpCategory.ELEMENTWISE)
    assert "copy" not in opinfo.names(OpCategory.ELEMENTWISE)
    assert opinfo.names(OpCategory.MOVEMENT) == {"broadcast_in_dim", "reshape", "squeeze", "transpose", "rev",
                                                 "slice", "pad", "concatenate", "ensure_shape"}
    assert {p.name for p in opinfo.REGISTRY if opinfo.info(p).alias} == {"reshape", "squeeze", "ensure_shape"}
    inplace = {p.name for p in opinfo.REGISTRY if opinfo.info(p).inplace == 0}
    assert inplace == {"dynamic_update_slice", "scatter", "process_allreduce", "check_index"}


def test_cost_classes_are_declared_for_elementwise_and_reductions() -> None:
    """Every primitive the native backend runs as an elementwise op or a reduction says what a cost
    model counts for it (``Primitive.cost_class``, read by ``jit(f).lower(x).cost_analysis()``), and
    every declared class is one the cost model knows: a new primitive cannot silently count nothing."""
    from ember._src.native import opinfo

    known = {"transcendental", "arithmetic", "reduction", "contraction", "free"}
    missing = sorted(p.name for p in (*opinfo.group(opinfo.OpCategory.ELEMENTWISE),
                                       *opinfo.group(opinfo.OpCategory.REDUCTION))
                     if p.cost_class is None and not p.name.startswith("native_"))
    assert not missing, f"no cost_class: {missing}"
    bad = sorted(p.name for p in core.PRIMITIVES.values() if p.cost_class not in known | {None})
    assert not bad, bad


def test_cost_analysis_counts_by_class() -> None:
    """A hand-counted program: 2*4*3*5 flops for the product, 4*5 for the add, 4*5 transcendentals
    for the exp, 4*5 - 4 flops for the row sum."""
    import numpy as np

    import ember.numpy as jnp

    f = ember.jit(lambda a, b: jnp.sum(jnp.exp(a @ b + 1.0), axis=1))
    a, b = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    cost = f.lower(a, b).cost_analysis()
    assert cost["flops"] == 2 * 4 * 3 * 5 + 4 * 5 + (4 * 5 - 4)
    assert cost["transcendentals"] == 4 * 5
