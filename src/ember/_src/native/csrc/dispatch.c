/* ember's call dispatcher: the CPython extension module ``ember_dispatch``
   (see native/runtime/dispatch_src.py and native/runtime/dispatch.py). Built with EMBER_DISPATCH_ABI defined. */
#define PY_SSIZE_T_CLEAN
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <Python.h>
#include <structmember.h>
#include <numpy/arrayobject.h>
#include <stdint.h>

static const char ember_dispatch_abi[] = EMBER_DISPATCH_ABI;

typedef int (*entry_fn)(void *, void *, void *, void *);

/* ---- ember Arrays made and freed in C (installed by install_array; see array.py) ----------------
   The memory statistics of ember Arrays live in one Stats object (array._stats once this module
   loads; the pure-Python dataclass before). install_array makes Array's __init__ and __del__ C
   functions (its tp_init and tp_finalize slots; the Python methods stay in the class for
   reference and for subclasses), and the dispatcher builds its results with make_array
   (tp_alloc + the slots, no argument parsing). Every update runs with the GIL held and without
   Python code in between, so it is atomic. While a leak tracker is active (check_leaks) a new
   Array also calls array._record_tracked(arr, value), which records the Python frames. The
   objects below are never released: an Array freed late in interpreter shutdown still finds them. */
typedef struct {
    PyObject_HEAD
    long long live_arrays, live_bytes, peak_bytes, total_allocated;
    PyObject *trackers;   /* list of (thread id, list) of the active check_leaks blocks */
} Stats;

static void Stats_dealloc(Stats *self) {
    Py_XDECREF(self->trackers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Stats_members[] = {
    {"live_arrays", T_LONGLONG, offsetof(Stats, live_arrays), 0, "ember Arrays alive"},
    {"live_bytes", T_LONGLONG, offsetof(Stats, live_bytes), 0, "bytes their buffers hold"},
    {"peak_bytes", T_LONGLONG, offsetof(Stats, peak_bytes), 0, "the most live_bytes has been"},
    {"total_allocated", T_LONGLONG, offsetof(Stats, total_allocated), 0, "bytes of every Array made"},
    {"trackers", T_OBJECT_EX, offsetof(Stats, trackers), 0, "active leak trackers: (thread id, list)"},
    {NULL}
};

static PyTypeObject StatsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember_dispatch.Stats",
    .tp_basicsize = sizeof(Stats),
    .tp_dealloc = (destructor)Stats_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory statistics of ember Arrays (updated in C).",
    .tp_members = Stats_members,
};

static Stats *g_stats;                 /* the statistics (NULL until install_array) */
static PyTypeObject *g_array;          /* ember's Array type */
static PyObject *g_record;             /* array._record_tracked */
static Py_ssize_t g_value_off = -1, g_weak_off, g_nbytes_off, g_aval_off;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* Fill a freshly allocated Array's slots from value and weak and count it (0, or -1 with an
   exception set). nbytes is value's byte size when the caller knows it (-1: ask value). */
static int array_fill(PyObject *self, PyObject *value, PyObject *weak, Py_ssize_t nbytes) {
    PyObject *nb;
    if (nbytes < 0 && PyArray_Check(value)) nbytes = PyArray_NBYTES((PyArrayObject *)value);
    if (nbytes >= 0) {
        nb = PyLong_FromSsize_t(nbytes);
    } else {
        nb = PyObject_GetAttrString(value, "nbytes");
        if (nb != NULL) nbytes = PyLong_AsSsize_t(nb);
        if (nb != NULL && nbytes == -1 && PyErr_Occurred()) Py_CLEAR(nb);
    }
    if (nb == NULL) return -1;
    Py_INCREF(value); Py_XSETREF(SLOT(self, g_value_off), value);
    Py_INCREF(weak); Py_XSETREF(SLOT(self, g_weak_off), weak);
    Py_XSETREF(SLOT(self, g_nbytes_off), nb);
    Py_INCREF(Py_None); Py_XSETREF(SLOT(self, g_aval_off), Py_None);
    Stats *s = g_stats;
    s->live_arrays += 1;
    s->live_bytes += nbytes;
    s->total_allocated += nbytes;
    if (s->live_bytes > s->peak_bytes) s->peak_bytes = s->live_bytes;
    PyObject *t = s->trackers;
    int tracking = t == NULL ? 0 : PyList_CheckExact(t) ? PyList_GET_SIZE(t) > 0 : PyObject_IsTrue(t);
    if (tracking < 0) return -1;
    if (tracking) {
        PyObject *r = PyObject_CallFunctionObjArgs(g_record, self, value, NULL);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Array.__init__(value, weak_type=False) */
static int array_init(PyObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"value", "weak_type", NULL};
    PyObject *value, *weak = Py_False;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (kw == NULL && (n == 1 || n == 2)) {
        value = PyTuple_GET_ITEM(args, 0);
        if (n == 2) weak = PyTuple_GET_ITEM(args, 1);
    } else if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:Array", kwlist, &value, &weak)) {
        return -1;
    }
    return array_fill(self, value, weak, -1);
}

