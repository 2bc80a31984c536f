/* schedverify._kernel: the optional compiled kernel for the hot paths of `check`.
 *
 * Each function here is a faster twin of a pure-Python function, for the common case only,
 * and returns None when its input is not that case; the caller then runs the Python code.
 * "The same answer" includes the numbers' types and, for ints, exactness: a function that
 * could not reproduce Python's exact ints in doubles declines (each says how it knows).
 * Arguments no caller passes raise TypeError/ValueError/IndexError before they are used
 * (the rule is in _accel.py's docstring).
 * So the kernel never decides anything the Python code would decide differently, and the
 * semantics stay where they are written (schedverify/deps.py, graph.py, cost/memory.py):
 * the dependency rules come in as the tables graph.py derives from deps.NEEDS.
 * tests/test_kernel.py holds every function equal to its twin.
 *
 *   parse_row          io/actions.py parse_row            plain action strings -> Actions
 *   compile_plain      graph.py _reference                the compiled graph's columns
 *   sweep_plain        graph.py sweep                     ASAP start/end, no deadlock
 *   memory_plain       cost/memory.py memory_sweep        peaks per device
 *   critical_path_plain cost/timeline.py critical_path    the path's action indices
 *   busy_plain         cost/timeline.py Timeline.busy     each device's busy time (int costs)
 *   format_plain       model.py Action.__str__            the path's action names
 *   parse_rows         io/actions.py parse_rows           plain rows -> grammar.PlainRows columns
 *   rows_of            grammar.py PlainRows.rows          those columns -> rows of Actions
 *   compile_columns    graph.py _reference                compile_plain over those columns
 *   format_columns     grammar.py PlainRows.name          format_plain over those columns
 *
 * .ci/sanitize runs the tests that drive these under ASan and UBSan.
 *
 * Built by setup.py as an optional extension: without a C compiler the package installs
 * and works, only slower.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#define MAX_DIGITS 18 /* grammar.MAX_DIGITS: the significant digits of an index, at most */

/* grammar.PlainRows' stage and microbatch columns: a native int32 each (-1: no microbatch),
 * half the memory of the int64 they were.  A reader declines a file with an index that does
 * not fit (the Python reader takes it, and says what it always said of it); the lowerings
 * write the indices they read, which fit. */
typedef int32_t pr_t;
#define PR_FITS(v) ((v) >= -1 && (v) <= INT32_MAX)

/* ------------------------------------------------------------------ cells */

/* The index of the kind whose text is the k characters at s, or -1. */
static inline int
kind_index(const char **kind_text, const Py_ssize_t *kind_len, int nkinds, const char *s, Py_ssize_t k)
{
    for (int c = 0; c < nkinds; c++)
        if (kind_len[c] == k && memcmp(kind_text[c], s, (size_t)k) == 0)
            return c;
    return -1;
}

/* An index's digits at s[*p..len): leading zeros skipped, then at most MAX_DIGITS significant
 * digits accumulated (grammar.MAX_DIGITS, counted as grammar._index counts them, so that
 * Python's parser accepts exactly the same texts), so v < 10^18 < 2^63: no signed overflow.
 * 1 with *p just past the digits, or 0 when there is no digit or there are too many. */
static inline int
read_index(const char *s, Py_ssize_t len, Py_ssize_t *p, long long *out)
{
    Py_ssize_t q = *p;
    long long v = 0;
    int significant = 0;
    while (q < len && s[q] == '0')
        q++;
    for (; q < len && s[q] >= '0' && s[q] <= '9'; q++) {
        if (significant++ == MAX_DIGITS)
            return 0;
        v = v * 10 + (s[q] - '0');
    }
    if (q == *p)
        return 0;
    *p = q;
    *out = v;
    return 1;
}

/* Read "digits KIND digits" from an ASCII cell; KIND is one of nkinds strings.  Returns the
 * kind's index, or -1 when the cell is not exactly that shape or an index has more than
 * MAX_DIGITS significant digits (grammar.parse_action then says why).  A kind whose ``bare``
 * flag is set (bookkeeping: grammar.read_action takes it without a microbatch) is read as
 * "digits KIND" instead, its microbatch -1; bare NULL: every kind has a microbatch. */
static inline int
parse_cell(const char *s, Py_ssize_t len, const char **kind_text, const Py_ssize_t *kind_len,
           int nkinds, const unsigned char *bare, long long *stage, long long *mb)
{
    Py_ssize_t p = 0, k, e;
    if (!read_index(s, len, &p, stage))
        return -1;
    for (k = p; k < len && !(s[k] >= '0' && s[k] <= '9'); k++)
        ;
    int c = kind_index(kind_text, kind_len, nkinds, s + p, k - p);
    if (c >= 0 && bare != NULL && bare[c]) {
        *mb = -1;
        return k == len ? c : -1;
    }
    e = k;
    if (k == len || !read_index(s, len, &e, mb) || e != len)
        return -1;
    return c;
}

/* Build one Action: a tuple subclass, filled the way CPython's tuple_subtype_new fills it. */
static PyObject *
new_action(PyTypeObject *type, PyObject *stage, PyObject *kind, PyObject *mb)
{
    PyObject *a = type->tp_alloc(type, 4);
    if (a == NULL)
        return NULL;
    Py_INCREF(kind);
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(a, 0, stage);
    PyTuple_SET_ITEM(a, 1, kind);
    PyTuple_SET_ITEM(a, 2, mb);
    PyTuple_SET_ITEM(a, 3, Py_None);
    /* ints, a str and None cannot form a cycle: untrack it now, as the collector itself
     * would at its next pass (CPython's untrack_tuples), so that a million new Actions do
     * not make the collector walk them again and again */
    PyObject_GC_UnTrack(a);
    return a;
}

/* Index objects are shared: a schedule names each microbatch index once per stage and pass,
 * so one int object per value saves an allocation per action (ints are immutable). */
#define INT_CACHE 65536
static PyObject *int_cache[INT_CACHE];

static PyObject *
index_object(long long v)
{
    if (v < 0 || v >= INT_CACHE)
        return PyLong_FromLongLong(v);
    if (int_cache[v] == NULL && (int_cache[v] = PyLong_FromLongLong(v)) == NULL)
        return NULL;
    Py_INCREF(int_cache[v]);
    return int_cache[v];
}

/* The Action (stage, kind, mb), its indices shared (index_object); NULL with an exception
 * set. */
static PyObject *
plain_action(PyTypeObject *type, long long stage, PyObject *kind, long long mb)
{
    PyObject *s = index_object(stage);
    PyObject *m = s ? index_object(mb) : NULL;
    PyObject *a = m ? new_action(type, s, kind, m) : NULL;
    if (a == NULL) { /* new_action took s and m only when it made the action */
        Py_XDECREF(s);
        Py_XDECREF(m);
    }
    return a;
}

/* The Action of a column's entry: plain_action, or (stage, kind, None) for a bookkeeping
 * entry, whose microbatch column holds -1 (grammar.PlainRows). */
static PyObject *
column_action(PyTypeObject *type, long long stage, PyObject *kind, long long mb)
{
    if (mb >= 0)
        return plain_action(type, stage, kind, mb);
    PyObject *s = index_object(stage);
    if (s == NULL)
        return NULL;
    Py_INCREF(Py_None);
    PyObject *a = new_action(type, s, kind, Py_None);
    if (a == NULL) {
        Py_DECREF(s);
        Py_DECREF(Py_None);
    }
    return a;
}

/* The kinds a cell may name (a tuple of at most MAX_KINDS str), as C strings; 0 with
 * TypeError/ValueError set otherwise. */
#define MAX_KINDS 16
#define MAX_KIND_LEN 32 /* the longest kind text read or written (REDUCE_GRAD: 11) */
typedef struct {
    int count;
    const char *text[MAX_KINDS];
    Py_ssize_t len[MAX_KINDS];
    int longest; /* the longest text's length, at most MAX_KIND_LEN (scan_order) */
} kinds_t;

static int
read_kinds(PyObject *kinds, kinds_t *out, const char *what)
{
    out->count = (int)PyTuple_GET_SIZE(kinds);
    out->longest = 0;
    if (out->count > MAX_KINDS) {
        PyErr_Format(PyExc_ValueError, "%s: at most 16 kinds", what);
        return 0;
    }
    for (int c = 0; c < out->count; c++) {
        PyObject *k = PyTuple_GET_ITEM(kinds, c);
        if (!PyUnicode_CheckExact(k)) {
            PyErr_Format(PyExc_TypeError, "%s: the kinds must be str", what);
            return 0;
        }
        out->text[c] = PyUnicode_AsUTF8AndSize(k, &out->len[c]);
        if (out->text[c] == NULL)
            return 0;
        if (out->len[c] > MAX_KIND_LEN) {
            PyErr_Format(PyExc_ValueError, "%s: a kind of at most %d characters", what, MAX_KIND_LEN);
            return 0;
        }
        if (out->len[c] > out->longest)
            out->longest = (int)out->len[c];
    }
    return 1;
}

/* new_action fills the object as a 4-tuple: the type must have exactly a tuple's layout (a
 * tuple subclass without an instance dict or slots, as a NamedTuple is); 0 with TypeError. */
static int
action_layout(PyTypeObject *type, const char *what)
{
    if (!PyType_IsSubtype(type, &PyTuple_Type) || type->tp_basicsize != PyTuple_Type.tp_basicsize ||
        type->tp_itemsize != PyTuple_Type.tp_itemsize || type->tp_dictoffset != 0) {
        PyErr_Format(PyExc_TypeError, "%s: the action type must be a tuple subclass with a "
                                      "tuple's layout (a NamedTuple)", what);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ helpers */

/* A Python int that fits in a long long, or -1 with *ok = 0. */
static long long
exact_int(PyObject *o, int *ok)
{
    int overflow = 0;
    long long v;
    if (!PyLong_CheckExact(o)) {
        *ok = 0;
        return -1;
    }
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) {
        *ok = 0;
        return -1;
    }
    return v;
}

/* Arguments.  The callers (graph.py, cost/memory.py, cost/timeline.py, io/actions.py) pass
 * columns of a Graph (array.array of signed ints: index_array reads them through the buffer
 * protocol, checking the typecode; a list of ints is read too) and
 * tables they build; an argument no caller passes (a container of the wrong type, an index
 * column holding a non-int, lengths that disagree, an index out of range, ``starts`` that do
 * not cut [0, n) into consecutive device ranges) raises TypeError or ValueError here, before
 * any of it is used to index memory.  An input that is consistent but not the kernel's case
 * (see _accel.py) returns None. */

/* Big arrays on huge pages.  A million-action check writes hundreds of megabytes of fresh
 * memory, and on 4 KiB pages the kernel takes a page fault (map and clear a page) for every
 * 4 KiB of it: about a fifth of the whole check's time.  An array of HUGE_HINT_AT bytes or
 * more is therefore marked for transparent huge pages before its first write (the 2 MiB
 * pages inside it: madvise(MADV_HUGEPAGE), as NumPy's allocator does for its big arrays),
 * so that one fault maps 2 MiB.  Only a hint: where the system's transparent huge pages
 * are "never" (or on a platform without them) nothing changes but the speed.  The arrays
 * CPython allocates and fills itself (array.array's) are written before the kernel sees
 * them and keep small pages. */
#define HUGE_HINT_AT ((size_t)4 << 20)
#define HUGE_PAGE ((uintptr_t)2 << 20)

static void
huge_hint(void *p, size_t len)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p == NULL || len < HUGE_HINT_AT)
        return;
    uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), hi = ((uintptr_t)p + len) & ~(HUGE_PAGE - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: its failure changes nothing */
#else
    (void)p;
    (void)len;
#endif
}

/* PyBytes_FromStringAndSize(NULL, n), its buffer (not yet written) hinted as above. */
static PyObject *
new_bytes(Py_ssize_t n)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, n);
    if (b != NULL)
        huge_hint(PyBytes_AS_STRING(b), (size_t)n);
    return b;
}

/* PyList_New(n), its item array (zeroed by calloc: not yet written, for a big one) hinted
 * as above. */
static PyObject *
new_list(Py_ssize_t n)
{
    PyObject *l = PyList_New(n);
    if (l != NULL && n > 0)
        huge_hint(&PyList_GET_ITEM(l, 0), (size_t)n * sizeof(PyObject *));
    return l;
}

/* A result column of n entries of size bytes as new_bytes (the caller reads it through a
 * memoryview cast): *out, and its buffer; NULL with an exception set. */
static void *
bytes_column(PyObject **out, Py_ssize_t n, size_t size)
{
    *out = new_bytes(n * (Py_ssize_t)size);
    return *out ? PyBytes_AS_STRING(*out) : NULL;
}

/* Scratch arrays.  Each function registers every C array it allocates in its scratch_t and
 * frees them all with one scratch_free on its way out, whichever way it leaves. */
#define MAX_SCRATCH 48

typedef struct {
    void *block[MAX_SCRATCH];
    size_t mapped[MAX_SCRATCH]; /* a block's mapped bytes when it is its own mapping (map_big), else 0 */
    int count;
} scratch_t;

#define SCRATCH_INIT {{NULL}, {0}, 0}

/* Not under AddressSanitizer, which sees overruns in malloc's blocks, not in mappings. */
#if defined(__linux__) && defined(MAP_ANONYMOUS) && !defined(__SANITIZE_ADDRESS__)
#define MAP_BIG 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#undef MAP_BIG
#endif
#endif

/* A big scratch array is a mapping of its own (zero, 2 MiB-aligned, hinted for huge pages),
 * so that dropping it gives its memory back at once: a big block from malloc's heap (where
 * glibc puts blocks up to 32 MiB once it has freed one that size) stays resident after it
 * is freed until the heap's top is trimmed, and the phases after it would pay for it.  The
 * mapping's bytes from the array on go to *mapped (its unused tail, under 2 MiB, is never
 * written, so it costs no memory).  NULL when the platform has no such mapping or the
 * system refuses one (then malloc's). */
static void *
map_big(size_t len, size_t *mapped)
{
#ifdef MAP_BIG
    size_t page = (size_t)HUGE_PAGE, total = len + page;
    char *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)m + page - 1) & ~(uintptr_t)(page - 1));
    size_t head = (size_t)(a - m); /* whole pages: m is page-aligned, a 2 MiB-aligned */
    if (head > 0)
        munmap(m, head);
    *mapped = total - head;
    huge_hint(a, len);
    return a;
#else
    (void)len;
    (void)mapped;
    return NULL;
#endif
}

static void
block_free(void *p, size_t mapped)
{
#ifdef MAP_BIG
    if (mapped) {
        munmap(p, mapped);
        return;
    }
#endif
    PyMem_Free(p);
}

/* An array for n elements of size bytes (one more, so that n = 0 allocates too), zeroed when
 * zero is set; NULL with an exception set. */
static void *
scratch_array(scratch_t *sc, Py_ssize_t n, size_t size, int zero)
{
    if (sc->count == MAX_SCRATCH) {
        PyErr_SetString(PyExc_SystemError, "_kernel: more than MAX_SCRATCH arrays");
        return NULL;
    }
    size_t len = size * ((size_t)n + 1), mapped = 0;
    void *p = len >= HUGE_HINT_AT ? map_big(len, &mapped) : NULL; /* zero, as a mapping is */
    sc->mapped[sc->count] = p != NULL ? mapped : 0;
    if (p == NULL)
        p = zero ? PyMem_Calloc((size_t)n + 1, size) : PyMem_Malloc(len);
    if (p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    sc->block[sc->count++] = p;
    return p;
}

static void
scratch_free(scratch_t *sc)
{
    while (sc->count > 0) {
        sc->count--;
        block_free(sc->block[sc->count], sc->mapped[sc->count]);
    }
}

/* keep_freed_memory() -> bool: glibc's malloc told to keep the blocks it frees for the next
 * ones (M_TRIM_THRESHOLD: never give the top of the heap back; M_MMAP_THRESHOLD: blocks up
 * to 32 MiB, glibc's largest, from the heap, the threshold fixed there instead of moving).
 * A check or a lowering of a million actions makes and drops result columns of tens of
 * megabytes one after another (a run's times, then the next run's); by default glibc hands
 * each back to the system as it is freed and maps the next one fresh, and a fresh page is
 * a fault and a clearing by the system, where a kept one is only written again (`perf` of
 * `schedverify lower` at a million compute actions: a fifth of its samples in clearing
 * pages, a tenth with the blocks kept).  The peak stays what it was, within a few percent:
 * what is kept is what the process held a moment before.  The big scratch arrays keep
 * their own mappings (map_big), given back when dropped, so that a phase's scratch is never
 * held through the next.  For a process that is ours
 * only (the command line calls it first): a library must not change its host's allocator.
 * False where there is no glibc, or it refuses (an allocator that replaces it, as a
 * sanitizer's does), and then nothing changed. */
static PyObject *
k_keep_freed_memory(PyObject *self, PyObject *noargs)
{
#if defined(__GLIBC__) && defined(M_TRIM_THRESHOLD) && defined(M_MMAP_THRESHOLD)
    int ok = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
    ok = ok && mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
    return PyBool_FromLong(ok);
#else
    Py_RETURN_FALSE;
#endif
}

/* Free one of sc's arrays now (a phase's own scratch, once the phase is over), so that the
 * phases after it do not hold it too; NULL is nothing. */
static void
scratch_drop(scratch_t *sc, void *p)
{
    for (int k = sc->count - 1; p != NULL && k >= 0; k--)
        if (sc->block[k] == p) {
            block_free(p, sc->mapped[k]);
            sc->count--;
            sc->block[k] = sc->block[sc->count];
            sc->mapped[k] = sc->mapped[sc->count];
            return;
        }
}

/* What a function returns from its not_plain label: None (declined), or NULL when an
 * exception is set. */
static PyObject *
declined(void)
{
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

/* A sequence of Python ints (indices) as a new scratch array; NULL with TypeError/ValueError
 * set when an element is not an int or does not fit in a long long. */
static long long *buffer_index_array(scratch_t *sc, PyObject *seq, Py_ssize_t *len, const char *what);

static long long *
index_array(scratch_t *sc, PyObject *seq, Py_ssize_t *len, const char *what)
{
    if (PyObject_CheckBuffer(seq)) /* an array.array column of a Graph */
        return buffer_index_array(sc, seq, len, what);
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    long long *out = scratch_array(sc, n, sizeof(long long), 0);
    if (out == NULL) {
        Py_DECREF(fast);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        int ok = 1;
        out[i] = exact_int(items[i], &ok);
        if (!ok) {
            PyErr_Format(PyLong_CheckExact(items[i]) ? PyExc_ValueError : PyExc_TypeError,
                         "%s: element %zd is not an int of at most 63 bits", what, i);
            Py_DECREF(fast);
            return NULL; /* out is freed with the scratch */
        }
    }
    Py_DECREF(fast);
    *len = n;
    return out;
}

/* A column of ints read where it lies: a buffer of signed ints (a Graph's array.array
 * column) is viewed, not copied, since a million-action column copied is megabytes the
 * machine must map and clear; any other sequence (a list) is copied by index_array.
 * int_at(c, i) for 0 <= i < the length read; release_ints when done. */
typedef struct {
    Py_buffer view; /* view.obj is NULL when the column was copied */
    const long long *q; /* the items, when they are aligned long longs (a 'q' array, a copy) */
    const int *i4;      /* the items, when they are aligned ints (an 'i' array: a compiled Graph's) */
    const signed char *i1; /* the items, when they are signed chars (a 'b' array: a Graph's codes) */
    char kind;
} ints_t;

static int
read_ints(scratch_t *sc, PyObject *seq, ints_t *out, Py_ssize_t *len, const char *what)
{
    out->view.obj = NULL;
    out->q = NULL;
    out->i4 = NULL;
    out->i1 = NULL;
    if (!PyObject_CheckBuffer(seq)) {
        out->q = index_array(sc, seq, len, what);
        return out->q != NULL;
    }
    if (PyObject_GetBuffer(seq, &out->view, PyBUF_FORMAT | PyBUF_ND) < 0)
        return 0;
    const char *f = out->view.format ? out->view.format : "B";
    if (*f == '@')
        f++;
    char kind = f[0];
    size_t size = (size_t)out->view.itemsize;
    if (!(f[0] != '\0' && f[1] == '\0' && out->view.ndim == 1 &&
          ((kind == 'b' && size == 1) || (kind == 'h' && size == sizeof(short)) ||
           (kind == 'i' && size == sizeof(int)) || (kind == 'l' && size == sizeof(long)) ||
           (kind == 'q' && size == sizeof(long long))))) {
        PyBuffer_Release(&out->view);
        out->view.obj = NULL;
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of ints or an array of signed ints", what);
        return 0;
    }
    out->kind = kind;
    if (kind == 'q' && (uintptr_t)out->view.buf % sizeof(long long) == 0)
        out->q = (const long long *)out->view.buf;
    if (kind == 'i' && (uintptr_t)out->view.buf % sizeof(int) == 0)
        out->i4 = (const int *)out->view.buf;
    if (kind == 'b')
        out->i1 = (const signed char *)out->view.buf;
    *len = out->view.len / out->view.itemsize;
    return 1;
}

/* int_at is read in every sweep's inner loop: inlined, its branches on the column's kind are
 * the same at every step and cost nothing once predicted (a call per read was 8% of a check) */
#if defined(__GNUC__) || defined(__clang__)
#define HOT_INLINE inline __attribute__((always_inline))
#else
#define HOT_INLINE inline
#endif

static HOT_INLINE long long
int_at(const ints_t *c, Py_ssize_t i)
{
    if (c->q != NULL)
        return c->q[i];
    if (c->i4 != NULL)
        return c->i4[i];
    if (c->i1 != NULL)
        return c->i1[i];
    const char *b = (const char *)c->view.buf;
    switch (c->kind) { /* memcpy: the buffer need not be aligned for the type */
    case 'b': { signed char v; memcpy(&v, b + i, 1); return v; }
    case 'h': { short v; memcpy(&v, b + i * sizeof v, sizeof v); return v; }
    case 'i': { int v; memcpy(&v, b + i * sizeof v, sizeof v); return v; }
    case 'l': { long v; memcpy(&v, b + i * sizeof v, sizeof v); return v; }
    default: { long long v; memcpy(&v, b + i * sizeof v, sizeof v); return v; }
    }
}

static void
release_ints(ints_t *c)
{
    if (c->view.obj != NULL)
        PyBuffer_Release(&c->view);
}

/* The integers of a one-dimensional buffer of signed integers (an array.array of typecode
 * b, h, i, l or q) as a new scratch array; TypeError for any other buffer (bytes, floats,
 * unsigned or multi-dimensional ones). */
static long long *
buffer_index_array(scratch_t *sc, PyObject *seq, Py_ssize_t *len, const char *what)
{
    ints_t c;
    Py_ssize_t n = 0;
    if (!read_ints(sc, seq, &c, &n, what))
        return NULL;
    long long *out = scratch_array(sc, n, sizeof(long long), 0);
    if (out != NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = int_at(&c, i);
        *len = n;
    }
    release_ints(&c);
    return out;
}

/* array.array (a new reference), or NULL with an exception set. */
static PyObject *
array_type(void)
{
    PyObject *mod = PyImport_ImportModule("array");
    if (mod == NULL)
        return NULL;
    PyObject *type = PyObject_GetAttrString(mod, "array");
    Py_DECREF(mod);
    return type;
}

/* A column the kernel fills where it lies: a new array.array of typecode ``code`` with n
 * zero items, held with its writable buffer, instead of scratch memory filled and then
 * copied into an array (a million-action column is megabytes the machine must map and
 * clear either way).  column_new returns the items (NULL with an exception set);
 * column_take releases the buffer and hands over the array; column_free drops what is
 * still held.  No Python code runs while the kernel writes, so nothing resizes the array
 * under it. */
typedef struct {
    PyObject *array;
    Py_buffer view;
} column_t;

static void *
column_new(column_t *c, const char *code, Py_ssize_t n)
{
    PyObject *type = array_type();
    PyObject *one = type ? PyObject_CallFunction(type, "s(i)", code, 0) : NULL;
    c->array = one ? PySequence_Repeat(one, n) : NULL;
    Py_XDECREF(type);
    Py_XDECREF(one);
    if (c->array != NULL && PyObject_GetBuffer(c->array, &c->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        Py_CLEAR(c->array);
    return c->array ? c->view.buf : NULL;
}

static PyObject *
column_take(column_t *c)
{
    PyObject *out = c->array;
    if (out != NULL)
        PyBuffer_Release(&c->view);
    c->array = NULL;
    return out;
}

static void
column_free(column_t *c)
{
    Py_XDECREF(column_take(c));
}

/* ``starts`` (D + 1 entries) cuts the n actions into the devices' ranges: starts[0] = 0,
 * non-decreasing, starts[D] = n, and D fits the kernel's int32 device numbers.  Otherwise
 * ValueError and 0. */
static int
valid_starts(const long long *starts, Py_ssize_t D1, Py_ssize_t n, const char *what)
{
    if (D1 < 1 || D1 - 1 >= INT32_MAX || starts[0] != 0 || starts[D1 - 1] != n) {
        PyErr_Format(PyExc_ValueError, "%s: starts must run from 0 to the number of actions", what);
        return 0;
    }
    for (Py_ssize_t d = 0; d + 1 < D1; d++)
        if (starts[d + 1] < starts[d]) {
            PyErr_Format(PyExc_ValueError, "%s: starts must not decrease", what);
            return 0;
        }
    return 1;
}

/* Numbers.  Python computes with ints exactly and with floats in IEEE double arithmetic, and
 * mixes them by converting the int to a double (correctly rounded) for + and -, but compares
 * an int with a float exactly.  The kernel reads an exact int of magnitude at most
 * EXACT_INT_MAX = 2^53 (every such int is a double, so the conversion is exact and a double
 * comparison is Python's exact one) or a float, remembering which it was; anything else (a
 * bool, a Fraction, a bigger int) makes the function decline.  Each function then keeps its
 * own int results within reach of doubles (its comment says how) and writes each result back
 * as the type Python's code would give it. */
#define EXACT_INT_MAX (1LL << 53)

static int
read_number(PyObject *o, double *out, unsigned char *is_float)
{
    if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        *is_float = 1;
        return 1;
    }
    if (PyLong_CheckExact(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || v > EXACT_INT_MAX || v < -EXACT_INT_MAX)
            return 0;
        *out = (double)v;
        *is_float = 0;
        return 1;
    }
    return 0;
}

/* read_number for a column of numbers that are mostly the same few objects (a duration per
 * action is one of the costs' few numbers): the last NUMBER_CACHE objects read and their
 * values, so that each object is read once rather than once per action.  A number object is
 * immutable, and it is used only in a phase that runs no Python code (see "Ownership"), while
 * the list that holds it cannot change: a pointer seen stays the same number. */
#define NUMBER_CACHE 8
typedef struct {
    PyObject *obj[NUMBER_CACHE];
    double value[NUMBER_CACHE];
    unsigned char is_float[NUMBER_CACHE];
    int next;
} number_cache_t;

static inline int
read_number_cached(number_cache_t *c, PyObject *o, double *out, unsigned char *is_float)
{
    for (int k = 0; k < NUMBER_CACHE; k++)
        if (c->obj[k] == o) {
            *out = c->value[k];
            *is_float = c->is_float[k];
            return 1;
        }
    if (!read_number(o, out, is_float))
        return 0;
    c->obj[c->next] = o;
    c->value[c->next] = *out;
    c->is_float[c->next] = *is_float;
    c->next = (c->next + 1) % NUMBER_CACHE;
    return 1;
}

/* A number as Python's code would hold it: an int (exact, in i) or a float (in f). */
typedef struct {
    double f;
    long long i;
    unsigned char is_float;
} num_t;

static int
read_num(PyObject *o, num_t *x)
{
    if (!read_number(o, &x->f, &x->is_float))
        return 0;
    x->i = x->is_float ? 0 : (long long)x->f;
    return 1;
}

static double
num_double(num_t x)
{
    return x.is_float ? x.f : (double)x.i;
}

/* Python's a + b (sign 1) or a - b (sign -1).  Ints stay exact: the callers add at most
 * three numbers each of magnitude at most 2^53, far from long long's 2^63; an int meeting a
 * float is converted as Python converts it (correctly rounded to nearest, ties to even: what
 * C's conversion does in the default rounding mode). */
static num_t
num_add(num_t a, num_t b, int sign)
{
    num_t r = {0, 0, 0};
    if (!a.is_float && !b.is_float) {
        r.i = sign > 0 ? a.i + b.i : a.i - b.i;
    } else {
        r.is_float = 1;
        r.f = sign > 0 ? num_double(a) + num_double(b) : num_double(a) - num_double(b);
    }
    return r;
}

/* Python's abs(v) <= tol, tol a float: exact for an int v, as Python compares them. */
static int
num_within(num_t v, double tol)
{
    if (v.is_float)
        return fabs(v.f) <= tol;
    long long a = v.i < 0 ? -v.i : v.i; /* |v.i| < 2^55: no overflow */
    if (isnan(tol) || tol < 0)
        return 0;
    if (tol >= 0x1p62)
        return 1;
    return a <= (long long)floor(tol); /* for an integer a: a <= tol iff a <= floor(tol) */
}

/* A new list of the ints v[0..n), for each integer type the kernel keeps columns in. */
#define DEFINE_LIST_OF(name, type)                            \
    static PyObject *name(const type *v, Py_ssize_t n)        \
    {                                                         \
        PyObject *out = new_list(n);                        \
        if (out == NULL)                                      \
            return NULL;                                      \
        for (Py_ssize_t i = 0; i < n; i++) {                  \
            PyObject *x = PyLong_FromLongLong((long long)v[i]); \
            if (x == NULL) {                                  \
                Py_DECREF(out);                               \
                return NULL;                                  \
            }                                                 \
            PyList_SET_ITEM(out, i, x);                       \
        }                                                     \
        return out;                                           \
    }
DEFINE_LIST_OF(list_of_ints, long long)

/* the kernel hands int32_t columns to Python as typecode 'i' */
typedef char int_is_int32[sizeof(int) == sizeof(int32_t) ? 1 : -1];

/* ------------------------------------------------------------------ parse_row */

/* Ownership.  A caller's list can change whenever Python code runs, and Python code can run
 * at any allocation of a Python object (the cyclic collector runs then, and with it
 * gc.callbacks and finalizers), at any call into an object (an iterator, __index__, a
 * buffer's exporter) and at an import.  So every function here reads what it is given in
 * phases: first whatever can run Python code (conversions, iterators, its own result
 * objects), then every item it reads from a caller's container, into C arrays or strong
 * references of its own, in a phase that neither allocates an object nor calls anything;
 * and then no item of the caller's is read again.  Tuples, str and bytes cannot change, and
 * a buffer view pins its storage (the exporter cannot resize or free it while it is viewed):
 * those are read where they lie, each value checked where it is read.
 * tests/test_kernel.py's table of bad arguments holds the hostile cases (an iterator that
 * empties a table, a gc.callbacks hook that clears a list, an __index__ that raises). */

static PyObject *
k_parse_row(PyObject *self, PyObject *args)
{
    PyObject *cells, *kinds, *out = NULL;
    PyTypeObject *type;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &cells, &PyType_Type, &type,
                          &PyTuple_Type, &kinds))
        return NULL;
    kinds_t kt;
    if (!action_layout(type, "parse_row") || !read_kinds(kinds, &kt, "parse_row"))
        return NULL;
    /* every cell is read into C arrays (raw memory: allocating it runs no Python code)
     * before the first Action is made */
    Py_ssize_t n = PyList_GET_SIZE(cells);
    scratch_t sc = SCRATCH_INIT;
    signed char *code = scratch_array(&sc, n, 1, 0);
    long long *stage = code ? scratch_array(&sc, n, sizeof(long long), 0) : NULL;
    long long *mb = stage ? scratch_array(&sc, n, sizeof(long long), 0) : NULL;
    if (mb == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *cell = PyList_GET_ITEM(cells, i);
        if (!PyUnicode_Check(cell) || !PyUnicode_IS_ASCII(cell))
            goto not_plain;
        int c = parse_cell((const char *)PyUnicode_1BYTE_DATA(cell), PyUnicode_GET_LENGTH(cell),
                           kt.text, kt.len, kt.count, NULL, &stage[i], &mb[i]);
        if (c < 0)
            goto not_plain;
        code[i] = (signed char)c;
    }
    out = new_list(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *a = plain_action(type, stage[i], PyTuple_GET_ITEM(kinds, code[i]), mb[i]);
        if (a == NULL)
            Py_CLEAR(out); /* the unset slots are NULL, which list dealloc skips */
        else
            PyList_SET_ITEM(out, i, a);
    }
    goto done;
not_plain:
    out = declined();
done:
    scratch_free(&sc);
    return out;
}

/* ------------------------------------------------------------------ parse_rows, rows_of */

/* parse_rows(rows, kinds) -> (codes, stages, mbs, lengths, top_stage, top_mb) | None
 *
 * Every cell of every row (a list of lists of str) read as parse_row reads one, into the
 * columns of grammar.PlainRows: ``codes`` (bytes, one per action: its kind's index in
 * ``kinds``), ``stages`` and ``mbs`` (bytes of native int64, one per action), ``lengths``
 * (a tuple: the actions of each row), and the largest stage and microbatch (-1 when there is no
 * action).  No Action is built: the schedule makes them when its
 * order is first read (model.Schedule).  None when any cell is not plain; the caller then
 * parses row by row, and parse_action says what is wrong. */
static PyObject *
k_parse_rows(PyObject *self, PyObject *args)
{
    PyObject *rows, *kinds;
    kinds_t kt;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &rows, &PyTuple_Type, &kinds) ||
        !read_kinds(kinds, &kt, "parse_rows"))
        return NULL;
    /* (1) the sizes; (2) the result objects, made before any cell is read (making them may
     * run Python code, which may change the lists); (3) every row and cell read afresh, into
     * those objects, with nothing made or called meanwhile; (4) the lengths. */
    Py_ssize_t D = PyList_GET_SIZE(rows), n = 0;
    for (Py_ssize_t d = 0; d < D; d++) {
        PyObject *row = PyList_GET_ITEM(rows, d);
        if (!PyList_Check(row))
            Py_RETURN_NONE;
        n += PyList_GET_SIZE(row); /* each list is in memory: the sum fits */
    }
    if (n > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(pr_t))
        Py_RETURN_NONE;
    scratch_t sc = SCRATCH_INIT;
    Py_ssize_t *len = scratch_array(&sc, D, sizeof(Py_ssize_t), 0);
    PyObject *codes = len ? new_bytes(n) : NULL;
    PyObject *stages = codes ? new_bytes(n * (Py_ssize_t)sizeof(pr_t)) : NULL;
    PyObject *mbs = stages ? new_bytes(n * (Py_ssize_t)sizeof(pr_t)) : NULL;
    PyObject *lengths = NULL, *result = NULL;
    if (mbs == NULL)
        goto done;
    char *code_out = PyBytes_AS_STRING(codes);
    pr_t *stage_out = (pr_t *)PyBytes_AS_STRING(stages);
    pr_t *mb_out = (pr_t *)PyBytes_AS_STRING(mbs);
    Py_ssize_t i = 0;
    long long top_stage = -1, top_mb = -1;
    if (PyList_GET_SIZE(rows) != D) /* changed while the objects were made: not a case */
        goto not_plain;
    for (Py_ssize_t d = 0; d < D; d++) {
        PyObject *row = PyList_GET_ITEM(rows, d);
        if (!PyList_Check(row) || PyList_GET_SIZE(row) > n - i)
            goto not_plain;
        len[d] = PyList_GET_SIZE(row);
        for (Py_ssize_t p = 0; p < len[d]; p++, i++) {
            PyObject *cell = PyList_GET_ITEM(row, p);
            if (!PyUnicode_Check(cell) || !PyUnicode_IS_ASCII(cell))
                goto not_plain;
            long long st, mb;
            int c = parse_cell((const char *)PyUnicode_1BYTE_DATA(cell), PyUnicode_GET_LENGTH(cell),
                               kt.text, kt.len, kt.count, NULL, &st, &mb);
            if (c < 0 || !PR_FITS(st) || !PR_FITS(mb))
                goto not_plain;
            code_out[i] = (char)c;
            stage_out[i] = (pr_t)st;
            mb_out[i] = (pr_t)mb;
            if (stage_out[i] > top_stage)
                top_stage = stage_out[i];
            if (mb_out[i] > top_mb)
                top_mb = mb_out[i];
        }
    }
    if (i != n)
        goto not_plain;
    /* nothing of the caller's is read from here on */
    if ((lengths = PyTuple_New(D)) == NULL)
        goto done;
    for (Py_ssize_t d = 0; d < D; d++) {
        PyObject *l = PyLong_FromSsize_t(len[d]);
        if (l == NULL)
            goto done;
        PyTuple_SET_ITEM(lengths, d, l);
    }
    result = Py_BuildValue("(OOOOLL)", codes, stages, mbs, lengths, top_stage, top_mb);
    goto done;
