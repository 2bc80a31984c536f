/* schedverify._kernel: the optional compiled kernel for the hot paths of `check`.
 *
 * Each function here is a faster twin of a pure-Python function, for the common case only,
 * and returns None when its input is not that case; the caller then runs the Python code.
 * So the kernel never decides anything the Python code would decide differently, and the
 * semantics stay where they are written (schedverify/deps.py, graph.py, cost/memory.py):
 * the dependency rules come in as the tables graph.py derives from deps.NEEDS.
 * tests/test_kernel.py holds every function equal to its twin.
 *
 *   parse_row          io/actions.py parse_row            plain action strings -> Actions
 *   compile_plain      graph.py _index + _link            the compiled graph's columns
 *   sweep_plain        graph.py sweep                     ASAP start/end, no deadlock
 *   memory_plain       cost/memory.py memory_sweep        peaks per device
 *   critical_path_plain cost/timeline.py critical_path    the path's action indices
 *   format_plain       model.py Action.__str__            the path's action names
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

#define MAX_DIGITS 18 /* longer indices are left to Python's unbounded ints */

/* ------------------------------------------------------------------ parse_row */

/* Read "digits KIND digits" from an ASCII cell; KIND is one of nkinds strings.  Returns the
 * kind's index, or -1 when the cell is not exactly that shape. */
static int
parse_cell(const char *s, Py_ssize_t len, const char **kind_text, const Py_ssize_t *kind_len,
           int nkinds, long long *stage, long long *mb)
{
    Py_ssize_t p = 0, k, e;
    long long v = 0;
    while (p < len && s[p] >= '0' && s[p] <= '9') {
        v = v * 10 + (s[p] - '0');
        p++;
    }
    if (p == 0 || p > MAX_DIGITS)
        return -1;
    *stage = v;
    k = p;
    while (k < len && !(s[k] >= '0' && s[k] <= '9'))
        k++;
    if (k == len || len - k > MAX_DIGITS)
        return -1;
    v = 0;
    for (e = k; e < len; e++) {
        if (s[e] < '0' || s[e] > '9')
            return -1;
        v = v * 10 + (s[e] - '0');
    }
    *mb = v;
    for (int c = 0; c < nkinds; c++)
        if (kind_len[c] == k - p && memcmp(kind_text[c], s + p, (size_t)(k - p)) == 0)
            return c;
    return -1;
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

static PyObject *
k_parse_row(PyObject *self, PyObject *args)
{
    PyObject *cells, *kinds;
    PyTypeObject *type;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyList_Type, &cells, &PyType_Type, &type,
                          &PyTuple_Type, &kinds))
        return NULL;
    int nkinds = (int)PyTuple_GET_SIZE(kinds);
    if (nkinds > 16) {
        PyErr_SetString(PyExc_ValueError, "parse_row: at most 16 kinds");
        return NULL;
    }
    const char *kind_text[16];
    Py_ssize_t kind_len[16];
    for (int c = 0; c < nkinds; c++) {
        PyObject *k = PyTuple_GET_ITEM(kinds, c);
        kind_text[c] = PyUnicode_AsUTF8AndSize(k, &kind_len[c]);
        if (kind_text[c] == NULL)
            return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(cells);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *cell = PyList_GET_ITEM(cells, i);
        long long stage, mb;
        int c;
        if (!PyUnicode_Check(cell) || !PyUnicode_IS_ASCII(cell))
            goto not_plain;
        c = parse_cell((const char *)PyUnicode_1BYTE_DATA(cell), PyUnicode_GET_LENGTH(cell),
                       kind_text, kind_len, nkinds, &stage, &mb);
        if (c < 0)
            goto not_plain;
        PyObject *s = index_object(stage);
        PyObject *m = s ? index_object(mb) : NULL;
        PyObject *a = m ? new_action(type, s, PyTuple_GET_ITEM(kinds, c), m) : NULL;
        if (a == NULL) {
            Py_XDECREF(s);
            Py_XDECREF(m);
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, a);
    }
    return out;
not_plain:
    Py_DECREF(out); /* the unset slots are NULL, which list dealloc skips */
    Py_RETURN_NONE;
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

