/* The sampler's per-row work in C: each row's top-k by one vectorised pass, the filters of
 * sampling.process_rows on the survivors, and the coupled rule's keyed Gumbel-max choice.
 *
 * sampling.py's numpy code is the definition and the fallback; this is the same arithmetic with
 * the fixed cost of ~25 numpy calls a step taken out (tests/unit/test_kernels.py holds them equal).
 * Arrays come in through the buffer protocol, so no numpy headers are needed to build it.
 * Ties: equal logits are ordered by id, lower first - one order for whole rows and top-k rows.
 * Beside them, the one other thing that must be C: the flag llama.cpp's decode checks to stop. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LS_X86 1
#endif

#ifdef _OPENMP /* setup.py builds with OpenMP where the compiler has it (Linux) */
#include <omp.h>
static int thread_num(void) { return omp_get_thread_num(); }
#else
static int thread_num(void) { return 0; }
#endif
static int n_threads = 1; /* 2 where OpenMP and a second core are there */

typedef struct {
    float x;
    int64_t id;
} cand;

/* a before b: the larger logit, or at equal logits the lower id */
static inline int before(cand a, cand b) { return a.x > b.x || (a.x == b.x && a.id < b.id); }

/* -- the kept set: a heap whose root is the worst of the k best so far ------------------------- */
typedef struct {
    cand *h;
    int n, k;
} heap;