/* Array.__del__: an Array not deleted gives its bytes back */
static void array_finalize(PyObject *self) {
    PyObject *v = SLOT(self, g_value_off), *nb = SLOT(self, g_nbytes_off);
    if (v == NULL || v == Py_None || nb == NULL) return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    Py_ssize_t n = PyLong_AsSsize_t(nb);
    if (n == -1 && PyErr_Occurred()) PyErr_Clear();
    else { g_stats->live_arrays -= 1; g_stats->live_bytes -= n; }
    PyErr_Restore(et, ev, tb);
}

/* A new Array wrapping value (the dispatcher's results) */
static PyObject *make_array(PyObject *value, PyObject *weak) {
    PyObject *self = g_array->tp_alloc(g_array, 0);
    if (self == NULL) return NULL;
    if (array_fill(self, value, weak, -1) < 0) { Py_DECREF(self); return NULL; }
    return self;
}

static Py_ssize_t slot_offset(PyObject *type, const char *name);

/* install_array(Array, array_module, record) -> Stats: from now on Array's __init__/__del__ and the
   dispatcher's results count in C. The statistics so far (array_module._stats) are carried over and
   array_module._stats becomes the C object, all without running Python code in between (another
   thread cannot update the old object meanwhile). Idempotent for the same type. */
static PyObject *install_array(PyObject *mod, PyObject *args) {
    PyObject *type, *amod, *record;
    if (!PyArg_ParseTuple(args, "O!OO", &PyType_Type, &type, &amod, &record)) return NULL;
    if (g_stats != NULL) {
        if ((PyObject *)g_array != type) {
            PyErr_SetString(PyExc_RuntimeError, "install_array: another Array type is installed");
            return NULL;
        }
        Py_INCREF(g_stats);
        return (PyObject *)g_stats;
    }
    PyTypeObject *tp = (PyTypeObject *)type;
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || tp->tp_new != PyBaseObject_Type.tp_new ||
        !PyCallable_Check(record)) {
        PyErr_SetString(PyExc_TypeError, "install_array: a Python class and a callable expected");
        return NULL;
    }
    Py_ssize_t offs[4];
    const char *names[4] = {"_value", "_weak", "_nbytes", "_aval"};
    for (int i = 0; i < 4; i++) {
        offs[i] = slot_offset(type, names[i]);
        if (offs[i] < 0) {
            PyErr_Format(PyExc_TypeError, "install_array: the Array type has no %s slot", names[i]);
            return NULL;
        }
    }
    PyObject *old = PyObject_GetAttrString(amod, "_stats");
    if (old == NULL) return NULL;
    long long v[4];
    const char *fields[4] = {"live_arrays", "live_bytes", "peak_bytes", "total_allocated"};
    for (int i = 0; i < 4; i++) {
        PyObject *x = PyObject_GetAttrString(old, fields[i]);
        v[i] = x ? PyLong_AsLongLong(x) : -1;
        Py_XDECREF(x);
        if (v[i] == -1 && PyErr_Occurred()) { Py_DECREF(old); return NULL; }
    }
    PyObject *trackers = PyObject_GetAttrString(old, "trackers");
    Py_DECREF(old);
    if (trackers == NULL) return NULL;
    Stats *s = PyObject_New(Stats, &StatsType);
    if (s == NULL) { Py_DECREF(trackers); return NULL; }
    s->live_arrays = v[0]; s->live_bytes = v[1]; s->peak_bytes = v[2]; s->total_allocated = v[3];
    s->trackers = trackers;   /* the same list: a check_leaks block in progress keeps working */
    if (PyObject_SetAttrString(amod, "_stats", (PyObject *)s) < 0) { Py_DECREF(s); return NULL; }
    g_value_off = offs[0]; g_weak_off = offs[1]; g_nbytes_off = offs[2]; g_aval_off = offs[3];
    Py_INCREF(record); g_record = record;
    Py_INCREF(type); g_array = tp;
    Py_INCREF(s); g_stats = s;   /* kept for the life of the process */
    tp->tp_init = array_init;
    tp->tp_finalize = array_finalize;
    PyType_Modified(tp);
    return (PyObject *)s;
}