/* A sequence of Python ints as a new C array (NULL with *ok = 0 if one is not an int). */
static long long *
int_array(PyObject *seq, Py_ssize_t *len, int *ok)
{
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    long long *out = PyMem_Malloc(sizeof(long long) * (size_t)(n + 1));
    if (out == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n && *ok; i++)
        out[i] = exact_int(items[i], ok);
    Py_DECREF(fast);
    *len = n;
    return out;
}

/* A number as a double: exact ints and floats only (a Fraction would round silently). */
static int
as_double(PyObject *o, double *out, int *all_int)
{
    if (PyFloat_CheckExact(o)) {
        *out = PyFloat_AS_DOUBLE(o);
        *all_int = 0;
        return 1;
    }
    if (PyLong_CheckExact(o)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || v > (1LL << 53) || v < -(1LL << 53))
            return 0;
        *out = (double)v;
        return 1;
    }
    return 0;
}

static PyObject *
list_of_ints(const long long *v, Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (x == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

static PyObject *
list_of_int32(const int32_t *v, Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLong(v[i]);
        if (x == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

/* ------------------------------------------------------------------ compile_plain */

#define NCODES 8  /* graph.KIND_CODE: F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B */
#define MAX_NEEDS 4

typedef struct {
    int count;
    long long offset[MAX_NEEDS];
    int kinds[MAX_NEEDS][2]; /* producer codes; the second -1 when there is no alternative */
    int recv[MAX_NEEDS];     /* the RECV code that stands in across devices, or -1 */
} needs_t;

/* compile_plain(order, S, M, routes, mroute, needs, match, kinds, allow_comm)
 *
 * The twin of graph._index + graph._link for the common case: every entry an Action of one
 * of the eight kinds (``kinds``, in graph.KIND_CODE order) with int indices in range, on the
 * device its route places it, no duplicate, no pair mixing B with I/W, at most one wait on
 * another device per action; with SEND/RECV (only when ``allow_comm``: eager semantics) also
 * every SEND/RECV matched (``match``: graph._MATCH as a per-code (peer code, offset) or None)
 * and every input from another device received on the consumer's own device.  ``needs`` is
 * graph._NEEDS as per-code tuples of (offset, producer codes, recv code or -1), so the rules
 * stay those of deps.NEEDS.  Returns (acts, dev, pos, starts, wait, counts, inversions, code,
 * stage, explicit), or None when the schedule is not such a case (also when its declared sizes
 * are so much larger than its action count that a dense table would waste memory). */
static PyObject *
k_compile_plain(PyObject *self, PyObject *args)
{
    PyObject *order, *routes, *mroute, *needs_o, *match_o, *kinds;
    long long S, M;
    int allow_comm;
    if (!PyArg_ParseTuple(args, "O!LLO!OO!O!O!p", &PyTuple_Type, &order, &S, &M, &PyTuple_Type,
                          &routes, &mroute, &PyTuple_Type, &needs_o, &PyTuple_Type, &match_o,
                          &PyTuple_Type, &kinds, &allow_comm))
        return NULL;
    if (PyTuple_GET_SIZE(kinds) != NCODES || PyTuple_GET_SIZE(needs_o) != NCODES ||
        PyTuple_GET_SIZE(match_o) != NCODES || S <= 0 || M <= 0) {
        PyErr_SetString(PyExc_ValueError, "compile_plain: bad arguments");
        return NULL;
    }
    PyObject *kind_obj[NCODES];
    for (int c = 0; c < NCODES; c++)
        kind_obj[c] = PyTuple_GET_ITEM(kinds, c);

    /* the rules, as C tables */
    needs_t needs[NCODES];
    long long match_code[NCODES], match_off[NCODES];
    int ok = 1;
    for (int c = 0; c < NCODES; c++) {
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
            needs[c].kinds[k][0] = (int)exact_int(PyTuple_GET_ITEM(codes, 0), &ok);
            needs[c].kinds[k][1] = PyTuple_GET_SIZE(codes) > 1 ? (int)exact_int(PyTuple_GET_ITEM(codes, 1), &ok) : -1;
            needs[c].recv[k] = (int)exact_int(PyTuple_GET_ITEM(need, 2), &ok);
        }
        if (m == Py_None) {
            match_code[c] = -1;
            match_off[c] = 0;
        } else if (PyTuple_Check(m) && PyTuple_GET_SIZE(m) == 2) {
            match_code[c] = exact_int(PyTuple_GET_ITEM(m, 0), &ok);
            match_off[c] = exact_int(PyTuple_GET_ITEM(m, 1), &ok);
        } else {
            ok = 0;
        }
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "compile_plain: bad rule tables");
        return NULL;
    }

    Py_ssize_t D = PyTuple_GET_SIZE(order), n = 0;
    for (Py_ssize_t d = 0; d < D; d++) {
        PyObject *row = PyTuple_GET_ITEM(order, d);
        if (!PyTuple_Check(row))
            Py_RETURN_NONE;
        for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(row); p++)
            n += PyTuple_GET_ITEM(row, p) != Py_None;
    }
    /* a dense producer table of S*M*8 entries, only when that is not absurd for n actions */
    if (S > (4LL * n + 1024) / M + 1 || S * M > 4LL * n + 1024 || n >= INT32_MAX)
        Py_RETURN_NONE;
    Py_ssize_t table_size = (Py_ssize_t)(S * M * NCODES);

    Py_ssize_t R = PyTuple_GET_SIZE(routes);
    int32_t *route_dev = NULL, *mr = NULL, *table = NULL, *devs = NULL, *waitv = NULL;
    int8_t *code = NULL;
    long long *stage = NULL, *mbs = NULL, *pos = NULL, *starts = NULL, *inv = NULL;
    PyObject *acts = NULL, *result = NULL;
    Py_ssize_t ninv = 0, inv_cap = 0;
    int explicit = 0;

    route_dev = PyMem_Malloc(sizeof(int32_t) * (size_t)(R * S + 1));
    if (route_dev == NULL)
        goto nomem;
    for (Py_ssize_t r = 0; r < R && ok; r++) {
        PyObject *route = PyTuple_GET_ITEM(routes, r);
        if (!PyTuple_Check(route) || PyTuple_GET_SIZE(route) != S) {
            ok = 0;
            break;
        }
        for (Py_ssize_t s = 0; s < S && ok; s++)
            route_dev[r * S + s] = (int32_t)exact_int(PyTuple_GET_ITEM(route, s), &ok);
    }
    if (ok && mroute != Py_None) {
        if (!PyTuple_Check(mroute) || PyTuple_GET_SIZE(mroute) != M) {
            ok = 0;
        } else {
            mr = PyMem_Malloc(sizeof(int32_t) * (size_t)(M + 1));
            if (mr == NULL)
                goto nomem;
            for (Py_ssize_t m = 0; m < M && ok; m++) {
                mr[m] = (int32_t)exact_int(PyTuple_GET_ITEM(mroute, m), &ok);
                if (ok && (mr[m] < 0 || mr[m] >= R))
                    ok = 0;
            }
        }
    }
    if (!ok || R < 1)
        goto not_plain;

    code = PyMem_Malloc((size_t)n + 1);
    stage = PyMem_Malloc(sizeof(long long) * (size_t)(n + 1));
    mbs = PyMem_Malloc(sizeof(long long) * (size_t)(n + 1));
    pos = PyMem_Malloc(sizeof(long long) * (size_t)(n + 1));
    devs = PyMem_Malloc(sizeof(int32_t) * (size_t)(n + 1));
    starts = PyMem_Malloc(sizeof(long long) * (size_t)(D + 1));
    acts = PyList_New(n);
    if (!code || !stage || !mbs || !pos || !devs || !starts || !acts)
        goto nomem;

    long long counts[NCODES] = {0};
    Py_ssize_t i = 0;
    for (Py_ssize_t d = 0; d < D; d++) {
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
            for (int k = 0; k < NCODES; k++)
                if (kind == kind_obj[k]) {
                    c = k;
                    break;
                }
            if (c < 0) { /* not the interned object: compare the text */
                if (!PyUnicode_Check(kind))
                    goto not_plain;
                for (int k = 0; k < NCODES && c < 0; k++) {
                    int eq = PyUnicode_Compare(kind, kind_obj[k]);
                    if (eq == -1 && PyErr_Occurred())
                        goto fail;
                    if (eq == 0)
                        c = k;
                }
                if (c < 0)
                    goto not_plain;
            }
            if (c >= 4) {
                if (!allow_comm)
                    goto not_plain;
                explicit = 1;
            }
            long long s = exact_int(PyTuple_GET_ITEM(a, 0), &ok);
            long long m = exact_int(PyTuple_GET_ITEM(a, 2), &ok);
            if (!ok || s < 0 || s >= S || m < 0 || m >= M)
                goto not_plain;
            if (route_dev[(mr ? mr[m] : 0) * S + s] != d)
                goto not_plain;
            code[i] = (int8_t)c;
            stage[i] = s;
            mbs[i] = m;
            pos[i] = p;
            devs[i] = (int32_t)d;
            counts[c]++;
            Py_INCREF(a);
            PyList_SET_ITEM(acts, i, a);
            i++;
        }
    }
    starts[D] = n;
    if (counts[1] && (counts[2] || counts[3]))
        goto not_plain; /* a pair might mix B with I/W: the general path says which */

    table = PyMem_Malloc(sizeof(int32_t) * (size_t)(table_size + 1));
    waitv = PyMem_Malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!table || !waitv)
        goto nomem;
    memset(table, 0xff, sizeof(int32_t) * (size_t)table_size); /* -1: no action */
    for (i = 0; i < n; i++) {
        Py_ssize_t key = (Py_ssize_t)((stage[i] * M + mbs[i]) * NCODES + code[i]);
        if (table[key] != -1)
            goto not_plain; /* a duplicate */
        table[key] = (int32_t)i;
        waitv[i] = (int32_t)n;
    }