static void sift_down(heap *hp, int i) {
    cand *h = hp->h;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < hp->n && before(h[w], h[l])) w = l;
        if (r < hp->n && before(h[w], h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void sift_up(heap *hp, int i) {
    cand *h = hp->h;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!before(h[p], h[i])) return;
        cand t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static inline void offer(heap *hp, cand c) {
    if (hp->n < hp->k) {
        hp->h[hp->n++] = c;
        sift_up(hp, hp->n - 1);
    } else if (before(c, hp->h[0])) {
        hp->h[0] = c;
        sift_down(hp, 0);
    }
}

/* -- a whole row's top-k: two passes -------------------------------------------------------------
 * The row is cut into chunks of 1024 logits, each 64 vectors of 16 lanes; a group is one lane of
 * one chunk (64 logits), so a chunk's 16 group maxima are its vectors' elementwise maximum.
 * 1. every group's maximum: the one pass over the row, vertical maxima only (as fast as a read);
 * 2. tau = the k-th largest group maximum. At least k logits are >= tau (those k maxima), so every
 *    logit of the top k is >= tau and lies in a group whose maximum is >= tau: only those groups
 *    (about k, still in cache) are read again, and their logits >= tau offered to the heap. */
#define LANES 16
#define CHUNK 1024 /* the most: a short row gets shorter chunks (chunk_for), so it still has ~4k groups */

static float max16(const float *m) {
    float x = m[0];
    for (int l = 1; l < LANES; l++) x = m[l] > x ? m[l] : x;
    return x;
}

/* the 16 lane maxima m of the n logits x (a chunk, or the row's partial last one); returns their
 * maximum. NaN never wins a maximum */
static float lane_max(const float *x, int64_t n, float *m) {
    for (int l = 0; l < LANES; l++) m[l] = -INFINITY;
    for (int64_t j = 0; j < n; j++) m[j % LANES] = x[j] > m[j % LANES] ? x[j] : m[j % LANES];
    return max16(m);
}

/* the group maxima of the row's first nc full chunks of `size` (a multiple of 64), 16 a chunk, and
 * each chunk's maximum */
static void group_max_scalar(const float *row, int64_t nc, int64_t size, float *out, float *chunk) {
    for (int64_t c = 0; c < nc; c++) chunk[c] = lane_max(row + c * size, size, out + c * LANES);
}

#ifdef LS_X86
/* max(x, m) is m where x is NaN: the accumulators never hold one */
__attribute__((target("avx512f"))) static void group_max_avx512(const float *row, int64_t nc, int64_t size,
                                                                 float *out, float *chunk) {
    for (int64_t c = 0; c < nc; c++) {
        const float *x = row + c * size;
        __m512 a = _mm512_set1_ps(-INFINITY), b = a, d = a, e = a;
        for (int64_t j = 0; j < size; j += 4 * LANES) {
            a = _mm512_max_ps(_mm512_loadu_ps(x + j), a);
            b = _mm512_max_ps(_mm512_loadu_ps(x + j + 16), b);
            d = _mm512_max_ps(_mm512_loadu_ps(x + j + 32), d);
            e = _mm512_max_ps(_mm512_loadu_ps(x + j + 48), e);
        }
        a = _mm512_max_ps(_mm512_max_ps(a, b), _mm512_max_ps(d, e));
        _mm512_storeu_ps(out + c * LANES, a);
        chunk[c] = _mm512_reduce_max_ps(a);
    }
}

__attribute__((target("avx2"))) static void group_max_avx2(const float *row, int64_t nc, int64_t size,
                                                             float *out, float *chunk) {
    for (int64_t c = 0; c < nc; c++) {
        const float *x = row + c * size;
        __m256 a = _mm256_set1_ps(-INFINITY), b = a, d = a, e = a; /* lanes 0-7 (a, d), 8-15 (b, e) */
        for (int64_t j = 0; j < size; j += 2 * LANES) {
            a = _mm256_max_ps(_mm256_loadu_ps(x + j), a);
            b = _mm256_max_ps(_mm256_loadu_ps(x + j + 8), b);
            d = _mm256_max_ps(_mm256_loadu_ps(x + j + 16), d);
            e = _mm256_max_ps(_mm256_loadu_ps(x + j + 24), e);
        }
        _mm256_storeu_ps(out + c * LANES, _mm256_max_ps(a, d));
        _mm256_storeu_ps(out + c * LANES + 8, _mm256_max_ps(b, e));
        chunk[c] = max16(out + c * LANES);
    }
}
#endif

typedef void (*group_max_fn)(const float *, int64_t, int64_t, float *, float *);
static group_max_fn group_max = group_max_scalar;
static const char *isa_name = "scalar";

/* the k-th largest of n values (k <= n), through a min-heap of the k largest; NaN if one is NaN */
static float kth_largest(const float *x, int64_t n, int k, float *h) {
    for (int i = 0; i < k; i++) {
        if (x[i] != x[i]) return NAN;
        int j = i;
        for (h[j] = x[i]; j > 0 && h[(j - 1) / 2] > h[j]; j = (j - 1) / 2) {
            float t = h[j];
            h[j] = h[(j - 1) / 2], h[(j - 1) / 2] = t;
        }
    }
    for (int64_t i = k; i < n; i++) {
        if (x[i] <= h[0]) continue;
        if (x[i] != x[i]) return NAN;
        int j = 0;
        h[0] = x[i];
        for (;;) {
            int l = 2 * j + 1, r = l + 1, w = j;
            if (l < k && h[l] < h[w]) w = l;
            if (r < k && h[r] < h[w]) w = r;
            if (w == j) break;
            float t = h[j];
            h[j] = h[w], h[w] = t;
            j = w;
        }
    }
    return h[0];
}

/* the chunk size for a row of v logits at a top-k of k: at most CHUNK, down to 64 while the row
 * would have fewer than 4k groups */
static int64_t chunk_for(int64_t v, int k) {
    int64_t size = CHUNK;
    while (size > 4 * LANES && size * 4 * k > v * LANES) size /= 2;
    return size;
}

/* the floats `maxima` needs for a row of v logits at a top-k of k */
static int64_t scratch_size(int64_t v, int k) { return 3 * (v / 4 + LANES) + k; }

/* hp gets row's k best (k <= v) */
static void top_k_row(const float *row, int64_t v, int k, float *maxima, heap *hp) {
    int64_t size = chunk_for(v, k), nc = v / size, nt = (v + size - 1) / size, ng = nt * LANES;
    float *chunk = maxima + ng, *kept = chunk + nt, *h = kept + ng;
    group_max(row, nc, size, maxima, chunk);
    if (nt > nc) /* the last, partial chunk's groups (some may be empty: -inf) */
        chunk[nc] = lane_max(row + nc * size, v - nc * size, maxima + nc * LANES);
    /* tau is found among the group maxima >= the k-th largest chunk maximum (a chunk's maximum is
     * one of its groups', so that is a lower bound of tau): a few dozen of the thousands */
    float floor = nt > k ? kth_largest(chunk, nt, k, h) : -INFINITY;
    int64_t nk = 0;
    for (int64_t c = 0; c < nt; c++)
        if (chunk[c] >= floor)
            for (int l = 0; l < LANES; l++)
                if (maxima[c * LANES + l] >= floor) kept[nk++] = maxima[c * LANES + l];
    /* NaN never becomes a group maximum, so tau is a number */
    float tau = nk > k ? kth_largest(kept, nk, k, h) : floor;
    hp->n = 0;
    for (int64_t c = 0; c < nt; c++) {
        if (!(chunk[c] >= tau)) continue;
        for (int l = 0; l < LANES; l++) {
            if (!(maxima[c * LANES + l] >= tau)) continue;
            for (int64_t i = c * size + l, end = i + size < v ? i + size : v; i < end; i += LANES)
                if (row[i] >= tau) offer(hp, (cand){row[i], i});
        }
    }
    if (hp->n < k) { /* NaN in the row (a broken model) left fewer than k: everything, NaN as -inf */
        hp->n = 0;
        for (int64_t i = 0; i < v; i++) offer(hp, (cand){row[i] == row[i] ? row[i] : -INFINITY, i});
    }
}

static int by_order(const void *a, const void *b) {
    cand x = *(const cand *)a, y = *(const cand *)b;
    return before(x, y) ? -1 : before(y, x) ? 1 : 0;
}

/* best first: an insertion sort for the usual few dozen (qsort's calls cost more there) */
static void sort_kept(cand *c, int k) {
    if (k > 64) {
        qsort(c, k, sizeof(cand), by_order);
        return;
    }
    for (int i = 1; i < k; i++) {
        cand t = c[i];
        int j = i;
        for (; j > 0 && before(t, c[j - 1]); j--) c[j] = c[j - 1];
        c[j] = t;
    }
}

/* -- the filters on a row's k survivors, best first: sampling.process_rows' arithmetic ---------- */
typedef struct {
    double temperature, top_p, min_p;
} params;

static int64_t finish_row(const cand *c, int k, params p, double *probs) {
    double top = c[0].x, sum = 0.0;
    int64_t keep = 0;
    int have = 0;
    if (p.top_p < 1.0) { /* the smallest prefix of mass >= top_p */
        double csum = 0.0;
        for (int j = 0; j < k; j++) csum += probs[j] = exp((double)c[j].x - top);
        double cut = p.top_p * csum;
        csum = 0.0;
        for (int j = 0; j < k; j++) keep += (csum += probs[j]) < cut;
        keep += 1, have = 1;
    }
    if (p.min_p > 0.0) { /* p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) */
        double floor = top + log(p.min_p);
        int64_t km = 0;
        for (int j = 0; j < k; j++) km += (double)c[j].x >= floor;
        keep = have && keep < km ? keep : km, have = 1;
    }
    if (!have)
        for (int j = 0; j < k; j++) keep += c[j].x > -INFINITY;
    double t = p.temperature > 0.0 ? p.temperature : 1.0;
    for (int j = 0; j < k; j++) {
        double d = (double)c[j].x - top;
        probs[j] = j < keep ? exp(t != 1.0 ? d / t : d) : 0.0;
        sum += probs[j];
    }
    for (int j = 0; j < k; j++) probs[j] /= sum;
    return keep;
}

/* -- buffers ---------------------------------------------------------------------------------- */
typedef struct {
    Py_buffer b;
    int ok;
} buf;

static int get(PyObject *o, buf *out, int flags, int ndim, Py_ssize_t itemsize, const char *kinds,
               const char *what) {
    out->ok = 0;
    if (PyObject_GetBuffer(o, &out->b, flags | PyBUF_STRIDES | PyBUF_FORMAT) < 0) return -1;
    out->ok = 1;
    const char *f = out->b.format ? out->b.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    /* itemsize 0: ids, int32 ('i') or int64 */
    int size_ok = itemsize ? out->b.itemsize == itemsize : out->b.itemsize == (*f == 'i' ? 4 : 8);
    if (out->b.ndim != ndim || !size_ok || !strchr(kinds, *f) || f[1] ||
        out->b.strides[ndim - 1] != out->b.itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: a %d-D array of items of kind %s, each row contiguous", what,
                     ndim, kinds);
        return -1;
    }
    return 0;
}

static void release(buf *bs, int n) {
    for (int i = 0; i < n; i++)
        if (bs[i].ok) PyBuffer_Release(&bs[i].b);
}

#define ROW(b, i) ((char *)(b).buf + (i) * (b).strides[0])

static int outputs(PyObject *const *args, buf *bs, Py_ssize_t n, int k) {
    if (get(args[0], &bs[0], PyBUF_WRITABLE, 2, 8, "lq", "ids_out") < 0) return -1;
    if (get(args[1], &bs[1], PyBUF_WRITABLE, 2, 8, "d", "probs_out") < 0) return -1;
    if (get(args[2], &bs[2], PyBUF_WRITABLE, 1, 8, "lq", "keep_out") < 0) return -1;
    if (bs[0].b.shape[0] < n || bs[0].b.shape[1] < k || bs[1].b.shape[0] < n || bs[1].b.shape[1] < k ||
        bs[2].b.shape[0] < n) {
        PyErr_SetString(PyExc_ValueError, "output arrays smaller than (rows, k)");
        return -1;
    }
    return 0;
}

static void write_row(buf *bs, Py_ssize_t r, cand *c, int k, params p) {
    int64_t *ids = (int64_t *)ROW(bs[0].b, r);
    double *probs = (double *)ROW(bs[1].b, r);
    for (int j = 0; j < k; j++) ids[j] = c[j].id;
    ((int64_t *)bs[2].b.buf)[r * bs[2].b.strides[0] / 8] = finish_row(c, k, p, probs);
}

/* k and the sampler's parameters, from args[0..3] */
static int read_params(PyObject *const *args, long *k, params *p) {
    *k = PyLong_AsLong(args[0]);
    *p = (params){PyFloat_AsDouble(args[1]), PyFloat_AsDouble(args[2]), PyFloat_AsDouble(args[3])};
    return PyErr_Occurred() ? -1 : 0;
}

/* process_rows(blocks, k, temperature, top_p, min_p, ids_out, probs_out, keep_out): every row of a
 * list of float32 (n_i, n_vocab) arrays, taken one after another (a round's rows of one step, as
 * the decodes left them: no copy joins them); 0 < k <= n_vocab. */
static PyObject *process_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) return PyErr_Format(PyExc_TypeError, "process_rows takes 8 arguments");
    buf out[3] = {{.ok = 0}}, *in = NULL;
    PyObject *res = NULL, *blocks = NULL;
    const float **rows = NULL;
    cand *h = NULL;
    float *maxima = NULL;
    long k;
    params p;
    if (read_params(args + 1, &k, &p) < 0) return NULL;
    if (!(blocks = PySequence_Fast(args[0], "process_rows: a list of 2-D arrays"))) return NULL;
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(blocks), n = 0, v = -1;
    if (!(in = calloc(nb ? nb : 1, sizeof(buf)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        if (get(PySequence_Fast_GET_ITEM(blocks, i), &in[i], PyBUF_SIMPLE, 2, 4, "f", "rows") < 0) goto done;
        if (v >= 0 && in[i].b.shape[1] != v) {
            PyErr_SetString(PyExc_ValueError, "process_rows: blocks of different widths");
            goto done;
        }
        v = in[i].b.shape[1], n += in[i].b.shape[0];
    }
    if (k <= 0 || k > v || k > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "k=%ld outside 1..%zd", k, v);
        goto done;
    }
    if (outputs(args + 5, out, n, (int)k) < 0) goto done;
    /* two threads share the rows of a bigger call: the row reads are the cost, and one core alone
     * does not draw all the memory bandwidth; llama.cpp's own OpenMP threads are idle here */
    int threads = n >= 4 && v >= 4096 ? n_threads : 1;
    int64_t scratch = scratch_size(v, (int)k);
    if (!(rows = malloc(sizeof(float *) * n)) || !(h = malloc(sizeof(cand) * k * threads)) ||
        !(maxima = malloc(sizeof(float) * scratch * threads))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0, r = 0; i < nb; i++)
        for (Py_ssize_t j = 0; j < in[i].b.shape[0]; j++) rows[r++] = (const float *)ROW(in[i].b, j);
    Py_BEGIN_ALLOW_THREADS;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (Py_ssize_t r = 0; r < n; r++) {
        int t = thread_num();
        heap hp = {h + t * k, 0, (int)k};
        top_k_row(rows[r], v, (int)k, maxima + t * scratch, &hp);
        sort_kept(hp.h, (int)k);
        write_row(out, r, hp.h, (int)k, p);
    }
    Py_END_ALLOW_THREADS;
    res = Py_NewRef(Py_None);
done:
    free(rows);
    free(h);
    free(maxima);
    if (in) release(in, (int)nb);
    free(in);
    release(out, 3);
    Py_XDECREF(blocks);
    return res;
}

