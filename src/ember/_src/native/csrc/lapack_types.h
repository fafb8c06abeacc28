/* The LAPACK call steps' helpers (native/emit/lapack.py), for one element type: the routines'
   pointer types and two checks. Instantiated by the defines in front of it: ELT (float or double)
   and EM_T(name) (name##_f32 or name##_f64). */
typedef void (*EM_T(em_potrf))(char *, int *, ELT *, int *, int *);
typedef void (*EM_T(em_trsm))(char *, char *, char *, char *, int *, int *, ELT *, ELT *, int *, ELT *, int *);
typedef void (*EM_T(em_getrf))(int *, int *, ELT *, int *, int *, int *);
typedef void (*EM_T(em_geqrf))(int *, int *, ELT *, int *, ELT *, ELT *, int *, int *);
typedef void (*EM_T(em_orgqr))(int *, int *, int *, ELT *, int *, ELT *, ELT *, int *, int *);
typedef void (*EM_T(em_syevd))(char *, char *, int *, ELT *, int *, ELT *, ELT *, int *, int *, int *, int *);
typedef void (*EM_T(em_gesdd))(char *, int *, int *, ELT *, int *, ELT *, ELT *, int *, ELT *, int *, ELT *,
                           int *, int *, int *);
typedef void (*EM_T(em_geev))(char *, char *, int *, ELT *, int *, ELT *, ELT *, ELT *, int *, ELT *, int *,
                          ELT *, int *, int *);
static int EM_T(em_all_finite)(const ELT *a, int64_t n) {
    for (int64_t i = 0; i < n; ++i) if (!isfinite(a[i])) return 0;
    return 1;
}
static void EM_T(em_fill_nan)(ELT *a, int64_t n) { for (int64_t i = 0; i < n; ++i) a[i] = (ELT)NAN; }