not_plain:
    result = declined();
done:
    Py_XDECREF(codes);
    Py_XDECREF(stages);
    Py_XDECREF(mbs);
    Py_XDECREF(lengths);
    scratch_free(&sc);
    return result;
}

/* ------------------------------------------------------------------ scan_order */

/* scan_order(text, pos, kinds) -> (codes, stages, mbs, lengths, top_stage, top_mb, end) | None
 *
 * The JSON value that starts at text[pos] (after any whitespace), read straight into
 * parse_rows' columns when it is an array of arrays of plain action strings: what
 * parse_rows(json.loads(value)) gives, without a str or a list per action.  ``end`` is the
 * index just past the value's closing bracket.  Only a strict subset of JSON is taken: JSON
 * whitespace (space, tab, newline, carriage return) between tokens, and strings of plain
 * action text without an escape, whose content is therefore the str json.loads would make of
 * it.  Anything else (an escape, a number, a nested object, a cell that is not plain, a
 * syntax error) declines, and the caller reads the value with json and parse_rows, which give
 * the same columns or say what is wrong.
 *
 * Memory.  Every cell is a string, two quote characters, so the text from pos on has at most
 * (its quotes) / 2 cells: the columns are allocated for that many (one fast count), every write
 * is checked against it, and they are cut to the cells read at the end. */
typedef struct {
    kinds_t *kt;
    Py_ssize_t n, cap;
    char *codes;
    pr_t *stages, *mbs;
    long long top_stage, top_mb;
    PyObject *lengths; /* a list: each row's number of cells */
} scan_t;

/* One cell's columns: 1, or 0 to decline (more cells than the columns hold: not a text
 * whose quotes were counted; an index beyond the columns' int32). */
static inline int
scan_cell(scan_t *sc, int code, long long st, long long mb)
{
    if (sc->n >= sc->cap || !PR_FITS(st) || !PR_FITS(mb))
        return 0;
    sc->codes[sc->n] = (char)code;
    sc->stages[sc->n] = (pr_t)st;
    sc->mbs[sc->n] = (pr_t)mb;
    if (st > sc->top_stage)
        sc->top_stage = st;
    if (mb > sc->top_mb)
        sc->top_mb = mb;
    sc->n++;
    return 1;
}

/* The pass over text[*pos..len), a str's characters of type CHAR: 1 when the value has the
 * accepted shape (then *pos is just past it), 0 to decline, -1 with an exception set.  Every
 * read is of text[p] with p < len: AT() is 0 at the end, which no branch takes for a
 * character it accepts.  A cell is read as parse_cell reads its text, in the same pass that
 * finds its closing quote: digits (as read_index reads them), then the kind (the characters up to the
 * next digit: printable ASCII, no backslash, no longer than the longest kind), then digits,
 * then the quote.  Anything else in a cell (an escape, a control or non-ASCII character, the
 * end of the text) declines. */
#define DEFINE_SCAN_PASS(name, CHAR)                                                       \
    static int name(const CHAR *text, Py_ssize_t len, Py_ssize_t *pos, scan_t *sc)         \
    {                                                                                      \
        Py_ssize_t p = *pos;                                                               \
        char kind[MAX_KIND_LEN];                                                           \
        SKIP_SPACE();                                                                      \
        if (AT() != '[')                                                                   \
            return 0;                                                                      \
        p++;                                                                               \
        SKIP_SPACE();                                                                      \
        if (AT() == ']') {                                                                 \
            *pos = p + 1;                                                                  \
            return 1;                                                                      \
        }                                                                                  \
        for (;;) { /* a row */                                                             \
            SKIP_SPACE();                                                                  \
            if (AT() != '[')                                                               \
                return 0;                                                                  \
            p++;                                                                           \
            SKIP_SPACE();                                                                  \
            Py_ssize_t first = sc->n;                                                      \
            if (AT() == ']') {                                                             \
                p++;                                                                       \
            } else {                                                                       \
                for (;;) { /* a cell */                                                    \
                    if (AT() != '"')                                                       \
                        return 0;                                                          \
                    p++;                                                                   \
                    long long st = 0, mb = 0;                                              \
                    Py_ssize_t at = p;                                                     \
                    int significant = 0, k = 0;                                            \
                    Py_UCS4 c;                                                             \
                    while (AT() == '0') /* leading zeros: read_index skips them too */     \
                        p++;                                                               \
                    for (; (c = AT()) >= '0' && c <= '9'; p++) {                           \
                        if (significant++ == MAX_DIGITS)                                   \
                            return 0;                                                      \
                        st = st * 10 + (long long)(c - '0');                               \
                    }                                                                      \
                    if (p == at)                                                           \
                        return 0;                                                          \
                    for (; (c = AT()) != '"' && !(c >= '0' && c <= '9'); p++) {            \
                        if (c < 0x21 || c > 0x7e || c == '\\' || k == sc->kt->longest)     \
                            return 0;                                                      \
                        kind[k++] = (char)c;                                               \
                    }                                                                      \
                    at = p;                                                                \
                    while (AT() == '0')                                                    \
                        p++;                                                               \
                    for (significant = 0; (c = AT()) >= '0' && c <= '9'; p++) {            \
                        if (significant++ == MAX_DIGITS)                                   \
                            return 0;                                                      \
                        mb = mb * 10 + (long long)(c - '0');                               \
                    }                                                                      \
                    if (p == at || c != '"')                                               \
                        return 0;                                                          \
                    p++;                                                                   \
                    int code = kind_index(sc->kt->text, sc->kt->len, sc->kt->count, kind, k); \
                    if (code < 0 || !scan_cell(sc, code, st, mb))                          \
                        return 0;                                                          \
                    SKIP_SPACE();                                                          \
                    if (AT() == ']') {                                                     \
                        p++;                                                               \
                        break;                                                             \
                    }                                                                      \
                    if (AT() != ',')                                                       \
                        return 0;                                                          \
                    p++;                                                                   \
                    SKIP_SPACE();                                                          \
                }                                                                          \
            }                                                                              \
            PyObject *l = PyLong_FromSsize_t(sc->n - first);                               \
            if (l == NULL || PyList_Append(sc->lengths, l) < 0) {                          \
                Py_XDECREF(l);                                                             \
                return -1;                                                                 \
            }                                                                              \
            Py_DECREF(l);                                                                  \
            SKIP_SPACE();                                                                  \
            if (AT() == ']') {                                                             \
                *pos = p + 1;                                                              \
                return 1;                                                                  \
            }                                                                              \
            if (AT() != ',')                                                               \
                return 0;                                                                  \
            p++;                                                                           \
        }                                                                                  \
    }
#define AT() (p < len ? (Py_UCS4)text[p] : 0)
#define SKIP_SPACE()                                                    \
    while (AT() == ' ' || AT() == '\t' || AT() == '\n' || AT() == '\r') \
    p++
DEFINE_SCAN_PASS(scan_pass_1, Py_UCS1)
DEFINE_SCAN_PASS(scan_pass_2, Py_UCS2)
DEFINE_SCAN_PASS(scan_pass_4, Py_UCS4)
#undef AT
#undef SKIP_SPACE

static PyObject *
k_scan_order(PyObject *self, PyObject *args)
{
    PyObject *text, *kinds, *quote = NULL, *codes = NULL, *stages = NULL, *mbs = NULL, *result = NULL;
    Py_ssize_t pos;
    kinds_t kt;
    if (!PyArg_ParseTuple(args, "UnO!", &text, &pos, &PyTuple_Type, &kinds) ||
        !read_kinds(kinds, &kt, "scan_order"))
        return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(text);
    if (pos < 0 || pos > len) {
        PyErr_SetString(PyExc_ValueError, "scan_order: pos is outside the text");
        return NULL;
    }
    scan_t sc = {&kt, 0, 0, NULL, NULL, NULL, -1, -1, PyList_New(0)};
    if (sc.lengths == NULL || (quote = PyUnicode_FromString("\"")) == NULL)
        goto done;
    sc.cap = PyUnicode_Count(text, quote, pos, len) / 2;
    if (sc.cap < 0)
        goto done;
    if (sc.cap > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(pr_t))
        goto not_plain;
    codes = new_bytes(sc.cap);
    stages = new_bytes(sc.cap * (Py_ssize_t)sizeof(pr_t));
    mbs = new_bytes(sc.cap * (Py_ssize_t)sizeof(pr_t));
    if (!codes || !stages || !mbs)
        goto done;
    sc.codes = PyBytes_AS_STRING(codes);
    sc.stages = (pr_t *)PyBytes_AS_STRING(stages);
    sc.mbs = (pr_t *)PyBytes_AS_STRING(mbs);
    int ok;
    switch (PyUnicode_KIND(text)) {
    case PyUnicode_1BYTE_KIND:
        ok = scan_pass_1(PyUnicode_1BYTE_DATA(text), len, &pos, &sc);
        break;
    case PyUnicode_2BYTE_KIND:
        ok = scan_pass_2(PyUnicode_2BYTE_DATA(text), len, &pos, &sc);
        break;
    default:
        ok = scan_pass_4(PyUnicode_4BYTE_DATA(text), len, &pos, &sc);
    }
    if (ok < 0)
        goto done;
    if (ok == 0)
        goto not_plain;
    if (_PyBytes_Resize(&codes, sc.n) < 0 || _PyBytes_Resize(&stages, sc.n * (Py_ssize_t)sizeof(pr_t)) < 0 ||
        _PyBytes_Resize(&mbs, sc.n * (Py_ssize_t)sizeof(pr_t)) < 0)
        goto done; /* _PyBytes_Resize freed the one it could not resize and set it to NULL */
    PyObject *lengths = PyList_AsTuple(sc.lengths);
    if (lengths != NULL) {
        result = Py_BuildValue("(OOOOLLn)", codes, stages, mbs, lengths, sc.top_stage, sc.top_mb, pos);
        Py_DECREF(lengths);
    }
    goto done;
not_plain:
    result = declined();
done:
    Py_XDECREF(quote);
    Py_XDECREF(codes);
    Py_XDECREF(stages);
    Py_XDECREF(mbs);
    Py_XDECREF(sc.lengths);
    return result;
}

/* ------------------------------------------------------------------ scan_csv */

/* scan_csv(text, kinds[, bare]) -> (codes, stages, mbs, lengths, top_stage, top_mb) | None
 *
 * A PyTorch schedule CSV (io/csvfmt.py) read straight into parse_rows' columns when every
 * cell is a plain action, or (``bare``: a flag per kind, 1 for one written without a
 * microbatch, whose microbatch is -1 in the columns) a bookkeeping one, as a compute+comms
 * CSV holds: what parse_rows of the rows csv.reader makes of the text (with
 * strict=True and newline="", as csvfmt._read_rows reads it), without a str or a list per
 * cell.  Only a strict subset of CSV is taken, one whose rows csv.reader cuts exactly where
 * this pass does: lines ended by "\n" or "\r\n" (the last one may lack it), cells cut at
 * every ",", each cell read by parse_cell (so no quote, no space to strip, no empty cell).
 * csv.reader makes [] of an empty line, and so does this pass: a row without actions.  Any
 * other byte (a lone "\r", a quote, a space, a character beyond Latin-1) is in some cell,
 * which parse_cell does not read: the pass declines and csvfmt reads the text with
 * csv.reader, which gives the same rows or says what is wrong.
 *
 * Memory.  Every cell but a row's last ends at a ",", every row at a line end: the text has
 * at most (commas) + (lines) cells, the columns are allocated for that many (counted in one
 * pass) and cut to the cells read at the end. */
static PyObject *
k_scan_csv(PyObject *self, PyObject *args)
{
    PyObject *text, *kinds, *bare_o = NULL, *codes = NULL, *stages = NULL, *mbs = NULL, *lengths = NULL,
             *result = NULL;
    kinds_t kt;
    if (!PyArg_ParseTuple(args, "UO!|S", &text, &PyTuple_Type, &kinds, &bare_o) || !read_kinds(kinds, &kt, "scan_csv"))
        return NULL;
    if (bare_o != NULL && PyBytes_GET_SIZE(bare_o) != kt.count) {
        PyErr_SetString(PyExc_ValueError, "scan_csv: one bare flag per kind");
        return NULL;
    }
    const unsigned char *bare = bare_o ? (const unsigned char *)PyBytes_AS_STRING(bare_o) : NULL;
    if (PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND)
        return declined(); /* a character beyond Latin-1: in a cell parse_cell does not read */
    const char *s = (const char *)PyUnicode_1BYTE_DATA(text);
    Py_ssize_t len = PyUnicode_GET_LENGTH(text), cap = 1, n = 0, p = 0;
    for (Py_ssize_t q = 0; q < len; q++)
        cap += s[q] == ',' || s[q] == '\n';
    if (cap > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(pr_t))
        return declined();
    long long top_stage = -1, top_mb = -1;
    if ((lengths = PyList_New(0)) == NULL)
        goto done;
    codes = new_bytes(cap);
    stages = new_bytes(cap * (Py_ssize_t)sizeof(pr_t));
    mbs = new_bytes(cap * (Py_ssize_t)sizeof(pr_t));
    if (!codes || !stages || !mbs)
        goto done;
    char *cd = PyBytes_AS_STRING(codes);
    pr_t *st = (pr_t *)PyBytes_AS_STRING(stages), *mb = (pr_t *)PyBytes_AS_STRING(mbs);
    while (p < len) { /* a line: s[p..end), then its terminator */
        const char *nl = memchr(s + p, '\n', (size_t)(len - p));
        Py_ssize_t end = nl == NULL ? len : nl - s, next = nl == NULL ? len : end + 1;
        if (end > p && s[end - 1] == '\r')
            end--; /* "\r\n": csv.reader's line end too */
        Py_ssize_t first = n;
        if (end > p) { /* an empty line is a row without cells, as csv.reader reads it */
            for (;;) { /* a cell: s[p..c) */
                const char *comma = memchr(s + p, ',', (size_t)(end - p));
                Py_ssize_t c = comma == NULL ? end : comma - s;
                if (n >= cap)
                    goto not_plain;
                long long cst, cmb;
                int code = parse_cell(s + p, c - p, kt.text, kt.len, kt.count, bare, &cst, &cmb);
                if (code < 0 || !PR_FITS(cst) || !PR_FITS(cmb))
                    goto not_plain;
                cd[n] = (char)code;
                st[n] = (pr_t)cst;
                mb[n] = (pr_t)cmb;
                if (st[n] > top_stage)
                    top_stage = st[n];
                if (mb[n] > top_mb)
                    top_mb = mb[n];
                n++;
                if (comma == NULL)
                    break;
                p = c + 1; /* after a ",", a cell (maybe empty: parse_cell declines it) */
            }
        }
        PyObject *l = PyLong_FromSsize_t(n - first);
        if (l == NULL || PyList_Append(lengths, l) < 0) {
            Py_XDECREF(l);
            goto done;
        }
        Py_DECREF(l);
        p = next;
    }
    if (_PyBytes_Resize(&codes, n) < 0 || _PyBytes_Resize(&stages, n * (Py_ssize_t)sizeof(pr_t)) < 0 ||
        _PyBytes_Resize(&mbs, n * (Py_ssize_t)sizeof(pr_t)) < 0)
        goto done; /* _PyBytes_Resize freed the one it could not resize and set it to NULL */
    PyObject *rows = PyList_AsTuple(lengths);
    if (rows != NULL) {
        result = Py_BuildValue("(OOOOLL)", codes, stages, mbs, rows, top_stage, top_mb);
        Py_DECREF(rows);
    }
    goto done;
not_plain:
    result = declined();
done:
    Py_XDECREF(codes);
    Py_XDECREF(stages);
    Py_XDECREF(mbs);
    Py_XDECREF(lengths);
    return result;
}

/* The columns of grammar.PlainRows, checked: n actions, codes below ncodes, one int32 stage
 * and microbatch each (pr_t, in native byte order, as parse_rows writes them), non-negative
 * lengths summing to n.  0 with ValueError/TypeError set otherwise. */
typedef struct {
    const unsigned char *code;
    const pr_t *stage, *mb;
    Py_ssize_t n, D;
    PyObject *lengths;
    PyObject *stages, *mbs; /* the bytes objects of stage and mb (borrowed) */
} columns_t;

static int
read_columns(PyObject *codes, PyObject *stages, PyObject *mbs, PyObject *lengths, int ncodes,
             columns_t *out, const char *what)
{
    if (!PyBytes_CheckExact(codes) || !PyBytes_CheckExact(stages) || !PyBytes_CheckExact(mbs) ||
        !PyTuple_CheckExact(lengths)) {
        PyErr_Format(PyExc_TypeError, "%s: the columns are three bytes and a tuple", what);
        return 0;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(codes);
    if (PyBytes_GET_SIZE(stages) != (Py_ssize_t)sizeof(pr_t) * n || PyBytes_GET_SIZE(mbs) != (Py_ssize_t)sizeof(pr_t) * n) {
        PyErr_Format(PyExc_ValueError, "%s: one int32 stage and microbatch per code", what);
        return 0;
    }
    Py_ssize_t total = 0, D = PyTuple_GET_SIZE(lengths);
    for (Py_ssize_t d = 0; d < D; d++) {
        int ok = 1;
        long long len = exact_int(PyTuple_GET_ITEM(lengths, d), &ok);
        if (!ok || len < 0 || len > n - total) {
            PyErr_Format(PyExc_ValueError, "%s: the lengths must be ints >= 0 summing to the codes", what);
            return 0;
        }
        total += (Py_ssize_t)len;
    }
    const unsigned char *code = (const unsigned char *)PyBytes_AS_STRING(codes);
    for (Py_ssize_t i = 0; ncodes < 256 && i < n; i++) /* 256: every byte is a code (the caller checks) */
        if (code[i] >= ncodes) {
            PyErr_Format(PyExc_ValueError, "%s: a code is not the index of a kind", what);
            return 0;
        }
    if (total != n) {
        PyErr_Format(PyExc_ValueError, "%s: the lengths must sum to the number of codes", what);
        return 0;
    }
    out->code = code;
    out->stage = (const pr_t *)PyBytes_AS_STRING(stages);
    out->mb = (const pr_t *)PyBytes_AS_STRING(mbs);
    out->n = n;
    out->D = D;
    out->lengths = lengths;
    out->stages = stages;
    out->mbs = mbs;
    return 1;
}

/* rows_of(codes, stages, mbs, lengths, action_type, kinds) -> tuple of tuples of Actions:
 * the rows the columns stand for (what parse_row gives for each row, as tuples). */
static PyObject *
k_rows_of(PyObject *self, PyObject *args)
{
    PyObject *codes, *stages, *mbs, *lengths, *kinds;
    PyTypeObject *type;
    if (!PyArg_ParseTuple(args, "OOOOO!O!", &codes, &stages, &mbs, &lengths, &PyType_Type, &type,
                          &PyTuple_Type, &kinds))
        return NULL;
    if (!action_layout(type, "rows_of"))
        return NULL;
    columns_t c;
    if (!read_columns(codes, stages, mbs, lengths, (int)PyTuple_GET_SIZE(kinds), &c, "rows_of"))
        return NULL;
    PyObject *out = PyTuple_New(c.D);
    if (out == NULL)
        return NULL;
    Py_ssize_t i = 0;
    for (Py_ssize_t d = 0; d < c.D; d++) {
        Py_ssize_t len = (Py_ssize_t)PyLong_AsSsize_t(PyTuple_GET_ITEM(c.lengths, d));
        PyObject *row = PyTuple_New(len);
        if (row == NULL)
            goto fail;
        PyTuple_SET_ITEM(out, d, row);
        for (Py_ssize_t p = 0; p < len; p++, i++) {
            PyObject *a = column_action(type, c.stage[i], PyTuple_GET_ITEM(kinds, c.code[i]), c.mb[i]);
            if (a == NULL)
                goto fail;
            PyTuple_SET_ITEM(row, p, a);
        }
    }
    return out;
fail:
    Py_DECREF(out); /* unset slots are NULL, which tuple dealloc skips */
    return NULL;
}

/* ------------------------------------------------------------------ lower_plain */

static int read_small_ints(PyObject *seq, Py_ssize_t len, long long lo, long long hi, int32_t outside,
                           int32_t *out);

/* lower_plain(codes, stages, mbs, lengths, S, M, rank_of, kinds, (dict_order, reduce_wait, wait_send))
 *     -> (codes, stages, mbs, lengths, top_stage, top_mb) | None
 *
 * The twin of lowering.torch_lowering without defer_pp_recv and with the default options,
 * over a compute-only schedule's columns (grammar.PlainRows): every action F, B, I or W with
 * its stage below S and its microbatch below M.  For PyTorch 2.13 and 2.14 (the dialect all
 * 0) the passes ``unshard_reshard``, ``reduce_grad``, ``send_recv``: lowering.add_unshard_reshard
 * with three stages resident in a set, add_reduce_grad without waits, add_send_recv; for 2.15
 * (all 1, dialect_t) ``unshard_reshard_lookahead`` (three resident, a dict), ``reduce_grad_wait``,
 * ``send_recv``, ``wait_send`` (add_wait_send), whose ``validate_send_waits`` holds by
 * construction (each send gets one wait after it) and whose ``send_budget`` is off by
 * default.  ``rank_of`` is the route, S ints in [0, D); ``kinds`` is grammar.COLUMN_KINDS
 * (CODED_KINDS, then UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD, WAIT_SEND_F, WAIT_SEND_B:
 * codes 8 to 13).  Declined (None): any other code or an index out of range, a rank without
 * actions, a compute order that makes no progress or a send listed twice (lowering.py raises
 * PyTorch's message), with 2.15 a compute action on a rank its stage is not routed to (the
 * waits are placed as the rows are written, which needs a stage's sends and backwards on one
 * row), and tables too large for the action count.  The rows, as columns in
 * the codes of ``kinds`` (a bookkeeping action's microbatch -1), are what the Python passes
 * give, action for action (tests/test_kernel.py holds them equal).
 *
 * The resident stages live in a real Python set of the stage ints, added to and discarded
 * from in PyTorch's sequence, so that RESHARD comes out in CPython's set order, as in
 * PyTorch (_add_unshard_reshard iterates its set) and in lowering.py, on any CPython.  With
 * plain actions the stages PyTorch's next_stage_indices finds from action i are the first
 * three distinct stages from i on, in order of first appearance: one backward pass. */
#define LOWER_RESIDENT 3
#define LK_UNSHARD 8
#define LK_RESHARD 9
#define LK_REDUCE 10
#define LK_WAIT_REDUCE 11
#define LK_WAIT_SEND_F 12 /* WAIT_SEND_B is one more */
#define LK_KINDS 14

/* A lowered row being built: code, stage and microbatch per entry, the stage and the
 * microbatch of the columns' own type (pr_t: every index a lowering writes is one the
 * columns read, or one more or less, or -1), 9 bytes an entry. */
typedef struct {
    signed char *code;
    pr_t *st, *mb;
    Py_ssize_t n, cap;
} lvec_t;

static int
lvec_push(lvec_t *v, int code, long long st, long long mb)
{
    if (v->n == v->cap) {
        Py_ssize_t cap = v->cap < 16 ? 16 : v->cap * 2;
        signed char *c = PyMem_Realloc(v->code, (size_t)cap);
        if (c == NULL)
            return 0;
        v->code = c;
        pr_t *s = PyMem_Realloc(v->st, (size_t)cap * sizeof(pr_t));
        if (s == NULL)
            return 0;
        v->st = s;
        pr_t *m = PyMem_Realloc(v->mb, (size_t)cap * sizeof(pr_t));
        if (m == NULL)
            return 0;
        v->mb = m;
        v->cap = cap;
    }
    v->code[v->n] = (signed char)code;
    v->st[v->n] = (pr_t)st;
    v->mb[v->n] = (pr_t)mb;
    v->n++;
    return 1;
}

/* Room for cap entries in an empty *v: 1, 0 out of memory. */
static int
lvec_reserve(lvec_t *v, Py_ssize_t cap)
{
    v->code = PyMem_Malloc((size_t)cap + 1);
    v->st = PyMem_Malloc(((size_t)cap + 1) * sizeof(pr_t));
    v->mb = PyMem_Malloc(((size_t)cap + 1) * sizeof(pr_t));
    v->cap = cap;
    return v->code != NULL && v->st != NULL && v->mb != NULL;
}

static void
lvec_free(lvec_t *v)
{
    PyMem_Free(v->code);
    PyMem_Free(v->st);
    PyMem_Free(v->mb);
}

/* Each stage of from[0..nfrom) that is not in other[0..nother), in order: added to the
 * resident stages (add) or taken from them, and pushed to *out as `code` (UNSHARD or
 * RESHARD).  The resident stages are the set `active` (2.13), or, with `active` NULL, the
 * array act[0..*nact) in insertion order (2.15), which an added stage is appended to (the
 * caller keeps the ones not taken).  1, 0 out of memory (nothing set), -1 with an exception set. */
static int
move_stages(PyObject *active, long long *act, int *nact, const long long *from, int nfrom,
            const long long *other, int nother, int add, lvec_t *out, int code)
{
    for (int e = 0; e < nfrom; e++) {
        int found = 0;
        for (int r = 0; r < nother; r++)
            found |= other[r] == from[e];
        if (found)
            continue;
        if (active == NULL) {
            if (add)
                act[(*nact)++] = from[e];
            if (!lvec_push(out, code, from[e], -1))
                return 0;
            continue;
        }
        PyObject *s = index_object(from[e]);
        if (s == NULL || (add ? PySet_Add(active, s) : PySet_Discard(active, s)) < 0) {
            Py_XDECREF(s);
            return -1;
        }
        Py_DECREF(s);
        if (!lvec_push(out, code, from[e], -1))
            return 0;
    }
    return 1;
}

/* How a release lowers (releases.Release.lowering, read by lowering._KERNEL_LOWERINGS):
 * 2.13 and 2.14 keep the resident stages in a set and add REDUCE_GRAD alone; 2.15 keeps them
 * in a dict (evicted in insertion order), pairs each REDUCE_GRAD with a WAIT_REDUCE_GRAD right
 * after it and adds a WAIT_SEND per send (_add_wait_send). */
typedef struct {
    int dict_order, reduce_wait, wait_send;
} dialect_t;

/* The unshard/reshard and reduce-grad passes over one rank's n actions, into *out: 1, 0 with
 * MemoryError, -1 with another exception set. */
static int
lower_bookkeeping(const unsigned char *code, const pr_t *st, const pr_t *mb, Py_ssize_t n,
                  long long M, long long *count, long long (*next)[LOWER_RESIDENT], int *nnext, lvec_t *out,
                  const dialect_t *how)
{
    /* next[i]: the first distinct stages from action i on (at most three), nnext[i] of them */
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        int k = 0;
        next[i][k++] = st[i];
        if (i + 1 < n)
            for (int j = 0; j < nnext[i + 1] && k < LOWER_RESIDENT; j++)
                if (next[i + 1][j] != st[i])
                    next[i][k++] = next[i + 1][j];
        nnext[i] = k;
    }
    /* the resident stages: 2.13's Python set (see above), or 2.15's dict as a C array in
     * insertion order (at most three after each step) */
    PyObject *active = NULL;
    long long act[LOWER_RESIDENT * 2];
    int nact = 0;
    if (!how->dict_order && (active = PySet_New(NULL)) == NULL)
        return -1;
    int ok = -1;
    for (Py_ssize_t i = 0; i <= n; i++) {
        /* the resident stages in iteration order (the last step: all of them) */
        long long in_set[LOWER_RESIDENT * 2];
        int nin = 0;
        if (how->dict_order) {
            for (; nin < nact; nin++)
                in_set[nin] = act[nin];
        } else {
            PyObject *it = PyObject_GetIter(active), *key;
            if (it == NULL)
                goto done;
            while ((key = PyIter_Next(it)) != NULL) {
                if (nin < LOWER_RESIDENT * 2)
                    in_set[nin++] = PyLong_AsLongLong(key);
                Py_DECREF(key);
            }
            Py_DECREF(it);
            if (PyErr_Occurred())
                goto done;
        }
        int nres = i < n ? nnext[i] : 0;
        const long long *res = i < n ? next[i] : NULL;
        /* evict: resident, not among the next stages; then fetch: the next stages not resident */
        if (how->dict_order) { /* the dict keeps the resident stages still among the next ones */
            nact = 0;
            for (int e = 0; e < nin; e++)
                for (int r = 0; r < nres; r++)
                    if (res[r] == in_set[e])
                        act[nact++] = in_set[e];
        }
        int moved = move_stages(active, act, &nact, in_set, nin, res, nres, 0, out, LK_RESHARD);
        if (moved == 1 && i < n)
            moved = move_stages(active, act, &nact, res, nres, in_set, nin, 1, out, LK_UNSHARD);
        if (moved < 0)
            goto done;
        if (moved == 0)
            goto nomem;
        if (i == n)
            break;
        if (!lvec_push(out, code[i], st[i], mb[i]))
            goto nomem;
        if ((code[i] == 1 || code[i] == 3) && ++count[st[i]] == M) /* B or W: the stage's last */
            if (!lvec_push(out, LK_REDUCE, st[i], -1) ||
                (how->reduce_wait && !lvec_push(out, LK_WAIT_REDUCE, st[i], -1)))
                goto nomem;
    }
    for (Py_ssize_t i = 0; i < n; i++) /* the counts are each rank's own */
        count[st[i]] = 0;
    ok = 1;
    goto done;
nomem:
    PyErr_NoMemory();
done:
    Py_XDECREF(active);
    return ok;
}

