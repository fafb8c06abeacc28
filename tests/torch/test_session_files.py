"""Saved sessions are untrusted input: the schema of metadata.json / program.json / the weights file,
damaged directories, a node name that must not reach the generated C, and a fuzz test of mutated
sessions (run in a child process, so a crash is a signal, not a lost test run). Torch-free: the
model is a small hand-written graph (x @ w + b, relu, * c, softmax)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import ember
from ember._src.session import SessionError
from ember._src.torch_import.graph import Graph, Input, Node
from ember._src.torch_import.module import ImportedModule
from ember.errors import DTypeError, ShapeError

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "src"))
X = np.array([[0.5, -1.0, 2.0, 0.25], [1.5, 0.0, -0.5, 1.0]], np.float32)


def small_session(first_name: str = "mm") -> ember.InferenceSession:
    """softmax(relu(x @ w + b) * c) over a named batch axis."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = np.array([1.0, 0.5, 2.0], np.float32)
    c = np.array([1.0, 2.0, 0.5], np.float32)
    f32 = "float32"
    g = Graph([Input("x", "user", "x", ["batch", 4], f32), Input("p_w", "param", "w", [4, 3], f32),
               Input("p_b", "param", "b", [3], f32), Input("c_c", "constant", "c", [3], f32)],
              [Node(first_name, "aten.mm.default", [{"ref": "x"}, {"ref": "p_w"}], {}, ["batch", 3], f32,
                    "/home/someone/project/model.py:3 in forward: x @ w"),
               Node("add", "aten.add.Tensor", [{"ref": first_name}, {"ref": "p_b"}], {}, ["batch", 3], f32),
               Node("relu", "aten.relu.default", [{"ref": "add"}], {}, ["batch", 3], f32),
               Node("mul", "aten.mul.Tensor", [{"ref": "relu"}, {"ref": "c_c"}], {}, ["batch", 3], f32),
               Node("sm", "aten._softmax.default", [{"ref": "mul"}, 1, False], {}, ["batch", 3], f32)],
              [{"ref": "sm"}], ["probs"], {}, {"batch": [1, 64]})
    return ember.InferenceSession(ImportedModule(g, {"w": w, "b": b}, {"c": c}))


def reference(x: np.ndarray) -> np.ndarray:
    """The model in NumPy (the same weights as :func:`small_session`)."""
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    z = np.maximum(x @ w + np.array([1.0, 0.5, 2.0], np.float32), 0) * np.array([1.0, 2.0, 0.5], np.float32)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _rehash(d: str) -> None:
    """Make metadata.json's checksums match the files again (a crafted, not a damaged, session)."""
    p = os.path.join(d, "metadata.json")
    meta = json.loads(open(p).read())
    for n in ("program.json", "weights.safetensors"):
        meta["sha256"][n] = hashlib.sha256(open(os.path.join(d, n), "rb").read()).hexdigest()
    with open(p, "w") as f:
        json.dump(meta, f)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("session") / "small")
    small_session().save(d)
    return d


def _copy(saved: str, tmp_path, name: str = "s") -> str:
    d = str(tmp_path / name)
    shutil.copytree(saved, d)
    return d


def _edit(d: str, name: str, fn) -> None:
    p = os.path.join(d, name)
    doc = json.loads(open(p).read())
    fn(doc)
    with open(p, "w") as f:
        json.dump(doc, f)
    if name != "metadata.json":
        _rehash(d)


