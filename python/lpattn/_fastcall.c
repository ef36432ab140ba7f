/* lpattn._fastcall: the hot path of lpattn.attention, KVPool.decode and the
 * plans' runs on torch tensors, in C (issue 32 item 1). Optional: without it
 * the package runs the same calls through ctypes (python/lpattn/_fast.py).
 *
 * It links nothing: the library's functions come as addresses from the
 * ctypes-loaded liblpattn (bind()), so LPATTN_LIBRARY still picks the library.
 * Each entry takes the common case only (exact torch.Tensor / Parameter of a
 * known dtype, strided, on the CPU or a CUDA/ROCm device, rank as expected,
 * int32 ids, an existing context) and answers None for anything else: the
 * caller then runs the Python path, which raises what it raises. So a call
 * either gives what the Python path gives or is the Python path. No
 * allocation beyond a missing out (as the Python path), no sync. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "lpattn.h"

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o) {
  Py_INCREF(o);
  return o;
}
#endif

typedef lpattn_status (*attention_fn)(lpattn_ctx *, const lpattn_tensor *, const lpattn_tensor *,
                                      const lpattn_tensor *, const lpattn_tensor *,
                                      const lpattn_attn_params *, const lpattn_attn_aux *);
typedef lpattn_status (*decode_fn)(lpattn_ctx *, lpattn_kv_pool *, const lpattn_kv_batch *,
                                   const lpattn_tensor *, const lpattn_tensor *,
                                   const lpattn_attn_params *, const lpattn_attn_aux *);
typedef void (*batch_init_fn)(lpattn_kv_batch *);
typedef int (*ptr3_fn)(void *, void *, void *);
typedef int (*ptr5_fn)(void *, void *, void *, void *, void *);

/* What bind() and bind_torch() set. */
static struct {
  attention_fn attention;
  decode_fn decode;
  batch_init_fn batch_init;
  void *no_rows; /* the shared lpattn_attn_aux of calls without lse/entropy */
  PyObject *names[5]; /* backend names by lpattn_backend: "auto", "ref", "cpu", "cuda", "hip" */
  int host_backend;   /* what "auto" means on the host (cpu or ref) */
  PyObject *ctxs;     /* the threading.local holding each thread's ctxs dict */
  PyObject *resolve;  /* resolve(backend, device_type, device_id) -> context */
  /* torch (bind_torch): NULL until torch is used */
  PyTypeObject *tensor, *param;
  PyObject *f32, *f16, *bf16, *i32, *strided, *stream; /* stream(device_id) -> int */
  int hip;
} G;

static PyObject *s_dtype, *s_layout, *s_is_neg, *s_is_cuda, *s_is_cpu, *s_get_device, *s_shape,
    *s_stride, *s_data_ptr, *s_is_inference, *s_new_empty, *s_ctxs, *s_addr, *s_stream,
    *s_use_stream;

enum { DEV_CPU = 1, DEV_CUDA = 2, DEV_ROCM = 10 };

typedef struct {
  lpattn_dtype dtype;
  int ndim, device_type, device_id;
  int64_t shape[4], stride[4];
  void *ptr;
} view;

static int bail(void) { /* clears a Python error: the Python path redoes the call */
  if (PyErr_Occurred()) PyErr_Clear();
  return 0;
}

static int attr_true(PyObject *o, PyObject *name) {
  PyObject *r = PyObject_GetAttr(o, name);
  if (!r) return -1;
  int t = r == Py_True;
  Py_DECREF(r);
  return t;
}

static int tuple_i64(PyObject *t, int64_t *out, int *n) {
  if (!t || !PyTuple_Check(t) || PyTuple_GET_SIZE(t) > 4) return 0;
  *n = (int)PyTuple_GET_SIZE(t);
  for (int i = 0; i < *n; i++) {
    long long x = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
    if (x == -1 && PyErr_Occurred()) return 0;
    out[i] = x;
  }
  return 1;
}

/* The view of a torch tensor as _dlpack.View._from_torch takes it, for
 * `floats` (f32/f16/bf16) or int32; 0 (bail) for anything else. */
