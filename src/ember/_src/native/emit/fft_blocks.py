"""The FFT kernels of the ``fft`` step as shared libraries: compiled once per precision and set of
reachable paths, called by every program whose steps reach those paths.

Why: a program that transforms compiled the whole FFT machinery it could reach (``fft_lanes.h``,
``fft_line.h``, the Stockham passes and ``fft_conv.h``'s tables: 70 KB of machine code for a
64 x 1024 complex transform) into its own translation unit, about 2 s of compiler time per
program, nearly all of a small program's compile. The kernels take every length, count and
stride at run time (a job struct); a program only chooses *which* paths it can reach (the
``EM_FFTG`` mask of :func:`.fft.reach`), and programs share few masks (18 over the FFT tests'
234 programs). So the kernels of one (precision, mask) are one library (:func:`library_source`;
its entry ``csrc/fft_block.h``), built through the compile cache (so once per machine and
compiler) and loaded with its symbols global; a program's fft steps call it through
``csrc/fft_block_call.h``, which looks the entry up by name. The program keeps its plans (their
tables in its static storage, ``em_fft_make``) and the runtime-length plan cache.

The entry's name, ``ember_fftb_<version>_<f32|f64>_<mask|all>``, carries a hash of the FFT sources
and says which library to build: :func:`prepare_for` reads the names from a program's source
before the program is loaded (``native/backend.py``), also when the source comes from the
program cache, and builds and loads what is missing. A library's table caches (``fft_conv.h``'s
twiddles) are freed when no executable uses it (``native/runtime/fft_tables.py``).

Calling across the library boundary costs nothing measurable: the kernels are reached through
one call per step either way, and a length known when the program is compiled was never
propagated into them (an A/B with the entry kept out of interprocedural optimization measured
level on 64-line transforms of 1000-3000 points).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import re
import threading

from ember._src.native.csrc import load
from ember._src.native.emit import c_ops, support

__all__ = ["contracted", "conv_text", "core_text", "library_source", "passes_text", "prepare_for",
           "program_block", "symbol"]

_PASSES, _CONV, _TYPED = load("fft_passes.h"), load("fft_conv.h"), load("fft_typed.h")
_LANES = load("fft_line.h") + load("fft_lanes.h")  # the line kernel first: em_fftl_run picks it
# floating-point contraction on for the FFT helpers' own code only (csrc/fma_on.h says why)
_FMA_ON, _FMA_OFF = load("fma_on.h"), load("fma_off.h")
_SYM_RE = re.compile(r'#define EM_FFTB_SYM "(ember_fftb_([0-9a-f]{12})_(f32|f64)_(all|\d+))"')
_PRECISIONS = {"f32": "float", "f64": "double"}


def contracted(text: str) -> str:
    """``text`` (C) compiled with floating-point contraction (FMA) on, the rest of the unit as it was."""
    return _FMA_ON + text + _FMA_OFF


def _typed(real_t: str, s: str, text: str, elti: bool = False) -> str:
    """``text`` with ``ELT`` (and ``ELTI``), ``EM_T`` defined for one precision around it."""
    ei = ("int32_t" if real_t == "float" else "int64_t") if elti else ""
    head = (f"#define ELT {real_t}\n" + (f"#define ELTI {ei}\n" if ei else "")
            + f"#define EM_T(name) name##_{s}\n")
    return head + text + "#undef EM_T\n" + ("#undef ELTI\n" if ei else "") + "#undef ELT\n"


def core_text() -> str:
    """The plans shared by both precisions (small DFTs first)."""
    return load("dft_small.h") + load("fft_core.h")


def passes_text(real_t: str, s: str) -> str:
    """fft_passes.h for one precision (``real_t`` float or double, name suffix ``s``)."""
    return load("dft_small.h") + contracted(_typed(real_t, s, _PASSES, elti=True))


def conv_text(real_t: str, s: str) -> str:
    """fft_conv.h for one precision (after :func:`core_text` and :func:`passes_text`)."""
    return _typed(real_t, s, contracted(_CONV), elti=True)


@functools.cache
def _version() -> str:
    """A hash of every source a library is built from (its entry's name carries it)."""
    texts = [load(n) for n in ("dft_small.h", "fft_core.h", "fft_passes.h", "fft_conv.h", "fft_typed.h",
                               "fft_line.h", "fft_lanes.h", "fft_block.h", "fma_on.h", "fma_off.h",
                               "pool_program.h")]
    return hashlib.sha256("\0".join(texts).encode()).hexdigest()[:12]


def symbol(s: str, gates: int | None) -> str:
    """The library entry of precision ``s`` (``f32``/``f64``) for the ``EM_FFTG`` mask ``gates``
    (``None``: every path)."""
    return f"ember_fftb_{_version()}_{s}_{'all' if gates is None else int(gates)}"


def program_block(real_t: str, s: str, gates: int | None) -> str:
    """What a program includes for its fft steps of one precision: the job type and ``em_fft_run``,
    calling the library of ``gates``."""
    sym = symbol(s, gates)
    return (f'#define EM_FFTB_SYM "{sym}"\n' + _typed(real_t, s, _TYPED + load("fft_block_call.h"))
            + "#undef EM_FFTG_ON\n#undef EM_FFTG_MISSED\n#undef EM_FFTB_SYM\n")


def gates_of(block: str) -> int | None:
    """The mask of a :func:`program_block` text (``None``: every path)."""
    m = _SYM_RE.match(block)
    assert m is not None, "not an fft program block"
    return None if m.group(4) == "all" else int(m.group(4))


def library_source(s: str, gates: int | None) -> str:
    """The complete translation unit of the library :func:`symbol` names."""
    real_t = _PRECISIONS[s]
    sym = symbol(s, gates)
    lanes = ("" if gates is None else f"#define EM_FFTG {int(gates)}\n") + _typed(
        real_t, s, _TYPED + contracted(_LANES)
        + f"#define EM_FFTB_ENTRY {sym}\n#define EM_FFTB_RELEASE {sym}_release\n"
        f"#define EM_FFTB_LIVE {sym}_tables_live\n" + load("fft_block.h"))
    body = ("#define EM_FFT_API static __attribute__((unused))\n" + core_text() + passes_text(real_t, s)
            + conv_text(real_t, s) + lanes)
    from ember._src.native.runtime import threadpool

    pool = threadpool.c_helpers()
    needs: dict[str, None] = {}
    with support.recording(needs):
        support.uses(pool + body)
    head = "/* ember: shared FFT kernels (native/emit/fft_blocks.py) */\n"
    return head + c_ops.prelude(needs) + pool + body


_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}


def prepare_for(source: str) -> list[tuple[ctypes.CDLL, str]]:
    """Build (or take from the compile cache) and load, symbols global, every FFT kernel library the
    program ``source`` calls; ``(library, entry name)`` of each. Raises ``CompileError`` when one
    cannot be built, and ``RuntimeError`` for an entry of other FFT sources than this ember's."""
    out = []
    for sym, version, s, mask in dict.fromkeys(_SYM_RE.findall(source)):
        if version != _version():
            raise RuntimeError(f"program calls FFT kernels {sym} of other sources than this ember's "
                               f"({_version()}): regenerate it")
        with _lock:
            lib = _loaded.get(sym)
            if lib is None:
                from ember._src.native.runtime import compiler

                lib = compiler.load_global(library_source(s, None if mask == "all" else int(mask)),
                                           name_hint="fft_kernels")
                _loaded[sym] = lib
        out.append((lib, sym))
    return out
