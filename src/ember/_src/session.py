"""``InferenceSession``: run an imported model with NumPy in/out, keep its state, save and load it.

A saved session is one directory (format ``ember.session``, see docs/torch.md):

* ``program.json``: the graph (``ember.torch_graph`` JSON, versioned);
* ``weights.safetensors``: parameters (state-dict names) and constants (``constant/<name>``);
* ``metadata.json``: format and version, ember version, input names, dtypes and dynamic axes,
  output names, state names, and the SHA-256 of the two other files.

Loading needs no torch; the weights are read and written with the ``safetensors`` package (a
dependency of ember).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
from typing import Any

import numpy as np

import ember
from ember._src import devices, dtypes
from ember._src.devices import Device
from ember._src.shapes import evaluate
from ember._src.torch_import import bf16, safetensors, schema
from ember._src.torch_import.graph import Graph, range_error
from ember._src.torch_import.module import ImportedModule
from ember._src.torch_import.schema import SchemaError
from ember.errors import BindingError, DTypeError, EmberError, ShapeError

FORMAT = "ember.session"
FORMAT_VERSION = 1
WEIGHTS = ("float32", "bfloat16")  # InferenceSession(weights=...)


class SessionError(EmberError, ValueError):
    """A bad call of a session (unknown or missing input names) or a saved session that cannot be
    loaded (another format version, a damaged file)."""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class InferenceSession:
    """Runs an :class:`~ember.torch.ImportedModule` (weights as program constants, one compile per
    input structure; named axes bound per call).

    ``run({"input_ids": ids}) -> {"logits": ...}`` takes and returns NumPy arrays and is safe to call
    from several threads. Buffers the graph mutates are session state: each ``run`` reads them and
    keeps the new values (``state``, ``reset_state()``). ``state_inputs={"past": "present"}`` makes
    an input session state too (a key/value cache): ``run`` feeds it the value kept from the
    previous call's output ``present`` (start it with ``set_state("past", value)``) unless the
    caller passes it. ``device`` (``"webgpu"``, ``"cuda"``, a device of ``ember.devices()``; default
    the CPU) runs the model's programs there: the weights are uploaded once per compiled program
    and stay on the device, feeds and results are NumPy arrays as on the CPU.
    """

    def __init__(self, imported: ImportedModule, state_inputs: dict[str, str] | None = None,
                 weights: str = "float32", device: Any = None):
        if not isinstance(imported, ImportedModule):
            raise TypeError("InferenceSession takes an ember.torch.ImportedModule, "
                            f"got {type(imported).__name__}")
        if weights not in WEIGHTS:
            raise ValueError(f"InferenceSession: weights must be one of {list(WEIGHTS)}, got {weights!r}")
        self._device, backend = _session_device(device)
        if weights != "float32" and backend is not None:
            raise ValueError(f"InferenceSession: weights={weights!r} runs on the CPU only (the GPU "
                             "backends have no bfloat16-weight products yet); use weights='float32' on "
                             f"{self._device}")
        self._m = imported
        self._weights = weights
        g = imported.graph
        self._users = g.user_inputs()
        self._state_names = list(g.mutations)
        self._initial_state = {k: np.asarray(imported.params[k]) for k in self._state_names}
        self._state = dict(self._initial_state)
        const = {k: v for k, v in imported.params.items() if k not in g.mutations}
        chosen = bf16.product_weights(g) if weights == "bfloat16" else set()
        declared = {i.target: i.dtype for i in g.inputs if i.kind == "param"}
        for k, v in const.items():  # bfloat16 weights of a loaded session: kept as they are or widened
            if k in chosen:
                const[k] = np.asarray(v).astype(dtypes.bfloat16)
            elif np.asarray(v).dtype == dtypes.bfloat16 and declared.get(k) == "float32":
                const[k] = np.asarray(v).astype(np.float32)
        for k in (bf16.table_weights(g) if chosen else ()):  # an embedding tied to a product weight
            twin = next((c for c in sorted(chosen) if const[c].shape == np.shape(const[k])
                         and np.array_equal(const[c], np.asarray(const[k], dtypes.bfloat16))), None)
            if twin is not None:
                const[k] = const[twin]  # one array: its bits are held once
                chosen.add(k)
        self._const_params = const  # what the session holds (PARAMS) and saves
        bits = {k: const[k].view(np.uint16) for k in chosen}  # the bfloat16 weights' bits, shared
        plain = {k: v for k, v in const.items() if k not in chosen}
        specs = imported._axes_specs()
        fn = imported._raw

        def step(state: dict, *inputs: Any) -> tuple:
            # a bfloat16 weight enters the program as its uint16 bits, widened where it is read; the
            # native backend's bf16_weights pass runs its products on the bits (docs/torch.md)
            wide = {k: bf16.decode(v) for k, v in bits.items()}
            return fn({**plain, **wide, **state}, *inputs)
        self._step = step
        # on a GPU, what its kernels do not compute (the importer's index checks, sort, ...) runs on
        # the host, its values copied between segments
        gpu_opts = {"host_fallback": True} if backend is not None else {}
        self._jit = ember.jit(step, dynamic_axes=[None, *specs], backend=backend, **gpu_opts)
        self._lock = threading.RLock()
        self._fed = dict(state_inputs or {})
        for i, o in self._fed.items():
            if i not in self.input_names or o not in self.output_names:
                raise SessionError(f"state_inputs: {i!r} -> {o!r} must map an input "
                                   f"{self.input_names} to an output {self.output_names}")
        self._fed_state: dict[str, np.ndarray] = {}
        self._origin: str | None = None  # the directory of a loaded session

    def set_state(self, name: str, value: Any) -> None:
        """Set a ``state_inputs`` input's current value (e.g. an empty key/value cache)."""
        if name not in self._fed:
            raise SessionError(f"set_state: {name!r} is not one of the state inputs {list(self._fed)}")
        with self._lock:
            self._fed_state[name] = np.asarray(value)

    # ---- introspection --------------------------------------------------------------------------
    @property
    def device(self) -> Device:
        """The device the session's programs run on (``cpu``, ``webgpu:0`` or ``cuda:0``)."""
        return self._device

    @property
    def weights(self) -> str:
        """How the session keeps the weights of its products: ``"float32"`` or ``"bfloat16"``."""
        return self._weights

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self._users]

    @property
    def output_names(self) -> list[str]:
        return self._m.output_names

    @property
    def dynamic_axes(self) -> dict[str, tuple]:
        return self._m.dynamic_axes

    @property
    def state(self) -> dict[str, np.ndarray]:
        """The current values of the buffers the graph mutates."""
        return dict(self._state)

    def reset_state(self) -> None:
        """Back to the initial values of the mutated buffers; state inputs are cleared."""
        with self._lock:
            self._state = dict(self._initial_state)
            self._fed_state.clear()

    def cache_info(self) -> dict[str, int]:
        """The jitted program's cache counters (``compiles``, ``specializations``, ...)."""
        return self._jit.cache_info()

    # ---- running --------------------------------------------------------------------------------
    def _check(self, feeds: dict[str, Any]) -> tuple[list[np.ndarray], dict[str, int]]:
        if not isinstance(feeds, dict):
            raise TypeError("InferenceSession.run takes a dict {input name: array}")
        names = self.input_names
        missing = [n for n in names if n not in feeds]
        extra = [n for n in feeds if n not in names]
        if missing or extra:
            raise SessionError(f"run: missing inputs {missing}, unknown inputs {extra} "
                               f"(the model takes {names})")
        axes: dict[str, tuple[int, str]] = {}
        arrays = []
        for spec in self._users:
            a = np.asarray(feeds[spec.name])
            want = np.dtype(spec.dtype)
            if a.dtype != want:
                same_int = a.dtype.kind in "iu" and want.kind == "i"
                if not same_int:
                    raise DTypeError(f"run: input {spec.name!r} must be {want}, got {a.dtype}")
                if a.size and (a.max() > np.iinfo(want).max or a.min() < np.iinfo(want).min):
                    raise DTypeError(f"run: input {spec.name!r} has values that do not fit {want}")
                a = a.astype(want)
            if a.ndim != len(spec.shape):
                raise ShapeError(f"run: input {spec.name!r} must have {len(spec.shape)} dims "
                                 f"({_fmt(spec.shape)}), got shape {a.shape}")
            for i, (d, n) in enumerate(zip(spec.shape, a.shape)):
                if isinstance(d, int):
                    if d != n:
                        raise ShapeError(f"run: input {spec.name!r}: dimension {i} must be {d}, got {n}")
                    continue
                if not isinstance(d, str):
                    continue
                if d in axes and axes[d][0] != n:
                    raise ShapeError(f"run: axis {d!r} has conflicting sizes: {axes[d][1]} has {axes[d][0]}, "
                                     f"{spec.name} has {n}")
                axes[d] = (n, spec.name)
                why = range_error(self._m.graph, d, n, f"run: input {spec.name!r}")
                if why is not None:
                    raise ShapeError(why)
            arrays.append(a)
        return arrays, {k: v[0] for k, v in axes.items()}  # (torch's guards: program constraints)

    def run(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        """Run the model on ``feeds`` ({input name: array}); returns {output name: NumPy array}."""
        with self._lock:
            if self._fed:
                feeds = dict(feeds)
                for name in self._fed:
                    if name not in feeds:
                        if name not in self._fed_state:
                            raise SessionError(f"run: state input {name!r} has no value yet: pass it or "
                                               f"call set_state({name!r}, value) first")
                        feeds[name] = self._fed_state[name]
            arrays, _ = self._check(feeds)
            try:
                outs, new_state = self._jit(self._state, *arrays)
            except (MemoryError, BindingError):  # (sizes the program rejects: the caller's inputs)
                raise
            except Exception as e:
                if self._origin is None:
                    raise
                # a loaded program passed the schema but fails to trace or run: the file's fault
                notes = "".join(f" ({n})" for n in getattr(e, "__notes__", ()))
                raise SessionError(f"the program of the session loaded from {self._origin!r} fails: "
                                   f"{type(e).__name__}: {str(e)[:2000]}{notes}") from e
            if new_state:
                self._state = {k: np.asarray(v) for k, v in new_state.items()}
            result = {n: np.asarray(o) for n, o in zip(self.output_names, outs)}
            for i, o in self._fed.items():
                self._fed_state[i] = result[o]
        return result

    def memory(self, **sizes: int) -> dict[str, int]:
        """Bytes per arena class for a binding of the named axes (``memory(seq=512)``): ``PARAMS``
        (weights and constants), ``INPUTS``, ``OUTPUTS``, ``ACTIVATIONS`` (the planned arena's peak,
        intermediates and per-step workspace together) and ``WORKSPACE`` (the workspace buffers'
        total, when the backend plans them)."""
        axes = {d for i in self._users for d in i.shape if isinstance(d, str)}
        if set(sizes) != axes:
            raise SessionError(f"memory: give a size for each named axis {sorted(axes)}, got {sorted(sizes)}")
        from ember._src.torch_import.graph import eval_dim
        examples = [ember.ShapeDtypeStruct(tuple(eval_dim(d, sizes) for d in i.shape), i.dtype)
                    for i in self._users]
        held = {id(v): v for v in self._const_params.values()}  # tied weights sharing one array
        params = sum(np.asarray(v).nbytes for v in held.values())
        params += sum(np.asarray(v).nbytes for v in self._m.constants.values())
        state_ex = {k: ember.ShapeDtypeStruct(v.shape, v.dtype) for k, v in self._initial_state.items()}
        compiled = self._jit.lower(state_ex, *examples)
        spec = compiled.specialize(**sizes) if compiled.symbolic else None
        run = spec.run if spec is not None else compiled.executable
        out_avals = spec.out_avals if spec is not None else compiled.out_avals
        activ = int(getattr(run, "arena_bytes", 0) or getattr(getattr(run, "plan", None), "arena_bytes", 0))
        work = _workspace_bytes(run, sizes)
        return {"PARAMS": int(params),
                "INPUTS": int(sum(np.prod(e.shape, dtype=np.int64) * np.dtype(e.dtype).itemsize
                                  for e in examples)),
                "OUTPUTS": int(sum(np.prod(a.shape, dtype=np.int64) * np.dtype(a.dtype).itemsize
                                   for a in out_avals)),
                "ACTIVATIONS": activ, "WORKSPACE": work}

    # ---- save / load ----------------------------------------------------------------------------
    def save(self, path: str, keep_source_paths: bool = False) -> None:
        """Write the session to the directory ``path`` (created if needed).

        Each node's ``source`` (the model's source line that made it) is stored with its file
        relative to the current directory or to the ``sys.path`` entry it was imported from (a file
        under neither keeps its base name), so no absolute path of this machine is written;
        ``keep_source_paths=True`` keeps the absolute paths (for debugging on this machine).
        """
        os.makedirs(path, exist_ok=True)
        g = self._m.graph
        program = g.to_json()
        if not keep_source_paths:
            for n in program["nodes"]:
                n["source"] = portable_source(n["source"])
        with open(os.path.join(path, "program.json"), "w") as f:
            json.dump(program, f)
        tensors = {k: np.asarray(v) for k, v in self._m.params.items()}
        tensors.update({k: np.asarray(v) for k, v in self._const_params.items()})  # bfloat16 kept as such
        tensors.update({f"constant/{k}": np.asarray(v) for k, v in self._m.constants.items()})
        safetensors.save(os.path.join(path, "weights.safetensors"), tensors, {"format": FORMAT})
        meta = {"format": FORMAT, "version": FORMAT_VERSION, "ember_version": ember.__version__,
                "inputs": [{"name": i.name, "dtype": i.dtype,
                            "axes": [d if isinstance(d, (str, int)) else None for d in i.shape]}
                           for i in self._users],
                "outputs": self.output_names, "state": self._state_names,
                "sha256": {n: _sha256(os.path.join(path, n)) for n in _FILES}}
        with open(os.path.join(path, "metadata.json"), "w") as f:
            json.dump(meta, f, indent=1)

    @classmethod
    def load(cls, path: str, device: Any = None) -> InferenceSession:
        """Load a session saved with :meth:`save` (torch is not needed), to run on ``device`` (as
        the constructor's).

        The files are untrusted input: ``metadata.json`` and ``program.json`` are checked against
        their versioned schemas, the weights' sizes against the weights file and the program's
        inputs, before anything is built (see docs/SECURITY.md). Any damaged, missing, unreadable
        or inconsistent file raises :class:`SessionError` naming the file and field.
        """
        def fail(msg: str) -> SessionError:
            return SessionError(f"InferenceSession.load({path!r}): {msg}")
        if not os.path.isdir(path):
            raise fail("not a directory: not a saved session directory")
        meta = _read_json(path, "metadata.json", fail)
        try:
            _check_metadata(meta)
        except SchemaError as e:
            raise fail(f"metadata.json: {e}") from None
        for name in _FILES:
            try:
                digest = _sha256(os.path.join(path, name))
            except FileNotFoundError:
                raise fail(f"{name} is missing") from None
            except OSError as e:
                raise fail(f"{name} cannot be read ({e.strerror or e})") from None
            if digest != meta["sha256"][name]:
                raise fail(f"{name} is damaged (its SHA-256 does not match metadata.json)")
        try:
            graph = Graph.from_json(_read_json(path, "program.json", fail))
        except SchemaError as e:
            raise fail(f"program.json: {e}") from None
        try:
            tensors, _ = safetensors.load(os.path.join(path, "weights.safetensors"))
        except safetensors.SafetensorsError as e:
            raise fail(f"weights.safetensors is damaged: {e}") from None
        except OSError as e:
            raise fail(f"weights.safetensors cannot be read ({e.strerror or e})") from None
        try:
            _check_consistent(meta, graph, tensors)
        except SchemaError as e:
            raise fail(str(e)) from None
        tensors = _widened(graph, tensors)
        consts = {k[len("constant/"):]: v for k, v in tensors.items() if k.startswith("constant/")}
        params = {k: v for k, v in tensors.items() if not k.startswith("constant/")}
        declared = {i.target: i.dtype for i in graph.inputs if i.kind == "param"}
        narrowed = [k for k, v in params.items()
                    if v.dtype == dtypes.bfloat16 and declared.get(k) == "float32"]
        weights = "bfloat16" if narrowed else "float32"  # float32 weights saved as bfloat16
        session = cls(ImportedModule(graph, params, consts), weights=weights, device=device)
        session._origin = path
        return session


_FILES = ("program.json", "weights.safetensors")
_META_KEYS = ("format", "version", "ember_version", "inputs", "outputs", "state", "sha256")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")


def _read_json(path: str, name: str, fail: Any) -> Any:
    """The JSON document ``name`` of the session directory ``path`` (every failure a SessionError)."""
    try:
        with open(os.path.join(path, name), "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        if name == "metadata.json":
            raise fail("no metadata.json: not a saved session directory") from None
        raise fail(f"{name} is missing") from None
    except OSError as e:
        raise fail(f"{name} cannot be read ({e.strerror or e})") from None
    except RecursionError:
        raise fail(f"{name} is damaged (nested too deeply)") from None
    except ValueError as e:
        raise fail(f"{name} is damaged (not valid JSON: {str(e)[:200]})") from None


def _check_metadata(meta: Any) -> None:
    """The types of ``metadata.json``'s fields (raises :class:`SchemaError`)."""
    schema.check_version(meta, FORMAT, FORMAT_VERSION, "the session")
    schema.check_keys(meta, "", _META_KEYS)
    if not isinstance(meta["ember_version"], str) or len(meta["ember_version"]) > 64:
        raise SchemaError("ember_version", "must be a short string")
    for i, spec in enumerate(schema.check_list(meta["inputs"], "inputs")):
        p = f"inputs[{i}]"
        schema.check_keys(spec, p, ("name", "dtype", "axes"))
        schema.check_name(spec["name"], f"{p}.name")
        schema.check_dtype(spec["dtype"], f"{p}.dtype")
        for j, d in enumerate(schema.check_list(spec["axes"], f"{p}.axes")):
            if isinstance(d, str):
                schema.check_axis(d, f"{p}.axes[{j}]")
            elif d is not None:  # None: a size computed from the other axes
                schema.check_size(d, f"{p}.axes[{j}]")
    for key in ("outputs", "state"):
        for i, n in enumerate(schema.check_list(meta[key], key)):
            schema.check_name(n, f"{key}[{i}]")
    schema.check_keys(meta["sha256"], "sha256", _FILES)
    for name in _FILES:
        if not isinstance(meta["sha256"][name], str) or not _HEX64.match(meta["sha256"][name]):
            raise SchemaError(f'sha256["{name}"]', "must be 64 lowercase hexadecimal digits")


def _check_consistent(meta: dict, graph: Graph, tensors: dict[str, np.ndarray]) -> None:
    """``metadata.json`` describes ``graph``; the weights file holds exactly the tensors the graph's
    inputs name, with their shapes and dtypes (raises :class:`SchemaError` with the file's name)."""
    users = graph.user_inputs()
    if len(meta["inputs"]) != len(users):
        raise SchemaError("metadata.json: inputs", f"lists {len(meta['inputs'])} inputs, program.json "
                                                   f"has {len(users)}")
    for i, (spec, inp) in enumerate(zip(meta["inputs"], users)):
        want = {"name": inp.name, "dtype": inp.dtype,
                "axes": [d if isinstance(d, (str, int)) else None for d in inp.shape]}
        for k, v in want.items():
            if spec[k] != v:
                raise SchemaError(f"metadata.json: inputs[{i}].{k}", "does not match program.json")
    if meta["outputs"] != graph.output_names:
        raise SchemaError("metadata.json: outputs", "does not match program.json's output_names")
    if meta["state"] != list(graph.mutations):
        raise SchemaError("metadata.json: state", "does not match program.json's mutations")
    used = set()
    for i, inp in enumerate(graph.inputs):
        if inp.kind not in ("param", "state", "constant"):
            continue
        key = f"constant/{inp.target}" if inp.kind == "constant" else inp.target
        used.add(key)
        t = tensors.get(key)
        if t is None:
            raise SchemaError(f"program.json: inputs[{i}].target", f"{key!r} is not in weights.safetensors")
        if list(t.shape) != inp.shape:
            raise SchemaError(f"program.json: inputs[{i}].shape", f"is {inp.shape}, but weights.safetensors "
                                                                  f"holds {key!r} with shape {list(t.shape)}")
        # a 64-bit tensor saved while jax_enable_x64 was off is stored 32-bit (loaded widened); a
        # float32 weight of a bfloat16 session is saved as bfloat16
        declared = dtypes.lookup(inp.dtype)
        bf16_weight = inp.kind == "param" and inp.dtype == "float32" and t.dtype == dtypes.bfloat16
        if t.dtype.name not in (inp.dtype, str(dtypes.narrow(declared))) and not bf16_weight:
            raise SchemaError(f"program.json: inputs[{i}].dtype", f"is {inp.dtype}, but weights.safetensors "
                                                                  f"holds {key!r} as {t.dtype.name}")
    extra = sorted(set(tensors) - used)
    if extra:
        raise SchemaError("weights.safetensors", f"holds tensors the program does not use: {extra[:5]}")


def _session_device(device: Any) -> tuple[Device, str | None]:
    """The :class:`Device` a session runs on and the ``jit`` backend for it (None: the default, the
    CPU's); a GPU device that cannot run here raises RuntimeError saying why."""
    try:
        dev = devices.parse_device(device)
    except ValueError as e:
        raise ValueError(f"InferenceSession: device: {e}") from None
    if dev is None or dev.platform == "cpu":
        return Device(), None
    devices.platform(dev)  # the GPU backends registered themselves when ember was imported
    return dev, dev.platform


def _widened(graph: Graph, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``tensors`` with each one stored narrower than its declared dtype (an int64 buffer saved
    while ``jax_enable_x64`` was off is int32 in the file) widened to the dtype ember uses for the
    declared one now (exact: a widening cast)."""
    out = dict(tensors)
    for inp in graph.inputs:
        if inp.kind not in ("param", "state", "constant"):
            continue
        key = f"constant/{inp.target}" if inp.kind == "constant" else inp.target
        want = dtypes.canonicalize(inp.dtype)
        if key in out and out[key].dtype != want and out[key].dtype == dtypes.narrow(want):
            out[key] = out[key].astype(want)
    return out


def portable_source(source: str) -> str:
    """A node's ``source`` ("<file>:<line> in <function>: <code>") with the file relative to the
    current directory or to the ``sys.path`` entry that holds it (else its base name)."""
    m = re.match(r"(.+?):(\d+) in ", source, re.S)
    if m is None or not os.path.isabs(m.group(1)):
        return source
    f = os.path.normpath(m.group(1))
    bases = [os.getcwd(), *(p for p in sys.path if p and os.path.isabs(p))]
    best = ""
    for b in bases:
        b = os.path.normpath(b)
        if os.path.dirname(b) != b and f.startswith(b + os.sep) and len(b) > len(best):
            best = b
    rel = os.path.relpath(f, best) if best else os.path.basename(f)
    return rel + source[m.end(1):]


def _fmt(shape: list) -> str:
    return ", ".join(str(d) if isinstance(d, (int, str)) else "?" for d in shape)


def _workspace_bytes(run: Any, sizes: dict[str, int]) -> int:
    """Total bytes of the WORKSPACE buffers of a native plan for this binding (0 when unknown)."""
    plan = getattr(getattr(run, "sym", None), "plan", None) or getattr(run, "plan", None)
    total = 0
    for b in getattr(plan, "buffers", ()):
        if getattr(b, "cls", None) == "WORKSPACE":
            n = b.nbytes
            total += int(evaluate(n, sizes))
    return total