typedef struct {
    PyObject_HEAD
    entry_fn fn;
    void **bufs;
    void *arena;
    void *fns;
    Py_ssize_t base;          /* index of the first output buffer in bufs */
    Py_ssize_t n_in, n_buf, n_res;
    int *kind;                /* per input: 0 an ember Array (weak must match), 1 a NumPy array */
    int *weak;
    int *ndim;
    npy_intp *shape;          /* n_in * NPY_MAXDIMS */
    PyArray_Descr **descr;
    Py_ssize_t *direct;       /* result j is output buffer direct[j] */
    PyObject **out_weak;      /* Py_True / Py_False per result */
    PyObject *slots;          /* list per output buffer: list of (arr, raw, addr) or None */
    PyObject *take_one;       /* take_one(k) -> (arr, addr) when no recycled buffer is idle */
    PyObject *on_error;       /* on_error(rc) raises the error of a failed run */
    PyObject *acquire, *release;
    PyObject *last;           /* the executable's last-inputs list (kept consistent with bufs) */
    PyObject *array_type;
    PyObject *wrap;           /* None: one result; a tuple: results as a flat tuple; else wrap(list) */
    int out_mode;             /* 0 single, 1 flat tuple, 2 wrap callable */
    int release_gil;
    PyObject *miss;
    Py_ssize_t value_off, weak_off; /* offsets of Array._value / Array._weak slots */
    long long calls;
    /* products whose B is an argument (codegen._argument_packed_b): per such product, the input
       index, the program's 8-byte cell for a packed copy; pack(j, array) makes the copy, and
       pcache[j] is (array, copy) once made (a list the executable owns, so a copy outlives this
       entry while the cell may point at it) */
    Py_ssize_t n_pk;
    Py_ssize_t *pk_in;
    void **pk_cell_ptr;
    PyObject *pack, *pcache;
} Entry;

static void Entry_dealloc(Entry *self) {
    Py_ssize_t i;
    if (self->descr) for (i = 0; i < self->n_in; i++) Py_XDECREF(self->descr[i]);
    if (self->out_weak) for (i = 0; i < self->n_res; i++) Py_XDECREF(self->out_weak[i]);
    PyMem_Free(self->kind); PyMem_Free(self->weak); PyMem_Free(self->ndim); PyMem_Free(self->shape);
    PyMem_Free(self->descr); PyMem_Free(self->direct); PyMem_Free(self->out_weak);
    PyMem_Free(self->pk_in); PyMem_Free(self->pk_cell_ptr);
    Py_XDECREF(self->pack); Py_XDECREF(self->pcache);
    Py_XDECREF(self->slots); Py_XDECREF(self->take_one); Py_XDECREF(self->on_error);
    Py_XDECREF(self->acquire); Py_XDECREF(self->release); Py_XDECREF(self->last);
    Py_XDECREF(self->array_type); Py_XDECREF(self->wrap); Py_XDECREF(self->miss);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t slot_offset(PyObject *type, const char *name) {
    PyObject *d = PyObject_GetAttrString(type, name);
    Py_ssize_t off = -1;
    if (d == NULL) { PyErr_Clear(); return -1; }
    if (Py_TYPE(d) == &PyMemberDescr_Type) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX || m->type == T_OBJECT) off = m->offset;
    }
    Py_DECREF(d);
    return off;
}

/* Entry(fn, bufs, arena, fns, base, in_specs, slots, take_one, direct, out_weak, wrap,
         on_error, lock, last, array_type, release_gil, miss, packables, pack, pcache) */