/* 2.15's _add_wait_send (lowering.add_wait_send) over one rank's lowered row ``in``, into
 * *out: a SEND_F's wait right after the first B or I of its stage and microbatch on the
 * rank, the other sends' waits at the end of the row in the order they were sent.
 * ``state`` (S * M * 2 bytes, zero at first, shared by the ranks: a send's stage is on one
 * rank): 1 a pending send, 2 one already waited.  1, 0 out of memory, -1 declined: a send
 * listed twice (add_wait_send or validate_send_waits raises PyTorch's message). */
static int
lower_wait_send(const lvec_t *in, lvec_t *out, long long M, unsigned char *state)
{
    Py_ssize_t sends = 0; /* a wait per send at most: out's exact room, not doubled as it grows */
    for (Py_ssize_t k = 0; k < in->n; k++)
        sends += in->code[k] == 4 || in->code[k] == 6;
    if (!lvec_reserve(out, in->n + sends))
        return 0;
    for (Py_ssize_t k = 0; k < in->n; k++) {
        int c = in->code[k];
        long long s = in->st[k], m = in->mb[k];
        if (!lvec_push(out, c, s, m))
            return 0;
        if (c == 4 || c == 6) {
            unsigned char *x = &state[(s * M + m) * 2 + (c == 6)];
            if (*x)
                return -1;
            *x = 1;
        } else if ((c == 1 || c == 2) && state[(s * M + m) * 2] == 1) {
            state[(s * M + m) * 2] = 2;
            if (!lvec_push(out, LK_WAIT_SEND_F, s, m))
                return 0;
        }
    }
    for (Py_ssize_t k = 0; k < in->n; k++) {
        int c = in->code[k];
        long long s = in->st[k], m = in->mb[k];
        if ((c == 4 || c == 6) && state[(s * M + m) * 2 + (c == 6)] == 1) {
            state[(s * M + m) * 2 + (c == 6)] = 2;
            if (!lvec_push(out, LK_WAIT_SEND_F + (c == 6), s, m))
                return 0;
        }
    }
    return 1;
}

/* Each rank's row of ``rows`` with 2.15's waits added (lower_wait_send), in place: 1, 0 out
 * of memory, -1 declined.  (lower_plain places the waits as it writes its rows.) */
static int
lower_wait_sends(lvec_t *rows, Py_ssize_t D, long long S, long long M)
{
    unsigned char *state = PyMem_Calloc((size_t)(S * M * 2), 1);
    if (state == NULL)
        return 0;
    int r = 1;
    for (Py_ssize_t d = 0; d < D && r == 1; d++) {
        lvec_t waited = {NULL, NULL, NULL, 0, 0};
        r = lower_wait_send(&rows[d], &waited, M, state);
        lvec_free(&rows[d]);
        rows[d] = waited;
    }
    PyMem_Free(state);
    return r;
}

/* The lowered rows as the columns of grammar.PlainRows, codes in the order of ``kinds``
 * (grammar.COLUMN_KINDS; a bookkeeping action's microbatch is -1): (codes, stages, mbs,
 * lengths, top_stage, top_mb), no Python object per action. */
static PyObject *
lowered_columns(const lvec_t *rows, Py_ssize_t D)
{
    Py_ssize_t n = 0;
    for (Py_ssize_t d = 0; d < D; d++)
        n += rows[d].n;
    PyObject *codes = new_bytes(n);
    PyObject *stages = new_bytes((Py_ssize_t)sizeof(pr_t) * n);
    PyObject *mbs = new_bytes((Py_ssize_t)sizeof(pr_t) * n);
    PyObject *lengths = PyTuple_New(D), *result = NULL;
    if (codes == NULL || stages == NULL || mbs == NULL || lengths == NULL)
        goto done;
    char *c = PyBytes_AS_STRING(codes);
    pr_t *st = (pr_t *)PyBytes_AS_STRING(stages), *mb = (pr_t *)PyBytes_AS_STRING(mbs);
    long long top_stage = -1, top_mb = -1;
    Py_ssize_t i = 0;
    for (Py_ssize_t d = 0; d < D; d++) {
        PyObject *len = PyLong_FromSsize_t(rows[d].n);
        if (len == NULL)
            goto done;
        PyTuple_SET_ITEM(lengths, d, len);
        for (Py_ssize_t p = 0; p < rows[d].n; p++, i++) {
            c[i] = (char)rows[d].code[p];
            st[i] = rows[d].st[p];
            mb[i] = rows[d].mb[p];
            if (st[i] > top_stage)
                top_stage = st[i];
            if (mb[i] > top_mb)
                top_mb = mb[i];
        }
    }
    result = Py_BuildValue("(OOOOLL)", codes, stages, mbs, lengths, top_stage, top_mb);
done:
    Py_XDECREF(codes);
    Py_XDECREF(stages);
    Py_XDECREF(mbs);
    Py_XDECREF(lengths);
    return result;
}

/* The send a compute action (code, stage s) posts when its neighbour stage is on another
 * rank (_add_send_recv): SEND_F (4) to s + 1 after F, SEND_B (6) to s - 1 after B or I, the
 * neighbour in *peer; 0 when there is none. */
static inline int
lower_comm(int code, long long s, long long S, const int32_t *rank, long long *peer)
{
    if (code == 0 && s + 1 < S && rank[s + 1] != rank[s]) {
        *peer = s + 1;
        return 4;
    }
    if ((code == 1 || code == 2) && s > 0 && rank[s - 1] != rank[s]) {
        *peer = s - 1;
        return 6;
    }
    return 0;
}

static PyObject *
k_lower_plain(PyObject *self, PyObject *args)
{
    PyObject *codes, *stages, *mbs, *lengths, *rank_o, *kinds, *result = NULL;
    long long S, M;
    dialect_t how;
    if (!PyArg_ParseTuple(args, "SSSO!LLOO!(ppp)", &codes, &stages, &mbs, &PyTuple_Type, &lengths, &S, &M,
                          &rank_o, &PyTuple_Type, &kinds, &how.dict_order, &how.reduce_wait, &how.wait_send))
        return NULL;
    columns_t c;
    if (!read_columns(codes, stages, mbs, lengths, 256, &c, "lower_plain"))
        return NULL;
    if (PyTuple_GET_SIZE(kinds) != LK_KINDS) {
        PyErr_SetString(PyExc_ValueError, "lower_plain: fourteen kinds");
        return NULL;
    }
    for (int k = 0; k < LK_KINDS; k++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(kinds, k))) {
            PyErr_SetString(PyExc_TypeError, "lower_plain: the kinds must be str");
            return NULL;
        }
    Py_ssize_t D = c.D, n = c.n;
    if (S <= 0 || M <= 0) {
        PyErr_SetString(PyExc_ValueError, "lower_plain: S and M must be at least 1");
        return NULL;
    }
    /* the tables: a count per stage, and per rank a bit per (stage, microbatch) and each of
     * F, B, I, RECV_F, RECV_B (what add_send_recv's ready() asks of a rank's past), only when
     * their bytes follow the action count (a file's cost is its size, not its indices) */
    if (D == 0 || S > 2 * n + 1024
        || (double)D * (double)S * (double)M * 5.0 / 8.0 > 64.0 * (double)n + (double)(1 << 20))
        return declined();
    for (Py_ssize_t i = 0; i < n; i++)
        if (c.code[i] > 3 || c.stage[i] < 0 || c.stage[i] >= S || c.mb[i] < 0 || c.mb[i] >= M)
            return declined();
    scratch_t sc = SCRATCH_INIT;
    lvec_t *mid = NULL;
    PyObject *codes_out = NULL, *stages_out = NULL, *mbs_out = NULL;
    int32_t *rank = scratch_array(&sc, S, sizeof(int32_t), 0);
    long long *count = scratch_array(&sc, S, sizeof(long long), 1);
    long long (*next)[LOWER_RESIDENT] = scratch_array(&sc, n, sizeof(long long[LOWER_RESIDENT]), 0);
    int *nnext = scratch_array(&sc, n, sizeof(int), 0);
    Py_ssize_t *head = scratch_array(&sc, D, sizeof(Py_ssize_t), 1);
    long long bits = D * S * M * 5;
    unsigned char *seen = scratch_array(&sc, (Py_ssize_t)(bits / 8 + 1), 1, 1);
    mid = PyMem_Calloc((size_t)D, sizeof(lvec_t));
    if (!rank || !count || !next || !nnext || !head || !seen || !mid) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    int got = read_small_ints(rank_o, S, 0, D, -1, rank);
    if (got < 0)
        goto done;
    if (got == 0)
        goto not_plain;
    for (long long s = 0; s < S; s++)
        if (rank[s] < 0)
            goto not_plain;
    Py_ssize_t at = 0;
    for (Py_ssize_t d = 0; d < D; d++) {
        Py_ssize_t len = PyLong_AsSsize_t(PyTuple_GET_ITEM(lengths, d));
        if (len == 0)
            goto not_plain; /* PyTorch's _add_send_recv asserts every rank has an action */
        if (how.wait_send) /* a stage's sends and backwards on its own rank: the waits below need it */
            for (Py_ssize_t i = at; i < at + len; i++)
                if (rank[c.stage[i]] != d)
                    goto not_plain;
        int r = lower_bookkeeping(c.code + at, c.stage + at, c.mb + at, len, M, count, next, nnext, &mid[d], &how);
        if (r <= 0)
            goto done;
        at += len;
    }
    /* Each rank's lowered row is written once, into the result's columns: its length is known
     * before the sweep (its bookkeeping and compute rows, a send per compute action whose
     * neighbour stage is on another rank, with 2.15 a wait per send, and the receives those
     * sends post to it), so a row starts at off[d] and pos[d] is where its next action goes. */
    Py_ssize_t *off = scratch_array(&sc, D + 1, sizeof(Py_ssize_t), 1), *pos = scratch_array(&sc, D, sizeof(Py_ssize_t), 0);
    unsigned char *state = NULL; /* 2.15: (stage, mb, SEND_F/B): 1 a send pending, 2 waited */
    if (!off || !pos || (how.wait_send && !(state = scratch_array(&sc, (Py_ssize_t)(S * M * 2), 1, 1))))
        goto done;
    for (Py_ssize_t d = 0; d < D; d++)
        for (Py_ssize_t h = 0; h < mid[d].n; h++) {
            long long rs;
            int comm = lower_comm(mid[d].code[h], mid[d].st[h], S, rank, &rs);
            off[d + 1] += 1 + (comm ? 1 + how.wait_send : 0);
            if (comm)
                off[rank[rs] + 1]++;
        }
    for (Py_ssize_t d = 0; d < D; d++) {
        pos[d] = off[d];
        off[d + 1] += off[d];
    }
    Py_ssize_t nout = off[D];
    codes_out = new_bytes(nout);
    stages_out = new_bytes((Py_ssize_t)sizeof(pr_t) * nout);
    mbs_out = new_bytes((Py_ssize_t)sizeof(pr_t) * nout);
    if (!codes_out || !stages_out || !mbs_out)
        goto done;
    char *oc = PyBytes_AS_STRING(codes_out);
    pr_t *os = (pr_t *)PyBytes_AS_STRING(stages_out), *om = (pr_t *)PyBytes_AS_STRING(mbs_out);
    long long top_stage = -1, top_mb = -1;
#define PUT(d, k, s, m) do { \
        Py_ssize_t at_ = pos[d]++; \
        if (at_ >= off[(d) + 1]) \
            goto overrun; \
        oc[at_] = (char)(k); \
        os[at_] = (pr_t)(s); /* an index read off the columns: it fits */ \
        om[at_] = (pr_t)(m); \
        if ((s) > top_stage) \
            top_stage = (s); \
        if ((m) > top_mb) \
            top_mb = (m); \
    } while (0)
#define PENDING(s, m, back) state[((s) * M + (m)) * 2 + (back)]
#define SEEN(d, s, m, k) (((((long long)(d) * S + (s)) * M + (m)) * 5) + (k))
#define TEST(b) ((seen[(b) >> 3] >> ((b) & 7)) & 1)
#define MARK(b) (seen[(b) >> 3] |= (unsigned char)(1u << ((b) & 7)))
    /* the bit of each kind add_send_recv's ready() asks about: F, B, I, RECV_F, RECV_B */
    static const int seen_kind[LK_KINDS] = {0, 1, 2, -1, -1, 3, -1, 4, -1, -1, -1, -1, -1, -1};
    Py_ssize_t left = D;
    while (left > 0) {
        int progress = 0;
        for (Py_ssize_t d = 0; d < D; d++) {
            if (head[d] == mid[d].n)
                continue;
            Py_ssize_t h = head[d];
            int k = mid[d].code[h];
            long long s = mid[d].st[h], m = mid[d].mb[h];
            int ready = 1;
            if (k == 0 && s != 0)
                ready = TEST(SEEN(d, s, m, 3)) || TEST(SEEN(d, s - 1, m, 0));
            else if ((k == 1 || k == 2) && s != S - 1)
                ready = TEST(SEEN(d, s, m, 4)) || TEST(SEEN(d, s + 1, m, 2)) || TEST(SEEN(d, s + 1, m, 1));
            if (!ready)
                continue;
            PUT(d, k, s, m);
            if (seen_kind[k] >= 0)
                MARK(SEEN(d, s, m, seen_kind[k]));
            /* 2.15's _add_wait_send: a SEND_F's wait right after its stage's B or I of the
             * same microbatch (both on the stage's rank, as placed above) */
            if (state && (k == 1 || k == 2) && PENDING(s, m, 0) == 1) {
                PENDING(s, m, 0) = 2;
                PUT(d, LK_WAIT_SEND_F, s, m);
            }
            long long rs;
            int comm = lower_comm(k, s, S, rank, &rs); /* the SEND code (its RECV's is one more) */
            if (comm) {
                Py_ssize_t dest = rank[rs];
                PUT(d, comm, s, m);
                PUT(dest, comm + 1, rs, m);
                MARK(SEEN(dest, rs, m, comm == 4 ? 3 : 4));
                if (state) {
                    if (PENDING(s, m, comm == 6))
                        goto not_plain; /* a send listed twice: add_wait_send raises PyTorch's message */
                    PENDING(s, m, comm == 6) = 1;
                }
            }
            if (++head[d] == mid[d].n)
                left--;
            progress = 1;
        }
        if (!progress)
            goto not_plain; /* the compute order deadlocks: lowering.py raises PyTorch's message */
    }
    /* the sends not waited for yet: their waits at the end of the row, in the order sent */
    if (state)
        for (Py_ssize_t d = 0; d < D; d++)
            for (Py_ssize_t q = off[d], end = pos[d]; q < end; q++) {
                int k = oc[q];
                if ((k == 4 || k == 6) && PENDING(os[q], om[q], k == 6) == 1) {
                    PENDING(os[q], om[q], k == 6) = 2;
                    PUT(d, LK_WAIT_SEND_F + (k == 6), os[q], om[q]);
                }
            }
#undef PUT
#undef PENDING
#undef SEEN
#undef TEST
#undef MARK
    PyObject *row_lengths = PyTuple_New(D);
    if (row_lengths == NULL)
        goto done;
    for (Py_ssize_t d = 0; d < D; d++) {
        PyObject *len = pos[d] == off[d + 1] ? PyLong_FromSsize_t(off[d + 1] - off[d]) : NULL;
        if (len == NULL) {
            Py_DECREF(row_lengths);
            goto overrun;
        }
        PyTuple_SET_ITEM(row_lengths, d, len);
    }
    result = Py_BuildValue("(OOOOLL)", codes_out, stages_out, mbs_out, row_lengths, top_stage, top_mb);
    Py_DECREF(row_lengths);
    goto done;
overrun:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_SystemError, "lower_plain: a row's length was miscounted");
    goto done;
not_plain:
    result = declined();
done:
    if (mid != NULL)
        for (Py_ssize_t d = 0; d < D; d++)
            lvec_free(&mid[d]);
    PyMem_Free(mid);
    Py_XDECREF(codes_out);
    Py_XDECREF(stages_out);
    Py_XDECREF(mbs_out);
    scratch_free(&sc);
    return result;
}

/* ------------------------------------------------------------------ compile_plain */

/* The kinds are data: their number is the length of the ``kinds`` table a caller hands in
 * (grammar.CODED_KINDS), at most MAX_CODES, and what each one needs, matches and may not
 * meet comes in with it (graph._NEEDS_BY_CODE, _MATCH_BY_CODE, _MIXED_BY_CODE), so that a
 * new kind needs no change here. */
#define MAX_CODES 16
#define MAX_NEEDS 4

#define MAX_OFFSET (1LL << 32) /* a need's stage offset; s + offset cannot overflow */

/* An int code (-1 with *ok = 0 when it is not an int of at most 31 bits). */
static int
small_int(PyObject *o, int *ok)
{
    long long v = exact_int(o, ok);
    if (v < INT32_MIN || v > INT32_MAX) {
        *ok = 0;
        return -1;
    }
    return (int)v;
}

typedef struct {
    int count;
    long long offset[MAX_NEEDS];
    int kinds[MAX_NEEDS][2]; /* producer codes; the second -1 when there is no alternative */
    int recv[MAX_NEEDS];     /* the RECV code that stands in across devices, or -1 */
} needs_t;

/* compile_plain(order, S, M, routes, mroute, needs, match, mixed, kinds, allow_comm)
 *
 * The twin of graph._reference for the common case: every entry an Action of one of the
 * kinds of ``kinds`` (grammar.CODED_KINDS, in code order) with int indices in range, on the
 * device its route places it (``routes``: a sequence of ints per route, ``mroute`` one per
 * microbatch or None), no duplicate, no two kinds of one pair of ``mixed``
 * (graph._MIXED_BY_CODE: B with I or W) anywhere, at most one wait on another device per
 * action; with communication (a code that has a peer in ``match``: graph._MATCH_BY_CODE,
 * per code (peer code, offset) or None; only when ``allow_comm``: eager semantics) also
 * every such action matched and every input from another device received on the consumer's
 * own device.  ``needs`` is graph._NEEDS_BY_CODE, per code a tuple of (offset, producer
 * codes, recv code or -1), so the rules stay those of deps.NEEDS.  Returns (acts, dev, pos,
 * starts, wait, counts, inversions, code, stage, explicit, uncoded, reduce_grads, mb), or
 * None when the schedule is not
 * such a case (also when its sizes are so much larger than its action count that a dense
 * table would waste memory: the routes are read only after that test, so a placement of
 * ten million stages costs nothing when the kernel declines it). */
/* See PLACE in compile_core. */
static int
place_action(Py_ssize_t i, Py_ssize_t p, Py_ssize_t d, int c, long long s, long long m, long long S,
             long long M, const int32_t *route_dev, const int32_t *mr, int allow_comm,
             const signed char *is_comm, int *explicit, int8_t *code, int32_t *stage, int32_t *mbs,
             int32_t *pos, int32_t *devs, long long *counts)
{
    if (is_comm[c]) {
        if (!allow_comm)
            return 0;
        *explicit = 1;
    }
    if (s < 0 || s >= S || m < 0 || m >= M || route_dev[(mr ? mr[m] : 0) * S + s] != d)
        return 0;
    code[i] = (int8_t)c;
    if (stage != NULL) /* NULL: the columns' own stages and microbatches are the Graph's */
        stage[i] = (int32_t)s; /* in range: S, M and every position fit (compile_core) */
    if (mbs != NULL)
        mbs[i] = (int32_t)m;
    if (pos != NULL) /* NULL: a graph of the columns, whose positions are made on demand */
        pos[i] = (int32_t)p;
    devs[i] = (int32_t)d;
    counts[c]++;
    return 1;
}

/* The ints of ``seq`` (any sequence: a tuple, a placement's compact route), each in
 * [lo, hi) or else stored as ``outside``, into out[0..len): 1; 0 (declined) when it is not a
 * sequence of exactly len ints; -1 with an exception set. */
static int
read_small_ints(PyObject *seq, Py_ssize_t len, long long lo, long long hi, int32_t outside, int32_t *out)
{
    PyObject *fast = PySequence_Fast(seq, "");
    if (fast == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    int ok = PySequence_Fast_GET_SIZE(fast) == len;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t k = 0; k < len && ok; k++) {
        long long v = exact_int(items[k], &ok);
        out[k] = v >= lo && v < hi ? (int32_t)v : outside;
    }
    Py_DECREF(fast);
    return ok;
}

/* What an entry of a code without a kind code is (compile_columns' roles) */
#define ROLE_BOOKKEEPING 0
#define ROLE_REDUCE 1
#define ROLE_REDUCE_WAIT 2
#define ROLE_SEND_WAIT 3

static PyObject *
compile_core(PyObject *order, const columns_t *cols, long long S, long long M, PyObject *routes,
             PyObject *mroute, PyObject *needs_o, PyObject *match_o, PyObject *mixed_o, PyObject *kinds,
             int allow_comm, const char *roles, int keep_wait)
{
    int K = (int)PyTuple_GET_SIZE(kinds);
    if (K < 1 || K > MAX_CODES || PyTuple_GET_SIZE(needs_o) != K || PyTuple_GET_SIZE(match_o) != K ||
        S <= 0 || M <= 0) {
        PyErr_SetString(PyExc_ValueError, "compile_plain: bad arguments");
        return NULL;
    }
    PyObject *kind_obj[MAX_CODES];
    for (int c = 0; c < K; c++)
        kind_obj[c] = PyTuple_GET_ITEM(kinds, c);

    /* the rules, as C tables */
    needs_t needs[MAX_CODES];
    long long match_code[MAX_CODES], match_off[MAX_CODES];
    signed char is_comm[MAX_CODES];
    int ok = 1;
    for (int c = 0; c < K; c++) {
        PyObject *list = PyTuple_GET_ITEM(needs_o, c), *m = PyTuple_GET_ITEM(match_o, c);
        if (!PyTuple_Check(list) || PyTuple_GET_SIZE(list) > MAX_NEEDS) {
            PyErr_SetString(PyExc_ValueError, "compile_plain: bad needs table");
            return NULL;
        }
        needs[c].count = (int)PyTuple_GET_SIZE(list);
        for (int k = 0; k < needs[c].count; k++) {
            PyObject *need = PyTuple_GET_ITEM(list, k), *codes;
            if (!PyTuple_Check(need) || PyTuple_GET_SIZE(need) != 3 ||
                !PyTuple_Check(codes = PyTuple_GET_ITEM(need, 1)) || PyTuple_GET_SIZE(codes) < 1 ||
                PyTuple_GET_SIZE(codes) > 2) {
                PyErr_SetString(PyExc_ValueError, "compile_plain: bad needs table");
                return NULL;
            }
            needs[c].offset[k] = exact_int(PyTuple_GET_ITEM(need, 0), &ok);
            needs[c].kinds[k][0] = small_int(PyTuple_GET_ITEM(codes, 0), &ok);
            needs[c].kinds[k][1] = PyTuple_GET_SIZE(codes) > 1 ? small_int(PyTuple_GET_ITEM(codes, 1), &ok) : -1;
            needs[c].recv[k] = small_int(PyTuple_GET_ITEM(need, 2), &ok);
        }
        if (m == Py_None) {
            match_code[c] = -1;
            match_off[c] = 0;
        } else if (PyTuple_Check(m) && PyTuple_GET_SIZE(m) == 2) {
            match_code[c] = exact_int(PyTuple_GET_ITEM(m, 0), &ok);
            match_off[c] = exact_int(PyTuple_GET_ITEM(m, 1), &ok);
            ok &= match_code[c] >= 0 && match_code[c] < K && llabs(match_off[c]) <= MAX_OFFSET;
        } else {
            ok = 0;
        }
        is_comm[c] = match_code[c] >= 0; /* a kind with a peer is communication */
        /* the codes index the producer table and the offsets are added to stages: in range */
        for (int k = 0; k < needs[c].count && ok; k++)
            ok = llabs(needs[c].offset[k]) <= MAX_OFFSET && needs[c].kinds[k][0] >= 0 &&
                 needs[c].kinds[k][0] < K && needs[c].kinds[k][1] >= -1 &&
                 needs[c].kinds[k][1] < K && needs[c].recv[k] >= -1 && needs[c].recv[k] < K;
    }
    /* pairs of codes that one (stage, microbatch) may not both have */
    int nmixed = PyTuple_Check(mixed_o) ? (int)PyTuple_GET_SIZE(mixed_o) : -1, mixed[MAX_CODES * MAX_CODES][2];
    ok &= nmixed >= 0 && nmixed <= MAX_CODES * MAX_CODES;
    for (int k = 0; k < nmixed && ok; k++) {
        PyObject *pair = PyTuple_GET_ITEM(mixed_o, k);
        ok = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2;
        if (ok) {
            mixed[k][0] = small_int(PyTuple_GET_ITEM(pair, 0), &ok);
            mixed[k][1] = small_int(PyTuple_GET_ITEM(pair, 1), &ok);
            ok &= mixed[k][0] >= 0 && mixed[k][0] < K && mixed[k][1] >= 0 && mixed[k][1] < K;
        }
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "compile_plain: bad rule tables");
        return NULL;
    }

    Py_ssize_t D = order ? PyTuple_GET_SIZE(order) : cols->D, n = order ? 0 : cols->n;
    for (Py_ssize_t d = 0; order && d < D; d++) {
        PyObject *row = PyTuple_GET_ITEM(order, d);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) >= INT32_MAX)
            Py_RETURN_NONE;
        for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(row); p++)
            n += PyTuple_GET_ITEM(row, p) != Py_None;
    }
    /* a dense producer table of S*M*(the kinds present, at most 8) entries, only when that is
     * not absurd for n actions */
    if (S > (4LL * n + 1024) / M + 1 || S * M > 4LL * n + 1024 || n >= INT32_MAX || D >= INT32_MAX ||
        S >= INT32_MAX || M >= INT32_MAX) /* the int columns are int32 (graph.py's typecode i) */
        Py_RETURN_NONE;

    Py_ssize_t R = PyTuple_GET_SIZE(routes);
    scratch_t sc = SCRATCH_INIT;
    int32_t *route_dev, *mr = NULL, *table, *devs;
    int8_t *code;
    int32_t *stage = NULL, *mbs = NULL, *pos = NULL, *waitc;
    long long *starts, *inv = NULL;
    /* the entries of the columns without a code (codes K and up: graph.Graph.uncoded) and
     * among them, by their code's role (roles[code - K]), the REDUCE_GRADs (Graph.reduce_grads),
     * the WAIT_REDUCE_GRADs (Graph.reduce_waits) and the WAIT_SENDs (Graph.send_waits) */
    long long *uncoded = NULL, *reduces = NULL, *rwaits = NULL, *swaits = NULL;
    Py_ssize_t nuncoded = 0, nreduces = 0, nrwaits = 0, nswaits = 0;
    column_t c_uncoded = {NULL}, c_swaits = {NULL}, c_starts = {NULL};
    /* the Graph's columns (int8 code, the others int32), filled where they lie: bytes, on
     * huge pages (new_bytes), which graph.compile_graph reads through memoryview casts; a
     * graph of the columns has no pos (graph._ByDevice makes it on demand), its devices are
     * scratch, and its stage and mb are the columns' own bytes (Graph.stage and Graph.mb
     * hold an uncoded entry's indices as the columns do; a coded one's are in range here) */
    PyObject *c_dev = NULL, *c_pos = NULL, *c_wait = NULL, *c_code = NULL, *c_stage = NULL, *c_mb = NULL;
    PyObject *acts = NULL, *result = NULL;
    Py_ssize_t ninv = 0, inv_cap = 0;
    int explicit = 0;

    route_dev = scratch_array(&sc, R * S, sizeof(int32_t), 0);
    if (route_dev == NULL)
        goto fail;
    /* a route is any sequence of S ints (a device outside [0, D) matches no row: its actions
     * are misplaced, declined); it may run Python code to give its items, so it is read into
     * C arrays before anything of this call is read from the order */
    for (Py_ssize_t r = 0; r < R && ok > 0; r++)
        ok = read_small_ints(PyTuple_GET_ITEM(routes, r), S, 0, D, -1, route_dev + r * S);
    if (ok > 0 && mroute != Py_None) {
        if ((mr = scratch_array(&sc, M, sizeof(int32_t), 0)) == NULL)
            goto fail;
        ok = read_small_ints(mroute, M, 0, R, -1, mr);
        for (Py_ssize_t m = 0; m < M && ok > 0; m++)
            ok = mr[m] >= 0;
    }
    if (ok < 0)
        goto fail;
    if (!ok || R < 1)
        goto not_plain;

    if (!(code = bytes_column(&c_code, n, 1)) ||
        (!cols && (!(stage = bytes_column(&c_stage, n, sizeof(int32_t))) ||
                   !(mbs = bytes_column(&c_mb, n, sizeof(int32_t))))) ||
        (order && !(pos = bytes_column(&c_pos, n, sizeof(int32_t)))) ||
        !(devs = order ? bytes_column(&c_dev, n, sizeof(int32_t)) : scratch_array(&sc, n, sizeof(int32_t), 0)) ||
        !(starts = column_new(&c_starts, "q", D + 1)) || (order && !(acts = new_list(n))))
        goto fail;

    long long counts[MAX_CODES] = {0};
    Py_ssize_t i = 0;
    /* Action i, at position p of device d's row, has kind code c, stage s and microbatch m:
     * 0 when it is not the kernel's case (SEND/RECV where they are not allowed, an index out
     * of range, off its placed device), else 1 with its columns filled.  One definition for
     * both front ends (the columns of PlainRows and the rows of Actions). */
