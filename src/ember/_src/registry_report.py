"""Which rules every registered primitive has: the data behind the registry completeness test.

Each primitive must have every kind in :data:`REQUIRED_KINDS` (``transpose`` only when it is
linear), or declare with ``prim.na(kind, reason)`` why the rule does not apply. Extend
:data:`REQUIRED_KINDS` when a new rule kind becomes mandatory (e.g. ``lowering``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence

from ember._src import core

REQUIRED_KINDS: tuple[str, ...] = ("impl", "abstract_eval", "jvp", "transpose", "batch")

#: status values of one (primitive, rule kind) cell
OK, NOT_APPLICABLE, NOT_REQUIRED, MISSING = "ok", "n/a", "-", "MISSING"


def import_all_namespaces(package: str = "ember") -> list[str]:
    """Import every module of ``package`` so that every primitive is declared.

    Returns ``"module: error"`` lines for modules that failed to import (modules that need an
    optional third-party package that is not installed are skipped silently).
    """
    errors: list[str] = []
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}.", onerror=lambda name: None):
        name = info.name
        if ".tests" in name or name.endswith("__main__"):
            continue
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and not e.name.startswith(package):
                continue  # optional dependency absent
            errors.append(f"{name}: {type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            errors.append(f"{name}: {type(e).__name__}: {e}")
    return errors


def rule_status(prim: core.Primitive, kind: str) -> tuple[str, str]:
    """``(status, detail)`` of rule ``kind`` of ``prim``; detail is the declared reason for n/a."""
    if getattr(prim, kind, None) is not None:
        return OK, ""
    if kind in prim.not_applicable:
        return NOT_APPLICABLE, prim.not_applicable[kind]
    if kind == "transpose" and not prim.linear:
        return NOT_REQUIRED, "not linear"
    return MISSING, ""


def missing_rules(kinds: Sequence[str] = REQUIRED_KINDS) -> list[tuple[str, str]]:
    """Every ``(primitive name, rule kind)`` that is neither present nor declared not applicable."""
    return [(name, kind) for name, p in sorted(core.PRIMITIVES.items()) for kind in kinds
            if rule_status(p, kind)[0] == MISSING]


def rule_table(kinds: Sequence[str] = REQUIRED_KINDS, *, reasons: bool = False) -> str:
    """A text table: one row per primitive, one column per rule kind.

    Cells: ``ok`` (present), ``n/a`` (declared not applicable), ``-`` (transpose of a
    non-linear primitive) or ``MISSING``. With ``reasons=True`` the declared reasons follow.
    """
    prims = sorted(core.PRIMITIVES.items())
    name_w = max([len("primitive"), *(len(n) for n, _ in prims)])
    widths = [max(len(k), len(MISSING)) for k in kinds]
    header = "primitive".ljust(name_w) + "  " + "  ".join(k.ljust(w) for k, w in zip(kinds, widths))
    lines = [header, "-" * len(header)]
    notes = []
    for name, p in prims:
        cells = []
        for k, w in zip(kinds, widths):
            status, detail = rule_status(p, k)
            cells.append(status.ljust(w))
            if status == NOT_APPLICABLE:
                notes.append(f"{name}.{k}: {detail}")
        lines.append(name.ljust(name_w) + "  " + "  ".join(cells).rstrip())
    missing = missing_rules(kinds)
    lines.append("")
    lines.append(f"{len(prims)} primitives, {len(missing)} missing rules")
    if reasons and notes:
        lines.append("")
        lines.append("not applicable:")
        lines.extend(f"  {n}" for n in notes)
    return "\n".join(lines)