/* process_candidates(ids, logits, k, temperature, top_p, min_p, ids_out, probs_out, keep_out): rows
 * given as m candidates each (int32 or int64 ids, float32 logits, any order); 0 < k <= m. */
static PyObject *process_candidates(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) return PyErr_Format(PyExc_TypeError, "process_candidates takes 9 arguments");
    buf bs[5] = {{.ok = 0}};
    PyObject *res = NULL;
    cand *h = NULL;
    long k;
    params p;
    if (read_params(args + 2, &k, &p) < 0) return NULL;
    if (get(args[0], &bs[3], PyBUF_SIMPLE, 2, 0, "ilq", "ids") < 0) goto done;
    int wide = (int)bs[3].b.itemsize;
    if (get(args[1], &bs[4], PyBUF_SIMPLE, 2, 4, "f", "logits") < 0) goto done;
    Py_ssize_t n = bs[3].b.shape[0], m = bs[3].b.shape[1];
    if (bs[4].b.shape[0] != n || bs[4].b.shape[1] != m || k <= 0 || k > m) {
        PyErr_Format(PyExc_ValueError, "k=%ld outside 1..%zd, or ids and logits of other shapes", k, m);
        goto done;
    }
    if (outputs(args + 6, bs, n, (int)k) < 0) goto done;
    if (!(h = malloc(sizeof(cand) * k))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        const char *ids = ROW(bs[3].b, r);
        const float *x = (const float *)ROW(bs[4].b, r);
        heap hp = {h, 0, (int)k};
        for (Py_ssize_t j = 0; j < m; j++)
            offer(&hp, (cand){x[j], wide == 4 ? ((const int32_t *)ids)[j] : ((const int64_t *)ids)[j]});
        sort_kept(h, (int)k);
        write_row(bs, r, h, (int)k, p);
    }
    res = Py_NewRef(Py_None);