#define PLACE(c, s, m) place_action(i, p, d, (c), (s), (m), S, M, route_dev, mr, allow_comm, is_comm, \
                                    &explicit, code, stage, mbs, pos, devs, counts)
    if (cols) { /* the columns of grammar.PlainRows: plain actions, no idle slot */
        for (Py_ssize_t k = 0; k < n && !uncoded; k++)
            if (cols->code[k] >= K && (!(uncoded = scratch_array(&sc, n, sizeof(long long), 0)) ||
                                       !(reduces = scratch_array(&sc, n, sizeof(long long), 0)) ||
                                       !(rwaits = scratch_array(&sc, n, sizeof(long long), 0)) ||
                                       !(swaits = scratch_array(&sc, n, sizeof(long long), 0))))
                goto fail;
        for (Py_ssize_t d = 0; d < D; d++) {
            starts[d] = i;
            Py_ssize_t len = PyLong_AsSsize_t(PyTuple_GET_ITEM(cols->lengths, d));
            for (Py_ssize_t p = 0; p < len; p++, i++) {
                int c = cols->code[i];
                if (c < K) {
                    if (!PLACE(c, cols->stage[i], cols->mb[i]))
                        goto not_plain;
                    continue;
                }
                /* bookkeeping (graph._bookkeeping): a stage in range held by the device on
                 * some route; a send's wait (graph._send_wait): its stage and microbatch in
                 * range, on the device they are placed on.  No code in the Graph; its stage
                 * and microbatch as the columns hold them (a microbatch below -1, which the
                 * Graph would hold as none, declines) */
                long long s = cols->stage[i], m = cols->mb[i];
                int role = roles[c - K], held = 0;
                if (role == ROLE_SEND_WAIT)
                    held = s >= 0 && s < S && m >= 0 && m < M && route_dev[(mr ? mr[m] : 0) * S + s] == d;
                for (Py_ssize_t r = 0; role != ROLE_SEND_WAIT && r < R && !held && s >= 0 && s < S; r++)
                    held = route_dev[r * S + s] == d;
                if (!held || m < -1)
                    goto not_plain;
                code[i] = -1;
                devs[i] = (int32_t)d;
                uncoded[nuncoded++] = i;
                if (role == ROLE_REDUCE)
                    reduces[nreduces++] = i;
                else if (role == ROLE_REDUCE_WAIT)
                    rwaits[nrwaits++] = i;
                else if (role == ROLE_SEND_WAIT)
                    swaits[nswaits++] = i;
            }
        }
    }
    for (Py_ssize_t d = 0; order && d < D; d++) {
        PyObject *row = PyTuple_GET_ITEM(order, d);
        starts[d] = i;
        for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(row); p++) {
            PyObject *a = PyTuple_GET_ITEM(row, p);
            if (a == Py_None)
                continue;
            if (!PyTuple_Check(a) || PyTuple_GET_SIZE(a) != 4 || PyTuple_GET_ITEM(a, 3) != Py_None)
                goto not_plain;
            PyObject *kind = PyTuple_GET_ITEM(a, 1);
            int c = -1;
            for (int k = 0; k < K; k++)
                if (kind == kind_obj[k]) {
                    c = k;
                    break;
                }
            if (c < 0) { /* not the interned object: compare the text */
                if (!PyUnicode_Check(kind))
                    goto not_plain;
                for (int k = 0; k < K && c < 0; k++) {
                    int eq = PyUnicode_Compare(kind, kind_obj[k]);
                    if (eq == -1 && PyErr_Occurred())
                        goto fail;
                    if (eq == 0)
                        c = k;
                }
                if (c < 0)
                    goto not_plain;
            }
            long long s = exact_int(PyTuple_GET_ITEM(a, 0), &ok);
            long long m = exact_int(PyTuple_GET_ITEM(a, 2), &ok);
            if (!ok || !PLACE(c, s, m))
                goto not_plain;
            Py_INCREF(a);
            PyList_SET_ITEM(acts, i, a);
            i++;
        }
    }
#undef PLACE
    starts[D] = n;
    for (int k = 0; k < nmixed; k++)
        if (counts[mixed[k][0]] && counts[mixed[k][1]])
            goto not_plain; /* a pair might mix B with I/W: the general path says which */

    /* the table has a slot per (stage, microbatch) for each kind the schedule has (a
     * compute-only 1F1B: F and B, a quarter of the eight); a kind it lacks has no producer */
    /* each action's stage and microbatch */
    const int32_t *st = cols ? cols->stage : stage, *mb = cols ? cols->mb : mbs;
    int slot[MAX_CODES], present = 0;
    for (int c = 0; c < K; c++)
        slot[c] = counts[c] ? present++ : -1;
    Py_ssize_t table_size = (Py_ssize_t)(S * M * (present ? present : 1));
    waitc = NULL;
    if (!(table = scratch_array(&sc, table_size, sizeof(int32_t), 0)) ||
        (keep_wait && !(waitc = bytes_column(&c_wait, n, sizeof(int32_t)))))
        goto fail;
    memset(table, 0xff, sizeof(int32_t) * (size_t)table_size); /* -1: no action */
    for (i = 0; i < n; i++) {
        if (waitc != NULL)
            waitc[i] = (int32_t)n;
        if (code[i] < 0)
            continue; /* bookkeeping: no key */
        Py_ssize_t key = (Py_ssize_t)(((long long)st[i] * M + mb[i]) * present + slot[code[i]]);
        if (table[key] != -1)
            goto not_plain; /* a duplicate */
        table[key] = (int32_t)i;
    }
#define LOOKUP(st, mb, c) (slot[c] < 0 ? -1 : table[((st) * M + (mb)) * present + slot[c]])

    for (i = 0; i < n; i++) {
        int c = code[i], found = 0;
        if (c < 0)
            continue; /* bookkeeping needs nothing */
        long long s = st[i], m = mb[i];
        if (explicit && match_code[c] >= 0) { /* a SEND or RECV without its peer */
            long long ps = s + match_off[c];
            if (ps < 0 || ps >= S || LOOKUP(ps, m, match_code[c]) < 0)
                goto not_plain;
        }
        for (int k = 0; k < needs[c].count; k++) {
            long long ps = s + needs[c].offset[k];
            if (ps < 0 || ps >= S)
                continue; /* no such need */
            int32_t j = LOOKUP(ps, m, needs[c].kinds[k][0]);
            if (j < 0 && needs[c].kinds[k][1] >= 0)
                j = LOOKUP(ps, m, needs[c].kinds[k][1]);
            if (j < 0)
                continue; /* missing: the completeness rule reports it */
            if (explicit && needs[c].recv[k] >= 0 && devs[j] != devs[i]) {
                int32_t r = LOOKUP(s, m, needs[c].recv[k]);
                if (r < 0)
                    goto not_plain; /* no RECV for an input from another device */
                j = r;
            }
            if (devs[j] == devs[i]) {
                if (j > i) { /* i needs an action that comes later on its own device */
                    if (ninv == inv_cap) {
                        inv_cap = inv_cap ? 2 * inv_cap : 64;
                        long long *grown = PyMem_Realloc(inv, sizeof(long long) * 2 * (size_t)inv_cap);
                        if (grown == NULL)
                            goto nomem;
                        inv = grown;
                    }
                    inv[2 * ninv] = i;
                    inv[2 * ninv + 1] = j;
                    ninv++;
                }
                continue;
            }
            if (found++)
                goto not_plain; /* a second wait on another device: graph.more_waits */
            if (waitc != NULL)
                waitc[i] = (int32_t)j;
            else if (match_code[c] < 0) /* !keep_wait and an action other than a SEND/RECV
                                         * waits on another device, which the run would read.
                                         * By deps.NEEDS never (an input from another stage
                                         * comes through a RECV, one of its own stage is on
                                         * its own device): declined, so that a change of the
                                         * rules cannot make a run skip a wait */
                goto not_plain;
        }
    }
#undef LOOKUP

    {
        PyObject *starts_l = column_take(&c_starts);
        PyObject *counts_l = list_of_ints(counts, K);
        PyObject *inv_l = PyList_New(ninv);
        int32_t *uv = column_new(&c_uncoded, "i", nuncoded), *sv = column_new(&c_swaits, "i", nswaits);
        for (Py_ssize_t k = 0; uv && k < nuncoded; k++)
            uv[k] = (int32_t)uncoded[k];
        for (Py_ssize_t k = 0; sv && k < nswaits; k++)
            sv[k] = (int32_t)swaits[k];
        PyObject *uncoded_l = column_take(&c_uncoded), *swaits_l = column_take(&c_swaits);
        PyObject *reduces_l = list_of_ints(reduces, nreduces), *rwaits_l = list_of_ints(rwaits, nrwaits);
        for (Py_ssize_t k = 0; inv_l && k < ninv; k++) {
            PyObject *pair = Py_BuildValue("(LL)", inv[2 * k], inv[2 * k + 1]);
            if (pair == NULL) {
                Py_CLEAR(inv_l);
                break;
            }
            PyList_SET_ITEM(inv_l, k, pair);
        }
        if (starts_l && counts_l && inv_l && uncoded_l && reduces_l && rwaits_l && swaits_l) {
            result = Py_BuildValue("(OOOOOOOOOOOOOOO)", acts ? acts : Py_None, c_dev ? c_dev : Py_None,
                                   c_pos ? c_pos : Py_None, starts_l,
                                   c_wait ? c_wait : Py_None, counts_l, inv_l, c_code,
                                   cols ? cols->stages : c_stage, explicit ? Py_True : Py_False, uncoded_l,
                                   reduces_l, rwaits_l, swaits_l, cols ? cols->mbs : c_mb);
        }
        Py_XDECREF(uncoded_l);
        Py_XDECREF(reduces_l);
        Py_XDECREF(rwaits_l);
        Py_XDECREF(swaits_l);
        Py_XDECREF(starts_l);
        Py_XDECREF(counts_l);
        Py_XDECREF(inv_l);
    }
    goto done;

not_plain:
    result = declined();
    goto done;
nomem:
    PyErr_NoMemory();
fail:
done:
    Py_XDECREF(acts);
    Py_XDECREF(c_dev);
    Py_XDECREF(c_pos);
    column_free(&c_starts);
    Py_XDECREF(c_wait);
    Py_XDECREF(c_code);
    Py_XDECREF(c_stage);
    Py_XDECREF(c_mb);
    column_free(&c_uncoded);
    column_free(&c_swaits);
    scratch_free(&sc);
    PyMem_Free(inv); /* grown with PyMem_Realloc, so not a scratch array */
    return result;
}

static PyObject *
k_compile_plain(PyObject *self, PyObject *args)
{
    PyObject *order, *routes, *mroute, *needs_o, *match_o, *mixed_o, *kinds;
    long long S, M;
    int allow_comm;
    if (!PyArg_ParseTuple(args, "O!LLO!OO!O!O!O!p", &PyTuple_Type, &order, &S, &M, &PyTuple_Type,
                          &routes, &mroute, &PyTuple_Type, &needs_o, &PyTuple_Type, &match_o,
                          &PyTuple_Type, &mixed_o, &PyTuple_Type, &kinds, &allow_comm))
        return NULL;
    return compile_core(order, NULL, S, M, routes, mroute, needs_o, match_o, mixed_o, kinds, allow_comm, NULL, 1);
}

/* compile_columns(codes, stages, mbs, lengths, S, M, routes, mroute, needs, match, mixed,
 * kinds, allow_comm, column_kinds, roles): compile_plain over the columns of
 * grammar.PlainRows (codes in the order of ``column_kinds``, grammar.COLUMN_KINDS: first
 * ``kinds``, then the kinds without a code in the Graph, which need nothing) instead of rows
 * of Actions; the same result with None for acts (Graph builds them from the schedule's
 * order when it is first asked for them).  ``roles`` (bytes, one per code from len(kinds)
 * on): ROLE_BOOKKEEPING (UNSHARD, RESHARD), ROLE_REDUCE (REDUCE_GRAD: Graph.reduce_grads),
 * ROLE_REDUCE_WAIT (WAIT_REDUCE_GRAD: Graph.reduce_waits), ROLE_SEND_WAIT (WAIT_SEND_F/B:
 * Graph.send_waits).  An entry whose stage is out of range or not held by its device, or a
 * send's wait off the device its stage and microbatch are placed on, declines (the reference
 * reports it).  The uncoded entries and the send waits come as int arrays (typecode i), the
 * REDUCE_GRADs and WAIT_REDUCE_GRADs (one or two per stage) as lists.  With ``keep_wait``
 * false (it is true by default) no wait column is made (4 bytes an action that a run of
 * PyTorch's runtime does not read: runtime_plain takes its data through the RECVs): its slot
 * is None, and it declines when an action other than a SEND/RECV waits on another device,
 * which runtime_plain would need (the reference then compiles, keeping the column). */
static PyObject *
k_compile_columns(PyObject *self, PyObject *args)
{
    PyObject *codes, *stages, *mbs, *lengths, *routes, *mroute, *needs_o, *match_o, *mixed_o, *kinds,
        *column_kinds, *roles;
    long long S, M;
    int allow_comm, keep_wait = 1;
    if (!PyArg_ParseTuple(args, "OOOOLLO!OO!O!O!O!pO!S|p", &codes, &stages, &mbs, &lengths, &S, &M,
                          &PyTuple_Type, &routes, &mroute, &PyTuple_Type, &needs_o, &PyTuple_Type,
                          &match_o, &PyTuple_Type, &mixed_o, &PyTuple_Type, &kinds, &allow_comm,
                          &PyTuple_Type, &column_kinds, &roles, &keep_wait))
        return NULL;
    Py_ssize_t K = PyTuple_GET_SIZE(kinds), KC = PyTuple_GET_SIZE(column_kinds);
    const char *role = PyBytes_AS_STRING(roles);
    int ok = KC >= K && KC <= 255 && PyBytes_GET_SIZE(roles) == KC - K;
    for (Py_ssize_t k = 0; ok && k < KC - K; k++)
        ok = role[k] >= ROLE_BOOKKEEPING && role[k] <= ROLE_SEND_WAIT;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "compile_columns: the column kinds are the kinds and then one role each");
        return NULL;
    }
    columns_t cols;
    if (!read_columns(codes, stages, mbs, lengths, (int)KC, &cols, "compile_columns"))
        return NULL;
    return compile_core(NULL, &cols, S, M, routes, mroute, needs_o, match_o, mixed_o, kinds, allow_comm, role,
                        keep_wait);
}

/* ------------------------------------------------------------------ times */

/* Times.  The sweep's start and end times go back to Python as two columns each, not as a
 * list of a million numbers: ``values``, an array.array of doubles, and ``floats``, bytes
 * with 1 where the time is a float and 0 where it is an int.  An int time is an exact
 * integer of magnitude at most 2^53 (the sweep's bound), so its double is it exactly.
 * graph.Times makes the list Python's sweep would have made (times_list) only when a caller
 * reads it. */

/* A number of the kernel's (a double and whether it is a float) as the Python object. */
static PyObject *
number_object(double v, unsigned char is_float)
{
    return is_float ? PyFloat_FromDouble(v) : PyLong_FromLongLong((long long)v);
}

/* One column of times, read: its values (a 1-D buffer of doubles, held in view) and floats
 * (bytes of the same length); 0 with TypeError/ValueError set otherwise.  Release the view
 * with PyBuffer_Release when it was read.  A value is checked where it is read (time_at):
 * the critical path reads a few of a million. */
typedef struct {
    Py_buffer view;
    const double *v;   /* doubles, or NULL: then vi */
    const int32_t *vi; /* int32 (runtime_plain's end times of a run of small ints): each an int */
    const unsigned char *f;
    Py_ssize_t n;
} times_t;

