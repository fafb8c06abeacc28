/* The end of fma_on.h's region: the options in force before it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