static int Entry_init(Entry *self, PyObject *args, PyObject *kw) {
    unsigned long long fn, bufs, arena, fns;
    Py_ssize_t base, i, j;
    PyObject *in_specs, *slots, *take_one, *direct, *out_weak, *wrap, *on_error, *lock, *last;
    PyObject *array_type, *miss, *packables, *pack, *pcache;
    int release_gil;
    if (!PyArg_ParseTuple(args, "KKKKnO!O!OO!O!OOOO!OpOO!OO!", &fn, &bufs, &arena, &fns, &base,
                          &PyList_Type, &in_specs, &PyList_Type, &slots, &take_one,
                          &PyList_Type, &direct, &PyList_Type, &out_weak, &wrap, &on_error, &lock,
                          &PyList_Type, &last, &array_type, &release_gil, &miss,
                          &PyList_Type, &packables, &pack, &PyList_Type, &pcache))
        return -1;
    self->fn = (entry_fn)(uintptr_t)fn;
    self->bufs = (void **)(uintptr_t)bufs;
    self->arena = (void *)(uintptr_t)arena;
    self->fns = (void *)(uintptr_t)fns;
    self->base = base;
    self->n_in = PyList_GET_SIZE(in_specs);
    self->n_buf = PyList_GET_SIZE(slots);
    self->n_res = PyList_GET_SIZE(direct);
    if (PyList_GET_SIZE(out_weak) != self->n_res || PyList_GET_SIZE(last) != self->n_in) {
        PyErr_SetString(PyExc_ValueError, "Entry: inconsistent output or input counts");
        return -1;
    }
    Py_ssize_t nin = self->n_in ? self->n_in : 1, nres = self->n_res ? self->n_res : 1;
    self->kind = PyMem_Calloc(nin, sizeof(int));
    self->weak = PyMem_Calloc(nin, sizeof(int));
    self->ndim = PyMem_Calloc(nin, sizeof(int));
    self->shape = PyMem_Calloc(nin * NPY_MAXDIMS, sizeof(npy_intp));
    self->descr = PyMem_Calloc(nin, sizeof(PyArray_Descr *));
    self->direct = PyMem_Calloc(nres, sizeof(Py_ssize_t));
    self->out_weak = PyMem_Calloc(nres, sizeof(PyObject *));
    if (!self->kind || !self->weak || !self->ndim || !self->shape || !self->descr || !self->direct ||
        !self->out_weak) { PyErr_NoMemory(); return -1; }
    for (i = 0; i < self->n_in; i++) {
        PyObject *spec = PyList_GET_ITEM(in_specs, i), *shape, *dtype;
        int kind, weak;
        if (!PyArg_ParseTuple(spec, "iiO!O", &kind, &weak, &PyTuple_Type, &shape, &dtype)) return -1;
        Py_ssize_t nd = PyTuple_GET_SIZE(shape);
        if (nd > NPY_MAXDIMS) { PyErr_SetString(PyExc_ValueError, "Entry: too many dims"); return -1; }
        self->kind[i] = kind; self->weak[i] = weak; self->ndim[i] = (int)nd;
        for (j = 0; j < nd; j++) {
            self->shape[i * NPY_MAXDIMS + j] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, j));
            if (PyErr_Occurred()) return -1;
        }
        if (!PyArray_DescrConverter(dtype, &self->descr[i])) return -1;
    }
    for (i = 0; i < self->n_res; i++) {
        self->direct[i] = PyLong_AsSsize_t(PyList_GET_ITEM(direct, i));
        if (self->direct[i] < 0 || self->direct[i] >= self->n_buf) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Entry: bad output index");
            return -1;
        }
        self->out_weak[i] = PyObject_IsTrue(PyList_GET_ITEM(out_weak, i)) ? Py_True : Py_False;
        Py_INCREF(self->out_weak[i]);
    }
    self->acquire = PyObject_GetAttrString(lock, "acquire");
    self->release = PyObject_GetAttrString(lock, "release");
    if (!self->acquire || !self->release) return -1;
    Py_INCREF(slots); self->slots = slots;
    Py_INCREF(take_one); self->take_one = take_one;
    Py_INCREF(on_error); self->on_error = on_error;
    Py_INCREF(last); self->last = last;
    Py_INCREF(array_type); self->array_type = array_type;
    Py_INCREF(wrap); self->wrap = wrap;
    Py_INCREF(miss); self->miss = miss;
    self->out_mode = wrap == Py_None ? 0 : PyTuple_Check(wrap) ? 1 : 2;
    if (self->out_mode == 0 && self->n_res != 1) {
        PyErr_SetString(PyExc_ValueError, "Entry: a single-output entry needs exactly one result");
        return -1;
    }
    self->release_gil = release_gil;
    self->n_pk = PyList_GET_SIZE(packables);
    if (PyList_GET_SIZE(pcache) != self->n_pk) {
        PyErr_SetString(PyExc_ValueError, "Entry: packables and pcache differ in length");
        return -1;
    }
    self->pk_in = PyMem_Calloc(self->n_pk ? self->n_pk : 1, sizeof(Py_ssize_t));
    self->pk_cell_ptr = PyMem_Calloc(self->n_pk ? self->n_pk : 1, sizeof(void *));
    if (!self->pk_in || !self->pk_cell_ptr) { PyErr_NoMemory(); return -1; }
    for (j = 0; j < self->n_pk; j++) {
        unsigned long long cell;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(packables, j), "nK", &self->pk_in[j], &cell)) return -1;
        if (self->pk_in[j] < 0 || self->pk_in[j] >= self->n_in) {
            PyErr_SetString(PyExc_ValueError, "Entry: bad packable input index");
            return -1;
        }
        self->pk_cell_ptr[j] = (void *)(uintptr_t)cell;
    }
    Py_INCREF(pack); self->pack = pack;
    Py_INCREF(pcache); self->pcache = pcache;
    self->value_off = slot_offset(array_type, "_value");
    self->weak_off = slot_offset(array_type, "_weak");
    if (self->value_off < 0 || self->weak_off < 0) {
        PyErr_SetString(PyExc_TypeError, "Entry: the Array type has no _value/_weak slots");
        return -1;
    }
    return 0;
}