def test_roundtrip_matches_numpy(saved):
    s = ember.InferenceSession.load(saved)
    np.testing.assert_allclose(s.run({"x": X})["probs"], reference(X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, edit, match", [
    ("program.json", lambda g: g["nodes"][3].update(op="aten.system.default"),
     r"program.json: nodes\[3\].op: \"aten.system.default\" is not an op"),
    ("program.json", lambda g: g["nodes"][0]["shape"].__setitem__(1, 2 ** 62),
     r"program.json: nodes\[0\].shape\[1\]: a size must be at most"),
    ("program.json", lambda g: g["nodes"][2]["shape"].__setitem__(1, -3),
     r"program.json: nodes\[2\].shape\[1\]: a size must not be negative"),
    ("program.json", lambda g: g["nodes"][1].update(extra=1),
     r"program.json: nodes\[1\].extra: is not a field of this format"),
    ("program.json", lambda g: g["nodes"][1]["args"].__setitem__(0, {"ref": "later"}),
     r"program.json: nodes\[1\].args\[0\].ref: \"later\" is not an input or an earlier node"),
    ("program.json", lambda g: g["nodes"][4]["args"].__setitem__(1, float("nan")),
     r"program.json: nodes\[4\].args\[1\]: nan is not allowed"),
    ("program.json", lambda g: g["nodes"][4]["args"].append(7),
     r"program.json: nodes\[4\].args: do not fit aten._softmax.default"),
    ("program.json", lambda g: g["nodes"][0].update(shape=["seq", 3]),
     r"program.json: nodes\[0\].shape\[0\]: axis \"seq\" is not an axis of the inputs"),
    ("program.json", lambda g: g["inputs"][1]["shape"].__setitem__(0, 5),
     r"program.json: inputs\[1\].shape: is \[5, 3\], but weights.safetensors holds 'w' with shape \[4, 3\]"),
    ("program.json", lambda g: g["inputs"][3].update(target="missing"),
     r"program.json: inputs\[3\].target: 'constant/missing' is not in weights.safetensors"),
    ("program.json", lambda g: g.update(version=2),
     r"program.json: version: the graph was written in ember.torch_graph version 2, newer than this ember"),
    ("metadata.json", lambda m: m.update(version=7),
     r"metadata.json: version: the session was written in ember.session version 7, newer than this ember "
     r"reads \(version 1\): upgrade ember"),
    ("metadata.json", lambda m: m.update(version="1"), r"metadata.json: version: must be an integer"),
    ("metadata.json", lambda m: m["inputs"][0]["axes"].__setitem__(1, 5),
     r"metadata.json: inputs\[0\].axes: does not match program.json"),
    ("metadata.json", lambda m: m["sha256"].update({"../../etc/passwd": "0" * 64}),
     r"metadata.json: sha256\[\"../../etc/passwd\"\]: is not a field of this format"),
    ("metadata.json", lambda m: m.pop("outputs"), r"metadata.json: outputs: is missing"),
    ("program.json", lambda g: g.update(guards=[{"op": "system", "args": ["batch", 2]}]),
     r"program.json: guards\[0\].op: unknown comparison \"system\""),
    ("program.json", lambda g: g.update(guards=[{"op": "eq", "args": ["nope", 2]}]),
     r"program.json: guards\[0\].args\[0\]: axis \"nope\" is not an axis of the inputs"),
    ("program.json", lambda g: g.update(guards=[{"op": "eq", "args": ["batch"]}]),
     r"program.json: guards\[0\].args: must hold 2 operands, got 1"),
    ("program.json",
     lambda g: g.update(guards=[{"op": "eq", "args": [{"op": "mod", "args": ["batch", 0]}, 0]}]),
     r"program.json: guards\[0\].args\[0\].args: divides by zero"),
])
def test_schema_errors_name_the_field(saved, tmp_path, name, edit, match):
    d = _copy(saved, tmp_path)
    _edit(d, name, edit)
    with pytest.raises(SessionError, match=match):
        ember.InferenceSession.load(d)


def test_program_that_contradicts_its_shapes_fails_at_run(saved, tmp_path):
    """Valid in form, but the softmax's recorded size contradicts what its inputs give: the run stops
    at trace time, before any code is generated, with a SessionError naming the node."""
    d = _copy(saved, tmp_path)
    _edit(d, "program.json", lambda g: g["nodes"][4]["shape"].__setitem__(1, 2))
    s = ember.InferenceSession.load(d)
    with pytest.raises(SessionError, match=r"fails: ShapeError: .*dimension 1 is 3, the graph records 2"):
        s.run({"x": X})


def test_damaged_directories(saved, tmp_path):
    load = ember.InferenceSession.load
    d = _copy(saved, tmp_path, "dir")
    os.remove(os.path.join(d, "weights.safetensors"))
    os.mkdir(os.path.join(d, "weights.safetensors"))  # was a raw IsADirectoryError
    with pytest.raises(SessionError, match="weights.safetensors cannot be read"):
        load(d)
    d = _copy(saved, tmp_path, "missing")
    os.remove(os.path.join(d, "program.json"))
    with pytest.raises(SessionError, match="program.json is missing"):
        load(d)
    with pytest.raises(SessionError, match="not a saved session directory"):
        load(os.path.join(d, "metadata.json"))  # a file, not a directory
    d = _copy(saved, tmp_path, "badjson")
    with open(os.path.join(d, "program.json"), "w") as f:
        f.write("{" + '"a": [' * 5000)
    _rehash(d)
    with pytest.raises(SessionError, match=r"program.json is damaged \(not valid JSON"):
        load(d)
    with open(os.path.join(d, "program.json"), "w") as f:
        f.write("[" * 200000)  # deeper than the JSON parser recurses
    _rehash(d)
    with pytest.raises(SessionError, match=r"program.json is damaged \(nested too deeply\)"):
        load(d)
    d = _copy(saved, tmp_path, "trunc")
    w = os.path.join(d, "weights.safetensors")
    raw = open(w, "rb").read()
    with open(w, "wb") as f:
        f.write(raw[:-6])
    _rehash(d)
    with pytest.raises(SessionError, match=r"weights.safetensors is damaged: .*not fully covered"):
        load(d)
    with open(w, "wb") as f:  # a header length of 2**62: refused before reading that much
        f.write((2 ** 62).to_bytes(8, "little") + raw[8:])
    _rehash(d)
    with pytest.raises(SessionError, match="weights.safetensors is damaged: .*header too large"):
        load(d)


