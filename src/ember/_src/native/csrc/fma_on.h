/* Floating-point contraction (a * b + c as one FMA, one rounding instead of two) on for the code
   that follows, up to fma_off.h: -std=c11 leaves it off, and the FFT helpers (butterflies and
   twiddle products are sums of products: 10-13% of a transform's time) turn it on for themselves
   only (native/emit/fft.py, contracted). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
#endif