static int
read_times(PyObject *values, PyObject *floats, times_t *t, const char *what)
{
    if (!PyBytes_CheckExact(floats)) {
        PyErr_Format(PyExc_TypeError, "%s: the floats of a times column are bytes", what);
        return 0;
    }
    if (PyObject_GetBuffer(values, &t->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return 0;
    const char *f = t->view.format ? t->view.format : "B";
    if (*f == '@')
        f++;
    /* doubles, or int32 ("i", 4 bytes on every platform CPython supports), each an int.  (An
     * empty array's buffer is a placeholder that need not be aligned: nothing is read.) */
    const int narrow = strcmp(f, "i") == 0;
    const Py_ssize_t w = narrow ? (Py_ssize_t)sizeof(int32_t) : (Py_ssize_t)sizeof(double);
    if ((!narrow && strcmp(f, "d") != 0) || t->view.ndim != 1 || t->view.itemsize != w ||
        (t->view.len > 0 && ((uintptr_t)t->view.buf) % (uintptr_t)w)) {
        PyBuffer_Release(&t->view);
        PyErr_Format(PyExc_TypeError, "%s: the values of a times column are an array of doubles or of int32",
                     what);
        return 0;
    }
    t->v = narrow ? NULL : (const double *)t->view.buf;
    t->vi = narrow ? (const int32_t *)t->view.buf : NULL;
    t->f = (const unsigned char *)PyBytes_AS_STRING(floats);
    t->n = t->view.len / w;
    if (PyBytes_GET_SIZE(floats) != t->n) {
        PyBuffer_Release(&t->view);
        PyErr_Format(PyExc_ValueError, "%s: a times column has one flag per value", what);
        return 0;
    }
    return 1;
}

/* the value at i < t->n, as a double (an int32's exactly) */
static inline double
time_value(const times_t *t, Py_ssize_t i)
{
    return t->vi != NULL ? (double)t->vi[i] : t->v[i];
}

/* The time at i < t->n as a number: 1, or 0 with ValueError set when its flag is neither 1
 * (a float) nor 0 (an int: an integral double of magnitude at most 2^53, so that the cast
 * is exact), or is 1 in an int32 column. */
static inline int
time_at(const times_t *t, Py_ssize_t i, num_t *x)
{
    double v = time_value(t, i);
    x->f = v;
    x->i = 0;
    x->is_float = t->f[i];
    if (x->is_float == 1)
        return t->vi == NULL ? 1 : (PyErr_SetString(PyExc_ValueError, "an int32 times column holds no float"), 0);
    /* in range first, so that the cast is defined; then integral exactly when it round-trips */
    if (x->is_float == 0 && fabs(v) <= EXACT_INT_MAX && (double)(long long)v == v) {
        x->i = (long long)v;
        return 1;
    }
    PyErr_SetString(PyExc_ValueError, "a times column's flag is 1 (a float) or 0 (an int of magnitude "
                                      "at most 2^53)");
    return 0;
}

/* start_list(end_values, end_floats, ready_values, ready_floats, is_comm, durations[, never]) -> list
 * | None: runtime_plain's start times as the reference makes them (runtime._Sweep.run): a
 * SEND/RECV's (is_comm[i] nonzero) its ready time, another action's its end minus its
 * duration, the Python operation: an int when both are ints (exact: each at most 2^53 in
 * magnitude), else the double subtraction of the two as doubles (an int converted exactly).
 * None when a duration is a number read_number does not take.  ``never`` (bytes or None): a
 * hang's compute actions that never ended (runtime_plain), whose start is the int 0. */
static PyObject *
k_start_list(PyObject *self, PyObject *args)
{
    PyObject *ev, *ef, *rv, *rf, *comm_o, *dur_o, *never_o = Py_None;
    times_t e, r;
    if (!PyArg_ParseTuple(args, "OOOOSO!|O", &ev, &ef, &rv, &rf, &comm_o, &PyList_Type, &dur_o, &never_o))
        return NULL;
    if (never_o != Py_None && !PyBytes_CheckExact(never_o)) {
        PyErr_SetString(PyExc_TypeError, "start_list: never is bytes or None");
        return NULL;
    }
    if (!read_times(ev, ef, &e, "start_list"))
        return NULL;
    if (!read_times(rv, rf, &r, "start_list")) {
        PyBuffer_Release(&e.view);
        return NULL;
    }
    PyObject *out = NULL;
    Py_ssize_t n = e.n;
    if (r.n != n || PyBytes_GET_SIZE(comm_o) != n || PyList_GET_SIZE(dur_o) != n ||
        (never_o != Py_None && PyBytes_GET_SIZE(never_o) != n)) {
        PyErr_SetString(PyExc_ValueError, "start_list: the columns' lengths disagree");
        goto done;
    }
    const unsigned char *is_comm = (const unsigned char *)PyBytes_AS_STRING(comm_o);
    const unsigned char *never = never_o != Py_None ? (const unsigned char *)PyBytes_AS_STRING(never_o) : NULL;
    number_cache_t cache = {{NULL}, {0}, {0}, 0};
    /* the durations first: no list is made when one is not a number the kernel takes */
    for (Py_ssize_t i = 0; i < n; i++) {
        double d;
        unsigned char df;
        if (!is_comm[i] && !read_number_cached(&cache, PyList_GET_ITEM(dur_o, i), &d, &df)) {
            out = declined();
            goto done;
        }
    }
    if (!(out = new_list(n)))
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        num_t x;
        PyObject *o = NULL;
        if (is_comm[i]) {
            if (time_at(&r, i, &x))
                o = number_object(x.is_float ? x.f : (double)x.i, x.is_float);
        } else if (never != NULL && never[i]) {
            o = PyLong_FromLong(0); /* a hang's action that never ended */
        } else if (time_at(&e, i, &x)) {
            double d = 0;
            unsigned char df = 0;
            read_number_cached(&cache, PyList_GET_ITEM(dur_o, i), &d, &df); /* read above */
            o = x.is_float || df ? PyFloat_FromDouble((x.is_float ? x.f : (double)x.i) - d)
                                 : PyLong_FromLongLong(x.i - (long long)d);
        }
        if (o == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, o);
    }
done:
    PyBuffer_Release(&e.view);
    PyBuffer_Release(&r.view);
    return out;
}

/* times_list(values, floats) -> list: the times as Python's sweep makes them. */
static PyObject *
k_times_list(PyObject *self, PyObject *args)
{
    PyObject *values, *floats;
    times_t t;
    if (!PyArg_ParseTuple(args, "OO", &values, &floats) || !read_times(values, floats, &t, "times_list"))
        return NULL;
    PyObject *out = new_list(t.n);
    for (Py_ssize_t i = 0; out != NULL && i < t.n; i++) {
        num_t x;
        PyObject *o = time_at(&t, i, &x) ? number_object(x.f, x.is_float) : NULL;
        if (o == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, o);
    }
    PyBuffer_Release(&t.view);
    return out;
}

/* durations_plain(code, table) -> list: table[code[i]] for each action, code -1 reading the
 * table's last entry (graph.durations_for with one cost per kind: the same objects).  The
 * kinds are the table's entries but its last. */
static PyObject *
k_durations_plain(PyObject *self, PyObject *args)
{
    PyObject *code_o, *table;
    if (!PyArg_ParseTuple(args, "OO!", &code_o, &PyList_Type, &table))
        return NULL;
    scratch_t sc = SCRATCH_INIT;
    Py_ssize_t n = 0, T;
    /* the codes first: reading them may run Python code (an iterator), which may change the
     * table; then the table's entries are held, and only then is anything made */
    long long *code = index_array(&sc, code_o, &n, "durations_plain: code");
    PyObject *held[MAX_CODES + 1], *out = NULL;
    if (code == NULL)
        goto done;
    T = PyList_GET_SIZE(table);
    if (T < 2 || T > MAX_CODES + 1) {
        PyErr_SetString(PyExc_ValueError, "durations_plain: one duration per kind code, and one for -1");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (code[i] < -1 || code[i] >= T - 1) {
            PyErr_SetString(PyExc_ValueError, "durations_plain: a code is not a kind code or -1");
            goto done;
        }
    for (Py_ssize_t k = 0; k < T; k++) {
        held[k] = PyList_GET_ITEM(table, k);
        Py_INCREF(held[k]);
    }
    out = new_list(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *x = held[code[i] < 0 ? T - 1 : code[i]];
        Py_INCREF(x);
        PyList_SET_ITEM(out, i, x);
    }
    for (Py_ssize_t k = 0; k < T; k++)
        Py_DECREF(held[k]);
done:
    scratch_free(&sc);
    return out;
}

/* busy_plain(starts, durations) -> list | None: each device's busy time, sum(durations of
 * its actions) in order (cost/timeline.py Timeline.busy), when every duration is an exact
 * int (then the sum is exact in any order: Python's ints, summed in long long with overflow
 * checked); None when one is not (a float, a bool: Python's sum then adds them its own
 * way) or a sum outgrows a long long. */
static PyObject *
k_busy_plain(PyObject *self, PyObject *args)
{
    PyObject *starts_o, *dur_o, *out = NULL;
    if (!PyArg_ParseTuple(args, "OO!", &starts_o, &PyList_Type, &dur_o))
        return NULL;
    scratch_t sc = SCRATCH_INIT;
    Py_ssize_t D1 = 0;
    long long *starts = index_array(&sc, starts_o, &D1, "busy_plain: starts");
    if (starts == NULL || !valid_starts(starts, D1, PyList_GET_SIZE(dur_o), "busy_plain"))
        goto done;
    long long *sums = scratch_array(&sc, D1, sizeof(long long), 1);
    if (sums == NULL)
        goto done;
    /* nothing is made and nothing is called while the list's items are read */
    for (Py_ssize_t d = 0; d + 1 < D1; d++)
        for (long long i = starts[d]; i < starts[d + 1]; i++) {
            PyObject *x = PyList_GET_ITEM(dur_o, i);
            int overflow = 0;
            long long v = PyLong_CheckExact(x) ? PyLong_AsLongLongAndOverflow(x, &overflow) : 0;
            if (!PyLong_CheckExact(x) || overflow || (v > 0 && sums[d] > LLONG_MAX - v) ||
                (v < 0 && sums[d] < LLONG_MIN - v)) {
                out = declined();
                goto done;
            }
            sums[d] += v;
        }
    out = list_of_ints(sums, D1 - 1);
done:
    scratch_free(&sc);
    return out;
}

/* ------------------------------------------------------------------ sweep_plain */

/* sweep_plain(starts, wait, durations, comm)
 *   -> (start_values, start_floats, end_values, end_floats, makespan) | None
 *
 * The twin of graph.sweep for a graph without extra waits (more_waits empty): every device
 * runs its list in order, each action at max(its device's clock, end of wait[i] + comm).
 * The times come back as columns (see "Times" above) and the makespan as Python's
 * max(end, default=0) would give it.  None when some device never finishes (graph.sweep then finds the cycles), when a duration
 * or comm is not a number read_number takes, or when the ints could outgrow doubles (below).
 *
 * It does Python's operations in Python's order and keeps each value's type as Python's
 * would be: a device's clock starts as the int 0, "no producer" ends at the float -inf,
 * st = end[j] + comm; if st < now: st = now; end = st + duration.  A value is a float as soon
 * as one operand is; an int when both are.
 *
 * Exactness.  An int value is the int 0 plus int durations and int comms along a chain of
 * actions, each one an action that ended before the next started (its wait or its device
 * predecessor), so each action's duration appears at most once in it and there are at most
 * n comms.  Hence every int value, final or intermediate, has magnitude at most
 *     bound = sum over int durations |d| + n |comm| (the last term when comm is an int),
 * and when bound <= 2^53 every one of them is a double exactly: the double sums are Python's
 * exact int sums, and the comparisons of ints with each other or with floats are Python's
 * exact comparisons.  Float operations are IEEE double in both.  When bound > 2^53 the kernel
 * declines and Python's exact ints answer.  Checking it is one pass over the durations. */
static PyObject *
k_sweep_plain(PyObject *self, PyObject *args)
{
    PyObject *starts_o, *wait_o, *dur_o, *comm_o;
    if (!PyArg_ParseTuple(args, "OOO!O", &starts_o, &wait_o, &PyList_Type, &dur_o, &comm_o))
        return NULL;
    Py_ssize_t D1 = 0, n = 0;
    scratch_t sc = SCRATCH_INIT;
    ints_t wait = {{NULL}};
    column_t scol = {NULL}, ecol = {NULL};
    /* (1) what may run Python code: the columns read (an iterable is listed, a buffer
     * viewed), then every column and list this call makes; (2) the durations, read into the
     * end-time column (each end replaces its action's duration as the sweep goes) and the
     * waits checked, with nothing made or called; (3) the sweep; (4) the results. */
    long long *starts = index_array(&sc, starts_o, &D1, "sweep_plain: starts");
    double *st = NULL, *en = NULL, *clock = NULL;
    unsigned char *st_f = NULL, *en_f = NULL, *clock_f = NULL, *done_flag = NULL;
    int32_t *head = NULL, *nextw = NULL, *stack = NULL;
    long long *ptr = NULL;
    PyObject *result = NULL, *sv = NULL, *ev = NULL, *sf = NULL, *ef = NULL, *makespan = NULL;
    double comm = 0;
    unsigned char comm_f = 0;
    if (starts == NULL || !read_ints(&sc, wait_o, &wait, &n, "sweep_plain: wait") ||
        !valid_starts(starts, D1, n, "sweep_plain"))
        goto done;
    if (PyList_GET_SIZE(dur_o) != n) {
        PyErr_SetString(PyExc_ValueError, "sweep_plain: one duration per action");
        goto done;
    }
    Py_ssize_t D = D1 - 1;
    /* the times go straight into the columns handed back; per action (head: n + 1, with the
     * "no producer" entry), then per device (scratch_array adds the one) */
    if (!(st = column_new(&scol, "d", n)) || !(en = column_new(&ecol, "d", n)) ||
        !(sf = new_bytes(n)) || !(ef = new_bytes(n)) ||
        !(done_flag = scratch_array(&sc, n, 1, 1)) || !(head = scratch_array(&sc, n, sizeof(int32_t), 0)) ||
        !(nextw = scratch_array(&sc, D, sizeof(int32_t), 0)) ||
        !(stack = scratch_array(&sc, D, sizeof(int32_t), 0)) ||
        !(ptr = scratch_array(&sc, D, sizeof(long long), 0)) ||
        !(clock = scratch_array(&sc, D, sizeof(double), 0)) || !(clock_f = scratch_array(&sc, D, 1, 0)))
        goto done;
    st_f = (unsigned char *)PyBytes_AS_STRING(sf);
    en_f = (unsigned char *)PyBytes_AS_STRING(ef);

    /* (2): from here to the end of the sweep nothing is made and nothing is called */
    if (PyList_GET_SIZE(dur_o) != n) { /* Python code changed it meanwhile */
        PyErr_SetString(PyExc_ValueError, "sweep_plain: one duration per action");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long j = int_at(&wait, i);
        if (j < 0 || j > n) {
            PyErr_SetString(PyExc_ValueError, "sweep_plain: a wait is not an action index or n");
            goto done;
        }
    }
    if (!read_number(comm_o, &comm, &comm_f))
        goto not_plain;
    long long bound = 0; /* sum of |int duration| so far: at most 2^53 + 2^53, no overflow */
    number_cache_t cache = {{NULL}, {0}, {0}, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!read_number_cached(&cache, PyList_GET_ITEM(dur_o, i), &en[i], &en_f[i]))
            goto not_plain;
        if (!en_f[i] && (bound += (long long)fabs(en[i])) > EXACT_INT_MAX)
            goto not_plain;
    }
    if (!comm_f && comm != 0) {
        long long c = (long long)fabs(comm);
        if ((long long)n > (EXACT_INT_MAX - bound) / c)
            goto not_plain;
    }
    for (Py_ssize_t i = 0; i <= n; i++)
        head[i] = -1;
    done_flag[n] = 1; /* "no producer": always done, ends at the float -infinity */
    Py_ssize_t top = 0;
    for (Py_ssize_t d = D - 1; d >= 0; d--) {
        ptr[d] = starts[d];
        clock[d] = 0;
        clock_f[d] = 0;
        stack[top++] = (int32_t)d;
    }
    /* a device is on the stack at most once (pushed at the start, or when it was woken after
     * it blocked), so the stack never holds more than D */
    while (top > 0) {
        Py_ssize_t d = stack[--top];
        long long i = ptr[d], stop = starts[d + 1];
        double now = clock[d];
        unsigned char now_f = clock_f[d];
        while (i < stop) {
            long long j = int_at(&wait, i);
            if (!done_flag[j]) {
                nextw[d] = head[j];
                head[j] = (int32_t)d;
                break;
            }
            double s = (j < n ? en[j] : -Py_HUGE_VAL) + comm;
            unsigned char s_f = (j < n ? en_f[j] : 1) | comm_f;
            if (s < now) {
                s = now;
                s_f = now_f;
            }
            double dur = en[i]; /* its duration, until its end replaces it */
            unsigned char dur_f = en_f[i];
            st[i] = s;
            st_f[i] = s_f;
            now = s + dur;
            now_f = s_f | dur_f;
            en[i] = now;
            en_f[i] = now_f;
            done_flag[i] = 1;
            for (int32_t w = head[i]; w >= 0; w = nextw[w])
                stack[top++] = w;
            head[i] = -1;
            i++;
        }
        ptr[d] = i;
        clock[d] = now;
        clock_f[d] = now_f;
    }
    int finished = 1;
    for (Py_ssize_t d = 0; d < D; d++)
        finished &= ptr[d] == starts[d + 1];
    if (!finished)
        goto not_plain;
    Py_ssize_t last = -1; /* Python's max(end, default=0): the first greatest */
    for (Py_ssize_t i = 0; i < n; i++)
        if (last < 0 || en[i] > en[last])
            last = i;
    /* (4) */
    makespan = last < 0 ? PyLong_FromLong(0) : number_object(en[last], en_f[last]);
    sv = column_take(&scol);
    ev = column_take(&ecol);
    if (makespan != NULL)
        result = PyTuple_Pack(5, sv, sf, ev, ef, makespan);
    goto done;
not_plain:
    result = declined();
done:
    column_free(&scol);
    column_free(&ecol);
    Py_XDECREF(sv);
    Py_XDECREF(ev);
    Py_XDECREF(sf);
    Py_XDECREF(ef);
    Py_XDECREF(makespan);
    release_ints(&wait);
    scratch_free(&sc);
    return result;
}

/* ------------------------------------------------------------------ runtime_plain */

/* runtime_plain(starts, code, stage, mb, wait, durations, comm, route, received, comm_kinds,
 *               nccl, buffered, by_edge, by_direction, lazy, retired_waits, retired_sends,
 *               max_cycles)
 *   -> (end_values, end_floats, ready_values, ready_floats, bind, done_by, partner, lane_of,
 *       lanes, makespan, last, is_comm, hang) | None
 *
 * The twin of runtime.simulate (match, data_deps, _Sweep): PyTorch's runtime over gloo
 * (``nccl`` 0: one host lane per rank) or NCCL (a compute stream and one communication
 * stream per communicator, or per peer for a lazily initialised shared group), on a graph of
 * single actions (``code`` -1 only for bookkeeping, which runs on the host or compute stream
 * for its duration), one route (``route``: S ints, the rank of each stage), no BATCH, no
 * second wait (the caller declines those), ``wait`` None when no action but a SEND/RECV
 * waits on another device (a graph compiled without it); each WAIT_SEND of ``retired_waits`` waits for the
 * send of ``retired_sends`` at the same place, its only data (runtime.send_waits: PyTorch
 * 2.15's _PendingSendTracker).  ``durations``: a list, one number per action, or a tuple, one
 * per kind code and then the one for code -1 (graph.CodeDurations: no list of n).  ``received``: per code, (stage offset of the producer, RECV
 * code) for a kind whose input from another rank comes through a RECV, else None;
 * ``comm_kinds``: per code, (peer stage offset, is a send, carries an activation, the code
 * of the action it is meant for) for SEND/RECV, else None.
 *
 * It declines (None) whenever the reference would report anything about the messages: a
 * SEND or RECV without a peer stage or a partner (surplus), a matched pair whose labels
 * differ (a crossing), a number read_number does not take, or ints that could outgrow
 * doubles (bound as in sweep_plain, with each message's two durations counted).  Otherwise
 * every column is what the reference's RuntimeResult holds, number for number and type for
 * type (times as graph.Times columns, their values bytes of native doubles, end_floats None
 * when no end is a float: the caller's flags are then all 0; end_values are bytes of
 * native int32 instead, 4 bytes an entry, when every duration and comm is an int and the
 * bound fits in 31 bits, so the caller reads their width off their length; the start
 * times, a SEND/RECV's ready and a compute action's end - duration, are left for the caller
 * to make when it reads them; bind and partner are bytes of native int32, 4 bytes an entry,
 * so it declines 3n >= INT32_MAX (bind and done_by: the binders, RT_DONE_NONE), and lane_of
 * of uint8 when the layout makes at most 256 lanes, else of uint16 (lane_t: it declines a
 * run of more lanes), so the caller reads its width off its length; the matching's
 * peer_device is the device of each message's partner, and no column here): the
 * operations are the reference's in its order, a value a float as soon as one operand is.  ``lanes``: per lane (rank, "host" | "compute" | "comm",
 * the stream's key as runtime._stream_label reads it, or None); ``makespan`` and ``last``:
 * max(end) as Python gives it, and the first action that ends then; ``is_comm``: bytes, 1
 * for each SEND/RECV.
 *
 * ``hang`` is None for a run that ends.  For one that hangs it is the reference's rounds
 * (release the first wait of each cycle found and go on, up to ``max_cycles`` cycles and one
 * more): (cycles, stuck, unsent, never), each wait a tuple (lane, rank, head, awaited, event)
 * as runtime.Wait holds it; ``cycles`` each in wait order, ``stuck`` each lane's first wait at
 * each head it stopped at (in the order the rounds found them), ``unsent`` over gloo the
 * sends never done whose lane ran to its end (before 2.15 the runtime's step waits for each),
 * ``never`` bytes, 1 where a compute action never ended or a SEND/RECV was never ready; what
 * never happened is the int 0 in the time columns, as in the reference's.  ``ready_values``
 * and ``ready_floats`` are None for a run that ends: each ready time is then its binder's
 * fin (rt_ready), which bound_ready reads off bind and the end times when they are asked for. */
typedef struct {
    double v;
    unsigned char f; /* 1: a float; 0: an int, exactly v */
} rnum_t;

static inline rnum_t
rn_add(rnum_t a, rnum_t b)
{
    rnum_t r = {a.v + b.v, (unsigned char)(a.f | b.f)};
    return r;
}

static PyObject *
rn_object(rnum_t x)
{
    return x.f ? PyFloat_FromDouble(x.v) : PyLong_FromLongLong((long long)x.v);
}

#define RT_END 0
#define RT_READY 1
#define RT_DONE 2
/* The binders (runtime.RuntimeResult.bind, 3n entries in the reference's list) as two
 * columns: ``bind``, one int32 an action, the event that set a compute action's END or a
 * SEND/RECV's READY (-1: time 0); and ``done_by``, one byte an action, what set a SEND/RECV's
 * DONE, which is always the READY of the message or of its partner (rt_finish): RT_DONE_SELF,
 * RT_DONE_PARTNER, or RT_DONE_NONE (-1 in the reference's list, as an event of the other kind
 * is).  Four bytes an action fewer than an int32 per event that has a binder.  During the
 * sweep done_by is the top bits of the action's state byte (RT_DONE_SHIFT: one byte an action
 * fewer at the run's peak), and the state byte becomes the column when the sweep is over. */
#define RT_DONE_NONE 0
#define RT_DONE_SELF 1
#define RT_DONE_PARTNER 2
#define RT_DONE_SHIFT 4

static int
compare_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* A lane's index in runtime_plain's lane_of column: one byte an action when the layout
 * allows at most 256 lanes (lane_bound), else two.  A run with more lanes than two bytes
 * hold (NCCL's per-edge or lazily paired streams of more than a few hundred ranks that
 * each talk to many peers) is declined, and the reference runs it. */
typedef uint16_t lane_t;
#define RT_LANE_MAX 65535
#define RT_LANE_BYTE 256 /* the lanes one byte an action holds */

typedef struct {
    unsigned char *b; /* one byte an action, or NULL: then h, two */
    lane_t *h;
} lanes_t;

static HOT_INLINE long long
lane_at(const lanes_t *l, long long i)
{
    return l->b != NULL ? l->b[i] : l->h[i];
}

static inline void
lane_set(lanes_t *l, long long i, Py_ssize_t k)
{
    if (l->b != NULL)
        l->b[i] = (unsigned char)k;
    else
        l->h[i] = (lane_t)k;
}

/* runtime_plain's lanes: with at most RT_SCAN_LANES lanes on every device, a lane's cursor
 * steps over its device's actions (lane_next) instead of a list of its items */
#define RT_SCAN_LANES 8

/* the first action of lane k at index i or after, below end (end: none) */
static HOT_INLINE long long
lane_next(const lanes_t *lane_of, Py_ssize_t k, long long i, long long end)
{
    if (lane_of->b != NULL) {
        while (i < end && lane_of->b[i] != k)
            i++;
        return i;
    }
    while (i < end && lane_of->h[i] != k)
        i++;
    return i;
}

typedef struct {
    unsigned char send_of[MAX_CODES]; /* per kind code: 1 for a SEND (no column: read off the code) */
    const int32_t *partner;
    /* each action's duration: dcode[code + 1] when every action of a code has the same
     * one (dix NULL), else dtab[dix[i]], the table holding each distinct number object read
     * (a duration per action is one of the costs' few numbers) */
    const ints_t *code;
    rnum_t dcode[MAX_CODES + 1];
    const int32_t *dix;
    const rnum_t *dtab;
    rnum_t comm;
    int buffered;
    /* the times, in the result's columns: fin (a compute action's end, a SEND/RECV's done)
     * and ready, each a value and its float flag; state: bit 0 fin known, bit 1 ready known
     * (RT_HAS_*), and done_by above RT_DONE_SHIFT.
     * ready_v is NULL until the run hangs (rt_ready: a ready time is its binder's fin).
     * fin_i, when every duration is an int and their sum fits: the fins as int32, 4 bytes an
     * action instead of 8 (fin_v NULL; fin_f then never written) */
    double *fin_v, *ready_v;
    int32_t *fin_i;
    unsigned char *fin_f, *ready_f, *state;
    int any_float; /* a fin was a float: until then fin_f is not written (it is all 0) */
    int32_t *bind;
    /* the lanes waiting: waited[k], the action blocked lane k waits for; whead[l], the
     * first of the lanes that wait for an action of lane l, linked by wnext (the last to
     * begin waiting first).  A lane per action would be a column; a list per lane is L
     * entries, and an action's waiters are found on its own lane's list (RT_AWAITED: it
     * has some) */
    lanes_t lane_of;
    int32_t *waited, *whead, *wnext;
    int32_t *stack;
    Py_ssize_t top;
} rt_t;

#define RT_HAS_FIN 1
#define RT_HAS_READY 2
#define RT_RETIRED 4 /* a WAIT_SEND whose data is the send it retires (in partner, meanwhile) */
#define RT_AWAITED 8 /* a lane waits for its fin */

/* action i is a SEND: read off its kind code (send_of: 1 per SEND code), no column */
static inline int
code_is_send(const ints_t *code, const unsigned char *send_of, long long i)
{
    long long c = int_at(code, i);
    return c >= 0 && send_of[c];
}

static inline int
rt_is_send(const rt_t *r, long long i)
{
    return code_is_send(r->code, r->send_of, i);
}

static inline rnum_t
rt_fin(const rt_t *r, long long i)
{
    if (r->fin_i != NULL) {
        rnum_t x = {(double)r->fin_i[i], 0};
        return x;
    }
    rnum_t x = {r->fin_v[i], r->fin_f[i]};
    return x;
}

/* A SEND/RECV becomes ready at its lane's clock, and the lane's clock is always the fin of
 * the event that set it last (its binder), or the int 0 before any (binder -1).  Until a
 * run hangs every fin is set once, before it is read, so the ready time is read off the
 * binder and needs no column (9 bytes an action); the rounds of a hang release waits at a
 * provisional time that a partner may set again, so from the first round the ready times
 * are kept as the reference keeps them (ready_v, filled from the binders then). */
static inline rnum_t
rt_ready(const rt_t *r, long long i)
{
    if (r->ready_v != NULL) {
        rnum_t x = {r->ready_v[i], r->ready_f[i]};
        return x;
    }
    int32_t b = r->bind[i];
    if (b < 0) {
        rnum_t zero = {0, 0};
        return zero;
    }
    return rt_fin(r, b / 3);
}

/* action i's fin is t: the lanes waiting for it go back on the stack */
static inline void
rt_set_fin(rt_t *r, long long i, rnum_t t)
{
    if (r->fin_i != NULL) { /* an int within the bound the durations' sum gives (runtime_plain) */
        r->fin_i[i] = (int32_t)t.v;
    } else {
        r->fin_v[i] = t.v;
        if (t.f || r->any_float) { /* fin_f is zero until the first float (a zero mapping, unwritten) */
            r->fin_f[i] = t.f;
            r->any_float = 1;
        }
    }
    r->state[i] |= RT_HAS_FIN;
    if (!(r->state[i] & RT_AWAITED))
        return;
    r->state[i] &= (unsigned char)~RT_AWAITED;
    Py_ssize_t from = r->top;
    for (int32_t *link = &r->whead[lane_at(&r->lane_of, i)]; *link >= 0;) {
        int32_t k = *link;
        if (r->waited[k] == i) { /* unlinked, onto the stack */
            *link = r->wnext[k];
            r->stack[r->top++] = k;
        } else {
            link = &r->wnext[k];
        }
    }
    /* the list holds the lanes last to wait first: on the stack they go in the order they
     * began to wait, as the reference's list extends it, so that the last to wait runs first.
     * In a run that ends the order changes nothing; in a hang's rounds a released wait's
     * time is provisional (its partner may still set it), so who reads it first does. */
    for (Py_ssize_t lo = from, hi = r->top - 1; lo < hi; lo++, hi--) {
        int32_t x = r->stack[lo];
        r->stack[lo] = r->stack[hi];
        r->stack[hi] = x;
    }
}

static inline rnum_t
rt_dur(const rt_t *r, long long i)
{
    return r->dix != NULL ? r->dtab[r->dix[i]] : r->dcode[int_at(r->code, i) + 1];
}

static inline void
rt_finish(rt_t *r, long long x, rnum_t t, long long via)
{
    /* via: x or its partner (done_by, in the state byte's top bits; set once: a DONE is) */
    r->state[x] = (unsigned char)((r->state[x] & ((1 << RT_DONE_SHIFT) - 1)) |
                                  ((via == x ? RT_DONE_SELF : RT_DONE_PARTNER) << RT_DONE_SHIFT));
    rt_set_fin(r, x, t);
}

/* runtime._Sweep._set_ready */
static void
rt_set_ready(rt_t *r, long long x, rnum_t t)
{
    if (r->ready_v != NULL) { /* else t is its binder's fin (rt_ready) */
        r->ready_v[x] = t.v;
        r->ready_f[x] = t.f;
    }
    r->state[x] |= RT_HAS_READY;
    long long p = r->partner[x];
    int sending = rt_is_send(r, x);
    rnum_t dx = rt_dur(r, x), dp = rt_dur(r, p);
    if (r->buffered && sending)
        rt_finish(r, x, rn_add(t, dx.v > dp.v ? dx : dp), x);
    if (!(r->state[p] & RT_HAS_READY))
        return;
    long long s = sending ? x : p, rc = sending ? p : x;
    rnum_t rs = rt_ready(r, s), rr = rt_ready(r, rc);
    rnum_t ds = sending ? dx : dp, dr = sending ? dp : dx;
    rnum_t delta = ds.v > dr.v ? ds : dr;
    if (!(r->state[s] & RT_HAS_FIN))
        rt_finish(r, s, rn_add(rs.v >= rr.v ? rs : rr, delta), rs.v >= rr.v ? s : rc);
    rnum_t arrive = rn_add(rs, r->comm);
    rt_finish(r, rc, rn_add(arrive.v > rr.v ? arrive : rr, delta), arrive.v > rr.v ? s : rc);
}

static PyObject *
k_runtime_plain(PyObject *self, PyObject *args)
{
    PyObject *starts_o, *code_o, *stage_o, *mb_o, *wait_o, *dur_o, *comm_o, *route_o, *received_o, *kinds_o,
        *rw_o, *rs_o;
    int nccl, buffered, by_edge, by_direction, lazy;
    Py_ssize_t max_cycles;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO!O!pppppOOn", &starts_o, &code_o, &stage_o, &mb_o, &wait_o,
                          &dur_o, &comm_o, &route_o, &PyTuple_Type, &received_o, &PyTuple_Type,
                          &kinds_o, &nccl, &buffered, &by_edge, &by_direction, &lazy, &rw_o, &rs_o, &max_cycles))
        return NULL;
    if (!PyList_Check(dur_o) && !PyTuple_Check(dur_o)) {
        PyErr_SetString(PyExc_TypeError, "runtime_plain: durations is a list (one per action) or a tuple (one "
                                         "per kind code, then the one for -1)");
        return NULL;
    }
    /* a tuple: every action of a code lasts its code's entry (graph.CodeDurations' table) */
    const int per_code = PyTuple_Check(dur_o);
    if (max_cycles < 0 || max_cycles > 1000) {
        PyErr_SetString(PyExc_ValueError, "runtime_plain: max_cycles is 0 to 1000");
        return NULL;
    }
    scratch_t sc = SCRATCH_INIT;
    PyObject *result = NULL, *lanes_l = NULL, *flags[4] = {NULL}; /* the times' floats; is_comm; never */
    PyObject *hang = NULL; /* a run that hangs: (cycles, stuck, unsent, never) */
    Py_ssize_t D1 = 0, n = 0, n2 = 0, n3 = 0, n4 = 0, S = 0;
    ints_t code_c = {{NULL}}, stage_c = {{NULL}}, mb_c = {{NULL}}, wait_c = {{NULL}}, ret_w = {{NULL}},
           ret_s = {{NULL}};
    /* fin, ready (doubles); bind, partner (int32), lane_of (lane_t): bytes, which it allocates
     * unwritten, so that they are on huge pages (huge_hint); the caller reads them through
     * memoryview casts */
    PyObject *cols[5] = {NULL}, *done_o = NULL;
    /* (1) the columns and tables, which may run Python code, then every column made here */
    long long *starts = index_array(&sc, starts_o, &D1, "runtime_plain: starts");
    if (starts == NULL || !read_ints(&sc, code_o, &code_c, &n, "runtime_plain: code") ||
        !read_ints(&sc, stage_o, &stage_c, &n2, "runtime_plain: stage") ||
        !read_ints(&sc, mb_o, &mb_c, &n3, "runtime_plain: mb") ||
        (wait_o != Py_None && !read_ints(&sc, wait_o, &wait_c, &n4, "runtime_plain: wait")) ||
        !valid_starts(starts, D1, n, "runtime_plain"))
        goto done;
    /* wait None: no action other than a SEND/RECV waits on another device (compile_columns
     * without keep_wait), so none is read */
    const int no_waits = wait_o == Py_None;
    if (no_waits)
        n4 = n;
    long long *route = index_array(&sc, route_o, &S, "runtime_plain: route");
    Py_ssize_t nret = 0, nret2 = 0;
    /* read where they lie (an int32 array each: 8 bytes a pair, not 16 copied) */
    if (route == NULL || !read_ints(&sc, rw_o, &ret_w, &nret, "runtime_plain: retired_waits") ||
        !read_ints(&sc, rs_o, &ret_s, &nret2, "runtime_plain: retired_sends"))
        goto done;
    Py_ssize_t D = D1 - 1, K = PyTuple_GET_SIZE(kinds_o);
    if (n2 != n || n3 != n || n4 != n || nret != nret2 || Py_SIZE(dur_o) != (per_code ? K + 1 : n) || K < 1 ||
        K > MAX_CODES ||
        PyTuple_GET_SIZE(received_o) != K || n >= INT32_MAX / 3 || D >= (1 << 15)) { /* bind: 3n int32 */
        PyErr_SetString(PyExc_ValueError, "runtime_plain: the columns' and tables' lengths disagree");
        goto done;
    }
    long long rec_off[MAX_CODES], rec_code[MAX_CODES], peer_off[MAX_CODES], for_code[MAX_CODES];
    int send_k[MAX_CODES], fwd_k[MAX_CODES], ok = 1;
    /* whether action i is a SEND/RECV, read off its code (IS_COMM, below): per code + 1 (-1:
     * bookkeeping, no message).  is_comm, the column the caller reads, is made at the end,
     * when the sweep's scratch is given back (n bytes fewer at the peak) */
    unsigned char comm_of[MAX_CODES + 1] = {0};
    for (Py_ssize_t c = 0; c < K; c++) {
        PyObject *rv = PyTuple_GET_ITEM(received_o, c), *kv = PyTuple_GET_ITEM(kinds_o, c);
        rec_code[c] = -1;
        rec_off[c] = 0;
        if (rv != Py_None) {
            ok &= PyTuple_Check(rv) && PyTuple_GET_SIZE(rv) == 2;
            if (ok) {
                rec_off[c] = exact_int(PyTuple_GET_ITEM(rv, 0), &ok);
                rec_code[c] = exact_int(PyTuple_GET_ITEM(rv, 1), &ok);
                ok &= rec_code[c] >= 0 && rec_code[c] < K && llabs(rec_off[c]) <= MAX_OFFSET;
            }
        }
        comm_of[c + 1] = kv != Py_None;
        send_k[c] = fwd_k[c] = 0;
        peer_off[c] = 0;
        for_code[c] = -1;
        if (kv != Py_None) {
            ok &= PyTuple_Check(kv) && PyTuple_GET_SIZE(kv) == 4 && PyBool_Check(PyTuple_GET_ITEM(kv, 1)) &&
                  PyBool_Check(PyTuple_GET_ITEM(kv, 2));
            if (ok) {
                peer_off[c] = exact_int(PyTuple_GET_ITEM(kv, 0), &ok);
                send_k[c] = PyTuple_GET_ITEM(kv, 1) == Py_True;
                fwd_k[c] = PyTuple_GET_ITEM(kv, 2) == Py_True;
                for_code[c] = exact_int(PyTuple_GET_ITEM(kv, 3), &ok);
                ok &= for_code[c] >= 0 && for_code[c] < K && llabs(peer_off[c]) <= MAX_OFFSET;
            }
        }
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "runtime_plain: bad kind tables");
            goto done;
        }
    }
    /* the int columns are int32 ("i", as int is on every platform CPython supports): the
     * actions (and 3n event keys) are fewer than INT32_MAX, checked above */
    /* the most lanes the layout makes: a rank's compute stream (or host lane) and a stream
     * per key of its messages (runtime._stream_key): one per peer and direction (per edge),
     * per peer (lazily paired), per direction, or one */
    const double lane_bound = (double)D * (!nccl ? 1.0 : 1.0 + (by_edge ? 2.0 * (double)D : by_direction ? 2.0
                                                               : lazy ? (double)D : 1.0));
    const Py_ssize_t lane_w = lane_bound <= RT_LANE_BYTE ? 1 : (Py_ssize_t)sizeof(lane_t);
    /* fin: once the durations give its width, below; ready: a hang's, below */
    const Py_ssize_t col_len[5] = {0, 0, 4 * n, 4 * n, lane_w * n};
    for (int q = 2; q < 5; q++)
        if (!(cols[q] = new_bytes(col_len[q])))
            goto done;
    double *rv = NULL;
    int32_t *bv = (int32_t *)PyBytes_AS_STRING(cols[2]), *partner = (int32_t *)PyBytes_AS_STRING(cols[3]);
    lanes_t lane_of = {lane_w == 1 ? (unsigned char *)PyBytes_AS_STRING(cols[4]) : NULL,
                       lane_w == 1 ? NULL : (lane_t *)PyBytes_AS_STRING(cols[4])};
    /* done_by, the sweep's state bytes meanwhile (rt_t.state) */
    if (!(done_o = new_bytes(n)))
        goto done;
    unsigned char *done_by = (unsigned char *)PyBytes_AS_STRING(done_o);
    /* the fins' float flags: zero, and written from the first float on (rt_set_fin); a
     * column for the caller only when there was one (a run of ints: n bytes it never holds) */
    unsigned char *ffp = scratch_array(&sc, n, 1, 1), *rfp = NULL;
    if (ffp == NULL)
        goto done;
    /* (2) from here on nothing is made and nothing is called: the columns read where they
     * lie (a code -1 is bookkeeping) and checked */
#define CODE(i) int_at(&code_c, (i))
#define STAGE(i) int_at(&stage_c, (i))
#define MB(i) int_at(&mb_c, (i))
    long long M = 1; /* the microbatches the coded entries name (mb -1: out of range) */
    for (Py_ssize_t i = 0; i < n; i++) {
        long long c = CODE(i), w = no_waits ? n : int_at(&wait_c, i);
        if (c < -1 || c >= K || w < 0 || w > n || (c >= 0 && (STAGE(i) < 0 || STAGE(i) >= S))) {
            PyErr_SetString(PyExc_ValueError, "runtime_plain: a code, stage or wait out of range");
            goto done;
        }
        if (c >= 0 && MB(i) >= M) /* (an uncoded entry's stage and mb are not read) */
            M = MB(i) + 1;
    }
    for (Py_ssize_t s = 0; s < S; s++)
        if (route[s] < 0 || route[s] >= D) {
            PyErr_SetString(PyExc_ValueError, "runtime_plain: a route entry is not a rank");
            goto done;
        }
    if ((double)S * (double)M > 4.0 * (double)n + 1024.0)
        goto not_plain; /* a dense RECV table that would not follow the action count */
    if (Py_SIZE(dur_o) != (per_code ? K + 1 : n)) { /* a list Python code changed meanwhile */
        PyErr_SetString(PyExc_ValueError, "runtime_plain: one duration per action");
        goto done;
    }

    /* durations and comm.  When every action of a code has the same number object for its
     * duration (graph.durations_for with one cost per kind: a check's), each code's is read
     * once (dcode) and no column is made; otherwise each action gets an index into a table
     * of the number objects read (dtab has room for one per action; only the few the costs
     * give are written) */
    rnum_t comm = {0, 0}, dcode[MAX_CODES + 1] = {{0, 0}};
    PyObject *dobj[MAX_CODES + 1] = {NULL};
    int32_t *dix = NULL;
    rnum_t *dtab = NULL;
    if (!read_number(comm_o, &comm.v, &comm.f))
        goto not_plain;
    long long bound = 0;
    int by_code = 1, dur_float = 0; /* dur_float: an action's duration is a float */
    if (per_code) /* the table's own order: code 0 .. K - 1, then -1 */
        for (Py_ssize_t c = 0; c <= K; c++) {
            Py_ssize_t at = c == K ? 0 : c + 1;
            if (!read_number(PyTuple_GET_ITEM(dur_o, c), &dcode[at].v, &dcode[at].f) || !(dcode[at].v >= 0))
                goto not_plain;
            dobj[at] = PyTuple_GET_ITEM(dur_o, c);
        }
    for (Py_ssize_t i = 0; i < n && by_code; i++) {
        long long c = CODE(i) + 1;
        PyObject *o = per_code ? dobj[c] : PyList_GET_ITEM(dur_o, i);
        if (dobj[c] != o) {
            if (dobj[c] != NULL) {
                by_code = 0; /* a code with two objects: the table below */
                break;
            }
            if (!read_number(o, &dcode[c].v, &dcode[c].f) || !(dcode[c].v >= 0))
                goto not_plain;
            dobj[c] = o;
        }
        dur_float |= dcode[c].f;
        if (!dcode[c].f && (bound += 2 * (long long)dcode[c].v) > EXACT_INT_MAX)
            goto not_plain; /* a message's delta is one of its two durations: counted twice */
    }
    if (!by_code && (!(dix = scratch_array(&sc, n, sizeof(int32_t), 0)) ||
                     !(dtab = scratch_array(&sc, n, sizeof(rnum_t), 0))))
        goto done;
    PyObject *seen[NUMBER_CACHE] = {NULL};
    int32_t seen_at[NUMBER_CACHE] = {0}, ntab = 0, next_seen = 0;
    if (!by_code)
        bound = 0, dur_float = 0;
    for (Py_ssize_t i = 0; i < n && !by_code; i++) {
        PyObject *o = PyList_GET_ITEM(dur_o, i);
        int k = 0;
        while (k < NUMBER_CACHE && seen[k] != o)
            k++;
        if (k == NUMBER_CACHE) { /* an object not among the last few: a new entry */
            rnum_t x;
            if (!read_number(o, &x.v, &x.f) || !(x.v >= 0))
                goto not_plain;
            dtab[ntab] = x;
            k = next_seen;
            next_seen = (next_seen + 1) % NUMBER_CACHE;
            seen[k] = o;
            seen_at[k] = ntab++;
        }
        dix[i] = seen_at[k];
        rnum_t d = dtab[dix[i]];
        dur_float |= d.f;
        if (!d.f && (bound += 2 * (long long)d.v) > EXACT_INT_MAX)
            goto not_plain; /* a message's delta is one of its two durations: counted twice */
    }
    if (!comm.f && comm.v != 0) {
        long long c = (long long)fabs(comm.v);
        if ((long long)n > (EXACT_INT_MAX - bound) / c)
            goto not_plain;
        bound += (long long)n * c;
    }
    /* Every fin is at most bound: a time is 0 or an earlier one plus a delta (a duration, of
     * which a message's is one of its two, or comm), and no action adds its own twice.  So
     * when every duration and comm is an int and bound fits, the fins are an int32 column: 4
     * bytes an action, not 8 (making a bytes object runs no Python code: bytes are not
     * tracked by the collector, so the lists read above stay as they were read) */
    const int narrow = !dur_float && !comm.f && bound <= INT32_MAX;
    if (!(cols[0] = new_bytes((narrow ? 4 : 8) * n)))
        goto done;
    double *fv = narrow ? NULL : (double *)PyBytes_AS_STRING(cols[0]);
    int32_t *fiv = narrow ? (int32_t *)PyBytes_AS_STRING(cols[0]) : NULL;

    /* (3) matching (runtime.match): per channel (sender, receiver, direction when the layout
     * splits it) the k-th send posted meets the k-th receive posted */
    /* each message's peer rank: the matching's and the lanes' (every message has a partner
     * on that rank, so the caller derives the column from partner) */
    const signed char *code1 = code_c.i1; /* int8 codes (a graph's): read directly, the hot case */
#define IS_COMM(i) comm_of[(code1 != NULL ? code1[i] : CODE(i)) + 1]
    int32_t *peer = scratch_array(&sc, n, sizeof(int32_t), 0);
    rt_t r; /* the sweep's state; whether a message is a send is read off its code from here on */
    for (Py_ssize_t c = 0; c < K; c++)
        r.send_of[c] = (unsigned char)send_k[c];
    long long nch = (long long)D * D * 2;
    if ((double)nch > 4.0 * (double)n + 1024.0)
        goto not_plain; /* a channel table that would not follow the action count */
    long long *scount = scratch_array(&sc, nch, sizeof(long long), 1), *rcount = scratch_array(&sc, nch, sizeof(long long), 1);
    if (!peer || !scount || !rcount)
        goto done;
    /* the channel of message i on rank d */
#define IS_SEND(i) code_is_send(&code_c, r.send_of, (i))
#define CHANNEL(i, d) ((((long long)(IS_SEND(i) ? (d) : peer[i])) * D + (IS_SEND(i) ? peer[i] : (d))) * 2 + \
                       (by_direction && !by_edge ? fwd_k[CODE(i)] : 0))
    for (Py_ssize_t d = 0; d < D; d++)
        for (long long i = starts[d]; i < starts[d + 1]; i++) {
            partner[i] = -1;
            peer[i] = -1;
            long long c = CODE(i);
            if (c < 0 || !comm_of[c + 1])
                continue;
            long long ps = STAGE(i) + peer_off[c];
            if (ps < 0 || ps >= S || MB(i) < 0)
                goto not_plain; /* no peer: the reference reports it */
            peer[i] = (int32_t)route[ps];
            (send_k[c] ? scount : rcount)[CHANNEL(i, d)]++;
        }
    /* the sends and receives of each channel, in posting order (index order: a channel's
     * sends are all one rank's, and so are its receives) */
    long long *soff = scratch_array(&sc, nch + 1, sizeof(long long), 0), *roff = scratch_array(&sc, nch + 1, sizeof(long long), 0);
    int32_t *sl = scratch_array(&sc, n, sizeof(int32_t), 0), *rl = scratch_array(&sc, n, sizeof(int32_t), 0);
    if (!soff || !roff || !sl || !rl)
        goto done;
    soff[0] = roff[0] = 0;
    for (long long k = 0; k < nch; k++) {
        if (scount[k] != rcount[k])
            goto not_plain; /* a surplus send or receive */
        soff[k + 1] = soff[k] + scount[k];
        roff[k + 1] = roff[k] + rcount[k];
        scount[k] = rcount[k] = 0;
    }
    for (Py_ssize_t d = 0; d < D; d++)
        for (long long i = starts[d]; i < starts[d + 1]; i++)
            if (IS_COMM(i)) {
                long long k = CHANNEL(i, d);
                if (IS_SEND(i))
                    sl[soff[k] + scount[k]++] = (int32_t)i;
                else
                    rl[roff[k] + rcount[k]++] = (int32_t)i;
            }