/* The NumPy array behind argument i, borrowed, or NULL when the argument does not match. */
static PyArrayObject *match_arg(Entry *self, Py_ssize_t i, PyObject *a) {
    PyObject *v;
    if (self->kind[i] == 0) {
        if ((PyObject *)Py_TYPE(a) != self->array_type) return NULL;
        v = SLOT(a, self->value_off);
        PyObject *w = SLOT(a, self->weak_off);
        if (v == NULL || v == Py_None || w == NULL) return NULL;
        if ((w == Py_True) != (self->weak[i] != 0)) return NULL;
    } else {
        v = a;
    }
    if (!PyArray_CheckExact(v)) return NULL;
    PyArrayObject *arr = (PyArrayObject *)v;
    int nd = PyArray_NDIM(arr);
    if (nd != self->ndim[i] || !PyArray_IS_C_CONTIGUOUS(arr)) return NULL;
    npy_intp *dims = PyArray_DIMS(arr), *want = self->shape + i * NPY_MAXDIMS;
    for (int d = 0; d < nd; d++) if (dims[d] != want[d]) return NULL;
    PyArray_Descr *dt = PyArray_DESCR(arr);
    if (dt != self->descr[i] && !PyArray_EquivTypes(dt, self->descr[i])) return NULL;
    return arr;
}

