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
    """Issue 17: ``lowering`` is a required rule too. Every primitive either says how the native
    backend runs it (a fused kernel, a native call or loop, inlined, removed) or declares
    ``na("lowering", reason)``; ``native_kind`` never answers "never lowered" for a primitive
    that has a description."""
    from ember._src.native.lowerings import native_kind

    missing = [n for n, p in core.PRIMITIVES.items()
               if p.lowering is None and "lowering" not in p.not_applicable]
    assert not missing, f"primitives with no native lowering and no stated reason: {missing}"
    unread = [n for n, p in core.PRIMITIVES.items() if p.lowering and native_kind(p) == "never lowered"]
    assert not unread, f"lowering descriptions native_kind cannot classify: {unread}"