#define LOOKUP(st, mb, c) table[((st) * M + (mb)) * NCODES + (c)]

    for (i = 0; i < n; i++) {
        int c = code[i], found = 0;
        long long s = stage[i], m = mbs[i];
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
            waitv[i] = j;
        }
    }
#undef LOOKUP

    {
        PyObject *dev_l = list_of_int32(devs, n);
        PyObject *pos_l = list_of_ints(pos, n);
        PyObject *starts_l = list_of_ints(starts, D + 1);
        PyObject *wait_l = list_of_int32(waitv, n);
        PyObject *counts_l = list_of_ints(counts, NCODES);
        PyObject *inv_l = PyList_New(ninv);
        PyObject *code_l = PyList_New(n);
        PyObject *stage_l = list_of_ints(stage, n);
        if (inv_l && code_l) {
            for (Py_ssize_t k = 0; k < ninv; k++) {
                PyObject *pair = Py_BuildValue("(LL)", inv[2 * k], inv[2 * k + 1]);
                if (pair == NULL) {
                    Py_CLEAR(inv_l);
                    break;
                }
                PyList_SET_ITEM(inv_l, k, pair);
            }
            for (i = 0; i < n; i++) {
                PyObject *x = PyLong_FromLong(code[i]);
                if (x == NULL) {
                    Py_CLEAR(code_l);
                    break;
                }
                PyList_SET_ITEM(code_l, i, x);
            }
        }
        if (dev_l && pos_l && starts_l && wait_l && counts_l && inv_l && code_l && stage_l) {
            result = Py_BuildValue("(OOOOOOOOOO)", acts, dev_l, pos_l, starts_l, wait_l, counts_l,
                                   inv_l, code_l, stage_l, explicit ? Py_True : Py_False);
        }
        Py_XDECREF(dev_l);
        Py_XDECREF(pos_l);
        Py_XDECREF(starts_l);
        Py_XDECREF(wait_l);
        Py_XDECREF(counts_l);
        Py_XDECREF(inv_l);
        Py_XDECREF(code_l);
        Py_XDECREF(stage_l);
    }
    goto done;