/* Run on the n arguments args[0 .. n); a new reference to the result, the miss sentinel, or NULL. */
static PyObject *entry_run(Entry *self, PyObject *const *args, Py_ssize_t n) {
    Py_ssize_t i;
    PyArrayObject *ins[64];
    PyObject *outs[64];
    if (n != self->n_in || n > 64 || self->n_buf > 64) { Py_INCREF(self->miss); return self->miss; }
    for (i = 0; i < n; i++) {
        ins[i] = match_arg(self, i, args[i]);
        if (ins[i] == NULL) { Py_INCREF(self->miss); return self->miss; }
    }
    PyObject *got = PyObject_CallOneArg(self->acquire, Py_False);
    if (got == NULL) return NULL;
    int locked = got == Py_True;
    Py_DECREF(got);
    if (!locked) { Py_INCREF(self->miss); return self->miss; }  /* busy: the Python path waits */
    /* an ember Array (immutable) passed again as a product's B: pack it once, keep the copy, and
       point the program's cell at it (the program checks the copy's source address against B) */
    for (Py_ssize_t j = 0; j < self->n_pk; j++) {
        Py_ssize_t q = self->pk_in[j];
        PyObject *cur = (PyObject *)ins[q], *ent = PyList_GET_ITEM(self->pcache, j);
        if (self->kind[q] != 0 || (ent != Py_None && PyTuple_GET_ITEM(ent, 0) == cur)) continue;
        if (PyList_GET_ITEM(self->last, q) != cur) continue;  /* first sighting: pack on the second */
        PyObject *copy = PyObject_CallFunction(self->pack, "nO", j, cur);
        PyObject *pair = copy != NULL && PyArray_Check(copy) ? PyTuple_Pack(2, cur, copy) : NULL;
        Py_XDECREF(copy);
        if (pair == NULL) { PyErr_Clear(); continue; }  /* not packed: the program packs per call */
        *(void **)self->pk_cell_ptr[j] = PyArray_DATA((PyArrayObject *)PyTuple_GET_ITEM(pair, 1));
        PyList_SetItem(self->pcache, j, pair);  /* steals pair; frees the previous copy, if any */
    }
    for (i = 0; i < n; i++) {
        self->bufs[i] = PyArray_DATA(ins[i]);
        PyObject *old = PyList_GET_ITEM(self->last, i);
        if (old != (PyObject *)ins[i]) {
            Py_INCREF(ins[i]);
            PyList_SET_ITEM(self->last, i, (PyObject *)ins[i]);
            Py_XDECREF(old);
        }
    }
    Py_ssize_t k;
    for (k = 0; k < self->n_buf; k++) {
        PyObject *slot = PyList_GET_ITEM(self->slots, k);
        outs[k] = NULL;
        if (slot != Py_None) {
            Py_ssize_t m = PyList_GET_SIZE(slot);
            for (Py_ssize_t e = 0; e < m; e++) {
                PyObject *ent = PyList_GET_ITEM(slot, e);
                PyObject *arr = PyTuple_GET_ITEM(ent, 0), *raw = PyTuple_GET_ITEM(ent, 1);
                /* idle: the array is held by its tuple only, its block by the tuple and arr.base */
                if (Py_REFCNT(arr) == 1 && Py_REFCNT(raw) == 2) {
                    void *addr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(ent, 2));
                    Py_INCREF(arr);
                    outs[k] = arr;
                    self->bufs[self->base + k] = addr;
                    break;
                }
            }
        }
        if (outs[k] == NULL) {
            PyObject *idx = PyLong_FromSsize_t(k);
            PyObject *pair = idx ? PyObject_CallOneArg(self->take_one, idx) : NULL;
            Py_XDECREF(idx);
            void *addr = pair ? PyLong_AsVoidPtr(PyTuple_GetItem(pair, 1)) : NULL;
            if (pair == NULL || PyErr_Occurred()) {
                Py_XDECREF(pair);
                for (Py_ssize_t q = 0; q < k; q++) Py_DECREF(outs[q]);
                PyObject *r = PyObject_CallNoArgs(self->release);
                Py_XDECREF(r);
                return NULL;
            }
            outs[k] = PyTuple_GET_ITEM(pair, 0);
            Py_INCREF(outs[k]);
            Py_DECREF(pair);
            self->bufs[self->base + k] = addr;
        }
    }
    int rc;
    if (self->release_gil) {
        Py_BEGIN_ALLOW_THREADS
        rc = self->fn(self->bufs, self->arena, NULL, self->fns);
        Py_END_ALLOW_THREADS
    } else {
        rc = self->fn(self->bufs, self->arena, NULL, self->fns);
    }
    self->calls++;
    PyObject *r = PyObject_CallNoArgs(self->release);
    if (r == NULL) rc = rc ? rc : -1;
    Py_XDECREF(r);
    if (rc) {
        for (k = 0; k < self->n_buf; k++) Py_DECREF(outs[k]);
        if (rc == -1 && PyErr_Occurred()) return NULL;
        PyObject *code = PyLong_FromLong(rc);
        PyObject *e = code ? PyObject_CallOneArg(self->on_error, code) : NULL;
        Py_XDECREF(code);
        if (e != NULL) {  /* on_error must raise */
            Py_DECREF(e);
            PyErr_Format(PyExc_RuntimeError, "native program failed at step %d", rc - 1);
        }
        return NULL;
    }
    PyObject *res = NULL, *wrapped[64];
    for (i = 0; i < self->n_res; i++) {
        PyObject *argv[2] = {outs[self->direct[i]], self->out_weak[i]};
        wrapped[i] = self->array_type == (PyObject *)g_array ? make_array(argv[0], argv[1])
                     : PyObject_Vectorcall(self->array_type, argv, 2, NULL);
        if (wrapped[i] == NULL) {
            for (Py_ssize_t q = 0; q < i; q++) Py_DECREF(wrapped[q]);
            goto done;
        }
    }
    if (self->out_mode == 0) {
        res = wrapped[0];
    } else {
        PyObject *t = self->out_mode == 1 ? PyTuple_New(self->n_res) : PyList_New(self->n_res);
        if (t == NULL) {
            for (i = 0; i < self->n_res; i++) Py_DECREF(wrapped[i]);
            goto done;
        }
        for (i = 0; i < self->n_res; i++) {
            if (self->out_mode == 1) PyTuple_SET_ITEM(t, i, wrapped[i]);
            else PyList_SET_ITEM(t, i, wrapped[i]);
        }
        if (self->out_mode == 1) {
            res = t;
        } else {
            res = PyObject_CallOneArg(self->wrap, t);
            Py_DECREF(t);
        }
    }
done:
    for (k = 0; k < self->n_buf; k++) Py_DECREF(outs[k]);
    return res;
}

static PyObject *Entry_call(Entry *self, PyObject *args, PyObject *kw) {
    return entry_run(self, PySequence_Fast_ITEMS(args), PyTuple_GET_SIZE(args));
}

