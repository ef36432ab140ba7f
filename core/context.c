/* Contexts, backend selection and params defaults. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "internal.h"

#ifndef LPATTN_HAVE_CPU
const lpattn_backend_vtable *lpattn_cpu_backend(void) { return NULL; }
#endif
#ifndef LPATTN_HAVE_CUDA
const lpattn_backend_vtable *lpattn_cuda_backend(void) { return NULL; }
#endif
#ifndef LPATTN_HAVE_HIP
const lpattn_backend_vtable *lpattn_hip_backend(void) { return NULL; }
#endif

static const lpattn_backend_vtable *vtable_of(lpattn_backend b) {
  switch (b) {
    case LPATTN_BACKEND_REF: return &lpattn_ref_backend;
    case LPATTN_BACKEND_CPU: return lpattn_cpu_backend();
    case LPATTN_BACKEND_CUDA: return lpattn_cuda_backend();
    case LPATTN_BACKEND_HIP: return lpattn_hip_backend();
    default: return NULL;
  }
}

void lpattn_context_params_init(lpattn_context_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
}

/* A probe context: GPU backends report no device through init. */
int lpattn_backend_available(lpattn_backend b) {
  lpattn_ctx *c = NULL;
  if (b == LPATTN_BACKEND_AUTO) return 1;
  if (lpattn_create(b, NULL, &c) != LPATTN_OK) return 0;
  lpattn_free(c);
  return 1;
}

static lpattn_status create_one(lpattn_backend b, const lpattn_context_params *p,
                                lpattn_ctx **out) {
  const lpattn_backend_vtable *vt = vtable_of(b);
  if (!vt)
    return lp_fail(LPATTN_ERR_UNSUPPORTED_HARDWARE, "backend %s was not built into this library",
                   lpattn_backend_name(b));
  lpattn_ctx *c = calloc(1, sizeof *c);
  if (!c) return lp_fail(LPATTN_ERR_OUT_OF_MEMORY, "out of host memory for the context");
  c->kind = b;
  c->vt = vt;
  c->params = *p;
  lpattn_status st = vt->init ? vt->init(c, p) : LPATTN_OK;
  if (st != LPATTN_OK) {
    if (!lpattn_last_error()[0])
      lp_fail(st, "backend %s cannot start here: %s", lpattn_backend_name(b), lpattn_status_string(st));
    free(c);
    return st;
  }
  *out = c;
  return LPATTN_OK;
}

lpattn_status lpattn_create(lpattn_backend backend, const lpattn_context_params *params,
                            lpattn_ctx **out) {
  lp_err_clear();
  if (!out) return lp_fail(LPATTN_ERR_NULL_POINTER, "out is NULL");
  *out = NULL;
  lpattn_context_params p;
  lpattn_context_params_init(&p);
  if (params) {
    if (params->struct_size < sizeof(size_t) || params->struct_size > sizeof p)
      return lp_fail(LPATTN_ERR_PARAMS_SIZE, "params.struct_size = %zu, expected %zu..%zu",
                     params->struct_size, sizeof(size_t), sizeof p);
    memcpy(&p, params, params->struct_size);
    p.struct_size = sizeof p;
  }
  if (p.num_threads < 0 || p.num_threads > LPATTN_MAX_THREADS)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.num_threads = %d, expected 0..%d", p.num_threads,
                   LPATTN_MAX_THREADS);
  if (p.device < 0) return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "params.device = %d, expected >= 0", p.device);
  if (backend == LPATTN_BACKEND_AUTO) {
    static const lpattn_backend order[] = {LPATTN_BACKEND_CUDA, LPATTN_BACKEND_HIP,
                                           LPATTN_BACKEND_CPU, LPATTN_BACKEND_REF};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
      if (create_one(order[i], &p, out) == LPATTN_OK) {
        lp_err_clear(); /* the backends tried before */
        return LPATTN_OK;
      }
    return lp_fail(LPATTN_ERR_UNSUPPORTED_HARDWARE, "no backend can start here");
  }
  if (backend < LPATTN_BACKEND_REF || backend > LPATTN_BACKEND_HIP)
    return lp_fail(LPATTN_ERR_INVALID_ARGUMENT, "backend = %d, expected 0..4", (int)backend);
  return create_one(backend, &p, out);
}

