"""The import direction of ember's modules (parsed with ``ast``, nothing imported).

Every module belongs to one layer of :data:`LAYERS` (the longest matching prefix); a module may
import modules of its own layer and of lower layers only, at module level and inside functions
alike. The same table is in ``docs/INTERNALS.md`` ("Layers"). The listed exceptions are the only
places a lower layer reaches up, each with its reason.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

# lowest first; a module may import its own layer and the ones before it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("ember.errors", "ember._src.dtypes", "ember._src.shapes", "ember._src.tree",
              "ember._src.debug", "ember._src.flags", "ember._src.cache_files")),
    ("core", ("ember._src.core", "ember._src.array", "ember._src.program", "ember._src.registry_report",
              "ember._src.arg_checks", "ember._src.devices", "ember._src.call_keys")),
    ("prims", ("ember._src.prims", "ember._src.ad_util", "ember._src.dynamic")),
    ("transforms", ("ember._src.ad", "ember._src.partial_eval", "ember._src.jacobians", "ember._src.batching",
                    "ember._src.custom_derivatives",
                    "ember._src.control_flow", "ember._src.eval_shape", "ember._src.validation",
                    "ember._src.interpreter", "ember._src.aot", "ember._src.collectives",
                    "ember._src.rewrites")),
    ("jit", ("ember._src.jit",)),
    ("backends", ("ember._src.native", "ember._src.gpu")),
    ("numpy", ("ember._src.numpy",)),
    ("lax", ("ember._src.lax",)),
    ("library", ("ember._src.nn", "ember._src.random", "ember._src.xla_math", "ember._src.api_util")),
    ("public", ("ember", "ember._src")),
    # programs over the public API: the demo (python -m ember), the FEATURES.md generator and the fuzzer
    ("tools", ("ember._src.features", "ember._src.demo", "ember.__main__", "ember._src.fuzz",
               "ember._src.fuzz_cases", "ember._src.fuzz_check", "ember._src.fuzz_workers",
               "ember._src.fuzz_shrink", "ember.fuzz")),
]

# (importer, imported): upward imports that stay, and why
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("ember._src.numpy.array_methods", "ember.numpy"):
        "Array methods look the function up in the public namespace at call time, so a method and the "
        "function it names are the same object (monkeypatching included)",
    ("ember._src.native.runtime.progcache", "ember"):
        "the on-disk program cache keys entries by ember's version and the files of its package",
}

# modules that may import the native backend (it registers itself in jit.BACKENDS)
NATIVE_IMPORTERS = ("ember", "ember._src.features")
# modules that may import the GPU backends (they register themselves in jit.BACKENDS)
GPU_IMPORTERS = NATIVE_IMPORTERS


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in sorted((SRC / "ember").rglob("*.py")):
        parts = p.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _rank(mod: str, table: list[tuple[str, tuple[str, ...]]]) -> int:
    """The index of the entry of ``table`` whose longest prefix matches ``mod`` (-1: none)."""
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(table):
        for pre in prefixes:
            if (mod == pre or mod.startswith(pre + ".")) and len(pre) > best:
                best, rank = len(pre), i
    return rank


def _layer(mod: str) -> int:
    rank = _rank(mod, LAYERS)
    assert rank >= 0, f"{mod} is in no layer of LAYERS"
    return rank


def _imports(path: pathlib.Path, mod: str) -> list[tuple[str, int]]:
    """(imported ember module, line) for every import statement of the file."""
    out = []
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            out += [(a.name, n.lineno) for a in n.names if a.name.split(".")[0] == "ember"]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                up = pkg.split(".")[: len(pkg.split(".")) - n.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "ember":
                continue
            for a in n.names:
                sub = f"{base}.{a.name}"
                out.append((sub if sub in MODULES else base, n.lineno))
    return out


def _all_imports() -> list[tuple[str, str, int]]:
    return [(m, t, line) for m, p in MODULES.items() for t, line in _imports(p, m)]


def test_every_module_has_a_layer() -> None:
    for m in MODULES:
        _layer(m)


MAX_MODULE_LINES = 800  # issue 33: a longer module is split by job into modules named after what they hold


def _long_modules(root: pathlib.Path, limit: int = MAX_MODULE_LINES) -> list[str]:
    """``path: lines`` of every ``.py`` file under ``root`` with more than ``limit`` lines."""
    out = []
    for p in sorted(root.rglob("*.py")):
        n = len(p.read_text().splitlines())
        if n > limit:
            out.append(f"{p.relative_to(root)}: {n} lines")
    return out


def test_no_module_over_800_lines() -> None:
    """No module under ``src/`` is longer than 800 lines (no exceptions)."""
    long = _long_modules(SRC)
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job):\n" + "\n".join(long)


def test_the_length_check_sees_a_long_module(tmp_path: pathlib.Path) -> None:
    """An 801-line module anywhere below the root is reported; an 800-line one is not."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "ok.py").write_text("x = 1\n" * 800)
    (tmp_path / "pkg" / "sub" / "long.py").write_text("x = 1\n" * 801)
    assert _long_modules(tmp_path) == [str(pathlib.Path("pkg/sub/long.py")) + ": 801 lines"]


