/* The 2-, 3-, 4- and 5-point DFTs of a mixed-radix stage, in place on R complex vectors:
   V[k] (k < R) has vector members .re and .im of type CV (scalars ELT); afterwards V[j] =
   sum_k V[k] omega^(j k), omega = exp(-SG 2 pi i / R) (SG = 1 forward, -1 inverse). The radix-3
   form is X_1,2 = v0 - (v1 + v2) / 2 -+ SG i sin(2 pi / 3) (v1 - v2); radix 5 pairs (1, 4) and
   (2, 3); radix 4 X_1,3 = (v0 - v2) -+ SG i (v1 - v3). Used by fft_passes.h (em_fftp_rp, the passes of every FFT)
   and fft_core.h (the plan's table transform); pasted as text in front
   of each, so the guard keeps one definition per translation unit. */
#ifndef EM_DFT_SMALL_H
#define EM_DFT_SMALL_H
#define EM_DFT_SMALL(V, R, SG, CV, ELT)                                                               \
    do {                                                                                              \
        const ELT h3_ = (ELT)0.86602540378443864676372317075294;                                      \
        const ELT c1_ = (ELT)0.30901699437494742410229341718282;                                      \
        const ELT c2_ = (ELT)-0.80901699437494742410229341718282;                                     \
        const ELT s1_ = (ELT)0.95105651629515357211643933337938;                                      \
        const ELT s2_ = (ELT)0.58778525229247312916870595463907;                                      \
        if ((R) == 2) {                                                                               \
            const CV ar_ = (V)[0].re, ai_ = (V)[0].im, br_ = (V)[1].re, bi_ = (V)[1].im;              \
            (V)[0].re = ar_ + br_; (V)[0].im = ai_ + bi_; (V)[1].re = ar_ - br_; (V)[1].im = ai_ - bi_; \
        } else if ((R) == 4) {                                                                        \
            const CV ar_ = (V)[0].re + (V)[2].re, ai_ = (V)[0].im + (V)[2].im;                        \
            const CV br_ = (V)[0].re - (V)[2].re, bi_ = (V)[0].im - (V)[2].im;                        \
            const CV cr_ = (V)[1].re + (V)[3].re, ci_ = (V)[1].im + (V)[3].im;                        \
            const CV dr_ = (V)[1].re - (V)[3].re, di_ = (V)[1].im - (V)[3].im;                        \
            (V)[0].re = ar_ + cr_; (V)[0].im = ai_ + ci_; (V)[2].re = ar_ - cr_; (V)[2].im = ai_ - ci_; \
            (V)[1].re = br_ + (SG) * di_; (V)[1].im = bi_ - (SG) * dr_;                               \
            (V)[3].re = br_ - (SG) * di_; (V)[3].im = bi_ + (SG) * dr_;                               \
        } else if ((R) == 3) {                                                                        \
            const CV ar_ = (V)[1].re + (V)[2].re, ai_ = (V)[1].im + (V)[2].im;                        \
            const CV tr_ = (V)[0].re - (ELT)0.5 * ar_, ti_ = (V)[0].im - (ELT)0.5 * ai_;              \
            const CV dr_ = h3_ * ((V)[1].re - (V)[2].re), di_ = h3_ * ((V)[1].im - (V)[2].im);        \
            (V)[0].re += ar_; (V)[0].im += ai_;                                                       \
            (V)[1].re = tr_ + (SG) * di_; (V)[1].im = ti_ - (SG) * dr_;                               \
            (V)[2].re = tr_ - (SG) * di_; (V)[2].im = ti_ + (SG) * dr_;                               \
        } else {                                                                                      \
            const CV a1r_ = (V)[1].re + (V)[4].re, a1i_ = (V)[1].im + (V)[4].im;                      \
            const CV b1r_ = (V)[1].re - (V)[4].re, b1i_ = (V)[1].im - (V)[4].im;                      \
            const CV a2r_ = (V)[2].re + (V)[3].re, a2i_ = (V)[2].im + (V)[3].im;                      \
            const CV b2r_ = (V)[2].re - (V)[3].re, b2i_ = (V)[2].im - (V)[3].im;                      \
            const CV p1r_ = (V)[0].re + c1_ * a1r_ + c2_ * a2r_, p1i_ = (V)[0].im + c1_ * a1i_ + c2_ * a2i_; \
            const CV p2r_ = (V)[0].re + c2_ * a1r_ + c1_ * a2r_, p2i_ = (V)[0].im + c2_ * a1i_ + c1_ * a2i_; \
            const CV t1r_ = s1_ * b1r_ + s2_ * b2r_, t1i_ = s1_ * b1i_ + s2_ * b2i_;                  \
            const CV t2r_ = s2_ * b1r_ - s1_ * b2r_, t2i_ = s2_ * b1i_ - s1_ * b2i_;                  \
            (V)[0].re += a1r_ + a2r_; (V)[0].im += a1i_ + a2i_;                                       \
            (V)[1].re = p1r_ + (SG) * t1i_; (V)[1].im = p1i_ - (SG) * t1r_;                           \
            (V)[4].re = p1r_ - (SG) * t1i_; (V)[4].im = p1i_ + (SG) * t1r_;                           \
            (V)[2].re = p2r_ + (SG) * t2i_; (V)[2].im = p2i_ - (SG) * t2r_;                           \
            (V)[3].re = p2r_ - (SG) * t2i_; (V)[3].im = p2i_ + (SG) * t2r_;                           \
        }                                                                                             \
    } while (0)
#endif