lpattn_status lp_ctx_track(lpattn_ctx *ctx, void *obj, void (*detach)(void *obj)) {
  lp_ctx_obj *o = malloc(sizeof *o);
  if (!o) return LPATTN_ERR_OUT_OF_MEMORY;
  o->obj = obj, o->detach = detach, o->next = ctx->objs;
  ctx->objs = o;
  return LPATTN_OK;
}

void lp_ctx_untrack(lpattn_ctx *ctx, void *obj) {
  for (lp_ctx_obj **p = &ctx->objs; *p; p = &(*p)->next)
    if ((*p)->obj == obj) {
      lp_ctx_obj *o = *p;
      *p = o->next;
      free(o);
      return;
    }
}

void lpattn_free(lpattn_ctx *ctx) {
  if (!ctx) return;
  while (ctx->objs) { /* detach what the caller has not freed yet */
    lp_ctx_obj *o = ctx->objs;
    ctx->objs = o->next;
    o->detach(o->obj);
    free(o);
  }
  if (ctx->vt->fini) ctx->vt->fini(ctx);
  free(ctx);
}

lpattn_backend lpattn_context_backend(const lpattn_ctx *ctx) {
  return ctx ? ctx->kind : LPATTN_BACKEND_AUTO;
}

lpattn_tensor lpattn_tensor_4d(void *data, lpattn_dtype dtype, int64_t b, int64_t h, int64_t s,
                               int64_t d) {
  lpattn_tensor t;
  t.data = data;
  t.dtype = dtype;
  t.shape[0] = b, t.shape[1] = h, t.shape[2] = s, t.shape[3] = d;
  t.stride[3] = 1, t.stride[2] = d, t.stride[1] = s * d, t.stride[0] = h * s * d;
  return t;
}

void lpattn_quant_params_init(lpattn_quant_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->format = LPATTN_FMT_NVFP4;
  p->rounding = LPATTN_ROUND_NEAREST_EVEN;
  p->axis = LPATTN_AXIS_D;
  p->tile = 64;
}

void lpattn_attn_params_init(lpattn_attn_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->precision = LPATTN_PREC_HIGH;
  p->block_q = 64;
  p->block_k = 64;
  p->thrift_low = LPATTN_FMT_NVFP4;
  p->thrift_budget = 0.05f;
  p->selection = LPATTN_SELECT_CAUSAL;
  p->window_left = p->window_right = -1; /* no sliding window */
}

void lpattn_attn_aux_init(lpattn_attn_aux *a) {
  if (!a) return;
  memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
}

void lpattn_kv_cache_params_init(lpattn_kv_cache_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->num_seqs = 1;
  p->tile = 64;
  p->high_dtype = LPATTN_F16;
  p->precision = LPATTN_PREC_NVFP4;
  p->thrift_low = LPATTN_FMT_NVFP4;
}

#define TRY_BACKEND(expr, op)                                             \
  do {                                                                    \
    lpattn_status st_ = lp_err_backend((expr), ctx, (op));                \
    if (st_ != LPATTN_OK) return st_;                                     \
  } while (0)

lpattn_status lpattn_set_stream(lpattn_ctx *ctx, void *stream) {
  lp_err_clear();
  if (!ctx) return lp_fail(LPATTN_ERR_NULL_POINTER, "ctx is NULL");
  if (ctx->vt->set_stream) TRY_BACKEND(ctx->vt->set_stream(ctx, stream), "set_stream");
  ctx->params.stream = stream;
  return LPATTN_OK;
}

void *lpattn_context_stream(const lpattn_ctx *ctx) { return ctx ? ctx->params.stream : NULL; }

lpattn_status lpattn_synchronize(lpattn_ctx *ctx) {
  lp_err_clear();
  if (!ctx) return lp_fail(LPATTN_ERR_NULL_POINTER, "ctx is NULL");
  return ctx->vt->synchronize ? lp_err_backend(ctx->vt->synchronize(ctx), ctx, "synchronize") : LPATTN_OK;
}