static int torch_view(PyObject *t, int floats, view *v) {
  if (!G.tensor || (Py_TYPE(t) != G.tensor && Py_TYPE(t) != G.param)) return 0;
  PyObject *dt = PyObject_GetAttr(t, s_dtype);
  if (!dt) return bail();
  Py_DECREF(dt); /* the dtype objects are torch's singletons (identity compared) */
  if (floats) {
    if (dt == G.f32) v->dtype = LPATTN_F32;
    else if (dt == G.f16) v->dtype = LPATTN_F16;
    else if (dt == G.bf16) v->dtype = LPATTN_BF16;
    else return 0;
  } else if (dt == G.i32) {
    v->dtype = LPATTN_I32;
  } else {
    return 0;
  }
  PyObject *lay = PyObject_GetAttr(t, s_layout);
  if (!lay) return bail();
  Py_DECREF(lay);
  if (lay != G.strided) return 0;
  PyObject *neg = PyObject_CallMethodNoArgs(t, s_is_neg);
  if (!neg) return bail();
  Py_DECREF(neg);
  if (neg != Py_False) return 0;
  int cuda = attr_true(t, s_is_cuda);
  if (cuda < 0) return bail();
  if (cuda) {
    PyObject *d = PyObject_CallMethodNoArgs(t, s_get_device);
    if (!d) return bail();
    v->device_id = (int)PyLong_AsLong(d);
    Py_DECREF(d);
    if (PyErr_Occurred()) return bail();
    v->device_type = G.hip ? DEV_ROCM : DEV_CUDA;
  } else {
    int cpu = attr_true(t, s_is_cpu);
    if (cpu <= 0) return bail();
    v->device_type = DEV_CPU, v->device_id = 0;
  }
  PyObject *sh = PyObject_GetAttr(t, s_shape);
  int ok = tuple_i64(sh, v->shape, &v->ndim);
  Py_XDECREF(sh);
  if (!ok) return bail();
  PyObject *st = PyObject_CallMethodNoArgs(t, s_stride);
  int n = 0;
  ok = tuple_i64(st, v->stride, &n);
  Py_XDECREF(st);
  if (!ok || n != v->ndim) return bail();
  PyObject *p = PyObject_CallMethodNoArgs(t, s_data_ptr);
  if (!p) return bail();
  v->ptr = PyLong_AsVoidPtr(p);
  Py_DECREF(p);
  if (PyErr_Occurred() || !v->ptr) return bail(); /* NULL data: the Python path decides */
  return 1;
}

/* A writable out (_dlpack._check_writable): no inference tensor (the
 * Python path decides with torch's inference mode). */
static int writable_view(PyObject *t, view *v) {
  if (!torch_view(t, 1, v)) return 0;
  PyObject *r = PyObject_CallMethodNoArgs(t, s_is_inference);
  if (!r) return bail();
  Py_DECREF(r);
  return r == Py_False;
}

/* lpattn_tensor of a view: perm maps B, H, S, D to its axes (View.tensor);
 * fewer than 4 dimensions are padded in front (shape4). */
static lpattn_tensor to_tensor(const view *v, const int *perm) {
  lpattn_tensor t;
  t.data = v->ptr, t.dtype = v->dtype;
  int pad = 4 - v->ndim;
  for (int i = 0; i < 4; i++) {
    int a = perm ? perm[i] : i;
    t.shape[i] = a < pad ? 1 : v->shape[a - pad];
    t.stride[i] = a < pad ? 0 : v->stride[a - pad];
  }
  return t;
}

static int same_place(const view *a, const view *b) {
  return a->device_type == b->device_type && a->device_id == b->device_id;
}

/* The caller's current stream on a GPU context (_Ctx.use_stream). */
static int follow_stream(PyObject *ctx, int device_id) {
  if (!G.stream) return 0;
  PyObject *s = PyObject_CallFunction(G.stream, "i", device_id);
  if (!s) return bail();
  PyObject *cur = PyObject_GetAttr(ctx, s_stream);
  if (!cur) {
    Py_DECREF(s);
    return bail();
  }
  const int eq = PyObject_RichCompareBool(s, cur, Py_EQ);
  Py_DECREF(cur);
  if (eq < 0) {
    Py_DECREF(s);
    return bail();
  }
  const int same = eq == 1;
  PyObject *r = same ? Py_NewRef(Py_None) : PyObject_CallMethodOneArg(ctx, s_use_stream, s);
  Py_DECREF(s);
  if (!r) return bail();
  Py_DECREF(r);
  return 1;
}

static int ctx_addr(PyObject *ctx, void **h) {
  PyObject *a = PyObject_GetAttr(ctx, s_addr);
  if (!a) return bail();
  *h = PyLong_AsVoidPtr(a);
  Py_DECREF(a);
  return PyErr_Occurred() ? bail() : 1;
}

