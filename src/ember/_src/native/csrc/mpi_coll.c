/* ember's collectives across processes, called from generated programs (see native/emit/mpi_calls.py).

   Built without mpi.h and without linking libmpi: the MPI functions are the addresses mpi4py's
   extension module resolved (handed over by ember_mpi_init), and every MPI constant (datatype and
   operation handles, MPI_IN_PLACE, MPI_PROC_NULL) is the value mpi4py reports at run time, so the
   one source works with whatever MPI mpi4py was built against. Handles are pointers (Open MPI) or
   ints (MPICH): EM_MPI_INT_HANDLES selects the second. EM_MPI_SYMBOL names the exported entries
   (a hash of this file is in the name). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>

#ifndef EM_MPI_SYMBOL
#define EM_MPI_SYMBOL ember_mpi
#endif
#define EM_CAT2(a, b) a##b
#define EM_CAT(a, b) EM_CAT2(a, b)
#define EM_EXPORT(name) __attribute__((visibility("default"))) EM_CAT(EM_MPI_SYMBOL, name)

#ifdef EM_MPI_INT_HANDLES
typedef int em_h;
#define EM_H(v) ((em_h)(v))
#else
typedef void *em_h;
#define EM_H(v) ((em_h)(intptr_t)(v))
#endif

typedef int (*em_allreduce_t)(const void *, void *, int, em_h, em_h, em_h);
typedef int (*em_allgather_t)(const void *, int, em_h, void *, int, em_h, em_h);
typedef int (*em_reduce_scatter_block_t)(const void *, void *, int, em_h, em_h, em_h);
typedef int (*em_sendrecv_t)(const void *, int, em_h, int, int, void *, int, em_h, int, int, em_h, void *);
typedef int (*em_comm_rank_t)(em_h, int *);

enum { EM_KIND_ALLREDUCE = 0, EM_KIND_ALLGATHER = 1, EM_KIND_REDUCE_SCATTER = 2, EM_KIND_PERMUTE = 3 };
#define EM_MAX_TYPES 32
#define EM_MAX_OPS 8
#define EM_MAX_COMMS 64

static struct {
    em_allreduce_t allreduce;
    em_allgather_t allgather;
    em_reduce_scatter_block_t reduce_scatter;
    em_sendrecv_t sendrecv;
    em_comm_rank_t comm_rank;
    em_h types[EM_MAX_TYPES];  /* by ember's type code; code 0 is MPI_BYTE */
    int ntypes;
    em_h ops[EM_MAX_OPS];      /* sum, max, min */
    int nops;
    em_h comms[EM_MAX_COMMS];  /* by slot */
    int ncomms;
    const void *in_place;
    int proc_null;
} em;

/* fns: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Sendrecv, MPI_Comm_rank */
int EM_EXPORT(_init)(void *const *fns, const int64_t *types, int ntypes, const int64_t *ops, int nops,
                     int64_t in_place, int proc_null) {
    if (ntypes > EM_MAX_TYPES || nops > EM_MAX_OPS) return 1;
    em.allreduce = (em_allreduce_t)fns[0];
    em.allgather = (em_allgather_t)fns[1];
    em.reduce_scatter = (em_reduce_scatter_block_t)fns[2];
    em.sendrecv = (em_sendrecv_t)fns[3];
    em.comm_rank = (em_comm_rank_t)fns[4];
    for (int i = 0; i < ntypes; i++) em.types[i] = EM_H(types[i]);
    for (int i = 0; i < nops; i++) em.ops[i] = EM_H(ops[i]);
    em.ntypes = ntypes;
    em.nops = nops;
    em.in_place = (const void *)(intptr_t)in_place;
    em.proc_null = proc_null;
    return 0;
}

int EM_EXPORT(_set_comm)(int slot, int64_t handle) {
    if (slot < 0 || slot >= EM_MAX_COMMS) return 1;
    em.comms[slot] = EM_H(handle);
    if (slot >= em.ncomms) em.ncomms = slot + 1;
    return 0;
}

static int em_fail(const char *what, int rc) {
    fprintf(stderr, "ember: %s failed (MPI error code %d)\n", what, rc);
    fflush(stderr);
    return rc ? rc : -1;
}

/* allreduce: count elements in chunks of at most INT_MAX (an elementwise operation) */
static int em_allreduce(em_h comm, const char *send, char *recv, int64_t count, int64_t size, em_h type,
                        em_h op) {
    for (int64_t lo = 0; lo < count; lo += INT_MAX) {
        int n = (int)(count - lo < INT_MAX ? count - lo : INT_MAX);
        const void *s = send == recv ? em.in_place : (const void *)(send + lo * size);
        int rc = em.allreduce(s, recv + lo * size, n, type, op, comm);
        if (rc) return em_fail("MPI_Allreduce", rc);
    }
    return 0;
}

/* One collective on raw buffers (send == recv: in place, allreduce only).
   kind: EM_KIND_*; slot: the communicator; count: elements of the send buffer (allgather,
   allreduce, permute) or of one process's block (reduce_scatter); type: ember's type code; size:
   bytes per element; op: index into the operations; perm (permute): the process count n, then
   for each rank the rank it sends to, then for each rank the rank it receives from (-1: none). */
int EM_EXPORT(_step)(int kind, int slot, const void *send, void *recv, int64_t count, int type,
                     int64_t size, int op, const int32_t *perm) {
    if (slot < 0 || slot >= em.ncomms || type < 0 || type >= em.ntypes || op < 0 || op >= em.nops)
        return em_fail("ember MPI step (bad communicator, type or operation)", -1);
    em_h comm = em.comms[slot];
    if (count == 0) return 0;
    if (kind == EM_KIND_ALLREDUCE)
        return em_allreduce(comm, (const char *)send, (char *)recv, count, size, em.types[type], em.ops[op]);
    if (count * size > INT_MAX) return em_fail("ember MPI step (message over 2 GiB)", -1);
    int bytes = (int)(count * size);
    int rc;
    if (kind == EM_KIND_ALLGATHER) {
        rc = em.allgather(send, bytes, em.types[0], recv, bytes, em.types[0], comm);
        return rc ? em_fail("MPI_Allgather", rc) : 0;
    }
    if (kind == EM_KIND_REDUCE_SCATTER) {
        rc = em.reduce_scatter(send, recv, (int)count, em.types[type], em.ops[op], comm);
        return rc ? em_fail("MPI_Reduce_scatter_block", rc) : 0;
    }
    if (kind == EM_KIND_PERMUTE) {
        int rank = 0;
        rc = em.comm_rank(comm, &rank);
        if (rc) return em_fail("MPI_Comm_rank", rc);
        if (rank < 0 || rank >= perm[0]) return em_fail("ember MPI step (rank outside the permutation)", -1);
        int dest = perm[1 + rank], source = perm[1 + perm[0] + rank];
        int64_t status[64];  /* MPI_Status is at most 256 bytes (checked by the caller) */
        if (source < 0) memset(recv, 0, (size_t)bytes);
        rc = em.sendrecv(send, bytes, em.types[0], dest < 0 ? em.proc_null : dest, 0,
                         recv, bytes, em.types[0], source < 0 ? em.proc_null : source, 0, comm, status);
        return rc ? em_fail("MPI_Sendrecv", rc) : 0;
    }
    return em_fail("ember MPI step (unknown kind)", -1);
}