not_plain:
    if (!PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
    goto done;
nomem:
    PyErr_NoMemory();
fail:
done:
    Py_XDECREF(acts);
    PyMem_Free(route_dev);
    PyMem_Free(mr);
    PyMem_Free(table);
    PyMem_Free(devs);
    PyMem_Free(waitv);
    PyMem_Free(code);
    PyMem_Free(stage);
    PyMem_Free(mbs);
    PyMem_Free(pos);
    PyMem_Free(starts);
    PyMem_Free(inv);
    return result;
}

/* ------------------------------------------------------------------ sweep_plain */

/* sweep_plain(starts, wait, durations, comm) -> (start, end) | None
 *
 * The twin of graph.sweep for a graph without extra waits (more_waits empty): every device
 * runs its list in order, each action at max(its device's clock, end of wait[i] + comm).
 * None when some device never finishes (graph.sweep then finds the cycles) or a duration
 * is not an int or float.  All ints in, ints out, as in Python. */
static PyObject *
k_sweep_plain(PyObject *self, PyObject *args)
{
    PyObject *starts_o, *wait_o, *dur_o, *comm_o;
    if (!PyArg_ParseTuple(args, "OOO!O", &starts_o, &wait_o, &PyList_Type, &dur_o, &comm_o))
        return NULL;
    int ok = 1, all_int = 1;
    Py_ssize_t D1 = 0, n = 0;
    long long *starts = int_array(starts_o, &D1, &ok);
    long long *wait = starts ? int_array(wait_o, &n, &ok) : NULL;
    double *dur = NULL, *st = NULL, *en = NULL;
    int32_t *head = NULL, *nextw = NULL, *stack = NULL;
    long long *ptr = NULL;
    double *clock = NULL;
    PyObject *result = NULL;
    double comm = 0;
    if (wait == NULL)
        goto done;
    if (!ok || PyList_GET_SIZE(dur_o) != n || D1 < 1 || starts[D1 - 1] != n ||
        !as_double(comm_o, &comm, &all_int))
        goto not_plain;
    Py_ssize_t D = D1 - 1;
    dur = PyMem_Malloc(sizeof(double) * (size_t)(n + 1));
    st = PyMem_Malloc(sizeof(double) * (size_t)(n + 1));
    en = PyMem_Malloc(sizeof(double) * (size_t)(n + 1));
    head = PyMem_Malloc(sizeof(int32_t) * (size_t)(n + 1));
    nextw = PyMem_Malloc(sizeof(int32_t) * (size_t)(D + 1));
    stack = PyMem_Malloc(sizeof(int32_t) * (size_t)(D + 1));
    ptr = PyMem_Malloc(sizeof(long long) * (size_t)(D + 1));
    clock = PyMem_Malloc(sizeof(double) * (size_t)(D + 1));
    if (!dur || !st || !en || !head || !nextw || !stack || !ptr || !clock) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!as_double(PyList_GET_ITEM(dur_o, i), &dur[i], &all_int))
            goto not_plain;
        if (wait[i] < 0 || wait[i] > n)
            goto not_plain;
        head[i] = -1;
    }
    head[n] = -1;
    unsigned char *done_flag = PyMem_Calloc((size_t)n + 1, 1);
    if (done_flag == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    done_flag[n] = 1; /* "no producer": always done, ends at -infinity */
    en[n] = -Py_HUGE_VAL;
    Py_ssize_t top = 0;
    for (Py_ssize_t d = D - 1; d >= 0; d--) {
        ptr[d] = starts[d];
        clock[d] = 0;
        stack[top++] = (int32_t)d;
    }
    while (top > 0) {
        Py_ssize_t d = stack[--top];
        long long i = ptr[d], stop = starts[d + 1];
        double now = clock[d];
        while (i < stop) {
            long long j = wait[i];
            double s = now;
            if (!done_flag[j]) {
                nextw[d] = head[j];
                head[j] = (int32_t)d;
                break;
            }
            if (en[j] + comm > s)
                s = en[j] + comm;
            st[i] = s;
            now = s + dur[i];
            en[i] = now;
            done_flag[i] = 1;
            for (int32_t w = head[i]; w >= 0; w = nextw[w])
                stack[top++] = w;
            head[i] = -1;
            i++;
        }
        ptr[d] = i;
        clock[d] = now;
    }
    int finished = 1;
    for (Py_ssize_t d = 0; d < D; d++)
        finished &= ptr[d] == starts[d + 1];
    PyMem_Free(done_flag);
    if (!finished)
        goto not_plain;
    {
        PyObject *sl = PyList_New(n), *el = PyList_New(n);
        if (sl && el) {
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *a = all_int ? PyLong_FromLongLong((long long)st[i]) : PyFloat_FromDouble(st[i]);
                PyObject *b = all_int ? PyLong_FromLongLong((long long)en[i]) : PyFloat_FromDouble(en[i]);
                if (!a || !b) {
                    Py_XDECREF(a);
                    Py_XDECREF(b);
                    Py_CLEAR(sl);
                    break;
                }
                PyList_SET_ITEM(sl, i, a);
                PyList_SET_ITEM(el, i, b);
            }
        }
        if (sl && el)
            result = PyTuple_Pack(2, sl, el);
        Py_XDECREF(sl);
        Py_XDECREF(el);
    }
    goto done;