/* The thread's context for (backend, device) as _context.context finds it:
 * its cache first, else resolve(). A borrowed-then-owned reference. */
static PyObject *context(PyObject *backend, const view *v) {
  int code = -1;
  if (!PyUnicode_Check(backend)) return NULL;
  for (int i = 0; i < 5 && code < 0 && !PyErr_Occurred(); i++)
    if (backend == G.names[i] || PyUnicode_Compare(backend, G.names[i]) == 0) code = i;
  if (PyErr_Occurred() || code < 0) return NULL;
  int gpu_data = v->device_type != DEV_CPU;
  if (code == LPATTN_BACKEND_AUTO)
    code = !gpu_data ? G.host_backend : v->device_type == DEV_CUDA ? LPATTN_BACKEND_CUDA
                                                                    : LPATTN_BACKEND_HIP;
  int gpu = code == LPATTN_BACKEND_CUDA || code == LPATTN_BACKEND_HIP;
  if (gpu != gpu_data) return NULL;
  PyObject *key = Py_BuildValue("(Oi)", G.names[code], gpu ? v->device_id : 0);
  PyObject *d = key ? PyObject_GetAttr(G.ctxs, s_ctxs) : NULL;
  PyObject *ctx = d && PyDict_Check(d) ? PyDict_GetItemWithError(d, key) : NULL;
  Py_XINCREF(ctx);
  Py_XDECREF(d);
  Py_XDECREF(key);
  if (!ctx) {
    if (PyErr_Occurred()) PyErr_Clear();
    ctx = PyObject_CallFunction(G.resolve, "Oii", G.names[code], v->device_type, v->device_id);
    if (!ctx) return NULL;
  }
  if (gpu && !follow_stream(ctx, v->device_id)) Py_CLEAR(ctx);
  return ctx;
}

/* A new out of `shape` like t (_dlpack.empty: torch.empty of t's dtype and device). */
static PyObject *new_empty(PyObject *t, const int64_t *shape) {
  PyObject *sh = Py_BuildValue("(LLLL)", (long long)shape[0], (long long)shape[1],
                               (long long)shape[2], (long long)shape[3]);
  PyObject *r = sh ? PyObject_CallMethodOneArg(t, s_new_empty, sh) : NULL;
  Py_XDECREF(sh);
  return r;
}

/* Pointer arguments: None is NULL. */
static int as_ptr(PyObject *o, void **p) {
  if (o == Py_None) {
    *p = NULL;
    return 1;
  }
  *p = PyLong_AsVoidPtr(o);
  return !PyErr_Occurred();
}

/* attention(q, k, v, out, perm, backend, params_addr) -> out, a status (int)
 * or None (take the Python path). perm: LAYOUTS' tuple. */
static PyObject *fc_attention(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (n != 7 || !G.attention) return Py_NewRef(Py_None);
  view q, k, v, o;
  int perm[4], np = 0;
  int64_t pv[4];
  if (!tuple_i64(a[4], pv, &np) || np != 4) return bail(), Py_NewRef(Py_None);
  for (int i = 0; i < 4; i++) perm[i] = (int)pv[i];
  if (!torch_view(a[0], 1, &q) || !torch_view(a[1], 1, &k) || !torch_view(a[2], 1, &v))
    return Py_NewRef(Py_None);
  if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4 || !same_place(&q, &k) || !same_place(&q, &v) ||
      k.dtype != q.dtype || v.dtype != q.dtype)
    return Py_NewRef(Py_None);
  void *params;
  if (!as_ptr(a[6], &params) || !params) return bail(), Py_NewRef(Py_None);
  PyObject *ctx = context(a[5], &q);
  void *h;
  if (!ctx || !ctx_addr(ctx, &h)) {
    Py_XDECREF(ctx);
    return bail(), Py_NewRef(Py_None);
  }
  Py_DECREF(ctx); /* the thread's cache keeps it */
  PyObject *out = a[3];
  if (out == Py_None) {
    out = new_empty(a[0], q.shape);
    if (!out) return bail(), Py_NewRef(Py_None);
    if (!torch_view(out, 1, &o)) {
      Py_DECREF(out);
      return Py_NewRef(Py_None);
    }
  } else {
    if (!writable_view(out, &o) || o.ndim != 4 || !same_place(&o, &q)) return Py_NewRef(Py_None);
    Py_INCREF(out);
  }
  lpattn_tensor tq = to_tensor(&q, perm), tk = to_tensor(&k, perm), tv = to_tensor(&v, perm),
                to = to_tensor(&o, perm);
  lpattn_status st;
  Py_BEGIN_ALLOW_THREADS
  st = G.attention(h, &tq, &tk, &tv, &to, params, G.no_rows);
  Py_END_ALLOW_THREADS
  if (st != LPATTN_OK) {
    Py_DECREF(out);
    return PyLong_FromLong(st);
  }
  return out;
}