#undef CHANNEL
    for (long long k = 0; k < nch; k++)
        for (long long q = soff[k]; q < soff[k + 1]; q++) {
            int32_t s = sl[q], r = rl[roff[k] + (q - soff[k])];
            partner[s] = r;
            partner[r] = s;
            if (CODE(r) != for_code[CODE(s)] || STAGE(r) != STAGE(s) + peer_off[CODE(s)] || MB(r) != MB(s))
                goto not_plain; /* a crossing: the reference reports it */
        }
    /* the matching's scratch is not held through the sweep */
    scratch_drop(&sc, sl);
    scratch_drop(&sc, rl);
    scratch_drop(&sc, soff);
    scratch_drop(&sc, roff);
    scratch_drop(&sc, scount);
    scratch_drop(&sc, rcount);

    /* (4) the data each compute action waits for (runtime.data_deps): its wait, then the RECV
     * of its own label for an input from another rank; at most two each, found by the sweep
     * when it reaches the action (RT_DEPS), from the first RECV of each label (recv_at) */
    int recv_slot[MAX_CODES], nslots = 0;
    for (Py_ssize_t c = 0; c < K; c++)
        recv_slot[c] = -1;
    for (Py_ssize_t c = 0; c < K; c++)
        if (rec_code[c] >= 0 && recv_slot[rec_code[c]] < 0) {
            if (nslots == 2)
                goto not_plain;
            recv_slot[rec_code[c]] = nslots++;
        }
    int32_t *recv_at = scratch_array(&sc, S * M * (nslots ? nslots : 1), sizeof(int32_t), 0); /* [slot][s][mb] */
    if (!recv_at)
        goto done;
    for (long long k = 0; k < S * M * nslots; k++)
        recv_at[k] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long c = CODE(i);
        if (c >= 0 && recv_slot[c] >= 0 && MB(i) >= 0) {
            long long key = (recv_slot[c] * S + STAGE(i)) * M + MB(i);
            if (recv_at[key] < 0)
                recv_at[key] = (int32_t)i; /* the first of its label (Graph.producer) */
        }
    }

    /* a WAIT_SEND's data: the send it retires, alone (runtime.data_deps; the sweep reads it
     * off the WAIT_SEND's entry of partner, which only a SEND/RECV has otherwise, -1 again
     * once the sweep is over, and the state bit RT_RETIRED) */
    for (Py_ssize_t k = 0; k < nret; k++) {
        long long w = int_at(&ret_w, k), snd = int_at(&ret_s, k);
        if (w < 0 || w >= n || snd < 0 || snd >= n || IS_COMM(w) || !IS_SEND(snd)) {
            PyErr_SetString(PyExc_ValueError, "runtime_plain: a retired wait is not a compute entry or its "
                                              "send not a send");
            goto done;
        }
    }

    /* (5) the lanes (runtime._Sweep._build_lanes): gloo, one per rank; NCCL, per rank its
     * compute stream, then a stream per key in the keys' order */
    Py_ssize_t L = 0, maxl = D + (nccl ? n : 0) + 1; /* a comm stream has an action at least */
    Py_ssize_t most = 1; /* the most lanes a device has */
    long long *lane_dev = scratch_array(&sc, maxl, sizeof(long long), 0), *lane_key = scratch_array(&sc, maxl, sizeof(long long), 0);
    int *lane_kind = scratch_array(&sc, maxl, sizeof(int), 0); /* 0 host, 1 compute, 2 comm */
    int32_t *skey = scratch_array(&sc, n, sizeof(int32_t), 0);
    long long *keys = scratch_array(&sc, n, sizeof(long long), 0); /* one device's stream keys, sorted */
    if (!lane_dev || !lane_key || !lane_kind || !skey || !keys)
        goto done;
    for (Py_ssize_t d = 0; d < D; d++) {
        if (!nccl) {
            lane_dev[L] = d;
            lane_kind[L] = 0;
            lane_key[L] = -1;
            for (long long i = starts[d]; i < starts[d + 1]; i++)
                lane_set(&lane_of, i, L); /* L < D: within lane_bound */
            L++;
            continue;
        }
        if (L > RT_LANE_MAX)
            goto not_plain; /* more lanes than lane_t holds */
        Py_ssize_t compute = L++;
        lane_dev[compute] = d;
        lane_kind[compute] = 1;
        lane_key[compute] = -1;
        Py_ssize_t nkeys = 0;
        for (long long i = starts[d]; i < starts[d + 1]; i++) {
            if (!IS_COMM(i)) {
                lane_set(&lane_of, i, compute);
                continue;
            }
            long long e = peer[i];
            long long key = by_edge ? (IS_SEND(i) ? (long long)d * D + e : e * D + d)
                            : by_direction ? fwd_k[CODE(i)]
                            : lazy ? (d < e ? (long long)d * D + e : e * D + d) : 0;
            skey[i] = (int32_t)key;
            /* a key among the last few kept is not kept again: a device's messages go to a
             * few peers, so the sort below sees a handful of keys, not one per message */
            int again = 0;
            for (Py_ssize_t q = nkeys - 1; q >= 0 && q >= nkeys - 8; q--)
                if (keys[q] == key) {
                    again = 1;
                    break;
                }
            if (!again)
                keys[nkeys++] = key;
        }
        /* the distinct keys in order (sorted(streams)), a lane each */
        qsort(keys, (size_t)nkeys, sizeof(long long), compare_ll);
        Py_ssize_t distinct = 0;
        for (Py_ssize_t k = 0; k < nkeys; k++)
            if (k == 0 || keys[k] != keys[k - 1])
                keys[distinct++] = keys[k];
        Py_ssize_t first = L;
        if (first + distinct - 1 > (lane_w == 1 ? RT_LANE_BYTE - 1 : RT_LANE_MAX))
            goto not_plain; /* more lanes than lane_of holds (one byte: never, by lane_bound) */
        for (Py_ssize_t k = 0; k < distinct; k++) {
            lane_dev[L] = d;
            lane_kind[L] = 2;
            lane_key[L] = keys[k];
            L++;
        }
        if (1 + distinct > most)
            most = 1 + distinct;
        for (long long i = starts[d]; i < starts[d + 1]; i++)
            if (IS_COMM(i)) { /* its key's place among the distinct keys */
                Py_ssize_t lo = 0, hi = distinct - 1;
                while (lo < hi) {
                    Py_ssize_t mid = (lo + hi) / 2;
                    if (keys[mid] < skey[i])
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                lane_set(&lane_of, i, first + lo);
            }
    }
    scratch_drop(&sc, keys);
    scratch_drop(&sc, peer);
    /* each lane's items, in order.  A lane's items are its device's actions on that lane, in
     * index order, so a lane's cursor may be an action index that steps to the next one of
     * its lane (lane_next): every lane passes over its device's actions once, and a device
     * with few lanes (gloo's one, NCCL's compute stream and a stream or two: RT_SCAN_LANES)
     * needs no list.  With more (NCCL's per-edge or lazily paired streams of a device that
     * talks to many peers) each lane's items are listed (items, loff), so that no lane passes
     * over the actions of many others: 4 bytes an action. */
    int32_t *items = NULL;
    long long *loff = NULL;
    scratch_drop(&sc, skey); /* the keys are read */
    if (most > RT_SCAN_LANES) {
        long long *fill = scratch_array(&sc, L, sizeof(long long), 1);
        loff = scratch_array(&sc, L + 1, sizeof(long long), 1);
        items = scratch_array(&sc, n, sizeof(int32_t), 0);
        if (!loff || !fill || !items)
            goto done;
        for (Py_ssize_t i = 0; i < n; i++)
            loff[lane_at(&lane_of, i) + 1]++;
        for (Py_ssize_t k = 0; k < L; k++)
            loff[k + 1] += loff[k];
        for (Py_ssize_t i = 0; i < n; i++) {
            long long k = lane_at(&lane_of, i);
            items[loff[k] + fill[k]++] = (int32_t)i;
        }
        scratch_drop(&sc, fill);
    }
    /* a lane's cursor: its first item, the end of its items, the action at one, the next */
#define LANE_START(k) (items ? loff[k] : lane_next(&lane_of, (k), starts[lane_dev[k]], starts[lane_dev[k] + 1]))
#define LANE_STOP(k) (items ? loff[(k) + 1] : starts[lane_dev[k] + 1])
#define LANE_AT(p) (items ? (long long)items[p] : (p))
#define LANE_NEXT(k, p, stop) (items ? (p) + 1 : lane_next(&lane_of, (k), (p) + 1, (stop)))

    /* (6) the sweep (runtime._Sweep.run), until nothing moves.  RT_DEPS: the data of compute
     * entry i on device d as the step (4) above describes it, into out[0..nout) */
#define RT_DEPS(i, d, out, nout)                                                                           \
    do {                                                                                                   \
        if (r.state[i] & RT_RETIRED) {                                                                     \
            out[nout++] = partner[i];                                                                      \
            break;                                                                                         \
        }                                                                                                  \
        long long w_ = no_waits ? n : int_at(&wait_c, i), c_ = CODE(i);                                    \
        if (w_ != n)                                                                                       \
            out[nout++] = (int32_t)w_;                                                                     \
        if (c_ < 0 || rec_code[c_] < 0 || MB(i) < 0)                                                      \
            break;                                                                                         \
        long long ps_ = STAGE(i) + rec_off[c_], d_ = (d);                                                  \
        if (ps_ < 0 || ps_ >= S || route[ps_] == d_)                                                       \
            break;                                                                                         \
        long long r_ = recv_at[(recv_slot[rec_code[c_]] * S + STAGE(i)) * M + MB(i)];                      \
        if (r_ >= starts[d_] && r_ < i) /* on device d: the actions are device-major */                   \
            out[nout++] = (int32_t)r_;                                                                     \
    } while (0)
    r.partner = partner;
    r.code = &code_c;
    memcpy(r.dcode, dcode, sizeof dcode);
    r.dix = dix;
    r.dtab = dtab;
    r.comm = comm;
    r.buffered = nccl && buffered;
    r.fin_v = fv;
    r.fin_i = fiv;
    r.fin_f = ffp;
    r.any_float = 0;
    r.ready_v = NULL;
    r.ready_f = NULL;
    r.bind = bv;
    r.state = done_by; /* (zeroed below: RT_DONE_NONE, no flag) */
    r.lane_of = lane_of;
    r.whead = scratch_array(&sc, L, sizeof(int32_t), 0);
    r.wnext = scratch_array(&sc, L, sizeof(int32_t), 0);
    r.stack = scratch_array(&sc, L, sizeof(int32_t), 0);
    long long *ptr = scratch_array(&sc, L, sizeof(long long), 0), *source = scratch_array(&sc, L, sizeof(long long), 0);
    /* a communication stream's cursor over its rank's actions (NCCL): the first not yet
     * passed, and the last compute entry passed (each SEND/RECV waits for the compute its
     * rank posted before it) */
    long long *scan = scratch_array(&sc, L, sizeof(long long), 0), *posted = scratch_array(&sc, L, sizeof(long long), 0);
    rnum_t *clock = scratch_array(&sc, L, sizeof(rnum_t), 0);
    unsigned char *blocked = scratch_array(&sc, L, 1, 1);
    int32_t *waited = r.waited = scratch_array(&sc, L, sizeof(int32_t), 0); /* a blocked lane's awaited action */
    if (!r.state || !r.whead || !r.wnext || !r.stack || !ptr || !source || !scan || !posted || !clock || !blocked ||
        !waited)
        goto done;
    if (n > 0)
        memset(r.state, 0, (size_t)n);
    for (Py_ssize_t k = 0; k < nret; k++) { /* checked above; a wait given twice: the last send */
        r.state[int_at(&ret_w, k)] |= RT_RETIRED;
        partner[int_at(&ret_w, k)] = (int32_t)int_at(&ret_s, k);
    }
    for (Py_ssize_t k = 0; k < n; k++)
        bv[k] = -1;
    for (Py_ssize_t k = 0; k < L; k++)
        r.whead[k] = -1;
    r.top = 0;
    for (Py_ssize_t k = L - 1; k >= 0; k--) {
        ptr[k] = LANE_START(k);
        scan[k] = starts[lane_dev[k]];
        posted[k] = -1;
        clock[k].v = 0;
        clock[k].f = 0;
        source[k] = -1;
        r.stack[r.top++] = (int32_t)k;
    }
    /* a hang (runtime._Sweep.run): what the rounds found, each wait (lane, head, awaited,
     * event) as four entries.  Each round finds a cycle at least and stops past max_cycles,
     * and a round's waits are at most one per lane: (max_cycles + 1) * L of each at most */
    Py_ssize_t cap = (max_cycles + 1) * L, nseen = 0, nwaits = 0, ncycles = 0;
    long long *stuck_w = NULL, *cyc = NULL, *cyc_off = NULL, *seen_head = NULL;
    int32_t *target = NULL, *colour = NULL, *path = NULL;
    int hung = 0;
    for (;;) {
        while (r.top > 0) {
            Py_ssize_t k = r.stack[--r.top];
            long long p = ptr[k], stop = LANE_STOP(k), src = source[k];
            rnum_t now = clock[k];
            long long awaited = -1; /* the action whose fin the lane waits for */
            while (p < stop) {
                long long i = LANE_AT(p);
                if (IS_COMM(i)) {
                    if (nccl) {
                        long long c = posted[k], q = scan[k];
                        for (; q < i; q++)
                            if (!IS_COMM(q))
                                c = q;
                        scan[k] = q;
                        posted[k] = c;
                        if (c >= 0) { /* the stream waits for the compute posted before it */
                            if (!(r.state[c] & RT_HAS_FIN)) {
                                awaited = c;
                                break;
                            }
                            rnum_t fc = rt_fin(&r, c);
                            if (fc.v > now.v) {
                                now = fc;
                                src = 3 * c + RT_END;
                            }
                        }
                        if (!(r.state[i] & RT_HAS_READY)) {
                            bv[i] = (int32_t)src;
                            rt_set_ready(&r, i, now);
                        }
                        if (!(r.state[i] & RT_HAS_FIN)) {
                            awaited = i;
                            break;
                        }
                        rnum_t fi = rt_fin(&r, i);
                        if (fi.v >= now.v) {
                            now = fi;
                            src = 3 * i + RT_DONE;
                        }
                        p = LANE_NEXT(k, p, stop);
                        continue;
                    }
                    if (!(r.state[i] & RT_HAS_READY)) { /* gloo: posting takes no host time */
                        bv[i] = (int32_t)src;
                        rt_set_ready(&r, i, now);
                    }
                    p = LANE_NEXT(k, p, stop);
                    continue;
                }
                rnum_t st = now;
                int32_t deps[2];
                int ndeps = 0;
                RT_DEPS(i, lane_dev[k], deps, ndeps);
                for (int q = 0; q < ndeps; q++) {
                    long long j = deps[q];
                    if (!(r.state[j] & RT_HAS_FIN)) {
                        awaited = j;
                        break;
                    }
                    /* a RECV's done, or a compute action's end plus the latency */
                    rnum_t t = IS_COMM(j) ? rt_fin(&r, j) : rn_add(rt_fin(&r, j), comm);
                    if (t.v > st.v) {
                        st = t;
                        src = 3 * j + (IS_COMM(j) ? RT_DONE : RT_END);
                    }
                }
                if (awaited >= 0)
                    break;
                bv[i] = (int32_t)src;
                now = rn_add(st, rt_dur(&r, i));
                src = 3 * i + RT_END;
                rt_set_fin(&r, i, now);
                p = LANE_NEXT(k, p, stop);
            }
            ptr[k] = p;
            clock[k] = now;
            source[k] = src;
            blocked[k] = awaited >= 0;
            if (awaited >= 0) {
                waited[k] = (int32_t)awaited;
                r.wnext[k] = r.whead[lane_at(&lane_of, awaited)];
                r.whead[lane_at(&lane_of, awaited)] = (int32_t)k;
                r.state[awaited] |= RT_AWAITED;
            }
        }
        /* nothing moves.  A lane still blocked is a hang: as the reference does (to report every
         * independent hang at once), record each stuck lane's first wait at its head, find the
         * cycles of "lane k waits for lane l" among the stuck lanes, release the first wait of
         * each, and go on, until no lane is blocked, no cycle is found or max_cycles are passed.
         * Every message has its partner here, so a stuck lane always waits for another lane. */
        Py_ssize_t nblocked = 0;
        for (Py_ssize_t k = 0; k < L; k++)
            nblocked += blocked[k];
        if (nblocked == 0)
            break;
        if (!hung) {
            hung = 1;
            /* from here on the ready times are kept (rt_ready), as they are now */
            rv = scratch_array(&sc, n, sizeof(double), 0);
            rfp = scratch_array(&sc, n, 1, 0);
            if (!rv || !rfp)
                goto done;
            for (Py_ssize_t i = 0; i < n; i++) {
                rnum_t x = {0, 0};
                if (r.state[i] & RT_HAS_READY)
                    x = rt_ready(&r, i);
                rv[i] = x.v;
                rfp[i] = x.f;
            }
            r.ready_v = rv;
            r.ready_f = rfp;
            stuck_w = scratch_array(&sc, 4 * cap, sizeof(long long), 0);
            cyc = scratch_array(&sc, 4 * cap, sizeof(long long), 0);
            cyc_off = scratch_array(&sc, cap + 1, sizeof(long long), 0);
            seen_head = scratch_array(&sc, L, sizeof(long long), 0);
            target = scratch_array(&sc, 3 * L, sizeof(int32_t), 0);
            if (!stuck_w || !cyc || !cyc_off || !seen_head || !target)
                goto done;
            colour = target + L;
            path = colour + L;
            cyc_off[0] = 0;
            for (Py_ssize_t k = 0; k < L; k++)
                seen_head[k] = -1;
        }
#define RT_EVENT(j) (IS_COMM(j) ? RT_DONE : RT_END)
        for (Py_ssize_t k = 0; k < L; k++) {
            if (!blocked[k])
                continue;
            long long head = LANE_AT(ptr[k]), j = waited[k];
            if (seen_head[k] != head) { /* seen.setdefault((lane, head), wait): a lane's heads only grow */
                seen_head[k] = head;
                long long *w = stuck_w + 4 * nseen++;
                w[0] = k, w[1] = head, w[2] = j, w[3] = RT_EVENT(j);
            }
            /* the lane that must move (runtime._Sweep.waited_lane): the awaited action's, or,
             * when it is a message posted and waiting, its partner's */
            long long b = (!IS_COMM(j) || !(r.state[j] & RT_HAS_READY)) ? j : partner[j];
            target[k] = blocked[lane_at(&lane_of, b)] ? (int32_t)lane_at(&lane_of, b) : -1;
            colour[k] = -1;
        }
        Py_ssize_t found = 0;
        for (Py_ssize_t k0 = 0; k0 < L; k0++) { /* runtime._Sweep._cycles, in lane order */
            if (!blocked[k0] || target[k0] < 0 || colour[k0] >= 0)
                continue;
            Py_ssize_t len = 0, k = k0;
            while (blocked[k] && target[k] >= 0 && colour[k] < 0) {
                colour[k] = (int32_t)k0;
                path[len++] = (int32_t)k;
                k = target[k];
            }
            if (!blocked[k] || colour[k] != k0)
                continue;
            Py_ssize_t at = 0;
            while (path[at] != k)
                at++;
            for (; at < len; at++) {
                long long x = path[at], *w = cyc + 4 * nwaits++;
                w[0] = x, w[1] = LANE_AT(ptr[x]), w[2] = waited[x], w[3] = RT_EVENT(waited[x]);
            }
            cyc_off[++ncycles] = nwaits;
            found++;
        }
        if (ncycles > max_cycles || found == 0)
            break;
        for (Py_ssize_t c = ncycles - found; c < ncycles; c++) { /* runtime._Sweep._release */
            long long j = cyc[4 * cyc_off[c] + 2];
            if (cyc[4 * cyc_off[c] + 3] == RT_END) {
                rnum_t zero = {0, 0};
                rt_set_fin(&r, j, zero); /* as if it had ended, at 0: the run is a hang already */
            } else {
                rnum_t zero = {0, 0}, t = (r.state[j] & RT_HAS_READY) && rv[j] != 0 ? rt_ready(&r, j) : zero;
                rt_finish(&r, j, t, j); /* ``ready or 0`` */
            }
        }
    }
#undef RT_EVENT
    for (Py_ssize_t k = 0; k < nret; k++)
        partner[int_at(&ret_w, k)] = -1; /* a WAIT_SEND has no partner: the sweep is over */
    if (!hung)
        for (Py_ssize_t i = 0; i < n; i++)
            if (!(r.state[i] & RT_HAS_FIN))
                goto not_plain; /* a message never done (a send left pending at the end) */
#undef RT_DEPS
#undef STAGE
#undef MB

    /* (7) the results, as columns: no Python object per action.  ready: a compute action's
     * entry 0 (read as None); the start times are not a column (ready for a SEND/RECV, else
     * fin - duration: runtime._native makes them when they are read) */
    unsigned char *never = NULL; /* a hang: 1 where a compute never ended, a message was never ready */
    if (hung) {
        if (!(flags[3] = new_bytes(n)))
            goto done;
        never = (unsigned char *)PyBytes_AS_STRING(flags[3]);
    }
    rnum_t top = {0, 0};
    long long last = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hung) { /* what never happened is 0, an int (the reference's times of a hang) */
            unsigned char st = r.state[i];
            never[i] = !(st & (IS_COMM(i) ? RT_HAS_READY : RT_HAS_FIN));
            if (!(st & RT_HAS_FIN)) {
                if (fiv != NULL)
                    fiv[i] = 0;
                else
                    fv[i] = 0;
                if (r.any_float) /* (else 0 already, and unwritten) */
                    ffp[i] = 0;
            }
            if (!(st & RT_HAS_READY))
                rv[i] = 0, rfp[i] = 0;
        }
        rnum_t fin = rt_fin(&r, i);
        if (hung && !IS_COMM(i)) {
            rv[i] = 0;
            rfp[i] = 0;
        }
        if (last < 0 || fin.v > top.v) { /* Python's max: the first of the largest */
            top = fin;
            last = i;
        }
    }
    if (!(lanes_l = PyList_New(L)))
        goto done;
    for (Py_ssize_t k = 0; k < L; k++) {
        static const char *kind_name[3] = {"host", "compute", "comm"};
        long long key = lane_key[k];
        PyObject *kt;
        if (lane_kind[k] != 2)
            kt = (Py_INCREF(Py_None), Py_None);
        else if (by_edge || (!by_direction && lazy))
            kt = Py_BuildValue("(LL)", key / D, key % D);
        else if (by_direction)
            kt = Py_BuildValue("(L)", key);
        else
            kt = PyTuple_New(0);
        PyObject *lane = kt ? Py_BuildValue("(LsN)", lane_dev[k], kind_name[lane_kind[k]], kt) : NULL;
        if (lane == NULL)
            goto done;
        PyList_SET_ITEM(lanes_l, k, lane);
    }
    if (hung) { /* (cycles, stuck, unsent, never): each wait (lane, rank, head, awaited, event) */
        PyObject *cycles = PyList_New(ncycles), *stuck = PyList_New(nseen), *unsent = PyList_New(0);
        if (!cycles || !stuck || !unsent) {
            Py_XDECREF(cycles);
            Py_XDECREF(stuck);
            Py_XDECREF(unsent);
            goto done;
        }
        if (!(hang = Py_BuildValue("(NNNO)", cycles, stuck, unsent, flags[3]))) /* (N: taken even then) */
            goto done;
#define RT_WAIT(w) Py_BuildValue("(LLLLL)", (w)[0], lane_dev[(w)[0]], (w)[1], (w)[2], (w)[3])
        for (Py_ssize_t c = 0; c < ncycles; c++) {
            PyObject *one = PyList_New(cyc_off[c + 1] - cyc_off[c]);
            if (one == NULL)
                goto done;
            PyList_SET_ITEM(cycles, c, one);
            for (long long q = cyc_off[c]; q < cyc_off[c + 1]; q++) {
                PyObject *w = RT_WAIT(cyc + 4 * q);
                if (w == NULL)
                    goto done;
                PyList_SET_ITEM(one, q - cyc_off[c], w);
            }
        }
        for (Py_ssize_t q = 0; q < nseen; q++) {
            PyObject *w = RT_WAIT(stuck_w + 4 * q);
            if (w == NULL)
                goto done;
            PyList_SET_ITEM(stuck, q, w);
        }
#undef RT_WAIT
        /* over gloo, the sends never done whose host lane ran to its end (before 2.15 the step
         * ends by waiting for each: the caller adds them) */
        for (Py_ssize_t i = 0; !nccl && i < n; i++)
            if (rt_is_send(&r, i) && !(r.state[i] & RT_HAS_FIN) && ptr[lane_at(&lane_of, i)] == LANE_STOP(lane_at(&lane_of, i))) {
                PyObject *x = PyLong_FromSsize_t(i);
                if (x == NULL || PyList_Append(unsent, x) < 0) {
                    Py_XDECREF(x);
                    goto done;
                }
                Py_DECREF(x);
            }
    }
    if (hung) { /* the kept ready times, as columns; None for a run that ends (runtime._native
                 * reads them off the binders) */
        cols[1] = PyBytes_FromStringAndSize((const char *)rv, 8 * n);
        flags[1] = PyBytes_FromStringAndSize((const char *)rfp, n);
        if (cols[1] == NULL || flags[1] == NULL)
            goto done;
    } else {
        cols[1] = (Py_INCREF(Py_None), Py_None);
        flags[1] = (Py_INCREF(Py_None), Py_None);
    }
    /* the sweep's scratch is given back before the last column is made; the state bytes
     * become the done_by column (their top bits) */
    for (Py_ssize_t i = 0; i < n; i++)
        done_by[i] = (unsigned char)(r.state[i] >> RT_DONE_SHIFT);
    scratch_drop(&sc, recv_at);
    if (!(flags[2] = new_bytes(n)))
        goto done;
    if (r.any_float) {
        if (!(flags[0] = PyBytes_FromStringAndSize((const char *)ffp, n)))
            goto done;
    } else {
        flags[0] = (Py_INCREF(Py_None), Py_None);
    }
    scratch_drop(&sc, ffp);
    unsigned char *is_comm = (unsigned char *)PyBytes_AS_STRING(flags[2]);
    for (Py_ssize_t i = 0; i < n; i++)
        is_comm[i] = IS_COMM(i);
#undef IS_COMM
#undef CODE
    PyObject *makespan = n ? rn_object(top) : PyLong_FromLong(0);
    if (makespan == NULL)
        goto done;
    result = Py_BuildValue("(OOOOOOOOONLOO)", cols[0], flags[0], cols[1], flags[1], cols[2], done_o, cols[3], cols[4],
                           lanes_l, makespan, last, flags[2], hang ? hang : Py_None);
    goto done;
#undef IS_SEND
#undef LANE_START
#undef LANE_STOP
#undef LANE_AT
#undef LANE_NEXT
not_plain:
    result = declined();
done:
    for (int q = 0; q < 5; q++)
        Py_XDECREF(cols[q]);
    for (int q = 0; q < 4; q++)
        Py_XDECREF(flags[q]);
    Py_XDECREF(lanes_l);
    Py_XDECREF(done_o);
    Py_XDECREF(hang);
    release_ints(&code_c);
    release_ints(&stage_c);
    release_ints(&mb_c);
    release_ints(&wait_c);
    release_ints(&ret_w);
    release_ints(&ret_s);
    scratch_free(&sc);
    return result;
}


/* ------------------------------------------------------------------ loss_order_plain */

/* loss_order_plain(code, stage, mb, lo, hi, f_code, last) -> bool
 *
 * The common case of rules.loss_order (docs/spec.md 8.3) over a Graph's columns: True when
 * the actions in [lo, hi) whose code is ``f_code`` and whose stage is ``last`` have the
 * microbatches 0, 1, 2, ... in that order; False otherwise (one out of order, or a
 * microbatch -1: out of range), and then the rule's Python loop finds and explains it.  The
 * caller passes no overlapped action (their leaves are the Python loop's). */
static PyObject *
k_loss_order_plain(PyObject *self, PyObject *args)
{
    PyObject *code_o, *stage_o, *mb_o, *result = NULL;
    Py_ssize_t lo, hi;
    long long f_code, last;
    if (!PyArg_ParseTuple(args, "OOOnnLL", &code_o, &stage_o, &mb_o, &lo, &hi, &f_code, &last))
        return NULL;
    scratch_t sc = SCRATCH_INIT;
    ints_t code_c = {{NULL}}, stage_c = {{NULL}}, mb_c = {{NULL}};
    Py_ssize_t n = 0, n2 = 0, n3 = 0;
    if (!read_ints(&sc, code_o, &code_c, &n, "loss_order_plain: code") ||
        !read_ints(&sc, stage_o, &stage_c, &n2, "loss_order_plain: stage") ||
        !read_ints(&sc, mb_o, &mb_c, &n3, "loss_order_plain: mb"))
        goto done;
    if (n2 != n || n3 != n || lo < 0 || hi < lo || hi > n) {
        PyErr_SetString(PyExc_ValueError, "loss_order_plain: the columns or the range disagree");
        goto done;
    }
    long long seen = 0;
    int in_order = 1;
    for (Py_ssize_t i = lo; i < hi && in_order; i++)
        if (int_at(&code_c, i) == f_code && int_at(&stage_c, i) == last)
            in_order = int_at(&mb_c, i) == seen++;
    result = PyBool_FromLong(in_order);
done:
    release_ints(&code_c);
    release_ints(&stage_c);
    release_ints(&mb_c);
    scratch_free(&sc);
    return result;
}

/* ------------------------------------------------------------------ pair_send_waits */

/* pair_send_waits(code, mb, waits, codes, stages, mbs, lengths, S, M, send_f, send_b, wait_f)
 *     -> (waits, sends) | None
 *
 * The twin of runtime.send_waits (PyTorch 2.15's _PendingSendTracker) for a graph compiled
 * from a schedule's columns with no duplicate and nothing off its device (the caller's case):
 * ``code``, ``mb`` the Graph's columns, ``waits`` its send_waits (increasing indices), and the
 * schedule's columns (grammar.PlainRows), where a WAIT_SEND's stage and microbatch are.  Each
 * wait retires the pending send of its label (SEND_F codes ``send_f`` and ``send_b`` in the
 * Graph; a wait's column code ``wait_f``, or one more for WAIT_SEND_B), the one before it on
 * its device: (the waits, the sends they retire), int arrays in wait order.  Declined (None):
 * a wait without a pending send (an orphan) or a send no wait retires, which the reference
 * reports. */
