"""The WGSL renderer: device kernels (:mod:`.kernels`) as WebGPU compute shaders.

Types: float32 (``f32``), int32 (``i32``), uint32 (``u32``) and bool (``bool`` in registers, a
``u32`` 0/1 in storage buffers, which cannot hold bool). 64-bit types do not exist in WGSL:
float64/int64 values raise a TypeError that names the dtype and ember's default x32 mode.

float16 (where the adapter offers ``shader-f16``): stored as ``f16`` (2 bytes an element; a
module that names ``f16`` starts with ``enable f16;``), computed in ``f32``. Every float16 value
a kernel binds is rounded to float16 (:data:`F16_PRELUDE`'s ``e_f16``: round to nearest even,
overflow to infinity, NaN kept), so an elementwise chain rounds after each operation as NumPy
does; reduction and matmul accumulators stay ``f32`` and are rounded once, when stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember._src.gpu.kernels import TILE, WG, Kernel
from ember._src.gpu.render import BaseRenderer, float_text

# helpers the templates call; every module carries them (the compiler drops the unused ones)
PRELUDE = """\
fn e_log1p(x: f32) -> f32 { let u = 1.0 + x; if (u == 1.0) { return x; } return log(u) * x / (u - 1.0); }
fn e_expm1(x: f32) -> f32 {
  if (abs(x) < 1e-5) { return x + 0.5 * x * x; }
  return exp(x) - 1.0;
}
fn e_tanh(x: f32) -> f32 { return tanh(clamp(x, -15.0, 15.0)); }
fn e_logistic(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }
fn e_isfinite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }
fn e_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn e_round_away(x: f32) -> f32 { let t = trunc(x); return select(t, t + sign(x), abs(x - t) >= 0.5); }
fn e_erf(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5) {  // Taylor series: relative accuracy near 0
    let z = x * x;
    let q = 0.1128379167 + z * (-0.0268661706 + z * 0.0052239776);
    return x * (1.1283791671 + z * (-0.3761263890 + z * q));
  }
  return sign(x) * (1.0 - e_erfc_tail(a));
}
// erfc(a) for a >= 0 by Abramowitz-Stegun 7.1.26 (absolute error below 1.5e-7)
fn e_erfc_tail(a: f32) -> f32 {
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return p * exp(-a * a);
}
fn e_erfc(x: f32) -> f32 {
  if (abs(x) < 0.5) { return 1.0 - e_erf(x); }
  let r = e_erfc_tail(abs(x));
  return select(r, 2.0 - r, x < 0.0);
}
"""

# the head of a module that uses f16 (``enable`` must come before every declaration)
F16_PRELUDE = """\
enable f16;
fn e_f16(x: f32) -> f16 {
  if (abs(x) >= 65520.0 && !e_isnan(x)) {  // past the largest float16 (65504): infinity
    return f16(sign(x) * 65504.0) * 2.0h;  // (WGSL leaves f16(x) of such x undefined)
  }
  return f16(x);
}
"""
_F16 = np.dtype(np.float16)


class WGSLRenderer(BaseRenderer):
    """Renders kernels as WGSL compute shaders (one module per kernel, entry point ``main``)."""

    device = "webgpu"
    TYPES = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(np.uint32): "u32",
             np.dtype(np.bool_): "bool", _F16: "f32"}
    FNS = {"exp": "exp({0})", "exp2": "exp2({0})", "log": "log({0})", "log1p": "e_log1p({0})",
           "expm1": "e_expm1({0})", "tanh": "e_tanh({0})", "sin": "sin({0})", "cos": "cos({0})",
           "tan": "tan({0})", "asin": "asin({0})", "acos": "acos({0})", "atan": "atan({0})",
           "sinh": "sinh({0})", "cosh": "cosh({0})", "asinh": "asinh({0})", "acosh": "acosh({0})",
           "atanh": "atanh({0})", "sqrt": "sqrt({0})", "rsqrt": "inverseSqrt({0})", "floor": "floor({0})",
           "ceil": "ceil({0})", "logistic": "e_logistic({0})", "pow": "pow({0}, {1})",
           "atan2": "atan2({0}, {1})", "is_finite": "e_isfinite({0})", "erf": "e_erf({0})",
           "erfc": "e_erfc({0})", "max": "max({0}, {1})", "min": "min({0}, {1})", "abs": "abs({0})",
           "sign": "sign({0})", "rem": "({0} % {1})"}
    INT_FNS = {"max": "max({0}, {1})", "min": "min({0}, {1})", "abs": "abs({0})", "sign": "sign({0})",
               "rem": "({0} % {1})"}

    def __init__(self, f16: bool = True, adapter: str = "this adapter"):
        self.f16, self.adapter = f16, adapter  # whether the device has 'shader-f16'

    def check_dtype(self, dtype: np.dtype, what: str) -> None:
        if np.dtype(dtype) == _F16 and not self.f16:
            raise TypeError(f"the webgpu backend cannot run float16 ({what}) on {self.adapter}: the adapter "
                            "does not offer the WebGPU feature 'shader-f16' (use float32, or the cuda or "
                            "native backend)")
        super().check_dtype(dtype, what)

    def dtype_message(self, dtype: np.dtype, what: str) -> str:
        if dtype.itemsize == 8:
            return (f"the webgpu backend does not support dtype {dtype} ({what}): WGSL has no 64-bit types; "
                    "use float32/int32 (ember's default x32 mode, jax_enable_x64 off)")
        return f"the webgpu backend does not support dtype {dtype} ({what}); it computes float32, int32, " \
               "uint32, bool and (with the adapter feature 'shader-f16') float16"

    def op(self, name: str, args: Any, in_dtypes: Any, out_dtype: np.dtype, params: dict) -> str:
        if name == "round":
            return f"e_round_away({args[0]})" if int(params.get("rounding_method", 0)) == 0 \
                else f"round({args[0]})"
        return super().op(name, args, in_dtypes, out_dtype, params)

    def infix(self, sym: str, args: Any, d: np.dtype) -> str:
        if d == np.bool_ and sym == "^":
            sym = "!="
        return f"({args[0]} {sym} {args[1]})"

    def isnan(self, x: str) -> str:
        return f"e_isnan({x})"  # x != x may be folded away: WGSL lets compilers assume no NaN

    def literal(self, value: Any, dtype: np.dtype) -> str:
        d = np.dtype(dtype)
        if d == np.bool_:
            return "true" if bool(value) else "false"
        if d == np.int32:
            v = int(value)
            return "i32(-2147483647 - 1)" if v == -(2**31) else f"{v}i"
        if d == np.uint32:
            return f"{int(value)}u"
        v = float(value)
        if np.isnan(v):
            return "bitcast<f32>(0x7fc00000u)"
        if np.isinf(v):
            return "bitcast<f32>(0x7f800000u)" if v > 0 else "bitcast<f32>(0xff800000u)"
        return f"{float_text(v)}f"

    def let(self, name: str, dtype: np.dtype, expr: str) -> str:
        if np.dtype(dtype) == _F16 and not expr.startswith("f32(e_f16("):
            expr = f"f32(e_f16({expr}))"  # each float16 value rounded, as NumPy rounds each op
        return f"let {name}: {self.vtype(dtype)} = {expr};"

    def ilet(self, name: str, expr: str) -> str:
        return f"let {name}: i32 = {expr};"

    def load(self, buf: str, index: str, dtype: np.dtype) -> str:
        if np.dtype(dtype) == np.bool_:
            return f"({buf}[{index}] != 0u)"
        if np.dtype(dtype) == _F16:
            return f"f32(e_f16(f32({buf}[{index}])))"  # (the let of a load rounds nothing more)
        return f"{buf}[{index}]"

    def store(self, buf: str, index: str, value: str, dtype: np.dtype) -> str:
        if np.dtype(dtype) == np.bool_:
            value = f"select(0u, 1u, {value})"
        elif np.dtype(dtype) == _F16:
            value = f"e_f16({value})"
        return f"{buf}[{index}] = {value};"

    def convert(self, expr: str, src: np.dtype, dst: np.dtype) -> str:
        if np.dtype(src) == np.dtype(dst):
            return expr
        if np.dtype(dst) == _F16:
            return f"f32(e_f16(f32({expr})))"
        return f"{self.vtype(dst)}({expr})"

    def select(self, pred: str, if_false: str, if_true: str) -> str:
        return f"select({if_false}, {if_true}, {pred})"

    def _storage(self, dtype: np.dtype) -> str:
        if np.dtype(dtype) == _F16:
            return "f16"
        return "u32" if np.dtype(dtype) == np.bool_ else self.vtype(dtype)

    def _bindings(self, k: Kernel) -> str:
        lines = [f"@group(0) @binding({i}) var<storage, read> in{i}: array<{self._storage(b.dtype)}>;"
                 for i, b in enumerate(k.inputs)]
        lines.append(f"@group(0) @binding({len(k.inputs)}) var<storage, read_write> out: "
                     f"array<{self._storage(k.out.dtype)}>;")
        if k.uses_sizes:  # the named axes' values of this call, one i32 each
            fields = ", ".join(f"d{a}: i32" for a in range(k.info["naxes"]))
            lines.append(f"struct Sizes {{ {fields} }}\n"
                         f"@group(0) @binding({len(k.inputs) + 1}) var<uniform> sz: Sizes;")
        return PRELUDE + "\n".join(lines) + "\n"

    def axis(self, i: int) -> str:
        return f"sz.d{i}"

    def map_kernel(self, k: Kernel, body: list[str], value: str) -> str:
        lines = "\n  ".join(body)
        return self._module(f"{self._bindings(k)}\n@compute @workgroup_size({WG})\n"
                "fn main(@builtin(global_invocation_id) gid: vec3<u32>, "
                "@builtin(num_workgroups) nwg: vec3<u32>) {\n"
                f"  let gi: i32 = i32(gid.x + gid.y * nwg.x * {WG}u);\n"
                f"  if (gi >= {k.info['n']}) {{ return; }}\n  {lines}\n"
                f"  {self.store('out', 'gi', value, k.out.dtype)}\n}}\n")

    def _module(self, text: str) -> str:
        """``text`` with the float16 head where it names ``f16`` (the WGSL of one kernel)."""
        return F16_PRELUDE + text if ("f16>" in text or "e_f16(" in text) else text

    def reduce_kernel(self, k: Kernel, body: list[str], value: str) -> str:
        i = k.info
        t = self.vtype(i["dtype"])
        head = "\n  ".join(i["head"])
        loop = "\n    ".join(body)
        if i["combine"] in ("argmax", "argmin"):
            return self._module(self._arg_reduce(k, body, value))
        comb = self.combine(i["combine"], "acc", value)
        tree = self.combine(i["combine"], "sh[lid]", "sh[lid + s]")
        return self._module(f"{self._bindings(k)}var<workgroup> sh: array<{t}, {WG}>;\n\n"
                f"@compute @workgroup_size({WG})\n"
                "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
                "@builtin(local_invocation_id) lid3: vec3<u32>) {\n"
                "  let g: i32 = i32(wid.x + wid.y * nwg.x);\n"
                f"  if (g >= {i['groups']}) {{ return; }}\n"
                "  let lid: i32 = i32(lid3.x);\n"
                f"  let row: i32 = g / {i['parts']};\n  let part: i32 = g % {i['parts']};\n  {head}\n"
                f"  var acc: {t} = {self.identity(i['combine'], i['dtype'])};\n"
                f"  let j1: i32 = min(part * {i['chunk']} + {i['chunk']}, {i['count']});\n"
                f"  for (var j: i32 = part * {i['chunk']} + lid; j < j1; j = j + {WG}) {{\n"
                f"    {loop}\n    acc = {comb};\n  }}\n"
                "  sh[lid] = acc;\n  workgroupBarrier();\n"
                f"  for (var s: i32 = {WG // 2}; s > 0; s = s >> 1u) {{\n"
                f"    if (lid < s) {{ sh[lid] = {tree}; }}\n    workgroupBarrier();\n  }}\n"
                f"  if (lid == 0) {{ {self.store('out', 'g', 'sh[0]', i['dtype'])} }}\n}}\n")

    def _arg_reduce(self, k: Kernel, body: list[str], value: str) -> str:
        i = k.info
        t, kind, dt = self.vtype(i["dtype"]), i["combine"], i["dtype"]
        head = "\n  ".join(i["head"])
        loop = "\n    ".join(body)
        first = self.better(kind, "v", "j", "acc", "ai", dt)
        tree = self.better(kind, "o", "oi", "sh[lid]", "si[lid]", dt)
        res = self.convert("si[0]", np.dtype(np.int32), i["out_dtype"])
        return (f"{self._bindings(k)}var<workgroup> sh: array<{t}, {WG}>;\n"
                f"var<workgroup> si: array<i32, {WG}>;\n\n"
                f"@compute @workgroup_size({WG})\n"
                "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, "
                "@builtin(local_invocation_id) lid3: vec3<u32>) {\n"
                "  let row: i32 = i32(wid.x + wid.y * nwg.x);\n"
                f"  if (row >= {i['rows']}) {{ return; }}\n"
                f"  let lid: i32 = i32(lid3.x);\n  {head}\n"
                f"  var acc: {t} = {self.identity(kind, dt)};\n  var ai: i32 = 2147483647;\n"
                f"  for (var j: i32 = lid; j < {i['count']}; j = j + {WG}) {{\n"
                f"    {loop}\n    let v = {value};\n    if ({first}) {{ acc = v; ai = j; }}\n  }}\n"
                "  sh[lid] = acc;\n  si[lid] = ai;\n  workgroupBarrier();\n"
                f"  for (var s: i32 = {WG // 2}; s > 0; s = s >> 1u) {{\n"
                "    if (lid < s) {\n      let o = sh[lid + s];\n      let oi = si[lid + s];\n"
                f"      if ({tree}) {{ sh[lid] = o; si[lid] = oi; }}\n    }}\n    workgroupBarrier();\n  }}\n"
                f"  if (lid == 0) {{ {self.store('out', 'row', res, i['out_dtype'])} }}\n}}\n")

    def matmul_kernel(self, k: Kernel, a_body: list[str], a: str, b_body: list[str], b: str) -> str:
        i = k.info
        t = self.vtype(i["dtype"])
        zero = self.literal(0, i["dtype"])
        M, N, K = i["M"], i["N"], i["K"]
        ab, bb = "\n      ".join(a_body), "\n      ".join(b_body)
        out_index = f"(bz * {M} + row) * {N} + col"
        return self._module(f"{self._bindings(k)}var<workgroup> ta: array<array<{t}, {TILE}>, {TILE}>;\n"
                f"var<workgroup> tb: array<array<{t}, {TILE}>, {TILE}>;\n\n"
                f"@compute @workgroup_size({TILE}, {TILE})\n"
                "fn main(@builtin(workgroup_id) wid: vec3<u32>,\n"
                "        @builtin(local_invocation_id) lid: vec3<u32>) {\n"
                "  let tx: i32 = i32(lid.x);\n  let ty: i32 = i32(lid.y);\n  let bz: i32 = i32(wid.z);\n"
                f"  let row: i32 = i32(wid.y) * {TILE} + ty;\n  let col: i32 = i32(wid.x) * {TILE} + tx;\n"
                f"  var acc: {t} = {zero};\n"
                f"  for (var k0: i32 = 0; k0 < {K}; k0 = k0 + {TILE}) {{\n"
                f"    ta[ty][tx] = {zero};\n    tb[ty][tx] = {zero};\n"
                f"    {{\n      let am: i32 = row;\n      let ak: i32 = k0 + tx;\n"
                f"      if (am < {M} && ak < {K}) {{\n      {ab}\n      ta[ty][tx] = {a};\n      }}\n    }}\n"
                f"    {{\n      let bn: i32 = col;\n      let bk: i32 = k0 + ty;\n"
                f"      if (bk < {K} && bn < {N}) {{\n      {bb}\n      tb[ty][tx] = {b};\n      }}\n    }}\n"
                "    workgroupBarrier();\n"
                f"    for (var kk: i32 = 0; kk < {TILE}; kk = kk + 1) {{\n"
                "      acc = acc + ta[ty][kk] * tb[kk][tx];\n    }\n"
                "    workgroupBarrier();\n  }\n"
                f"  if (row < {M} && col < {N}) {{ {self.store('out', out_index, 'acc', i['dtype'])} }}\n"
                "}\n")