not_plain:
    if (!PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    PyMem_Free(starts);
    PyMem_Free(wait);
    PyMem_Free(dur);
    PyMem_Free(st);
    PyMem_Free(en);
    PyMem_Free(head);
    PyMem_Free(nextw);
    PyMem_Free(stack);
    PyMem_Free(ptr);
    PyMem_Free(clock);
    return result;
}

/* ------------------------------------------------------------------ memory_plain */

/* memory_plain(starts, code, stage, alloc, free, n_in, n_out, static, limit)
 *   -> (peak_inflight, peak_memory, peak_at, over_limit) | None
 *
 * The twin of cost/memory.memory_sweep without a timeline, for plain actions (code 0..7):
 * ``alloc``/``free`` are flat tables [code * S + stage] (S = 1: the same for every stage),
 * ``n_in``/``n_out`` per code,
 * ``static`` per device, ``limit`` a number or None.  Sums run in the order Python's
 * accumulate runs them, so the floats are bit for bit the same. */
static PyObject *
k_memory_plain(PyObject *self, PyObject *args)
{
    PyObject *starts_o, *code_o, *stage_o, *alloc_o, *free_o, *nin_o, *nout_o, *static_o, *limit_o;
    if (!PyArg_ParseTuple(args, "OOOO!O!OOO!O", &starts_o, &code_o, &stage_o, &PyList_Type,
                          &alloc_o, &PyList_Type, &free_o, &nin_o, &nout_o, &PyList_Type,
                          &static_o, &limit_o))
        return NULL;
    int ok = 1, all_int = 1;
    Py_ssize_t D1 = 0, n = 0, n2 = 0, ni = 0, no = 0;
    long long *starts = int_array(starts_o, &D1, &ok);
    long long *code = starts ? int_array(code_o, &n, &ok) : NULL;
    long long *stage = code ? int_array(stage_o, &n2, &ok) : NULL;
    long long *nin = stage ? int_array(nin_o, &ni, &ok) : NULL;
    long long *nout = nin ? int_array(nout_o, &no, &ok) : NULL;
    double *alloc = NULL, *freed = NULL;
    PyObject *result = NULL, *pn = NULL, *pm = NULL, *pa = NULL, *ov = NULL;
    double limit = 0;
    int has_limit = limit_o != Py_None;
    if (nout == NULL)
        goto done;
    Py_ssize_t T = PyList_GET_SIZE(alloc_o);
    if (!ok || n2 != n || ni != NCODES || no != NCODES || T % NCODES || PyList_GET_SIZE(free_o) != T ||
        D1 < 1 || starts[D1 - 1] != n || PyList_GET_SIZE(static_o) != D1 - 1)
        goto not_plain;
    if (has_limit && !as_double(limit_o, &limit, &all_int))
        goto not_plain;
    Py_ssize_t S = T / NCODES, D = D1 - 1;
    alloc = PyMem_Malloc(sizeof(double) * (size_t)(T + 1));
    freed = PyMem_Malloc(sizeof(double) * (size_t)(T + 1));
    if (!alloc || !freed) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < T; k++)
        if (!as_double(PyList_GET_ITEM(alloc_o, k), &alloc[k], &all_int) ||
            !as_double(PyList_GET_ITEM(free_o, k), &freed[k], &all_int))
            goto not_plain;
    for (Py_ssize_t i = 0; i < n; i++)
        if (code[i] < 0 || code[i] >= NCODES || stage[i] < 0 || (S > 1 && stage[i] >= S))
            goto not_plain;
    pn = PyList_New(D);
    pm = PyList_New(D);
    pa = PyList_New(D);
    ov = PyList_New(D);
    if (!pn || !pm || !pa || !ov)
        goto done;
    double over_at = limit + 1e-9;
    for (Py_ssize_t d = 0; d < D; d++) {
        double st;
        int unused = 1;
        if (!as_double(PyList_GET_ITEM(static_o, d), &st, &unused))
            goto not_plain;
        double before = st, peak = st;
        long long peak_i = -1, inflight = 0, peak_n = 0, first_over = -1;
        double over_value = 0;
        int any = 0;
        for (long long i = starts[d]; i < starts[d + 1]; i++) {
            Py_ssize_t k = (Py_ssize_t)(code[i] * S + (S > 1 ? stage[i] : 0));
            double a = alloc[k], f = freed[k];
            double during = before + a;
            long long n_during = inflight + nin[code[i]];
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
            inflight = inflight + (nin[code[i]] - nout[code[i]]);
        }
        /* Python: peak = max(during, default=static); peak_m = max(peak, static) */
        double peak_m = (any && st > peak) ? st : (any ? peak : st);
        PyObject *x = PyLong_FromLongLong(any ? peak_n : 0);
        PyObject *y = PyFloat_FromDouble(peak_m);
        PyObject *z = (any && peak > st) ? PyLong_FromLongLong(peak_i) : (Py_INCREF(Py_None), Py_None);
        PyObject *w = first_over >= 0 ? Py_BuildValue("(Ld)", first_over, over_value)
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
    if (!PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    Py_XDECREF(pn);
    Py_XDECREF(pm);
    Py_XDECREF(pa);
    Py_XDECREF(ov);
    PyMem_Free(starts);
    PyMem_Free(code);
    PyMem_Free(stage);
    PyMem_Free(nin);
    PyMem_Free(nout);
    PyMem_Free(alloc);
    PyMem_Free(freed);
    return result;
}

/* ------------------------------------------------------------------ critical_path_plain */

/* critical_path_plain(starts, dev, wait, start, end, comm, tol) -> list[int] | None
 *
 * The twin of Timeline.critical_path for a graph without extra waits: from the first action
 * that ends last, step back to the action whose end (plus comm, across devices) is this
 * one's start, preferring the cross-device wait. */
static PyObject *
k_critical_path_plain(PyObject *self, PyObject *args)
{
    /* reads only the elements the walk visits: the path is a small part of the schedule */
    PyObject *starts, *dev, *wait, *start, *end, *comm_o;
    double tol, comm = 0;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!Od", &PyList_Type, &starts, &PyList_Type, &dev,
                          &PyList_Type, &wait, &PyList_Type, &start, &PyList_Type, &end, &comm_o, &tol))
        return NULL;
    int ok = 1, all_int = 1;
    Py_ssize_t n = PyList_GET_SIZE(end), D = PyList_GET_SIZE(starts) - 1;
    if (n == 0 || PyList_GET_SIZE(start) != n || PyList_GET_SIZE(dev) != n ||
        PyList_GET_SIZE(wait) != n || D < 1 || !as_double(comm_o, &comm, &all_int))
        Py_RETURN_NONE;
    Py_ssize_t last = 0;
    double best = 0, e;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!as_double(PyList_GET_ITEM(end, i), &e, &all_int))
            Py_RETURN_NONE;
        if (i == 0 || e > best) {
            best = e;
            last = i;
        }
    }
    PyObject *path = PyList_New(0);
    if (path == NULL)
        return NULL;
    long long i = last;
    for (Py_ssize_t len = 0; len < n; len++) {
        PyObject *x = PyLong_FromLongLong(i);
        if (x == NULL || PyList_Append(path, x) < 0) {
            Py_XDECREF(x);
            Py_DECREF(path);
            return NULL;
        }
        Py_DECREF(x);
        double s, ej;
        long long k = exact_int(PyList_GET_ITEM(wait, i), &ok), d, next = -1;
        d = exact_int(PyList_GET_ITEM(dev, i), &ok);
        if (!ok || k < 0 || k > n || d < 0 || d >= D || !as_double(PyList_GET_ITEM(start, i), &s, &all_int))
            goto not_plain;
        if (k < n) {
            if (!as_double(PyList_GET_ITEM(end, k), &ej, &all_int))
                goto not_plain;
            if (fabs(ej + comm - s) <= tol)
                next = k;
        }
        if (next < 0) {
            long long first = exact_int(PyList_GET_ITEM(starts, d), &ok);
            if (!ok)
                goto not_plain;
            if (i > first) {
                if (!as_double(PyList_GET_ITEM(end, i - 1), &ej, &all_int))
                    goto not_plain;
                if (fabs(ej - s) <= tol)
                    next = i - 1;
            }
        }
        if (next < 0)
            break;
        i = next;
    }
    if (PyList_Reverse(path) < 0) {
        Py_DECREF(path);
        return NULL;
    }
    return path;