done:
    free(h);
    release(bs, 5);
    return res;
}

/* -- the coupled rule's choice: noise.choose -------------------------------------------------- */
static inline uint64_t mix(uint64_t z) { /* splitmix64's finaliser */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* choose(pos_keys, ids, probs) -> [token]: per row, argmax over j of
 * log probs[j] - log(-log U(key, ids[j])), the first on ties; probability 0 never wins. */
static PyObject *choose(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "choose takes 3 arguments");
    buf bs[2] = {{.ok = 0}};
    PyObject *keys = PySequence_Fast(args[0], "pos_keys: a sequence of ints"), *out = NULL;
    if (!keys) return NULL;
    if (get(args[1], &bs[0], PyBUF_SIMPLE, 2, 8, "lq", "ids") < 0 ||
        get(args[2], &bs[1], PyBUF_SIMPLE, 2, 8, "d", "probs") < 0)
        goto done;
    Py_ssize_t n = bs[0].b.shape[0], w = bs[0].b.shape[1];
    if (PySequence_Fast_GET_SIZE(keys) != n || bs[1].b.shape[0] != n || bs[1].b.shape[1] != w || w < 1) {
        PyErr_SetString(PyExc_ValueError, "choose: one key per row, ids and probs of one shape");
        goto done;
    }
    if (!(out = PyList_New(n))) goto done;
    for (Py_ssize_t r = 0; r < n; r++) {
        uint64_t key = PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(keys, r));
        if (PyErr_Occurred()) goto fail;
        const int64_t *ids = (const int64_t *)ROW(bs[0].b, r);
        const double *pr = (const double *)ROW(bs[1].b, r);
        double best = -INFINITY;
        Py_ssize_t at = 0;
        for (Py_ssize_t j = 0; j < w; j++) {
            uint64_t h = mix(key + (uint64_t)ids[j] * 0x9E3779B97F4A7C15ULL);
            double u = ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
            double s = log(pr[j]) - log(-log(u));
            if (s > best || (j == 0 && !(s < best))) best = s, at = j;
        }
        PyObject *t = PyLong_FromLongLong(ids[at]);
        if (!t) goto fail;
        PyList_SET_ITEM(out, r, t);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    release(bs, 2);
    Py_DECREF(keys);
    return out;
}