/* decode(ctx, pool, q, slots, lengths, page_table, max_length, out, params_addr,
 * head_dim_v, stream_device) -> out, a status or None. stream_device: the
 * pool memory's GPU (its context follows the caller's stream), or -1. */
static PyObject *fc_decode(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  if (n != 11 || !G.decode) return Py_NewRef(Py_None);
  view q, s, l, pt, o;
  if (!torch_view(a[3], 0, &s) || !torch_view(a[4], 0, &l) || !torch_view(a[5], 0, &pt) ||
      s.ndim != 1 || l.ndim != 1 || pt.ndim != 2 || !same_place(&s, &l) || !same_place(&s, &pt) ||
      s.shape[0] > INT32_MAX)
    return Py_NewRef(Py_None);
  if (!PyLong_Check(a[6])) return Py_NewRef(Py_None);
  int over = 0;
  long long max_length = PyLong_AsLongLongAndOverflow(a[6], &over);
  if (over || (max_length == -1 && PyErr_Occurred())) return bail(), Py_NewRef(Py_None);
  if (!torch_view(a[2], 1, &q) || q.ndim != 4) return Py_NewRef(Py_None);
  void *h, *pool, *params;
  long dv = PyLong_AsLong(a[9]), sdev = PyLong_AsLong(a[10]);
  if (PyErr_Occurred() || !as_ptr(a[1], &pool) || !as_ptr(a[8], &params) || !params ||
      !ctx_addr(a[0], &h))
    return bail(), Py_NewRef(Py_None);
  if (sdev >= 0 && !follow_stream(a[0], (int)sdev)) return Py_NewRef(Py_None);
  PyObject *out = a[7];
  if (out == Py_None) {
    int64_t shape[4] = {q.shape[0], q.shape[1], q.shape[2], dv};
    out = new_empty(a[2], shape);
    if (!out) return bail(), Py_NewRef(Py_None);
    if (!torch_view(out, 1, &o)) {
      Py_DECREF(out);
      return Py_NewRef(Py_None);
    }
  } else {
    if (!writable_view(out, &o) || o.ndim != 4) return Py_NewRef(Py_None);
    Py_INCREF(out);
  }
  lpattn_kv_batch b;
  G.batch_init(&b);
  b.num_seqs = (int)s.shape[0];
  b.slots = to_tensor(&s, NULL), b.lengths = to_tensor(&l, NULL);
  b.page_table = to_tensor(&pt, NULL);
  b.max_length = max_length;
  lpattn_tensor tq = to_tensor(&q, NULL), to = to_tensor(&o, NULL);
  lpattn_status st;
  Py_BEGIN_ALLOW_THREADS
  st = G.decode(h, pool, &b, &tq, &to, params, G.no_rows);
  Py_END_ALLOW_THREADS
  if (st != LPATTN_OK) {
    Py_DECREF(out);
    return PyLong_FromLong(st);
  }
  return out;
}

/* call(fn, *pointers): the status of fn(pointers...) for 3 or 5 pointers
 * (ints or None), the GIL released: the plans' runs. */
static PyObject *fc_call(PyObject *self, PyObject *const *a, Py_ssize_t n) {
  (void)self;
  void *f, *p[5];
  if (n != 4 && n != 6) {
    PyErr_SetString(PyExc_TypeError, "call(fn, 3 or 5 pointers)");
    return NULL;
  }
  if (!as_ptr(a[0], &f) || !f) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "call: NULL function");
    return NULL;
  }
  for (Py_ssize_t i = 1; i < n; i++)
    if (!as_ptr(a[i], &p[i - 1])) return NULL;
  int st;
  Py_BEGIN_ALLOW_THREADS
  if (n == 4) st = ((ptr3_fn)f)(p[0], p[1], p[2]);
  else st = ((ptr5_fn)f)(p[0], p[1], p[2], p[3], p[4]);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(st);
}

static void *addr_of(PyObject *d, const char *name) {
  PyObject *o = PyDict_GetItemString(d, name);
  void *p = NULL;
  if (!o || !as_ptr(o, &p) || !p) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "bind: %s", name);
    return NULL;
  }
  return p;
}

