/* In-register transpose of an N x N block held as N vectors of N lanes (row r in X[r]): log2(N)
   rounds of zips, each setting rows 2r, 2r + 1 <- the interleaved low / high halves of rows r and
   r + N / 2; after the last round X[r] holds column r. LO = {0, N, 1, N + 1, ..., N/2 - 1, N + N/2 - 1}
   and HI = the same from N / 2 on: __builtin_shuffle index vectors of the lanes' width; Y is scratch
   of N vectors of X's type. Used by conv.h (em_cv_tr) and gemm_driver.h (em_sk_pack_a); pasted as
   text in front of each, so the guard keeps one definition per translation unit. */
#ifndef EM_ZIP_TRANSPOSE_H
#define EM_ZIP_TRANSPOSE_H
#define EM_ZIP_TRANSPOSE(X, Y, N, LO, HI)                                                  \
    do {                                                                                   \
        _Pragma("GCC unroll 4") for (int s_ = 1; s_ < (N); s_ *= 2) {                      \
            _Pragma("GCC unroll 8") for (int r_ = 0; r_ < (N) / 2; ++r_) {                 \
                (Y)[2 * r_] = __builtin_shuffle((X)[r_], (X)[r_ + (N) / 2], (LO));         \
                (Y)[2 * r_ + 1] = __builtin_shuffle((X)[r_], (X)[r_ + (N) / 2], (HI));     \
            }                                                                              \
            _Pragma("GCC unroll 16") for (int r_ = 0; r_ < (N); ++r_) (X)[r_] = (Y)[r_];   \
        }                                                                                  \
    } while (0)
#endif
