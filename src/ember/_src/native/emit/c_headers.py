"""The ``#include`` lines of a generated translation unit: only the headers its code needs.

Parsing headers is a visible part of compiling a small program: with ember's flags, gcc 12 spends
about 11 ms of CPU on ``<math.h>`` (glibc's macro-generated declarations for every floating type)
and about 2 ms on ``<string.h>``, against roughly 60 ms for a whole 3-layer MLP. A program that
calls no math function (a matmul + bias + ReLU net, an indexing program) skips ``<math.h>``, and
then also links without libm (:func:`.toolchain.source_libs`).

Which identifiers need which header is decided from the names each header declares in C11
(``-std=c11``, the mode ember compiles in: glibc then declares no extensions such as ``M_PI``, so
generated code cannot rely on them anyway). Comments are ignored, so a step comment that names a
primitive (``exp``) does not pull the header in. ``<stdint.h>`` and ``<float.h>`` are always
included (fixed-width types are everywhere; ``<float.h>`` costs nothing measurable).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

__all__ = ["COMPLEX_NAMES", "MATH_NAMES", "STRING_NAMES", "headers_in", "include_lines", "includes_for"]

# C99/C11 <math.h> functions: each also comes with an ``f`` (float) and ``l`` (long double) variant.
_MATH_FUNCS = """
acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 fabs
fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 log1p log2
logb lrint lround modf nan nearbyint nextafter nexttoward pow remainder remquo rint round scalbln
scalbn sin sinh sqrt tan tanh tgamma trunc
""".split()
# <math.h> macros (classification, comparison, constants) and types.
_MATH_OTHER = """
FP_ILOGB0 FP_ILOGBNAN FP_INFINITE FP_NAN FP_NORMAL FP_SUBNORMAL FP_ZERO HUGE_VAL HUGE_VALF HUGE_VALL
INFINITY MATH_ERREXCEPT MATH_ERRNO NAN math_errhandling double_t float_t fpclassify isfinite
isgreater isgreaterequal isinf isless islessequal islessgreater isnan isnormal isunordered signbit
""".split()
MATH_NAMES: frozenset[str] = frozenset(_MATH_OTHER + [f + s for f in _MATH_FUNCS for s in ("", "f", "l")])

# C11 <string.h> (``size_t`` and ``NULL`` come with it: generated code casts to ``size_t``).
STRING_NAMES: frozenset[str] = frozenset("""
NULL memchr memcmp memcpy memmove memset size_t strcat strchr strcmp strcoll strcpy strcspn strerror
strlen strncat strncmp strncpy strpbrk strrchr strspn strstr strtok strxfrm
""".split())

# C99 <complex.h> functions (with ``f`` and ``l`` variants) and macros.
_COMPLEX_FUNCS = """
cabs cacos cacosh carg casin casinh catan catanh ccos ccosh cexp cimag clog conj cpow cproj creal
csin csinh csqrt ctan ctanh
""".split()
COMPLEX_NAMES: frozenset[str] = frozenset(["CMPLX", "CMPLXF", "I", "complex", "_Complex_I"]
                                          + [f + s for f in _COMPLEX_FUNCS for s in ("", "f", "l")])

_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# bytes.translate to blanks everything but identifier characters, then split: the words of the code
# (identifiers, and numbers, which match no name) at a fraction of a regex scan's cost
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_BLANK_OTHERS = bytes(c if c in _WORD_BYTES else 0x20 for c in range(256))
_MATH_B = frozenset(n.encode() for n in MATH_NAMES)
_STRING_B = frozenset(n.encode() for n in STRING_NAMES)
_COMPLEX_B = frozenset(n.encode() for n in COMPLEX_NAMES)


def _words(code: str) -> set[bytes]:
    return set(_COMMENT_RE.sub(" ", code).encode("utf-8", "replace").translate(_BLANK_OTHERS).split())


@functools.lru_cache(maxsize=512)
def headers_in(code: str) -> tuple[str, ...]:
    """The optional headers (``string.h``, ``math.h``, ``complex.h``, ``omp.h``) whose names
    ``code`` uses. Generated code records its headers as it is emitted (``emit/support.py``); this
    resolves hand-written C (csrc files, helper blocks: fixed texts, so the result is cached) and
    serves the emission check."""
    names = _words(code)
    found = [h for h, table in (("string.h", _STRING_B), ("math.h", _MATH_B), ("complex.h", _COMPLEX_B))
             if not names.isdisjoint(table)]
    if any(n.startswith(b"omp_") for n in names):
        found.append("omp.h")
    return tuple(found)


def include_lines(headers: Iterable[str]) -> str:
    """The ``#include`` block for a translation unit that uses ``headers`` (of
    :data:`.support.HEADERS`): ``<stdint.h>`` and ``<float.h>`` always, ``<omp.h>`` under
    ``_OPENMP``."""
    wanted = set(headers)
    lines = ["#include <stdint.h>", "#include <float.h>"]
    lines += [f"#include <{h}>" for h in ("string.h", "math.h", "complex.h") if h in wanted]
    if "omp.h" in wanted:
        lines += ["#ifdef _OPENMP", "#include <omp.h>", "#endif"]
    return "\n".join(lines) + "\n"


def includes_for(code: str) -> str:
    """The ``#include`` block for a translation unit whose code (everything after the includes) is
    ``code``: ``<stdint.h>`` and ``<float.h>`` always, ``<string.h>``, ``<math.h>`` and ``<complex.h>`` when
    ``code`` names something they declare, ``<omp.h>`` (under ``_OPENMP``) when it calls an ``omp_``
    function."""
    return include_lines(headers_in(code))