def test_imports_point_down() -> None:
    bad = []
    for m, t, line in _all_imports():
        if t not in MODULES:
            continue
        if _layer(t) > _layer(m) and (m, t) not in EXCEPTIONS:
            bad.append(f"{MODULES[m].relative_to(SRC)}:{line}: {m} ({LAYERS[_layer(m)][0]}) imports "
                       f"{t} ({LAYERS[_layer(t)][0]})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_only_the_top_imports_native() -> None:
    bad = [f"{m} imports {t}" for m, t, _ in _all_imports()
           if t.startswith("ember._src.native") and not m.startswith("ember._src.native")
           and m not in NATIVE_IMPORTERS]
    assert not bad, bad


def test_only_the_top_imports_gpu() -> None:
    """The GPU backends are imported by the top only, and never reach into the native backend."""
    bad = [f"{m} imports {t}" for m, t, _ in _all_imports()
           if (t.startswith("ember._src.gpu") and not m.startswith("ember._src.gpu")
               and m not in GPU_IMPORTERS)
           or (m.startswith("ember._src.gpu") and t.startswith("ember._src.native"))]
    assert not bad, bad


def test_exceptions_are_still_needed() -> None:
    found = {(m, t) for m, t, _ in _all_imports()}
    stale = [k for k in EXCEPTIONS if k not in found]
    assert not stale, f"remove these from EXCEPTIONS: {stale}"


@pytest.mark.parametrize("name", ["ember._src.jit", "ember._src.validation", "ember._src.prims.linalg"])
def test_named_cycles_are_gone(name: str) -> None:
    """The three reversed imports issue 17 named: jit -> native, validation -> native.planner,
    prims.linalg -> the numpy layer."""
    targets = [t for t, _ in _imports(MODULES[name], name)]
    assert not [t for t in targets if t.startswith(("ember._src.native", "ember._src.numpy"))], targets


def test_the_checker_sees_an_upward_import(tmp_path: pathlib.Path) -> None:
    """A module of the prims layer importing jit (inside a function too) is reported as upward."""
    f = tmp_path / "fake.py"
    f.write_text("from ember._src import jit\n\ndef g():\n"
                 "    from ember._src.native.runtime import dispatch\n")
    found = _imports(f, "ember._src.prims.fake")
    assert [t for t, _ in found] == ["ember._src.jit", "ember._src.native.runtime.dispatch"]
    assert all(_layer(t) > _layer("ember._src.prims.fake") for t, _ in found)
    assert _layer("ember._src.lax.conv") > _layer("ember._src.numpy.ufuncs") > _layer("ember._src.jit")


# The native backend's stages, lowest first: within ``ember._src.native`` a module imports only its own
# stage and the ones before it (pipeline order, with what the stages share below them).
NATIVE_STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("csrc", ("ember._src.native.csrc", "ember._src.native.pagecolor")),  # hand-written C and its loader
    ("runtime", ("ember._src.native.runtime",)),  # compiler, cache, dispatcher, per-machine libraries
    ("base", ("ember._src.native.base", "ember._src.native.opinfo", "ember._src.native.abi")),  # shared facts
    ("rewrite", ("ember._src.native.rewrite",)),
    ("scheduling", ("ember._src.native.scheduling",)),
    ("plan", ("ember._src.native.plan",)),
    ("emit", ("ember._src.native.emit",)),
    ("driver", ("ember._src.native",)),  # pipeline, backend, specialize, options, validators
]

# (importer, imported): backward imports between stages that stay, each with its reason. None today:
# a new backward import fails the test (move the fact it needs into ``native.base`` or the registry).
STAGE_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _stage(mod: str) -> int:
    return _rank(mod, NATIVE_STAGES)


def _native_imports() -> list[tuple[str, str, int]]:
    return [(m, t, line) for m, t, line in _all_imports()
            if m.startswith("ember._src.native") and t.startswith("ember._src.native") and t in MODULES]


def test_native_stages_import_only_earlier_stages() -> None:
    bad = []
    for m, t, line in _native_imports():
        if _stage(t) > _stage(m) and (m, t) not in STAGE_EXCEPTIONS:
            bad.append(f"{MODULES[m].relative_to(SRC)}:{line}: {m} ({NATIVE_STAGES[_stage(m)][0]}) imports "
                       f"{t} ({NATIVE_STAGES[_stage(t)][0]})")
    assert not bad, "imports against the native stage order:\n" + "\n".join(bad)


def test_native_stage_exceptions_are_still_needed() -> None:
    found = {(m, t) for m, t, _ in _native_imports()}
    stale = [k for k in STAGE_EXCEPTIONS if k not in found]
    assert not stale, f"remove these from STAGE_EXCEPTIONS: {stale}"


def test_every_native_module_has_a_stage() -> None:
    missing = [m for m in MODULES if m.startswith("ember._src.native") and _stage(m) < 0]
    assert not missing, missing


def _private_native_imports(root: pathlib.Path) -> list[str]:
    """``from ember._src.native.X import _name`` statements in the native backend under ``root``."""
    bad = []
    for p in sorted((root / "ember" / "_src" / "native").rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("ember._src.native"):
                bad += [f"{p.relative_to(root)}:{n.lineno}: {a.name} from {n.module}" for a in n.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return bad


def test_native_modules_share_no_private_names() -> None:
    """A helper one stage module takes from another is part of that module's interface: public name."""
    bad = _private_native_imports(SRC)
    assert not bad, "private names imported across native modules:\n" + "\n".join(bad)


def test_the_private_import_check_sees_one(tmp_path: pathlib.Path) -> None:
    mod = tmp_path / "ember" / "_src" / "native" / "emit"
    mod.mkdir(parents=True)
    (mod / "x.py").write_text("from ember._src.native.backend import _hidden\n")
    want = "ember/_src/native/emit/x.py:1: _hidden from ember._src.native.backend"
    assert _private_native_imports(tmp_path) == [want]
