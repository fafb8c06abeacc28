/* A program's entry into ember's MPI library (native/emit/mpi_calls.py, csrc/mpi_coll.c): the step
   function, looked up by name (EM_MPI_STEP, defined before this text) in the process's global
   symbols, where the library was loaded before the program was generated. -1 when it is absent. */
#ifndef EM_MPI_STEPS_H
#define EM_MPI_STEPS_H
typedef int (*em_mpi_step_t)(int, int, const void *, void *, int64_t, int, int64_t, int, const int32_t *);
static inline __attribute__((unused)) int em_mpi_step(int kind, int slot, const void *send, void *recv,
                                                      int64_t count, int type, int64_t size, int op,
                                                      const int32_t *perm) {
    extern void *dlsym(void *handle, const char *name);
    static em_mpi_step_t fn;
    if (!fn) fn = (em_mpi_step_t)dlsym((void *)0, EM_MPI_STEP);
    return fn ? fn(kind, slot, send, recv, count, type, size, op, perm) : -1;
}
#endif
