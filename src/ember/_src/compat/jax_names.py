"""Which public names of JAX's namespaces ember lacks.

``python -m ember._src.compat.jax_names --update`` walks the installed JAX's public namespaces
(``jax``, ``jax.numpy``, ``jax.lax``, ...) and records their names, with JAX's version, in
``jax_public_names.json`` beside this module. :func:`missing` checks that record against ember's
namespaces; ``docs/FEATURES.md`` lists the result (``_src/features.py``), so the list stays current
without JAX installed. Without ``--update`` the script prints what ember lacks.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pathlib
import sys
from typing import Any

RECORD = pathlib.Path(__file__).with_name("jax_public_names.json")

# JAX namespace -> ember namespace
NAMESPACES: dict[str, str] = {
    "jax": "ember",
    "jax.numpy": "ember.numpy",
    "jax.numpy.linalg": "ember.numpy.linalg",
    "jax.numpy.fft": "ember.numpy.fft",
    "jax.lax": "ember.lax",
    "jax.lax.linalg": "ember.lax.linalg",
    "jax.nn": "ember.nn",
    "jax.nn.initializers": "ember.nn.initializers",
    "jax.random": "ember.random",
    "jax.scipy.special": "ember.scipy.special",
    "jax.scipy.linalg": "ember.scipy.linalg",
    "jax.scipy.stats": "ember.scipy.stats",
    "jax.scipy.signal": "ember.scipy.signal",
    "jax.scipy.optimize": "ember.scipy.optimize",
    "jax.scipy.integrate": "ember.scipy.integrate",
    "jax.scipy.ndimage": "ember.scipy.ndimage",
    "jax.tree": "ember.tree",
    "jax.tree_util": "ember.tree_util",
    "jax.flatten_util": "ember.flatten_util",
    "jax.debug": "ember.debug",
    "jax.errors": "ember.errors",
    "jax.image": "ember.image",
    "jax.dtypes": "ember.dtypes",
    "jax.typing": "ember.typing",
    "jax.test_util": "ember.test_util",
    "jax.custom_batching": "ember.custom_batching",
    "jax.example_libraries.stax": "ember.example_libraries.stax",
    "jax.example_libraries.optimizers": "ember.example_libraries.optimizers",
    "jax.experimental.ode": "ember.experimental.ode",
}


# namespaces whose module holds its implementation: only these names are public
PUBLIC_OVERRIDES: dict[str, list[str]] = {"jax.experimental.ode": ["odeint"]}
# namespaces whose public names include submodules their package always imports (the distributions);
# elsewhere submodules are left out: which of them are attributes depends on what was imported before
MODULE_MEMBERS = ("jax.scipy.stats",)
_HELPER_MODULES = ("typing", "collections", "collections.abc", "builtins", "functools", "__future__")


def public_names(module: Any) -> list[str]:
    """The public names of ``module``: its ``__all__`` if it has one, else the names without a
    leading underscore, leaving out helpers imported from the standard library or JAX's utilities
    and modules (except the submodules of :data:`MODULE_MEMBERS`, ``jax.scipy.stats.norm``)."""
    if module.__name__ in PUBLIC_OVERRIDES:
        return list(PUBLIC_OVERRIDES[module.__name__])
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    out = []
    for n in names:
        value = getattr(module, n, None)
        if inspect.ismodule(value):
            if module.__name__ not in MODULE_MEMBERS or value.__name__ != f"{module.__name__}.{n}":
                continue
        else:
            owner = getattr(value, "__module__", None) or ""
            if owner in _HELPER_MODULES or owner.startswith("jax._src.util"):
                continue
        out.append(n)
    return sorted(set(out))


def walk_jax() -> dict[str, Any]:
    """The record of the installed JAX: ``{"jax_version": ..., "names": {namespace: [names]}}``."""
    jax = importlib.import_module("jax")
    names = {}
    for ns in NAMESPACES:
        try:
            names[ns] = public_names(importlib.import_module(ns))
        except ImportError:
            continue
    return {"jax_version": jax.__version__, "names": names}


def load_record() -> dict[str, Any]:
    """The recorded JAX names (``{"jax_version": ..., "names": {...}}``)."""
    return json.loads(RECORD.read_text())


def missing(record: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """For each JAX namespace of the record, the names its ember counterpart lacks (every name
    when ember has no such namespace)."""
    record = load_record() if record is None else record
    out = {}
    for ns, names in record["names"].items():
        try:
            mod = importlib.import_module(NAMESPACES[ns])
        except ImportError:
            out[ns] = list(names)
            continue
        lacking = [n for n in names if not hasattr(mod, n)]
        if lacking:
            out[ns] = lacking
    return out


def main(argv: list[str]) -> int:
    if "--update" in argv:
        RECORD.write_text(json.dumps(walk_jax(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {RECORD}")
        return 0
    record = load_record()
    gaps = missing(record)
    print(f"JAX {record['jax_version']}: {sum(map(len, gaps.values()))} public names ember lacks")
    for ns, names in gaps.items():
        print(f"{ns} ({len(names)}): {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