static PyObject *
k_pair_send_waits(PyObject *self, PyObject *args)
{
    PyObject *code_o, *mb_o, *waits_o, *codes, *stages, *mbs, *lengths, *result = NULL;
    long long S, M;
    int send_f, send_b, wait_f;
    if (!PyArg_ParseTuple(args, "OOOSSSO!LLiii", &code_o, &mb_o, &waits_o, &codes, &stages, &mbs, &PyTuple_Type,
                          &lengths, &S, &M, &send_f, &send_b, &wait_f))
        return NULL;
    columns_t c;
    if (!read_columns(codes, stages, mbs, lengths, 256, &c, "pair_send_waits"))
        return NULL;
    scratch_t sc = SCRATCH_INIT;
    ints_t code_c = {{NULL}}, mb_c = {{NULL}}, waits_c = {{NULL}};
    column_t out_w = {NULL}, out_s = {NULL};
    Py_ssize_t n = 0, n2 = 0, nw = 0;
    if (!read_ints(&sc, code_o, &code_c, &n, "pair_send_waits: code") ||
        !read_ints(&sc, mb_o, &mb_c, &n2, "pair_send_waits: mb") ||
        !read_ints(&sc, waits_o, &waits_c, &nw, "pair_send_waits: waits"))
        goto done;
    if (n2 != n || c.n != n || S <= 0 || M <= 0) {
        PyErr_SetString(PyExc_ValueError, "pair_send_waits: the columns disagree");
        goto done;
    }
    if ((double)S * (double)M > 4.0 * (double)n + 1024.0)
        goto not_plain; /* a table that would not follow the action count */
    /* per (stage, microbatch, direction): the pending send, -1 none yet, -2 retired */
    int32_t *pend = scratch_array(&sc, S * M * 2, sizeof(int32_t), 0);
    int32_t *wv = column_new(&out_w, "i", nw), *sv = column_new(&out_s, "i", nw);
    if (!pend || !wv || !sv)
        goto done;
    for (long long k = 0; k < S * M * 2; k++)
        pend[k] = -1;
    Py_ssize_t next = 0, paired = 0, sends = 0;
    long long w = nw > 0 ? int_at(&waits_c, 0) : -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long g = int_at(&code_c, i);
        if (g == send_f || g == send_b) {
            long long m = int_at(&mb_c, i), s = c.stage[i];
            if (m < 0 || s < 0 || s >= S || m >= M)
                goto not_plain;
            pend[(s * M + m) * 2 + (g == send_b)] = (int32_t)i;
            sends++;
            continue;
        }
        if (i != w)
            continue;
        long long s = c.stage[i], m = c.mb[i];
        int dir = c.code[i] - wait_f;
        if ((dir != 0 && dir != 1) || s < 0 || s >= S || m < 0 || m >= M)
            goto not_plain;
        int32_t *x = &pend[(s * M + m) * 2 + dir];
        if (*x < 0)
            goto not_plain; /* an orphan */
        wv[paired] = (int32_t)i;
        sv[paired++] = *x;
        *x = -2;
        if (++next < nw) {
            long long v = int_at(&waits_c, next);
            if (v <= w || v >= n)
                goto not_plain;
            w = v;
        }
    }
    if (paired != nw || sends != nw)
        goto not_plain; /* a wait past the columns, or a send no wait retires */
    PyObject *a = column_take(&out_w), *b = column_take(&out_s);
    result = Py_BuildValue("(NN)", a, b);
    goto done;
not_plain:
    result = declined();
done:
    column_free(&out_w);
    column_free(&out_s);
    release_ints(&code_c);
    release_ints(&mb_c);
    release_ints(&waits_c);
    scratch_free(&sc);
    return result;
}

/* ------------------------------------------------------------------ bind_path */

/* bind_path(bind, done_by, partner, is_comm, last) -> list | None:
 * runtime.RuntimeResult.critical_path over the compiled run's columns: from event key
 * 3 * last + (DONE for a SEND/RECV, else END), follow each event's binder (-1: time 0) until
 * it ends or a key comes again (a hung run's released waits, set at time 0, can close a
 * cycle), each action once per run of keys it binds, then reversed.  ``bind``, ``done_by``:
 * runtime_plain's binder columns (n ints, typecode "i", and n bytes: RT_DONE_NONE), ``partner``
 * its n ints, ``is_comm`` n bytes.  None when bind is not such a buffer (the reference's
 * list: the caller walks it). */
/* The buffer o as n native ints (typecode "i", aligned): its data, held in *view (released
 * by the caller when view->obj is set), or NULL with ValueError naming ``what``. */
