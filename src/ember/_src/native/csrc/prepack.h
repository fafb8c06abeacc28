/* Kernel layouts of constant operands, packed once per program (ember's derived constants).

   A convolution whose kernel is a program constant packs it into a buffer that lives as long as the
   program, on the first call, instead of into the call's workspace on every call. The buffer's state
   cell (an int64_t in the same derived constant) is 0 before packing, 1 while one call packs, 2 once
   packed; a call that finds another one packing (1) packs into its own workspace as before, so
   concurrent first calls never wait and never read a half-written buffer. */

#ifndef EM_PREPACK_H
#define EM_PREPACK_H

#include <stdint.h>

/* 1: the buffer is packed (use it, skip packing); 0: this call packs it now and calls
   em_prepack_done after; -1: another call is packing it (pack into the workspace). */
static inline int em_prepack_claim(int64_t *state) {
    int64_t s = __atomic_load_n(state, __ATOMIC_ACQUIRE);
    if (s == 2) return 1;
    int64_t expect = 0;
    if (s == 0 && __atomic_compare_exchange_n(state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return 0;
    return -1;
}

static inline void em_prepack_done(int64_t *state) { __atomic_store_n(state, 2, __ATOMIC_RELEASE); }

/* The 64-byte aligned start of a kept buffer after its 64-byte state block. */
static inline void *em_prepack_data(void *kept) {
    return (void *)(((uintptr_t)kept + 64 + 63) & ~(uintptr_t)63);
}

#endif
