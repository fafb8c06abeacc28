#!/bin/bash
# The C compiler as on a host with AVX2 and FMA but no AVX-512 (a Haswell-class x86-64-v3 CPU):
# gcc with -march=native replaced by that CPU's instruction sets. With EMBER_CC pointing here, ember
# builds its programs and kernels for AVX2 on any x86-64 machine (the cache key records the target),
# so an AVX-512 host can time the AVX2 path (benchmarks/bench_archs.py --avx2).
args=()
for a in "$@"; do
  if [ "$a" = "-march=native" ]; then
    args+=(-march=x86-64 -mmmx -msse -msse2 -msse3 -mssse3 -msse4.1 -msse4.2 -mpopcnt -mavx -mavx2
           -mfma -mf16c -mbmi -mbmi2 -mlzcnt -mmovbe -mtune=generic)
  else
    args+=("$a")
  fi
done
exec "${EMBER_AVX2_CC_REAL:-gcc}" "${args[@]}"