/* pos_keys(key, first, n) -> [noise.KeyedGumbel(key).pos_key(first + j) for j < n]: splitmix64
 * with its counter increment, of the key xor that of the position */
static PyObject *pos_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "pos_keys takes 3 arguments");
    uint64_t key = PyLong_AsUnsignedLongLongMask(args[0]);
    long long first = PyLong_AsLongLong(args[1]);
    Py_ssize_t n = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    PyObject *out = PyList_New(n < 0 ? 0 : n);
    for (Py_ssize_t j = 0; out && j < n; j++) {
        uint64_t at = mix((uint64_t)(first + j) + 0x9E3779B97F4A7C15ULL);
        PyObject *x = PyLong_FromUnsignedLongLong(mix((key ^ at) + 0x9E3779B97F4A7C15ULL));
        if (!x) Py_CLEAR(out);
        else PyList_SET_ITEM(out, j, x);
    }
    return out;
}

static PyObject *isa(PyObject *self, PyObject *unused) { return PyUnicode_FromString(isa_name); }

static PyObject *threads(PyObject *self, PyObject *unused) { return PyLong_FromLong(n_threads); }

/* llama.cpp's abort callback (ggml_abort_callback: ggml asks it after every graph node): true once the
 * int at `data` is set. Here rather than in Python so that each ask is one load, not a GIL taken
 * (llama/interrupt.py sets the int from the thread that cancels). */