static PyMemberDef Entry_members[] = {
    {"calls", T_LONGLONG, offsetof(Entry, calls), READONLY, "native calls made through this entry"},
    {NULL}
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember_dispatch.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_call = (ternaryfunc)Entry_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One native executable bound to one exact argument signature.",
    .tp_init = (initproc)Entry_init,
    .tp_new = PyType_GenericNew,
    .tp_members = Entry_members,
};

typedef struct {
    PyObject_HEAD
    PyObject *entries;   /* list of Entry */
    PyObject *state;     /* core._state: .dynamic must be None */
    PyObject *miss;
    PyObject *dynamic_name;
} Dispatcher;

static void Dispatcher_dealloc(Dispatcher *self) {
    Py_XDECREF(self->entries); Py_XDECREF(self->state); Py_XDECREF(self->miss);
    Py_XDECREF(self->dynamic_name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Dispatcher_init(Dispatcher *self, PyObject *args, PyObject *kw) {
    PyObject *state, *miss;
    if (!PyArg_ParseTuple(args, "OO", &state, &miss)) return -1;
    self->entries = PyList_New(0);
    self->dynamic_name = PyUnicode_InternFromString("dynamic");
    if (!self->entries || !self->dynamic_name) return -1;
    Py_INCREF(state); self->state = state;
    Py_INCREF(miss); self->miss = miss;
    return 0;
}

/* The first entry that serves args[0 .. n) (none while a dynamic trace is active): a new reference
   to its result, the miss sentinel, or NULL. */
static PyObject *dispatcher_run(Dispatcher *self, PyObject *const *args, Py_ssize_t n) {
    PyObject *dyn = PyObject_GetAttr(self->state, self->dynamic_name);
    if (dyn == NULL) return NULL;
    int active = dyn != Py_None;
    Py_DECREF(dyn);
    if (!active) {
        Py_ssize_t m = PyList_GET_SIZE(self->entries);
        for (Py_ssize_t e = 0; e < m; e++) {
            Entry *ent = (Entry *)PyList_GET_ITEM(self->entries, e);
            Py_INCREF(ent);
            PyObject *r = entry_run(ent, args, n);
            Py_DECREF(ent);
            if (r != self->miss) return r;
            Py_DECREF(r);
        }
    }
    Py_INCREF(self->miss);
    return self->miss;
}

static PyObject *Dispatcher_call(Dispatcher *self, PyObject *args, PyObject *kw) {
    PyObject *argt;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &argt)) return NULL;
    return dispatcher_run(self, PySequence_Fast_ITEMS(argt), PyTuple_GET_SIZE(argt));
}