@pytest.mark.parametrize("name", ["metadata.json", "program.json", "weights.safetensors"])
def test_unreadable_file_is_a_session_error(saved, name):
    """A session file the user may not read (mode 000) is a SessionError naming the file and the
    reason. Root reads any file, so the load runs in a child that (as root) drops to an unprivileged
    user after importing ember."""
    d = tempfile.mkdtemp(prefix="ember-perm-")
    try:
        s = os.path.join(d, "s")
        shutil.copytree(saved, s)
        os.chmod(d, 0o755)
        os.chmod(s, 0o755)
        for f in os.listdir(s):
            os.chmod(os.path.join(s, f), 0o644)
        os.chmod(os.path.join(s, name), 0)
        code = ("import os, ember, ember.torch\n"
                "if os.geteuid() == 0:\n"
                "    os.setgid(65534); os.setuid(65534)\n"
                "try:\n"
                f"    ember.InferenceSession.load({s!r})\n"
                "except ember.torch.SessionError as e:\n"
                "    print('SessionError:', e)\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
                   EMBER_CACHE_DIR=os.path.join(d, "cache"))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           timeout=300, cwd=d)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "SessionError:" in r.stdout, r.stdout
        assert f"{name} cannot be read (Permission denied)" in r.stdout, r.stdout
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_weights_header_sizes_are_bounded_by_the_file(saved, tmp_path):
    """The safetensors package refuses each bad header entry before allocating from it; an unknown
    field of an entry is ignored (the format allows it; the weights are still checked against the
    program)."""
    d = _copy(saved, tmp_path)
    w = os.path.join(d, "weights.safetensors")
    raw = open(w, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    cases = [({"shape": [2 ** 62, 4]}, r"overflow computing buffer size"),
             ({"shape": [0, 2 ** 62]}, r"invalid shape, data type, or offset"),
             ({"shape": [-3]}, r"invalid value: integer `-3`"),
             ({"data_offsets": [0, 2 ** 62]}, r"invalid (shape, data type, or )?offset"),
             ({"data_offsets": [-12, 0]}, r"invalid value: integer `-12`"),
             ({"dtype": "F128"}, r"unknown variant `F128`"),
             ({"extra": 1}, None)]
    for change, match in cases:
        h = copy.deepcopy(header)
        h["b"].update(change)
        text = json.dumps(h).encode()
        with open(w, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text + raw[8 + n:])
        _rehash(d)
        if match is None:
            np.testing.assert_allclose(ember.InferenceSession.load(d).run({"x": X})["probs"], reference(X),
                                       rtol=1e-5, atol=1e-6)
            continue
        with pytest.raises(SessionError, match="weights.safetensors is damaged: .*" + match):
            ember.InferenceSession.load(d)


def test_zero_dim_tensor_keeps_its_shape(tmp_path):
    """A 0-d weight (a step counter) was saved with shape [1]; the loader now refuses such a mismatch."""
    from ember._src.torch_import import safetensors as st
    st.save(str(tmp_path / "w.safetensors"), {"n": np.array(3, np.int32), "v": np.arange(2.0)})
    back, _ = st.load(str(tmp_path / "w.safetensors"))
    assert back["n"].shape == () and int(back["n"]) == 3
    np.testing.assert_array_equal(back["v"], [0.0, 1.0])


def test_node_name_does_not_reach_c(tmp_path):
    """A crafted node name (a C comment end, a call, newlines) is only a key of the graph: the session
    runs, and the generated C does not contain it."""
    evil = "mm */ abort(); /*\n#include <stdlib.h>\n"
    d = str(tmp_path / "evil")
    small_session(first_name=evil).save(d)
    s = ember.InferenceSession.load(d)
    np.testing.assert_allclose(s.run({"x": X})["probs"], reference(X), rtol=1e-5, atol=1e-6)
    from ember._src.native import specialize
    program = s._jit.lower({}, ember.ShapeDtypeStruct((2, 4), "float32")).program
    source = specialize.symbolic_executable(program).source
    assert "int ember_main" in source
    assert "abort()" not in source and "*/ abort" not in source and evil not in source


# ---- fuzzing ----------------------------------------------------------------------------------------

_PALETTE = [None, True, False, -1, 0, 1, 3, 2 ** 31, 2 ** 62, -(2 ** 62), 2 ** 64, 1.5, float("nan"),
            float("inf"), "", "x", "batch", "*/ abort(); /*\n", [], {}, [[[[1]]]], {"ref": "x"},
            {"dim": "batch"}, {"float": "nan"}, {"dtype": "float64"}]


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def _mutate_json(doc, rng: random.Random):
    """One random change of a JSON document; returns (document, description, inert) where ``inert``
    says the change cannot alter the output (a source line, the ember version)."""
    paths = [p for p in _paths(doc) if p]
    path = rng.choice(paths)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    how = rng.choice(["replace", "replace", "replace", "delete", "add", "wrap", "deep"])
    if how == "replace":
        new = copy.deepcopy(rng.choice(_PALETTE))
        inert = key in ("source", "ember_version") and isinstance(new, str)
        parent[key] = new
        return doc, f"{path} = {new!r}", inert
    if how == "delete":
        del parent[key]
        return doc, f"del {path}", False
    if how == "add":
        target = parent[key] if isinstance(parent[key], (dict, list)) else parent
        if isinstance(target, dict):
            target["unknown_field"] = 1
        else:
            target.append(copy.deepcopy(target[-1]) if target else 1)
        return doc, f"add at {path}", False
    if how == "wrap":
        parent[key] = [parent[key]]
        return doc, f"wrap {path}", False
    deep = 0
    for _ in range(60):
        deep = [deep]
    parent[key] = deep
    return doc, f"deep {path}", False


def _mutate(d: str, rng: random.Random) -> tuple[str, bool]:
    """Apply one random mutation to the saved session ``d``; returns (description, inert)."""
    kind = rng.choice(["metadata", "program", "program", "program", "weights_header", "weights_bytes",
                       "truncate", "files"])
    if kind in ("metadata", "program"):
        name = f"{kind}.json"
        p = os.path.join(d, name)
        doc, desc, inert = _mutate_json(json.loads(open(p).read()), rng)
        with open(p, "w") as f:
            json.dump(doc, f)
        if kind == "program":
            _rehash(d)
        return f"{name}: {desc}", inert
    w = os.path.join(d, "weights.safetensors")
    raw = open(w, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    if kind == "weights_header":
        header = json.loads(raw[8:8 + n])
        doc, desc, _ = _mutate_json(header, rng)
        text = json.dumps(doc).encode()
        if rng.random() < 0.2:
            raw = rng.choice([2 ** 62, 0, len(text) + 1000, 7]).to_bytes(8, "little") + text + raw[8 + n:]
        else:
            raw = len(text).to_bytes(8, "little") + text + raw[8 + n:]
    elif kind == "weights_bytes":  # other weight values: a different, valid model
        i = rng.randrange(8 + n, len(raw))
        raw = raw[:i] + bytes([raw[i] ^ (1 << rng.randrange(8))]) + raw[i + 1:]
        desc = f"flip a bit of byte {i}"
    elif kind == "truncate":
        name = rng.choice(["weights.safetensors", "program.json", "metadata.json"])
        p = os.path.join(d, name)
        data = open(p, "rb").read()
        cut = rng.randrange(len(data))
        with open(p, "wb") as f:
            f.write(data[:cut])
        if name != "metadata.json":
            _rehash(d)
        return f"truncate {name} at {cut}", False
    else:
        name = rng.choice(["weights.safetensors", "program.json", "metadata.json"])
        os.remove(os.path.join(d, name))
        if rng.random() < 0.5:
            os.mkdir(os.path.join(d, name))
        return f"{name} removed or a directory", False
    with open(w, "wb") as f:
        f.write(raw)
    _rehash(d)
    return f"weights.safetensors: {desc}", False


def fuzz(saved: str, work: str, seed: int, count: int) -> list[dict]:
    """Load and run ``count`` mutations of the session ``saved``; one record per mutation."""
    rng = random.Random(seed)
    ref = reference(X)
    records = []
    for k in range(count):
        d = os.path.join(work, f"m{k}")
        shutil.copytree(saved, d)
        desc, inert = _mutate(d, rng)
        rec = {"mutation": desc, "inert": inert}
        try:
            s = ember.InferenceSession.load(d)
            out = s.run({"x": X})
        except SessionError as e:
            rec["outcome"], rec["error"] = "rejected", str(e)[:300]
        except (ShapeError, DTypeError) as e:  # an input the mutated (valid) signature refuses
            ok = str(e).startswith("run: input")
            rec["outcome"], rec["error"] = ("input refused" if ok else "unclear error"), str(e)[:300]
        except Exception as e:  # noqa: BLE001 - anything else is a finding
            rec["outcome"], rec["error"] = "unclear error", f"{type(e).__name__}: {str(e)[:300]}"
        else:
            same = (list(out) == ["probs"] and out["probs"].shape == ref.shape
                    and np.allclose(out["probs"], ref, rtol=1e-5, atol=1e-6))
            rec["outcome"] = "same" if same else "differs"
        shutil.rmtree(d)
        records.append(rec)
    records.append({"max_rss_mib": peak_rss_kib() // 1024})
    return records


def peak_rss_kib() -> int:
    """This process's own peak resident memory in KiB (``VmHWM``). Not ``getrusage``'s ``ru_maxrss``:
    Linux keeps that across ``execve``, so a child started from a large parent (a pytest worker late
    in a full run) reports the parent's peak as its own."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


FUZZ_COUNT = 300


def test_fuzz_mutated_sessions(saved, tmp_path):
    """Every mutation is a SessionError (or, for an input signature it changed, an input error) or a
    run; a change that cannot alter the output gives the unmutated output. The child process has an
    8 GiB address-space limit (a larger allocation fails it), its peak resident memory must stay under
    2 GiB, and a crash is a signal."""
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]),
               MALLOC_ARENA_MAX="2")  # few malloc arenas: the address-space limit holds on many cores
    r = subprocess.run([sys.executable, __file__, saved, str(work), "20261206", str(FUZZ_COUNT)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, f"the fuzzing process ended with {r.returncode}: {r.stderr[-3000:]}"
    records = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    stats = records.pop()
    assert len(records) == FUZZ_COUNT
    bad = [x for x in records if x["outcome"] == "unclear error" or (x["inert"] and x["outcome"] != "same")]
    assert not bad, json.dumps(bad[:5], indent=1)
    outcomes = {o: sum(x["outcome"] == o for x in records) for o in ("rejected", "same", "differs")}
    assert outcomes["rejected"] > FUZZ_COUNT // 2 and outcomes["same"] > 0, outcomes
    assert stats["max_rss_mib"] < 2048, stats


def test_peak_memory_is_the_childs_own():
    """The fuzz child's memory bound measures the child: a parent that touched 600 MiB before
    starting it does not count (``ru_maxrss`` would report the parent's peak after ``execve``)."""
    big = np.ones((600 << 20) // 8)
    code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); " \
           "import test_session_files as t; print(t.peak_rss_kib())"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout.split()[-1]) < 400 << 10, r.stdout  # the child's own peak (torch, ember loaded)
    assert big.sum() == big.size


if __name__ == "__main__":  # the fuzzing child: saved-session directory, work directory, seed, count
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    for rec in fuzz(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])):
        print(json.dumps(rec), flush=True)


@pytest.mark.parametrize("save_x64,load_x64", [(False, True), (True, False)])
def test_int64_buffer_loads_under_either_x64_mode(tmp_path, save_x64, load_x64):
    """An int64 buffer (position ids) saved while jax_enable_x64 was off is int32 in the weights
    file; a session loaded with it on widens it (it was refused: "holds 'pos' as int32"), and a
    session saved with it on loads with it off; outputs equal torch's."""
    torch = pytest.importorskip("torch")
    import ember.torch  # noqa: F401
    from ember._src import flags

    class Positions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("pos", torch.arange(8, dtype=torch.int64) * 3 % 8)
            self.emb = torch.nn.Embedding(8, 4)

        def forward(self, x):
            return self.emb(self.pos[: x.shape[0]]) + x

    torch.manual_seed(0)
    m = Positions().eval()
    x = torch.randn(5, 4)
    with torch.no_grad():
        want = m(x).numpy()
    with flags.override("jax_enable_x64", save_x64):
        ember.InferenceSession(ember.torch.import_module(m, args=(x,))).save(str(tmp_path / "s"))
    with flags.override("jax_enable_x64", load_x64):
        s = ember.InferenceSession.load(str(tmp_path / "s"))
        got = np.asarray(next(iter(s.run({"x": x.numpy()}).values())))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