static bool flag_is_set(void *data) { return *(volatile int *)data != 0; }

static PyObject *abort_callback(PyObject *self, PyObject *unused) {
    return PyLong_FromVoidPtr((void *)(uintptr_t)&flag_is_set);
}

static PyMethodDef methods[] = {
    {"process_rows", (PyCFunction)(void (*)(void))process_rows, METH_FASTCALL, NULL},
    {"process_candidates", (PyCFunction)(void (*)(void))process_candidates, METH_FASTCALL, NULL},
    {"choose", (PyCFunction)(void (*)(void))choose, METH_FASTCALL, NULL},
    {"pos_keys", (PyCFunction)(void (*)(void))pos_keys, METH_FASTCALL, NULL},
    {"isa", isa, METH_NOARGS, "The vector instructions the row scan runs on this CPU."},
    {"threads", threads, METH_NOARGS, "The threads a call of many long rows shares them among."},
    {"abort_callback", abort_callback, METH_NOARGS, "The address of a ggml_abort_callback reading an int."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_kernels", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__kernels(void) {
#ifdef _OPENMP
    n_threads = omp_get_num_procs() > 1 ? 2 : 1;
#endif
#ifdef LS_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        group_max = group_max_avx512, isa_name = "avx512f";
    else if (__builtin_cpu_supports("avx2"))
        group_max = group_max_avx2, isa_name = "avx2";
#endif
    return PyModule_Create(&module);
}