not_plain:
    Py_DECREF(path);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ format_plain */

/* format_plain(acts, indices) -> list[str] | None
 *
 * The twin of ``[str(acts[i]) for i in indices]`` for plain actions (int stage, str kind,
 * int microbatch, no sub-actions): Action.__str__ writes those as stage, kind, microbatch. */
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

static PyObject *
k_format_plain(PyObject *self, PyObject *args)
{
    PyObject *acts, *indices;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &acts, &PyList_Type, &indices))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(indices), na = PyList_GET_SIZE(acts);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        int ok = 1;
        long long i = exact_int(PyList_GET_ITEM(indices, k), &ok);
        if (!ok || i < 0 || i >= na)
            goto not_plain;
        PyObject *a = PyList_GET_ITEM(acts, i);
        if (!PyTuple_Check(a) || PyTuple_GET_SIZE(a) != 4 || PyTuple_GET_ITEM(a, 3) != Py_None)
            goto not_plain;
        long long stage = exact_int(PyTuple_GET_ITEM(a, 0), &ok);
        long long mb = exact_int(PyTuple_GET_ITEM(a, 2), &ok);
        PyObject *kind = PyTuple_GET_ITEM(a, 1);
        if (!ok || stage < 0 || mb < 0 || !PyUnicode_CheckExact(kind) || !PyUnicode_IS_ASCII(kind) ||
            PyUnicode_GET_LENGTH(kind) > 32)
            goto not_plain;
        char buf[96];
        Py_ssize_t len = put_int(buf, stage);
        memcpy(buf + len, PyUnicode_1BYTE_DATA(kind), (size_t)PyUnicode_GET_LENGTH(kind));
        len += PyUnicode_GET_LENGTH(kind);
        len += put_int(buf + len, mb);
        PyObject *text = PyUnicode_FromStringAndSize(buf, len);
        if (text == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, text);
    }
    return out;
not_plain:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"parse_row", k_parse_row, METH_VARARGS,
     "parse_row(cells, action_type, kinds) -> list | None: plain action strings to Actions."},
    {"compile_plain", k_compile_plain, METH_VARARGS,
     "compile_plain(order, S, M, routes, mroute, slots, kinds) -> tuple | None."},
    {"sweep_plain", k_sweep_plain, METH_VARARGS,
     "sweep_plain(starts, wait, durations, comm) -> (start, end) | None."},
    {"memory_plain", k_memory_plain, METH_VARARGS,
     "memory_plain(starts, code, stage, alloc, free, n_in, n_out, static, limit) -> tuple | None."},
    {"critical_path_plain", k_critical_path_plain, METH_VARARGS,
     "critical_path_plain(starts, dev, wait, start, end, comm, tol) -> list | None."},
    {"format_plain", k_format_plain, METH_VARARGS,
     "format_plain(acts, indices) -> list[str] | None: str() of plain actions."},
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