static const int *
int_column(PyObject *o, Py_buffer *view, Py_ssize_t n, const char *what)
{
    view->obj = NULL;
    if (PyObject_GetBuffer(o, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        view->obj = NULL;
        return NULL;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '@')
        f++;
    if (strcmp(f, "i") != 0 || view->itemsize != sizeof(int) || view->ndim != 1 ||
        view->len / (Py_ssize_t)sizeof(int) != n || (n > 0 && ((uintptr_t)view->buf) % sizeof(int))) {
        PyErr_Format(PyExc_ValueError, "%s is n ints (typecode 'i') for the n actions", what);
        return NULL;
    }
    return (const int *)view->buf;
}

static PyObject *
k_bind_path(PyObject *self, PyObject *args)
{
    PyObject *bind_o, *done_o, *partner_o, *comm_o;
    Py_ssize_t last;
    if (!PyArg_ParseTuple(args, "OSOSn", &bind_o, &done_o, &partner_o, &comm_o, &last))
        return NULL;
    if (!PyObject_CheckBuffer(bind_o))
        Py_RETURN_NONE;
    Py_buffer bview, pview;
    pview.obj = NULL;
    PyObject *out = NULL;
    unsigned char *seen = NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(comm_o);
    const int *bind = int_column(bind_o, &bview, n, "bind_path: bind");
    const int *partner = bind != NULL ? int_column(partner_o, &pview, n, "bind_path: partner") : NULL;
    if (partner == NULL)
        goto done;
    if (PyBytes_GET_SIZE(done_o) != n) {
        PyErr_SetString(PyExc_ValueError, "bind_path: done_by is n bytes for the n actions");
        goto done;
    }
    if (last < 0 || last >= n) {
        PyErr_SetString(PyExc_ValueError, "bind_path: last is an action");
        goto done;
    }
    const unsigned char *is_comm = (const unsigned char *)PyBytes_AS_STRING(comm_o);
    const unsigned char *done_by = (const unsigned char *)PyBytes_AS_STRING(done_o);
    if (!(seen = PyMem_Calloc((size_t)(3 * n + 7) / 8, 1)) || !(out = PyList_New(0))) {
        if (seen == NULL)
            PyErr_NoMemory();
        goto done;
    }
    long long key = 3 * (long long)last + (is_comm[last] ? RT_DONE : RT_END), prev = -1;
    while (key >= 0 && key < 3 * (long long)n && !(seen[key >> 3] & (1 << (key & 7)))) {
        seen[key >> 3] |= (unsigned char)(1 << (key & 7));
        long long i = key / 3;
        if (i != prev) {
            PyObject *x = PyLong_FromLongLong(i);
            if (x == NULL || PyList_Append(out, x) < 0) {
                Py_XDECREF(x);
                Py_CLEAR(out);
                goto done;
            }
            Py_DECREF(x);
            prev = i;
        }
        long long e = key % 3;
        if (is_comm[i] ? e == RT_END : e != RT_END)
            key = -1; /* an event of the other kind has no binder: time 0 */
        else if (e != RT_DONE)
            key = bind[i];
        else if (done_by[i] == RT_DONE_SELF)
            key = 3 * i + RT_READY;
        else if (done_by[i] == RT_DONE_PARTNER && partner[i] >= 0 && partner[i] < n)
            key = 3 * (long long)partner[i] + RT_READY;
        else if (done_by[i] == RT_DONE_NONE)
            key = -1;
        else
            key = 3 * (long long)n; /* reported below */
    }
    if (key >= 3 * (long long)n) {
        PyErr_SetString(PyExc_ValueError, "bind_path: a binder beyond the events");
        Py_CLEAR(out);
        goto done;
    }
    if (PyList_Reverse(out) < 0)
        Py_CLEAR(out);
done:
    PyMem_Free(seen);
    if (bview.obj != NULL)
        PyBuffer_Release(&bview);
    if (pview.obj != NULL)
        PyBuffer_Release(&pview);
    return out;
}

/* bound_ready(bind, end_values, end_floats, is_comm) -> (values, floats): the ready times of
 * a runtime_plain run that ended, which it gives as no column (rt_ready): a SEND/RECV's is
 * the fin of its READY binder (bind[i] = 3j + event: action j's end or done), or the int 0
 * when it has none; every other action's entry is 0, as runtime_plain's column of a hang
 * holds it.  The columns as runtime_plain's: bytes of doubles, and a flag byte each. */
static PyObject *
k_bound_ready(PyObject *self, PyObject *args)
{
    PyObject *bind_o, *ev, *ef, *comm_o;
    if (!PyArg_ParseTuple(args, "OOOS", &bind_o, &ev, &ef, &comm_o))
        return NULL;
    times_t e;
    if (!read_times(ev, ef, &e, "bound_ready"))
        return NULL;
    Py_buffer view;
    PyObject *values = NULL, *floats = NULL, *out = NULL;
    Py_ssize_t n = e.n;
    const int *bind = int_column(bind_o, &view, n, "bound_ready: bind");
    if (bind == NULL)
        goto done;
    if (PyBytes_GET_SIZE(comm_o) != n) {
        PyErr_SetString(PyExc_ValueError, "bound_ready: is_comm is n bytes for the n end times");
        goto done;
    }
    const unsigned char *is_comm = (const unsigned char *)PyBytes_AS_STRING(comm_o);
    for (Py_ssize_t i = 0; i < n; i++) /* checked before anything is made */
        if (is_comm[i] && (bind[i] < -1 || bind[i] / 3 >= n)) {
            PyErr_SetString(PyExc_ValueError, "bound_ready: a binder beyond the events");
            goto done;
        }
    double *rv = bytes_column(&values, n, sizeof(double));
    unsigned char *rf = rv != NULL ? bytes_column(&floats, n, 1) : NULL;
    if (rf == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int b = is_comm[i] ? bind[i] : -1;
        rv[i] = b >= 0 ? time_value(&e, b / 3) : 0;
        rf[i] = b >= 0 ? e.f[b / 3] : 0;
    }
    out = PyTuple_Pack(2, values, floats);
done:
    Py_XDECREF(values);
    Py_XDECREF(floats);
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    PyBuffer_Release(&e.view);
    return out;
}

/* ------------------------------------------------------------------ memory_plain */

/* memory_plain(starts, code, stage, alloc, free, n_in, n_out, static, limit[, inert])
 *   -> (peak_inflight, peak_memory, peak_at, over_limit) | None
 *
 * The twin of cost/memory.memory_sweep without a timeline, for plain actions (a code
 * 0..K-1, K the length of ``n_in``): ``alloc``/``free`` are flat tables [code * S + stage]
 * (S = 1: the same for every stage), ``n_in``/``n_out`` per code, ``static`` per device,
 * ``limit`` a number or None.  None when an action is not plain (code -1; unless ``inert``:
 * then code -1 is bookkeeping, which allocates and frees nothing and changes no count, as
 * Python's 0 entries), when a stage is outside a per-stage table, or a number is not one
 * read_number takes.
 *
 * Exactness.  Python's memory values are floats: each device's sum starts at its static
 * memory, a float (static_memory starts from 0.0; the kernel declines a static that is not
 * a float), and goes on as before + (alloc - free), during = before + alloc.  The kernel
 * does those operations in that order in doubles.  alloc - free of two ints is exact in
 * Python and then rounded once when added to the float; in the kernel both are exact
 * doubles (|int| <= 2^53) and the double subtraction rounds that same exact difference the
 * same way, so every sum is bit for bit Python's.  Peaks follow Python's max (the first of
 * equal values; a value replaces the peak only when greater) and ``during > limit + 1e-9``.
 * The in-flight counts are ints; the kernel declines a count table entry beyond 2^20, so
 * that n * 2^20 < 2^63 keeps their sums exact. */
typedef struct { /* one device's peaks, in C until every input has been read */
    double peak_m, over_value;
    long long peak_n, peak_i, first_over;
    int any;
} device_peaks_t;

static PyObject *
k_memory_plain(PyObject *self, PyObject *args)
{
    PyObject *starts_o, *code_o, *stage_o, *alloc_o, *free_o, *nin_o, *nout_o, *static_o, *limit_o;
    int inert = 0;
    if (!PyArg_ParseTuple(args, "OOOO!O!OOO!O|p", &starts_o, &code_o, &stage_o, &PyList_Type,
                          &alloc_o, &PyList_Type, &free_o, &nin_o, &nout_o, &PyList_Type,
                          &static_o, &limit_o, &inert))
        return NULL;
    Py_ssize_t D1 = 0, n = 0, n2 = 0, ni = 0, no = 0;
    scratch_t sc = SCRATCH_INIT;
    /* (1) the columns and small tables, which may run Python code (an iterable is listed);
     * the code and stage columns are read where they lie (each entry once or twice) */
    long long *starts = index_array(&sc, starts_o, &D1, "memory_plain: starts");
    ints_t code = {{NULL}}, stage = {{NULL}};
    long long *nin = starts && read_ints(&sc, code_o, &code, &n, "memory_plain: code") &&
                             read_ints(&sc, stage_o, &stage, &n2, "memory_plain: stage")
                         ? index_array(&sc, nin_o, &ni, "memory_plain: n_in")
                         : NULL;
    long long *nout = nin ? index_array(&sc, nout_o, &no, "memory_plain: n_out") : NULL;
    double *alloc, *freed, *statics;
    device_peaks_t *peaks;
    PyObject *result = NULL, *pn = NULL, *pm = NULL, *pa = NULL, *ov = NULL;
    double limit = 0;
    unsigned char unused;
    int has_limit = limit_o != Py_None;
    if (nout == NULL || !valid_starts(starts, D1, n, "memory_plain"))
        goto done;
    /* (2) every list read into C arrays (raw memory: nothing runs), everything checked */
    Py_ssize_t T = PyList_GET_SIZE(alloc_o), D = D1 - 1, K = ni;
    if (n2 != n || K < 1 || K > MAX_CODES || no != K || T < K || T % K ||
        PyList_GET_SIZE(free_o) != T || PyList_GET_SIZE(static_o) != D) {
        PyErr_SetString(PyExc_ValueError, "memory_plain: the columns' and tables' lengths disagree");
        goto done;
    }
    Py_ssize_t S = T / K;
    if (!(alloc = scratch_array(&sc, T, sizeof(double), 0)) || !(freed = scratch_array(&sc, T, sizeof(double), 0)) ||
        !(statics = scratch_array(&sc, D, sizeof(double), 0)) ||
        !(peaks = scratch_array(&sc, D, sizeof(device_peaks_t), 0)))
        goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        if (int_at(&code, i) < -1 || int_at(&code, i) >= K) {
            PyErr_SetString(PyExc_ValueError, "memory_plain: a code is not a kind code or -1");
            goto done;
        }
    for (Py_ssize_t i = 0; i < n; i++)
        if (int_at(&code, i) < 0 ? !inert : (S > 1 && (int_at(&stage, i) < 0 || int_at(&stage, i) >= S)))
            goto not_plain;
    for (int c = 0; c < K; c++)
        if (nin[c] > (1 << 20) || nin[c] < -(1 << 20) || nout[c] > (1 << 20) || nout[c] < -(1 << 20))
            goto not_plain;
    for (Py_ssize_t d = 0; d < D; d++) {
        PyObject *x = PyList_GET_ITEM(static_o, d);
        if (!PyFloat_CheckExact(x))
            goto not_plain;
        statics[d] = PyFloat_AS_DOUBLE(x);
    }
    if (has_limit && !read_number(limit_o, &limit, &unused))
        goto not_plain;
    for (Py_ssize_t k = 0; k < T; k++)
        if (!read_number(PyList_GET_ITEM(alloc_o, k), &alloc[k], &unused) ||
            !read_number(PyList_GET_ITEM(free_o, k), &freed[k], &unused))
            goto not_plain;
    /* (3) the sweep, in C */
    double over_at = limit + 1e-9;
    for (Py_ssize_t d = 0; d < D; d++) {
        device_peaks_t *out = &peaks[d];
        double st = statics[d];
        double before = st, peak = st;
        long long peak_i = -1, inflight = 0, peak_n = 0, first_over = -1;
        double over_value = 0;
        int any = 0;
        for (long long i = starts[d]; i < starts[d + 1]; i++) {
            long long c = int_at(&code, i);
            Py_ssize_t k = c < 0 ? 0 : (Py_ssize_t)(c * S + (S > 1 ? int_at(&stage, i) : 0));
            double a = c < 0 ? 0.0 : alloc[k], f = c < 0 ? 0.0 : freed[k];
            long long c_in = c < 0 ? 0 : nin[c], c_out = c < 0 ? 0 : nout[c];
            double during = before + a;
            long long n_during = inflight + c_in;
            if (!any || during > peak) {
                peak = during;
                peak_i = i;
            }
            if (!any || n_during > peak_n)
                peak_n = n_during;
            any = 1;
            if (has_limit && first_over < 0 && during > over_at) {
                first_over = i;
                over_value = during;
            }
            before = before + (a - f);
            inflight = inflight + (c_in - c_out);
        }
        /* Python: peak = max(during, default=static); peak_m = max(peak, static) */
        out->peak_m = (any && st > peak) ? st : (any ? peak : st);
        out->peak_n = any ? peak_n : 0;
        out->peak_i = (any && peak > st) ? peak_i : -1;
        out->first_over = first_over;
        out->over_value = over_value;
        out->any = any;
    }
    /* (4) the results: nothing of the caller's is read from here on */
    pn = PyList_New(D);
    pm = PyList_New(D);
    pa = PyList_New(D);
    ov = PyList_New(D);
    if (!pn || !pm || !pa || !ov)
        goto done;
    for (Py_ssize_t d = 0; d < D; d++) {
        device_peaks_t *p = &peaks[d];
        PyObject *x = PyLong_FromLongLong(p->peak_n);
        PyObject *y = PyFloat_FromDouble(p->peak_m);
        PyObject *z = p->peak_i >= 0 ? PyLong_FromLongLong(p->peak_i) : (Py_INCREF(Py_None), Py_None);
        PyObject *w = p->first_over >= 0 ? Py_BuildValue("(Ld)", p->first_over, p->over_value)
                                         : (Py_INCREF(Py_None), Py_None);
        if (!x || !y || !z || !w) {
            Py_XDECREF(x);
            Py_XDECREF(y);
            Py_XDECREF(z);
            Py_XDECREF(w);
            goto done;
        }
        PyList_SET_ITEM(pn, d, x);
        PyList_SET_ITEM(pm, d, y);
        PyList_SET_ITEM(pa, d, z);
        PyList_SET_ITEM(ov, d, w);
    }
    result = PyTuple_Pack(4, pn, pm, pa, ov);
    goto done;
not_plain:
    result = declined();
done:
    Py_XDECREF(pn);
    Py_XDECREF(pm);
    Py_XDECREF(pa);
    Py_XDECREF(ov);
    release_ints(&code);
    release_ints(&stage);
    scratch_free(&sc);
    return result;
}

/* ------------------------------------------------------------------ critical_path_plain */

/* critical_path_plain(starts, wait, start_values, start_floats, end_values, end_floats, comm,
 *                     tol) -> list[int] | None
 *
 * The twin of Timeline.critical_path for a graph without extra waits: from the first action
 * that ends last, step back to the action whose end (plus comm, across devices) is this
 * one's start within tol, preferring the cross-device wait.  The times are the sweep's
 * columns ("Times" above).  None when comm is not a number read_number takes.  An action's
 * device is the range of ``starts`` holding it (what Graph.dev says), found by bisection:
 * the path reads a few of a million actions, so neither dev nor wait is copied whole.
 *
 * Exactness.  The tests are Python's abs(end[k] + comm - start[i]) <= tol and
 * abs(end[i-1] - start[i]) <= tol, evaluated left to right with each operand's type as it
 * is (num_add, num_within): ints exactly in long long (three terms of magnitude <= 2^53), a
 * float as soon as one operand is one, and an int compared with tol exactly.  The last
 * action is Python's max(range(n), key=end.__getitem__): the first of the greatest, the
 * comparisons exact since every time is exactly a double. */
static Py_ssize_t
device_of(const long long *starts, Py_ssize_t D, long long i)
{
    Py_ssize_t lo = 0, hi = D; /* starts[lo] <= i < starts[hi] */
    while (hi - lo > 1) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (starts[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static PyObject *
k_critical_path_plain(PyObject *self, PyObject *args)
{
    PyObject *starts_o, *wait_o, *sv, *sf, *ev, *ef, *comm_o;
    double tol;
    if (!PyArg_ParseTuple(args, "OOOOOOOd", &starts_o, &wait_o, &sv, &sf, &ev, &ef, &comm_o, &tol))
        return NULL;
    times_t start, end;
    if (!read_times(sv, sf, &start, "critical_path_plain: start"))
        return NULL;
    if (!read_times(ev, ef, &end, "critical_path_plain: end")) {
        PyBuffer_Release(&start.view);
        return NULL;
    }
    Py_ssize_t n = end.n, D1 = 0, nw = 0;
    scratch_t sc = SCRATCH_INIT;
    long long *starts = index_array(&sc, starts_o, &D1, "critical_path_plain: starts");
    ints_t wait = {{NULL}};
    PyObject *path = NULL, *result = NULL;
    long long *steps = NULL; /* grown with PyMem_Realloc, so not a scratch array */
    num_t comm;
    if (starts == NULL || !valid_starts(starts, D1, n, "critical_path_plain") ||
        !read_ints(&sc, wait_o, &wait, &nw, "critical_path_plain: wait"))
        goto done;
    if (start.n != n || nw != n) {
        PyErr_SetString(PyExc_ValueError, "critical_path_plain: the columns' lengths disagree");
        goto done;
    }
    if (n == 0 || !read_num(comm_o, &comm))
        goto not_plain;
    Py_ssize_t last = 0, D = D1 - 1, len = 0, cap = 0;
    for (Py_ssize_t i = 1; i < n; i++)
        if (time_value(&end, i) > time_value(&end, last))
            last = i;
    long long i = last;
    /* the path is walked in C (its indices into a growing C array: nothing is made or
     * called while the columns are read), then made into the list.  Each step goes to an
     * action the sweep finished before this one (its wait, or its device predecessor), so a
     * path has at most n actions. */
    for (;; len++) {
        if (len == n)
            goto not_plain;
        if (len == cap) {
            cap = cap ? 2 * cap : 256;
            long long *grown = PyMem_Realloc(steps, sizeof(long long) * (size_t)cap);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            steps = grown;
        }
        steps[len] = i;
        long long k = int_at(&wait, i), next = -1;
        Py_ssize_t d = device_of(starts, D, i);
        num_t s, e;
        if (k < 0 || k > n) {
            PyErr_SetString(PyExc_ValueError, "critical_path_plain: a wait is out of range");
            goto done;
        }
        if (!time_at(&start, i, &s))
            goto done;
        if (k < n) {
            if (!time_at(&end, k, &e))
                goto done;
            if (num_within(num_add(num_add(e, comm, 1), s, -1), tol))
                next = k;
        }
        if (next < 0 && i > starts[d]) {
            if (!time_at(&end, i - 1, &e))
                goto done;
            if (num_within(num_add(e, s, -1), tol))
                next = i - 1;
        }
        if (next < 0)
            break;
        i = next;
    }
    len++; /* the last step, where the walk stopped */
    if ((path = PyList_New(len)) == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < len; k++) { /* first to last: the walk's steps reversed */
        PyObject *x = PyLong_FromLongLong(steps[len - 1 - k]);
        if (x == NULL)
            goto done;
        PyList_SET_ITEM(path, k, x);
    }
    result = path;
    path = NULL;
    goto done;
not_plain:
    result = declined();
done:
    Py_XDECREF(path);
    PyMem_Free(steps);
    release_ints(&wait);
    scratch_free(&sc);
    PyBuffer_Release(&start.view);
    PyBuffer_Release(&end.view);
    return result;
}

/* ------------------------------------------------------------------ format_plain */

/* format_plain(acts, indices, action_type) -> list[str] | None
 *
 * The twin of ``[str(acts[i]) for i in indices]`` for plain actions (exactly of
 * ``action_type``, int stage, str kind, int microbatch, no sub-actions): Action.__str__
 * writes those as stage, kind, microbatch.  An index out of range raises IndexError, as
 * acts[i] does for a non-negative i; None for an action that is not plain. */
/* Write v >= 0 in decimal at buf; returns the number of characters. */
static Py_ssize_t
put_int(char *buf, long long v)
{
    char tmp[24];
    Py_ssize_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    for (Py_ssize_t k = 0; k < n; k++)
        buf[k] = tmp[n - 1 - k];
    return n;
}

/* Whether action_text can write this kind: an exact str of at most MAX_KIND_LEN ASCII
 * characters. */
static int
writable_kind(PyObject *kind)
{
    return PyUnicode_CheckExact(kind) && PyUnicode_IS_ASCII(kind) && PyUnicode_GET_LENGTH(kind) <= MAX_KIND_LEN;
}

/* The text of the plain action (stage, kind, mb): ``2F5``; ``2UNSHARD`` when mb < 0 (a
 * bookkeeping entry of the columns).  stage >= 0; kind writable_kind (the callers check
 * both). */
static PyObject *
action_text(long long stage, PyObject *kind, long long mb)
{
    char buf[2 * 20 + MAX_KIND_LEN]; /* two indices of at most 19 digits and a kind */
    Py_ssize_t len = put_int(buf, stage);
    memcpy(buf + len, PyUnicode_1BYTE_DATA(kind), (size_t)PyUnicode_GET_LENGTH(kind));
    len += PyUnicode_GET_LENGTH(kind);
    if (mb >= 0)
        len += put_int(buf + len, mb);
    return PyUnicode_FromStringAndSize(buf, len);
}

static PyObject *
k_format_plain(PyObject *self, PyObject *args)
{
    PyObject *acts, *indices, *out = NULL;
    PyTypeObject *type;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &acts, &PyList_Type, &indices, &PyType_Type, &type))
        return NULL;
    /* each indexed action is held (a strong reference: an Action cannot change) before any
     * text is made; then nothing of the two lists is read again */
    Py_ssize_t n = PyList_GET_SIZE(indices), na = PyList_GET_SIZE(acts), held = 0;
    scratch_t sc = SCRATCH_INIT;
    PyObject **act = scratch_array(&sc, n, sizeof(PyObject *), 0);
    if (act == NULL)
        return NULL;
    for (; held < n; held++) {
        int ok = 1;
        PyObject *index = PyList_GET_ITEM(indices, held);
        long long i = exact_int(index, &ok);
        if (!ok || i < 0 || i >= na) {
            PyErr_SetString(ok || PyLong_Check(index) ? PyExc_IndexError : PyExc_TypeError,
                            "format_plain: an index is not an index of acts");
            goto done;
        }
        PyObject *a = PyList_GET_ITEM(acts, i);
        if (Py_TYPE(a) != type || !PyTuple_Check(a) || PyTuple_GET_SIZE(a) != 4 ||
            PyTuple_GET_ITEM(a, 3) != Py_None)
            goto not_plain;
        long long stage = exact_int(PyTuple_GET_ITEM(a, 0), &ok);
        long long mb = exact_int(PyTuple_GET_ITEM(a, 2), &ok);
        if (!ok || stage < 0 || mb < 0 || !writable_kind(PyTuple_GET_ITEM(a, 1)))
            goto not_plain;
        Py_INCREF(a);
        act[held] = a;
    }
    out = new_list(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        int ok = 1;
        PyObject *text = action_text(exact_int(PyTuple_GET_ITEM(act[k], 0), &ok), PyTuple_GET_ITEM(act[k], 1),
                                     exact_int(PyTuple_GET_ITEM(act[k], 2), &ok));
        if (text == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, k, text);
    }
    goto done;
not_plain:
    out = declined();
done:
    while (held > 0)
        Py_DECREF(act[--held]);
    scratch_free(&sc);
    return out;
}

/* format_columns(codes, stages, mbs, lengths, indices, kinds) -> list[str]: the str() of the
 * actions at ``indices`` of the columns of grammar.PlainRows, as format_plain gives them. */
static PyObject *
k_format_columns(PyObject *self, PyObject *args)
{
    PyObject *codes, *stages, *mbs, *lengths, *indices, *kinds, *out = NULL;
    if (!PyArg_ParseTuple(args, "OOOOO!O!", &codes, &stages, &mbs, &lengths, &PyList_Type, &indices,
                          &PyTuple_Type, &kinds))
        return NULL;
    Py_ssize_t nkinds = PyTuple_GET_SIZE(kinds);
    for (Py_ssize_t c = 0; c < nkinds; c++) {
        PyObject *k = PyTuple_GET_ITEM(kinds, c);
        if (!writable_kind(k)) {
            PyErr_SetString(PyExc_TypeError, "format_columns: the kinds must be ASCII str");
            return NULL;
        }
    }
    columns_t col; /* its codes checked at the indices alone: a few names of a long run cost a few */
    if (!read_columns(codes, stages, mbs, lengths, 256, &col, "format_columns"))
        return NULL;
    /* the indices read into C first: then nothing of the caller's list is read again */
    Py_ssize_t n = PyList_GET_SIZE(indices);
    scratch_t sc = SCRATCH_INIT;
    long long *at = scratch_array(&sc, n, sizeof(long long), 0);
    if (at == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        int ok = 1;
        PyObject *index = PyList_GET_ITEM(indices, k);
        long long i = exact_int(index, &ok);
        if (!ok || i < 0 || i >= col.n) {
            PyErr_SetString(ok || PyLong_Check(index) ? PyExc_IndexError : PyExc_TypeError,
                            "format_columns: an index is not an index of the columns");
            goto done;
        }
        if (col.code[i] >= nkinds) {
            PyErr_SetString(PyExc_ValueError, "format_columns: a code is not the index of a kind");
            goto done;
        }
        if (col.stage[i] < 0 || col.mb[i] < -1) { /* no reader or lowering writes these */
            out = declined();
            goto done;
        }
        at[k] = i;
    }
    out = new_list(n);
    for (Py_ssize_t k = 0; out != NULL && k < n; k++) {
        long long i = at[k];
        PyObject *text = action_text(col.stage[i], PyTuple_GET_ITEM(kinds, col.code[i]), col.mb[i]);
        if (text == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, k, text);
    }
done:
    scratch_free(&sc);
    return out;
}

/* ------------------------------------------------------------------ lower_keyed, defer_recv_plain, format_csv
 *
 * The rest of ``schedverify lower`` over columns: our construction (lowering._keyed_messages
 * after the release's bookkeeping passes), PyTorch's _defer_recv_ops (lowering.defer_recv_ops)
 * as a pass over lower_plain's columns, and PyTorch's CSV of a schedule's columns
 * (io.csvfmt.dumps).  Each declines what its Python twin would answer differently or raise
 * on; tests/test_kernel.py holds them equal to the Python code, action for action. */

/* the index of (stage, microbatch, slot) in a table of S * M * K entries */
#define LK_AT(s, m, k, M, K) ((((long long)(s) * (M)) + (m)) * (K) + (k))

/* a per-(stage, microbatch, slot) table fits when it follows the action count */
static int
lk_table_fits(long long S, long long M, int slots, Py_ssize_t n)
{
    return (double)S * (double)M * (double)slots <= 8.0 * (double)n + (double)(1 << 20);
}

/* A message and its key, 32 bytes, so that the sort moves the records themselves (a C
 * library's sort may sort larger ones through pointers, then copy each one back); where
 * its two ends may go (the producer's and the consumer's rows) is kept apart, by seq.  The
 * int32 fields hold indices below the action count, which the caller bounds. */
typedef struct {
    double t;
    int32_t src, dst, s, mb, seq;
    int32_t code; /* the SEND's code, 4 (SEND_F, peer s + 1) or 6 (SEND_B, peer s - 1); its RECV's is one more */
} lk_msg_t;

static int
lk_cmp(const void *pa, const void *pb)
{
    const lk_msg_t *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
#define LK_BY(f) if (a->f != b->f) return a->f < b->f ? -1 : 1;
    LK_BY(src) LK_BY(dst) LK_BY(s)
    if (a->code != b->code) /* the label: "SEND_B" < "SEND_F" */
        return a->code == 6 ? -1 : 1;
    LK_BY(mb) LK_BY(seq)
#undef LK_BY
    return 0;
}

/* lower_keyed merges the ranks' runs of messages for at most this many ranks (each message
 * read costs a comparison per rank), and sorts them all for more */
#define LK_MERGE_RANKS 16

/* the least message at the runs' heads (run d: msg[run[d] .. run[d + 1]), of which taken[d]
 * are taken), taken off its run; some run is not empty */
static inline const lk_msg_t *
lk_least(const lk_msg_t *msg, const Py_ssize_t *run, Py_ssize_t *taken, Py_ssize_t D)
{
    Py_ssize_t best = -1;
    for (Py_ssize_t d = 0; d < D; d++)
        if (run[d] + taken[d] < run[d + 1] &&
            (best < 0 || lk_cmp(&msg[run[d] + taken[d]], &msg[run[best] + taken[best]]) < 0))
            best = d;
    return &msg[run[best] + taken[best]++];
}

typedef struct {
    int32_t pos; /* insert after this row index (-1: before the first) */
    int32_t dev, st, mb, code;
} lk_ins_t;

/* lower_keyed(codes, stages, mbs, lengths, S, M, rank_of, kinds, gcodes, gstages, gmbs, gends, dialect)
 *     -> (codes, stages, mbs, lengths, top_stage, top_mb) | None
 *
 * The twin of lowering._keyed_lowering: the bookkeeping passes of lower_plain in the
 * release's dialect (as lower_plain's), then _keyed_messages, then (2.15) the wait per send
 * of lower_plain.  The first four are
 * the compute-only columns (as lower_plain's); gcodes (int8), gstages, gmbs (int32, or int64
 * where a Graph's column needed it) and gends (double) are the compiled graph of the
 * compute-only schedule's check and its timeline's end times (graph.Times values, exact), action for action.  Declined: what
 * lower_plain declines, a compute leaf without an end or on a rank its stage is not on, a
 * message without its consumer, a NaN end, tables beyond the action count. */
static PyObject *
k_lower_keyed(PyObject *self, PyObject *args)
{
    PyObject *codes, *stages, *mbs, *lengths, *rank_o, *kinds, *gcodes, *gstages, *gmbs, *gends, *result = NULL;
    long long S, M;
    dialect_t how;
    if (!PyArg_ParseTuple(args, "SSSO!LLOO!SSSS(ppp)", &codes, &stages, &mbs, &PyTuple_Type, &lengths, &S, &M,
                          &rank_o, &PyTuple_Type, &kinds, &gcodes, &gstages, &gmbs, &gends, &how.dict_order,
                          &how.reduce_wait, &how.wait_send))
        return NULL;
    columns_t c;
    if (!read_columns(codes, stages, mbs, lengths, 256, &c, "lower_keyed"))
        return NULL;
    if (PyTuple_GET_SIZE(kinds) != LK_KINDS) {
        PyErr_SetString(PyExc_ValueError, "lower_keyed: fourteen kinds");
        return NULL;
    }
    Py_ssize_t ng = PyBytes_GET_SIZE(gcodes);
    /* a Graph's stage and mb columns are 4-byte ints, or 8-byte where an entry does not fit */
    int ws = ng > 0 && PyBytes_GET_SIZE(gstages) == 4 * ng ? 4 : 8;
    int wm = ng > 0 && PyBytes_GET_SIZE(gmbs) == 4 * ng ? 4 : 8;
    if (PyBytes_GET_SIZE(gstages) != ws * ng || PyBytes_GET_SIZE(gmbs) != wm * ng || PyBytes_GET_SIZE(gends) != 8 * ng) {
        PyErr_SetString(PyExc_ValueError, "lower_keyed: one stage, microbatch and end per graph code");
        return NULL;
    }
    if (S <= 0 || M <= 0) {
        PyErr_SetString(PyExc_ValueError, "lower_keyed: S and M must be at least 1");
        return NULL;
    }
    Py_ssize_t D = c.D, n = c.n;
    if (D == 0 || S > 2 * n + 1024 || !lk_table_fits(S, M, 4, n + ng) || n + ng >= INT32_MAX / 8)
        return declined();
    for (Py_ssize_t i = 0; i < n; i++)
        if (c.code[i] > 3 || c.stage[i] < 0 || c.stage[i] >= S || c.mb[i] < 0 || c.mb[i] >= M)
            return declined();
    const signed char *gc = (const signed char *)PyBytes_AS_STRING(gcodes);
    const char *gsb = PyBytes_AS_STRING(gstages), *gmb = PyBytes_AS_STRING(gmbs);
    const double *ge = (const double *)PyBytes_AS_STRING(gends);
    Py_ssize_t cells = (Py_ssize_t)(S * M * 4);
    scratch_t sc = SCRATCH_INIT;
    lvec_t *mid = NULL, *out = NULL;
    lk_msg_t *msg = NULL;
    lk_ins_t *ins = NULL;
    int32_t *rank = scratch_array(&sc, S, sizeof(int32_t), 0);
    long long *count = scratch_array(&sc, S, sizeof(long long), 1);
    long long (*next)[LOWER_RESIDENT] = scratch_array(&sc, n, sizeof(long long[LOWER_RESIDENT]), 0);
    int *nnext = scratch_array(&sc, n, sizeof(int), 0);
    double *endt = scratch_array(&sc, cells, sizeof(double), 0);
    unsigned char *has = scratch_array(&sc, cells, 1, 1);
    int32_t *atp = scratch_array(&sc, cells, sizeof(int32_t), 0); /* (positions: below n + ng, checked) */
    Py_ssize_t *cstart = scratch_array(&sc, D + 1, sizeof(Py_ssize_t), 1);
    mid = PyMem_Calloc((size_t)D, sizeof(lvec_t));
    out = PyMem_Calloc((size_t)D, sizeof(lvec_t));
    if (!rank || !count || !next || !nnext || !endt || !has || !atp || !cstart || !mid || !out)
        goto nomem;
    int got = read_small_ints(rank_o, S, 0, D, -1, rank);
    if (got < 0)
        goto done;
    if (got == 0)
        goto not_plain;
    for (long long s = 0; s < S; s++)
        if (rank[s] < 0)
            goto not_plain;
    /* each compute leaf's end (the last action of its key, as a dict assignment keeps) */
    for (Py_ssize_t g = 0; g < ng; g++) {
        if (ge[g] != ge[g])
            goto not_plain;
        long long gs = ws == 4 ? (long long)((const int32_t *)gsb)[g] : ((const long long *)gsb)[g];
        long long gm = wm == 4 ? (long long)((const int32_t *)gmb)[g] : ((const long long *)gmb)[g];
        if (gc[g] >= 0 && gc[g] <= 3 && gs >= 0 && gs < S && gm >= 0 && gm < M) {
            Py_ssize_t key = (Py_ssize_t)LK_AT(gs, gm, gc[g], M, 4);
            endt[key] = ge[g];
            has[key] = 1;
        }
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t d = 0; d < D; d++) {
        Py_ssize_t len = PyLong_AsSsize_t(PyTuple_GET_ITEM(lengths, d));
        if (len == 0)
            goto not_plain;
        int r = lower_bookkeeping(c.code + at, c.stage + at, c.mb + at, len, M, count, next, nnext, &mid[d], &how);
        if (r <= 0)
            goto done;
        at += len;
    }
    /* each phase's scratch goes when the phase ends, so that the next one does not hold it too */
    scratch_drop(&sc, next);
    scratch_drop(&sc, nnext);
    /* per rank: the row index and the end of each compute, in row order; where each leaf sits */
    for (Py_ssize_t k = 0; k < cells; k++)
        atp[k] = -1;
    Py_ssize_t ncomp = 0, nmsg = 0;
    for (Py_ssize_t d = 0; d < D; d++) {
        cstart[d] = ncomp;
        for (Py_ssize_t k = 0; k < mid[d].n; k++)
            if (mid[d].code[k] < LK_UNSHARD)
                ncomp++;
    }
    cstart[D] = ncomp;
    int32_t *cpos = scratch_array(&sc, ncomp, sizeof(int32_t), 0);
    double *cend = scratch_array(&sc, ncomp, sizeof(double), 0);
    if (!cpos || !cend)
        goto nomem;
    for (Py_ssize_t d = 0, j = 0; d < D; d++)
        for (Py_ssize_t k = 0; k < mid[d].n; k++) {
            int code = mid[d].code[k];
            if (code >= LK_UNSHARD)
                continue;
            long long s = mid[d].st[k], m = mid[d].mb[k];
            Py_ssize_t key = (Py_ssize_t)LK_AT(s, m, code, M, 4);
            if (rank[s] != d || !has[key] || (j > cstart[d] && endt[key] < cend[j - 1]))
                goto not_plain; /* a rank's ends in row order rise, as a timeline's do: the cursor below needs it */
            cpos[j] = (int32_t)k;
            cend[j++] = endt[key];
            atp[key] = (int32_t)k;
            long long peer;
            nmsg += lower_comm(code, s, S, rank, &peer) != 0;
        }
    msg = PyMem_Malloc(sizeof(lk_msg_t) * ((size_t)nmsg + 1));
    ins = PyMem_Malloc(sizeof(lk_ins_t) * (2 * (size_t)nmsg + 1));
    int32_t *producer = scratch_array(&sc, nmsg + 1, sizeof(int32_t), 0);
    int32_t *user = scratch_array(&sc, nmsg + 1, sizeof(int32_t), 0);
    if (msg == NULL || ins == NULL || producer == NULL || user == NULL)
        goto nomem;
    /* the messages, by key: (time the data is ready, sender, receiver, stage, label, microbatch) */
    Py_ssize_t q = 0;
    Py_ssize_t *run = scratch_array(&sc, D + 1, sizeof(Py_ssize_t), 0); /* each rank's messages: a run */
    if (run == NULL)
        goto nomem;
    for (Py_ssize_t d = 0; d < D; d++) {
        run[d] = q;
        for (Py_ssize_t k = 0; k < mid[d].n; k++) {
            int code = mid[d].code[k];
            long long s = mid[d].st[k], m = mid[d].mb[k], peer;
            int comm = lower_comm(code, s, S, rank, &peer);
            if (!comm)
                continue;
            Py_ssize_t use = atp[LK_AT(peer, m, comm == 4 ? 0 : 1, M, 4)];
            if (comm == 6 && use < 0)
                use = atp[LK_AT(peer, m, 2, M, 4)];
            if (use < 0)
                goto not_plain; /* no consumer: the Python code raises */
            lk_msg_t *e = &msg[q];
            e->t = endt[LK_AT(s, m, code, M, 4)];
            e->src = rank[s];
            e->dst = rank[peer];
            e->s = (int32_t)s;
            e->code = comm;
            e->mb = (int32_t)m;
            e->seq = (int32_t)q;
            producer[q] = atp[LK_AT(s, m, code, M, 4)];
            user[q] = (int32_t)use;
            q++;
        }
    }
    run[D] = q;
    scratch_drop(&sc, endt);
    scratch_drop(&sc, has);
    scratch_drop(&sc, atp);
    /* the messages in key order.  Each rank's come in its rows' order, whose ends rise (checked
     * above), so each rank's run is sorted but where ends tie; a run that is not is sorted
     * alone, and the runs of a few ranks are merged as the loop below reads them (the key is
     * a total order: the merge gives qsort's order).  Many ranks: one qsort of them all. */
    const int merge = D <= LK_MERGE_RANKS;
    if (!merge)
        qsort(msg, (size_t)nmsg, sizeof(lk_msg_t), lk_cmp);
    for (Py_ssize_t d = 0; merge && d < D; d++)
        for (Py_ssize_t x = run[d] + 1; x < run[d + 1]; x++)
            if (lk_cmp(&msg[x - 1], &msg[x]) > 0) {
                qsort(msg + run[d], (size_t)(run[d + 1] - run[d]), sizeof(lk_msg_t), lk_cmp);
                break;
            }
    /* each end after the last compute that ends by the key, but after the producer (a SEND)
     * or before the consumer (a RECV): bisect_right over the rank's compute ends, which is a
     * cursor per rank moving forward, since the keys come in increasing time */
    Py_ssize_t nins = 0;
    Py_ssize_t *cursor = scratch_array(&sc, D, sizeof(Py_ssize_t), 1);
    if (cursor == NULL)
        goto nomem;
    Py_ssize_t *taken = scratch_array(&sc, D, sizeof(Py_ssize_t), 1);
    if (taken == NULL)
        goto nomem;
    for (Py_ssize_t x = 0; x < nmsg; x++) {
        const lk_msg_t *e = merge ? lk_least(msg, run, taken, D) : &msg[x];
        for (int side = 0; side < 2; side++) {
            Py_ssize_t d = side == 0 ? (Py_ssize_t)e->src : (Py_ssize_t)e->dst;
            Py_ssize_t lo = side == 0 ? producer[e->seq] : -1, hi = side == 0 ? mid[d].n - 1 : user[e->seq] - 1;
            const double *ends = cend + cstart[d];
            Py_ssize_t a = cursor[d], b = cstart[d + 1] - cstart[d];
            while (a < b && !(e->t < ends[a]))
                a++;
            cursor[d] = a;
            Py_ssize_t k = a - 1 >= 0 ? cpos[cstart[d] + a - 1] : -1;
            Py_ssize_t pos = k > lo ? k : lo;
            if (pos > hi)
                pos = hi;
            if (pos < -1 || pos >= mid[d].n)
                goto not_plain; /* not where the Python code puts it; never with the checks above */
            lk_ins_t *w = &ins[nins++];
            w->pos = (int32_t)pos;
            w->dev = (int32_t)d;
            w->code = e->code + side;
            w->st = side == 0 ? e->s : e->s + (e->code == 4 ? 1 : -1);
            w->mb = e->mb;
        }
    }
    PyMem_Free(msg);
    msg = NULL;
    scratch_drop(&sc, producer);
    scratch_drop(&sc, user);
    scratch_drop(&sc, cursor);
    scratch_drop(&sc, cpos);
    scratch_drop(&sc, cend);
    /* each rank's row, written in place: bucket b of a rank (its inserts after row item
     * b - 1, in message order) starts past the b items before it and the inserts of the
     * buckets before it (before[b], counted per rank), so an insert of bucket b goes to
     * before[b] + b + (the inserts of b placed so far), and row item k to before[k + 1] + k */
    Py_ssize_t *base = scratch_array(&sc, D + 1, sizeof(Py_ssize_t), 0);
    if (base == NULL)
        goto nomem;
    base[0] = 0;
    for (Py_ssize_t d = 0; d < D; d++) /* a rank's buckets 0..n, and a slot past its last */
        base[d + 1] = base[d] + mid[d].n + 2;
    Py_ssize_t *before = scratch_array(&sc, base[D] + 1, sizeof(Py_ssize_t), 1);
    Py_ssize_t *placed = scratch_array(&sc, base[D] + 1, sizeof(Py_ssize_t), 1);
    Py_ssize_t *added = scratch_array(&sc, D, sizeof(Py_ssize_t), 1);
    if (before == NULL || placed == NULL || added == NULL)
        goto nomem;
    for (Py_ssize_t w = 0; w < nins; w++) {
        before[base[ins[w].dev] + ins[w].pos + 1 + 1]++;
        added[ins[w].dev]++;
    }
    for (Py_ssize_t d = 0; d < D; d++) /* per rank: the inserts of the buckets before each */
        for (Py_ssize_t b = base[d] + 1; b <= base[d] + mid[d].n; b++)
            before[b] += before[b - 1];
    for (Py_ssize_t d = 0; d < D; d++) {
        Py_ssize_t len = mid[d].n + added[d];
        out[d].code = PyMem_Malloc((size_t)len + 1);
        out[d].st = PyMem_Malloc(sizeof(pr_t) * ((size_t)len + 1));
        out[d].mb = PyMem_Malloc(sizeof(pr_t) * ((size_t)len + 1));
        if (out[d].code == NULL || out[d].st == NULL || out[d].mb == NULL)
            goto nomem;
        out[d].n = out[d].cap = len;
        const Py_ssize_t *bd = before + base[d];
        for (Py_ssize_t k = 0; k < mid[d].n; k++) {
            Py_ssize_t at = bd[k + 1] + k;
            out[d].code[at] = mid[d].code[k];
            out[d].st[at] = mid[d].st[k];
            out[d].mb[at] = mid[d].mb[k];
        }
    }
    for (Py_ssize_t w = 0; w < nins; w++) {
        const lk_ins_t *e = &ins[w];
        Py_ssize_t b = (Py_ssize_t)e->pos + 1, at = before[base[e->dev] + b] + b + placed[base[e->dev] + b]++;
        lvec_t *row = &out[e->dev];
        row->code[at] = (signed char)e->code;
        row->st[at] = e->st;
        row->mb[at] = e->mb;
    }
    PyMem_Free(ins);
    ins = NULL;
    scratch_free(&sc);
    for (Py_ssize_t d = 0; d < D; d++) {
        lvec_free(&mid[d]);
        mid[d] = (lvec_t){NULL, NULL, NULL, 0, 0};
    }
    if (how.wait_send) {
        int r = lower_wait_sends(out, D, S, M);
        if (r == 0)
            goto nomem;
        if (r < 0)
            goto not_plain;
    }
    result = lowered_columns(out, D);
    goto done;
nomem:
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    goto done;
not_plain:
    result = declined();
done:
    if (mid != NULL)
        for (Py_ssize_t d = 0; d < D; d++)
            lvec_free(&mid[d]);
    if (out != NULL)
        for (Py_ssize_t d = 0; d < D; d++)
            lvec_free(&out[d]);
    PyMem_Free(mid);
    PyMem_Free(out);
    PyMem_Free(msg);
    PyMem_Free(ins);
    scratch_free(&sc);
    return result;
}

/* defer_recv_plain(codes, stages, mbs, lengths, S, M, rank_of)
 *     -> (codes, stages, mbs, lengths, top_stage, top_mb) | None
 *
 * PyTorch's _defer_recv_ops (lowering.defer_recv_ops) over lowered columns in the codes of
 * grammar.COLUMN_KINDS (what lower_plain gives): each rank's RECVs held back until the
 * compute that consumes it, or until a SEND to the same peer from a lower rank, in the order
 * they were held.  The same actions, moved within their rows.  Declined: a code beyond the
 * fourteen kinds, an index out of range, a RECV held twice (the dict keeps the first's place),
 * a peer stage outside the route, a RECV with no consumer (PyTorch raises), tables beyond the
 * action count. */
static PyObject *
k_defer_recv_plain(PyObject *self, PyObject *args)
{
    PyObject *codes, *stages, *mbs, *lengths, *rank_o, *result = NULL;
    long long S, M;
    if (!PyArg_ParseTuple(args, "SSSO!LLO", &codes, &stages, &mbs, &PyTuple_Type, &lengths, &S, &M, &rank_o))
        return NULL;
    columns_t c;
    if (!read_columns(codes, stages, mbs, lengths, 256, &c, "defer_recv_plain"))
        return NULL;
    if (S <= 0 || M <= 0) {
        PyErr_SetString(PyExc_ValueError, "defer_recv_plain: S and M must be at least 1");
        return NULL;
    }
    Py_ssize_t D = c.D, n = c.n;
    /* the held RECVs' tables are int32 (their indices and keys: below 8n + 2^20 entries) */
    if (S > 2 * n + 1024 || !lk_table_fits(S, M, 2, n) || n >= INT32_MAX / 16)
        return declined();
    for (Py_ssize_t i = 0; i < n; i++)
        if (c.code[i] >= LK_KINDS || c.stage[i] < 0 || c.stage[i] >= S || c.mb[i] >= M
            || c.mb[i] < (c.code[i] >= LK_UNSHARD ? -1 : 0))
            return declined();
    Py_ssize_t cells = (Py_ssize_t)(S * M * 2);
    scratch_t sc = SCRATCH_INIT;
    PyObject *ocodes = NULL, *ostages = NULL, *ombs = NULL;
    int32_t *rank = scratch_array(&sc, S, sizeof(int32_t), 0);
    int32_t *tab = scratch_array(&sc, cells, sizeof(int32_t), 0);
    int32_t *e_i = scratch_array(&sc, n, sizeof(int32_t), 0);
    int32_t *e_next = scratch_array(&sc, n, sizeof(int32_t), 0);
    int32_t *e_key = scratch_array(&sc, n, sizeof(int32_t), 0);
    int32_t *e_peer = scratch_array(&sc, n, sizeof(int32_t), 0);
    unsigned char *alive = scratch_array(&sc, n, 1, 1);
    int32_t *head = scratch_array(&sc, D, sizeof(int32_t), 0);
    int32_t *tail = scratch_array(&sc, D, sizeof(int32_t), 0);
    ocodes = new_bytes(n);
    ostages = new_bytes((Py_ssize_t)sizeof(pr_t) * n);
    ombs = new_bytes((Py_ssize_t)sizeof(pr_t) * n);
    if (!rank || !tab || !e_i || !e_next || !e_key || !e_peer || !alive || !head || !tail || !ocodes || !ostages
        || !ombs) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    int got = read_small_ints(rank_o, S, 0, D, -1, rank);
    if (got < 0)
        goto done;
    if (got == 0)
        goto not_plain;
    for (long long s = 0; s < S; s++)
        if (rank[s] < 0)
            goto not_plain;
    for (Py_ssize_t k = 0; k < cells; k++)
        tab[k] = -1;
    for (Py_ssize_t d = 0; d < D; d++)
        head[d] = tail[d] = -1;
    char *oc = PyBytes_AS_STRING(ocodes);
    pr_t *os = (pr_t *)PyBytes_AS_STRING(ostages), *om = (pr_t *)PyBytes_AS_STRING(ombs);
    long long top_stage = -1, top_mb = -1;
    Py_ssize_t o = 0, at = 0;
#define EMIT(i) (oc[o] = (char)c.code[i], os[o] = c.stage[i], om[o] = c.mb[i], o++)
    for (Py_ssize_t d = 0; d < D; d++) {
        Py_ssize_t len = PyLong_AsSsize_t(PyTuple_GET_ITEM(lengths, d)), ne = at;
        for (Py_ssize_t i = at; i < at + len; i++) {
            int k = c.code[i];
            long long s = c.stage[i], m = c.mb[i];
            if (s > top_stage)
                top_stage = s;
            if (m > top_mb)
                top_mb = m;
            if (k == 5 || k == 7) { /* RECV_F, RECV_B: held */
                Py_ssize_t key = (Py_ssize_t)LK_AT(s, m, k == 5 ? 0 : 1, M, 2);
                long long ps = k == 5 ? s - 1 : s + 1;
                if (tab[key] >= 0 || ps < 0 || ps >= S)
                    goto not_plain;
                int32_t p = rank[ps];
                Py_ssize_t e = ne++;
                e_i[e] = (int32_t)i;
                e_next[e] = -1;
                e_key[e] = (int32_t)key;
                e_peer[e] = p;
                alive[e] = 1;
                if (tail[p] < 0)
                    head[p] = (int32_t)e;
                else
                    e_next[tail[p]] = (int32_t)e;
                tail[p] = (int32_t)e;
                tab[key] = (int32_t)e;
                continue;
            }
            if (k == 4 || k == 6) { /* SEND_F, SEND_B: to a higher rank, what is held from it goes first */
                long long ps = k == 4 ? s + 1 : s - 1;
                if (ps < 0 || ps >= S)
                    goto not_plain;
                int32_t p = rank[ps];
                if (d < p) {
                    for (Py_ssize_t e = head[p]; e >= 0; e = e_next[e])
                        if (alive[e]) {
                            EMIT(e_i[e]);
                            alive[e] = 0;
                            tab[e_key[e]] = -1;
                        }
                    head[p] = tail[p] = -1;
                }
            }
            if (k <= 2) { /* F consumes RECV_F, B and I consume RECV_B, of their own stage */
                Py_ssize_t e = tab[LK_AT(s, m, k == 0 ? 0 : 1, M, 2)];
                if (e >= 0) {
                    EMIT(e_i[e]);
                    alive[e] = 0;
                    tab[e_key[e]] = -1;
                }
            }
            EMIT(i);
        }
        for (Py_ssize_t e = at; e < ne; e++) {
            if (alive[e])
                goto not_plain; /* a RECV with no consumer: lowering.py raises PyTorch's message */
            head[e_peer[e]] = tail[e_peer[e]] = -1;
        }
        at += len;
    }
#undef EMIT
    if (o != n) {
        PyErr_SetString(PyExc_SystemError, "defer_recv_plain: an action lost");
        goto done;
    }
    result = Py_BuildValue("(OOOOLL)", ocodes, ostages, ombs, lengths, top_stage, top_mb);
    goto done;
not_plain:
    result = declined();
done:
    Py_XDECREF(ocodes);
    Py_XDECREF(ostages);
    Py_XDECREF(ombs);
    scratch_free(&sc);
    return result;
}

/* format_csv(codes, stages, mbs, lengths, kinds) -> str | None
 *
 * PyTorch's CSV of rows of plain actions (io.csvfmt.dumps: csv.writer, "\n" after each row,
 * the actions' str joined by commas; no field of a plain action needs quoting).  Declined:
 * a kind that is not writable, a negative stage or a microbatch below -1. */
static PyObject *
k_format_csv(PyObject *self, PyObject *args)
{
    PyObject *codes, *stages, *mbs, *lengths, *kinds;
    if (!PyArg_ParseTuple(args, "SSSO!O!", &codes, &stages, &mbs, &PyTuple_Type, &lengths, &PyTuple_Type, &kinds))
        return NULL;
    columns_t c;
    Py_ssize_t K = PyTuple_GET_SIZE(kinds);
    if (!read_columns(codes, stages, mbs, lengths, (int)(K < 256 ? K : 256), &c, "format_csv"))
        return NULL;
    for (Py_ssize_t k = 0; k < K; k++)
        if (!writable_kind(PyTuple_GET_ITEM(kinds, k)))
            return declined();
    size_t size = (size_t)c.D + 1;
    for (Py_ssize_t i = 0; i < c.n; i++) {
        if (c.stage[i] < 0 || c.mb[i] < -1)
            return declined();
        size += 2 * 20 + MAX_KIND_LEN + 1;
    }
    char *buf = PyMem_Malloc(size);
    if (buf == NULL)
        return PyErr_NoMemory();
    Py_ssize_t len = 0, i = 0;
    for (Py_ssize_t d = 0; d < c.D; d++) {
        Py_ssize_t row = PyLong_AsSsize_t(PyTuple_GET_ITEM(lengths, d));
        for (Py_ssize_t p = 0; p < row; p++, i++) {
            if (p > 0)
                buf[len++] = ',';
            PyObject *kind = PyTuple_GET_ITEM(kinds, c.code[i]);
            len += put_int(buf + len, c.stage[i]);
            memcpy(buf + len, PyUnicode_1BYTE_DATA(kind), (size_t)PyUnicode_GET_LENGTH(kind));
            len += PyUnicode_GET_LENGTH(kind);
            if (c.mb[i] >= 0)
                len += put_int(buf + len, c.mb[i]);
        }
        buf[len++] = '\n';
    }
    PyObject *text = PyUnicode_DecodeASCII(buf, len, NULL);
    PyMem_Free(buf);
    return text;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"parse_row", k_parse_row, METH_VARARGS,
     "parse_row(cells, action_type, kinds) -> list | None: plain action strings to Actions."},
    {"parse_rows", k_parse_rows, METH_VARARGS,
     "parse_rows(rows, kinds) -> (codes, stages, mbs, lengths, top_stage, top_mb) | None."},
    {"scan_order", k_scan_order, METH_VARARGS,
     "scan_order(text, pos, kinds) -> (codes, stages, mbs, lengths, top_stage, top_mb, end) | None."},
    {"lower_plain", k_lower_plain, METH_VARARGS,
     "lower_plain(codes, stages, mbs, lengths, S, M, rank_of, kinds, dialect) -> columns | None."},
    {"scan_csv", k_scan_csv, METH_VARARGS,
     "scan_csv(text, kinds[, bare]) -> (codes, stages, mbs, lengths, top_stage, top_mb) | None."},
    {"rows_of", k_rows_of, METH_VARARGS,
     "rows_of(codes, stages, mbs, lengths, action_type, kinds) -> tuple: the columns' rows of Actions."},
    {"compile_columns", k_compile_columns, METH_VARARGS,
     "compile_columns(codes, stages, mbs, lengths, S, M, routes, mroute, needs, match, mixed, "
     "kinds, allow_comm, column_kinds, roles) -> tuple | None."},
    {"format_columns", k_format_columns, METH_VARARGS,
     "format_columns(codes, stages, mbs, lengths, indices, kinds) -> list[str] | None."},
    {"compile_plain", k_compile_plain, METH_VARARGS,
     "compile_plain(order, S, M, routes, mroute, needs, match, mixed, kinds, allow_comm) -> tuple | None."},
    {"sweep_plain", k_sweep_plain, METH_VARARGS,
     "sweep_plain(starts, wait, durations, comm) -> (start_values, start_floats, end_values, "
     "end_floats, makespan) | None."},
    {"runtime_plain", k_runtime_plain, METH_VARARGS,
     "runtime_plain(starts, code, stage, mb, wait, durations, comm, route, received, comm_kinds, nccl, "
     "buffered, by_edge, by_direction, lazy, retired_waits, retired_sends, max_cycles) -> (end, ready as "
     "times columns, bind, partner, lane_of, lanes, makespan, last, is_comm, hang) | None."},
    {"bind_path", k_bind_path, METH_VARARGS,
     "bind_path(bind, done_by, partner, is_comm, last) -> list | None: the critical path of a compiled run, "
     "from its binders."},
    {"bound_ready", k_bound_ready, METH_VARARGS,
     "bound_ready(bind, end_values, end_floats, is_comm) -> (values, floats): the ready times of a "
     "runtime_plain run that ended."},
    {"start_list", k_start_list, METH_VARARGS,
     "start_list(end_values, end_floats, ready_values, ready_floats, is_comm, durations[, never]) -> list | None: "
     "runtime_plain's start times."},
    {"times_list", k_times_list, METH_VARARGS,
     "times_list(values, floats) -> list: a times column as Python's numbers."},
    {"busy_plain", k_busy_plain, METH_VARARGS,
     "busy_plain(starts, durations) -> list | None: each device's sum of int durations."},
    {"durations_plain", k_durations_plain, METH_VARARGS,
     "durations_plain(code, table) -> list: table[code[i]] per action (-1: the last entry)."},
    {"memory_plain", k_memory_plain, METH_VARARGS,
     "memory_plain(starts, code, stage, alloc, free, n_in, n_out, static, limit[, inert]) -> tuple | None."},
    {"critical_path_plain", k_critical_path_plain, METH_VARARGS,
     "critical_path_plain(starts, wait, start_values, start_floats, end_values, end_floats, comm, "
     "tol) -> list | None."},
    {"loss_order_plain", k_loss_order_plain, METH_VARARGS,
     "loss_order_plain(code, stage, mb, lo, hi, f_code, last) -> bool: the last stage's forwards in order."},
    {"pair_send_waits", k_pair_send_waits, METH_VARARGS,
     "pair_send_waits(code, mb, waits, codes, stages, mbs, lengths, S, M, send_f, send_b, wait_f) -> "
     "(waits, sends) | None."},
    {"lower_keyed", k_lower_keyed, METH_VARARGS,
     "lower_keyed(codes, stages, mbs, lengths, S, M, rank_of, kinds, gcodes, gstages, gmbs, gends, dialect) -> columns | None."},
    {"defer_recv_plain", k_defer_recv_plain, METH_VARARGS,
     "defer_recv_plain(codes, stages, mbs, lengths, S, M, rank_of) -> columns | None."},
    {"format_csv", k_format_csv, METH_VARARGS,
     "format_csv(codes, stages, mbs, lengths, kinds) -> str | None: PyTorch's CSV of the columns."},
    {"keep_freed_memory", k_keep_freed_memory, METH_NOARGS,
     "keep_freed_memory() -> bool: glibc's malloc keeps what it frees for the next blocks (the command line's)."},
    {"format_plain", k_format_plain, METH_VARARGS,
     "format_plain(acts, indices, action_type) -> list[str] | None: str() of plain actions."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "schedverify._kernel",
    "The optional compiled kernel: faster twins of check's hot paths (see _kernel.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__kernel(void)
{
    return PyModule_Create(&module);
}