/* bind(addrs, names, host_backend, ctxs, resolve): the library's functions
 * (dict of addresses), the backend names, what "auto" is on the host, the
 * threading.local of the contexts and the resolver of a missing one. */
static PyObject *fc_bind(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *d, *names, *ctxs, *resolve;
  int host;
  if (!PyArg_ParseTuple(args, "O!O!iOO", &PyDict_Type, &d, &PyTuple_Type, &names, &host, &ctxs,
                        &resolve))
    return NULL;
  if (PyTuple_GET_SIZE(names) != 5) return PyErr_Format(PyExc_ValueError, "bind: 5 names");
  void *att = addr_of(d, "lpattn_attention"), *dec = addr_of(d, "lpattn_paged_decode"),
       *bi = addr_of(d, "lpattn_kv_batch_init"), *nr = addr_of(d, "no_rows");
  if (!att || !dec || !bi || !nr) return NULL;
  for (int i = 0; i < 5; i++) {
    Py_XSETREF(G.names[i], Py_NewRef(PyTuple_GET_ITEM(names, i)));
  }
  G.attention = (attention_fn)att, G.decode = (decode_fn)dec;
  G.batch_init = (batch_init_fn)bi, G.no_rows = nr, G.host_backend = host;
  Py_XSETREF(G.ctxs, Py_NewRef(ctxs));
  Py_XSETREF(G.resolve, Py_NewRef(resolve));
  Py_RETURN_NONE;
}

/* bind_torch(Tensor, Parameter, (float32, float16, bfloat16, int32), strided,
 * stream, hip): torch's objects once torch is in use. */
static PyObject *fc_bind_torch(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *tt, *pt, *stream;
  PyObject *f32, *f16, *bf16, *i32, *strided;
  int hip;
  if (!PyArg_ParseTuple(args, "O!O!(OOOO)OOp", &PyType_Type, &tt, &PyType_Type, &pt, &f32, &f16,
                        &bf16, &i32, &strided, &stream, &hip))
    return NULL;
  Py_XSETREF(G.f32, Py_NewRef(f32));
  Py_XSETREF(G.f16, Py_NewRef(f16));
  Py_XSETREF(G.bf16, Py_NewRef(bf16));
  Py_XSETREF(G.i32, Py_NewRef(i32));
  Py_XSETREF(G.strided, Py_NewRef(strided));
  Py_XSETREF(G.stream, stream == Py_None ? NULL : Py_NewRef(stream));
  G.hip = hip;
  Py_XSETREF(G.param, (PyTypeObject *)Py_NewRef(pt));
  Py_XSETREF(G.tensor, (PyTypeObject *)Py_NewRef(tt));
  Py_RETURN_NONE;
}

/* sizes() -> (sizeof lpattn_tensor, sizeof lpattn_kv_batch): checked
 * against the ctypes structs before the module is used. */
static PyObject *fc_sizes(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return Py_BuildValue("(nn)", (Py_ssize_t)sizeof(lpattn_tensor),
                       (Py_ssize_t)sizeof(lpattn_kv_batch));
}

static PyMethodDef methods[] = {
    {"attention", (PyCFunction)(void (*)(void))fc_attention, METH_FASTCALL, NULL},
    {"decode", (PyCFunction)(void (*)(void))fc_decode, METH_FASTCALL, NULL},
    {"call", (PyCFunction)(void (*)(void))fc_call, METH_FASTCALL, NULL},
    {"bind", fc_bind, METH_VARARGS, NULL},
    {"bind_torch", fc_bind_torch, METH_VARARGS, NULL},
    {"sizes", fc_sizes, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcall",
                                    "lpattn's hot calls in C (python/lpattn/_fast.py)", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastcall(void) {
  struct {
    PyObject **s;
    const char *text;
  } names[] = {{&s_dtype, "dtype"},         {&s_layout, "layout"},     {&s_is_neg, "is_neg"},
               {&s_is_cuda, "is_cuda"},     {&s_is_cpu, "is_cpu"},     {&s_get_device, "get_device"},
               {&s_shape, "shape"},         {&s_stride, "stride"},     {&s_data_ptr, "data_ptr"},
               {&s_is_inference, "is_inference"}, {&s_new_empty, "new_empty"},
               {&s_ctxs, "ctxs"},           {&s_addr, "addr"},         {&s_stream, "stream"},
               {&s_use_stream, "use_stream"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!(*names[i].s = PyUnicode_InternFromString(names[i].text))) return NULL;
  return PyModule_Create(&module);
}