static PyObject *Dispatcher_add(Dispatcher *self, PyObject *ent) {
    if (!PyObject_TypeCheck(ent, &EntryType)) {
        PyErr_SetString(PyExc_TypeError, "Dispatcher.add takes an Entry");
        return NULL;
    }
    if (PyList_Append(self->entries, ent) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Dispatcher_clear(Dispatcher *self, PyObject *unused) {
    if (PyList_SetSlice(self->entries, 0, PyList_GET_SIZE(self->entries), NULL) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Dispatcher_get_calls(Dispatcher *self, void *closure) {
    long long total = 0;
    for (Py_ssize_t e = 0; e < PyList_GET_SIZE(self->entries); e++)
        total += ((Entry *)PyList_GET_ITEM(self->entries, e))->calls;
    return PyLong_FromLongLong(total);
}

static PyObject *Dispatcher_get_entries(Dispatcher *self, void *closure) {
    return PyList_GetSlice(self->entries, 0, PyList_GET_SIZE(self->entries));
}

static PyMethodDef Dispatcher_methods[] = {
    {"add", (PyCFunction)Dispatcher_add, METH_O, "Append an Entry."},
    {"clear", (PyCFunction)Dispatcher_clear, METH_NOARGS, "Drop every entry."},
    {NULL}
};

static PyGetSetDef Dispatcher_getset[] = {
    {"calls", (getter)Dispatcher_get_calls, NULL, "calls served by the entries", NULL},
    {"entries", (getter)Dispatcher_get_entries, NULL, "a copy of the entry list", NULL},
    {NULL}
};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember_dispatch.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_dealloc = (destructor)Dispatcher_dealloc,
    .tp_call = (ternaryfunc)Dispatcher_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The native entries of one jitted function, tried in order.",
    .tp_init = (initproc)Dispatcher_init,
    .tp_new = PyType_GenericNew,
    .tp_methods = Dispatcher_methods,
    .tp_getset = Dispatcher_getset,
};

/* CallSlot(fallback, name): a class's __call__ in C. Called as a method, (instance, *args), it runs
   the Dispatcher the instance holds in its attribute `name` on args (positional only) and returns
   its result; on a miss (or keywords, or no Dispatcher there) it returns fallback(instance, *args,
   **kwargs), the class's Python __call__. A jitted call then runs no Python bytecode at all (the
   Python __call__'s frame took ~0.4 us of a 1.0 us call). */
typedef struct {
    PyObject_HEAD
    PyObject *fallback;
    PyObject *name;
    vectorcallfunc vectorcall;
} CallSlot;

static void CallSlot_dealloc(CallSlot *self) {
    Py_XDECREF(self->fallback); Py_XDECREF(self->name);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *CallSlot_vectorcall(CallSlot *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n >= 1 && (kwnames == NULL || PyTuple_GET_SIZE(kwnames) == 0)) {
        PyObject *d = PyObject_GetAttr(args[0], self->name);
        if (d == NULL) return NULL;
        if (Py_TYPE(d) == &DispatcherType) {
            PyObject *miss = ((Dispatcher *)d)->miss;
            PyObject *r = dispatcher_run((Dispatcher *)d, args + 1, n - 1);
            Py_DECREF(d);
            if (r != miss) return r;
            Py_DECREF(r);
        } else {
            Py_DECREF(d);
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static int CallSlot_init(CallSlot *self, PyObject *args, PyObject *kw) {
    PyObject *fallback, *name;
    if (!PyArg_ParseTuple(args, "OU", &fallback, &name)) return -1;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "CallSlot: fallback must be callable");
        return -1;
    }
    Py_INCREF(fallback); Py_XSETREF(self->fallback, fallback);
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    Py_XSETREF(self->name, name);
    self->vectorcall = (vectorcallfunc)CallSlot_vectorcall;
    return 0;
}

/* As a class attribute read from an instance: a bound method (like a function). */
static PyObject *CallSlot_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) { Py_INCREF(self); return self; }
    return PyMethod_New(self, obj);
}

/* __name__ / __qualname__: the fallback's (so a bound JitFunction.__call__ reads as a method) */
static PyObject *CallSlot_get_attr(CallSlot *self, void *name) {
    return PyObject_GetAttrString(self->fallback, (const char *)name);
}

static PyGetSetDef CallSlot_getset[] = {
    {"__name__", (getter)CallSlot_get_attr, NULL, "the fallback's name", "__name__"},
    {"__qualname__", (getter)CallSlot_get_attr, NULL, "the fallback's qualified name", "__qualname__"},
    {NULL}
};

static PyMemberDef CallSlot_members[] = {
    {"fallback", T_OBJECT, offsetof(CallSlot, fallback), READONLY, "the Python __call__ a miss runs"},
    {NULL}
};

static PyTypeObject CallSlotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember_dispatch.CallSlot",
    .tp_basicsize = sizeof(CallSlot),
    .tp_dealloc = (destructor)CallSlot_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(CallSlot, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A class's __call__: the instance's Dispatcher first, else the Python __call__.",
    .tp_init = (initproc)CallSlot_init,
    .tp_new = PyType_GenericNew,
    .tp_descr_get = CallSlot_get,
    .tp_members = CallSlot_members,
    .tp_getset = CallSlot_getset,
};

static PyMethodDef module_methods[] = {
    {"install_array", install_array, METH_VARARGS,
     "install_array(Array, array_module, record) -> Stats: make and free ember Arrays in C."},
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "ember_dispatch", "ember's C call dispatcher", -1, module_methods,
};

PyMODINIT_FUNC PyInit_ember_dispatch(void) {
    import_array();
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&DispatcherType) < 0 || PyType_Ready(&CallSlotType) < 0 ||
        PyType_Ready(&StatsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&EntryType);
    Py_INCREF(&DispatcherType);
    Py_INCREF(&CallSlotType);
    Py_INCREF(&StatsType);
    if (PyModule_AddObject(m, "Entry", (PyObject *)&EntryType) < 0 ||
        PyModule_AddObject(m, "Dispatcher", (PyObject *)&DispatcherType) < 0 ||
        PyModule_AddObject(m, "CallSlot", (PyObject *)&CallSlotType) < 0 ||
        PyModule_AddObject(m, "Stats", (PyObject *)&StatsType) < 0 ||
        PyModule_AddStringConstant(m, "abi", ember_dispatch_abi) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
