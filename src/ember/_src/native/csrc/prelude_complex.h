/* The complex helpers of the C op table (native/emit/c_complex.py), NumPy's complex loops written
   once for both precisions: each section is one function, instantiated by the defines in front of
   it, CT (em_c64 or em_c128), RT (float or double) and S(name) (name##f or name: the function's
   and the libm routines' names for that precision). The marker names the sections it calls. */
/*@ cmul */
static inline CT S(em_cmul)(CT a, CT b) {
    RT ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
    /* each part one fused multiply-add, in the order of NumPy's SIMD complex loops (real:
       ar br - (ai bi), imag: ar bi + (ai br)), so an overflowing product rounds as there:
       (FLT_MAX + inf i)^2 is -inf + inf i (not NaN, which the other contraction gives) */
    return __builtin_complex(S(__builtin_fma)(ar, br, -(ai * bi)), S(__builtin_fma)(ar, bi, ai * br));
}
/*@ cdiv */
static inline CT S(em_cdiv)(CT a, CT b) {
    RT ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
    RT abr = br < 0 ? -br : br, abi = bi < 0 ? -bi : bi;
    if (abr >= abi) {
        if (abr == 0 && abi == 0) return __builtin_complex(ar / abr, ai / abr);
        RT rat = bi / br, scl = (RT)1 / (br + bi * rat);
        return __builtin_complex((ar + ai * rat) * scl, (ai - ar * rat) * scl);
    }
    RT rat = br / bi, scl = (RT)1 / (bi + br * rat);
    return __builtin_complex((ar * rat + ai) * scl, (ai * rat - ar) * scl);
}
/*@ conj */
static inline CT S(em_conj)(CT a) { return __builtin_complex(__real__ a, -__imag__ a); }
/*@ cabs */
static inline RT S(em_cabs)(CT a) { return S(hypot)(__real__ a, __imag__ a); }
/*@ csign after cabs */
static inline CT S(em_csign)(CT a) {
    RT r = S(em_cabs)(a);
    if (__real__ a == 0 && __imag__ a == 0) return __builtin_complex((RT)0, (RT)0);
    return __builtin_complex(__real__ a / r, __imag__ a / r);
}
/*@ cexpm1 */
static inline CT S(em_cexpm1)(CT a) {
    RT x = __real__ a, y = __imag__ a, h = S(sin)(y / 2);
    return __builtin_complex(S(expm1)(x) * S(cos)(y) - 2 * h * h, S(exp)(x) * S(sin)(y));
}
/*@ clog1p */
static inline CT S(em_clog1p)(CT a) {
    RT x = __real__ a + 1, y = __imag__ a;
    return __builtin_complex(S(log)(S(hypot)(x, y)), S(atan2)(y, x));
}
/*@ cpow after cmul cdiv */
static inline CT S(em_cpow)(CT a, CT b) {
    RT br = __real__ b, bi = __imag__ b;
    if (br == 0 && bi == 0) return __builtin_complex((RT)1, (RT)0);
    if (__real__ a == 0 && __imag__ a == 0) {
        if (br > 0 && bi == 0) return __builtin_complex((RT)0, (RT)0);
        return __builtin_complex((RT)NAN, (RT)NAN);
    }
    if (bi == 0 && br == (RT)(int)br && br > -100 && br < 100) {
        int n = (int)br, m = n < 0 ? -n : n;
        CT r = __builtin_complex((RT)1, (RT)0), p = a;
        while (m) { if (m & 1) r = S(em_cmul)(r, p); m >>= 1; if (m) p = S(em_cmul)(p, p); }
        return n < 0 ? S(em_cdiv)(__builtin_complex((RT)1, (RT)0), r) : r;
    }
    return S(cpow)(a, b);
}
/*@ cmax */
static inline CT S(em_cmax)(CT a, CT b) {
    RT ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
    int ge = (ar > br && ai == ai && bi == bi) || (ar == br && ai >= bi);
    return (ar != ar || ai != ai || ge) ? a : b;
}
/*@ cmin */
static inline CT S(em_cmin)(CT a, CT b) {
    RT ar = __real__ a, ai = __imag__ a, br = __real__ b, bi = __imag__ b;
    int le = (ar < br && ai == ai && bi == bi) || (ar == br && ai <= bi);
    return (ar != ar || ai != ai || le) ? a : b;
}
