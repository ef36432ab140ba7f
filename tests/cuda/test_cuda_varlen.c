/* Ragged batches on the GPU (lpattn_attention_varlen; lpattn.h "ragged
 * batches"): packed BSHD f16/bf16 Q/K/V in device memory, cu_seqlens on the
 * host, GQA, D = 64 and 128, causal or not:
 * - every precision (FP8_STATIC where the device has it) bitwise equal to
 *   per-sequence lpattn_attention calls on the same slices (out, lse);
 * - HIGH close to the ref backend's varlen call on the host copies;
 * - a call captured in a CUDA graph replays bitwise equal to the eager one.
 * Exit 77 without a GPU. */
#include <stdlib.h>

#include "cudatest.h"

enum { HQ = 8, HKV = 2, NS = 6, TQ = 496, TK = 660 };
/* seq 1: no queries; seq 3: a decode row; seq 4: Sq > Skv; seq 5: several tiles */
static const int32_t LQ[NS] = {5, 0, 70, 1, 90, 330}, LK[NS] = {5, 33, 100, 64, 40, 418};
static int32_t cq[NS + 1], ck[NS + 1];
static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift", "fp8_static"};

typedef struct {
  ct_pair q, k, v, o, lse, o1, lse1, dsc;
  int64_t D;
} prob_t;

/* A [1, T, H, D] buffer as the {1, H, T, D} view of a packed tensor, rows [s, s + n). */
static lpattn_tensor packed(const lpattn_tensor *t, int64_t s, int64_t n) {
  const int64_t T = t->shape[1], H = t->shape[2], D = t->shape[3];
  lpattn_tensor r = *t;
  r.shape[1] = H, r.shape[2] = n;
  r.stride[0] = T * H * D, r.stride[1] = D, r.stride[2] = H * D, r.stride[3] = 1;
  r.data = (char *)t->data + (size_t)(s * H * D) * ct_esize(t->dtype);
  return r;
}

/* lse [1, HQ, TQ, 1] rows [s, s + n) */
static lpattn_tensor lrows(const lpattn_tensor *t, int64_t s, int64_t n) {
  lpattn_tensor r = *t;
  r.shape[2] = n;
  r.data = (float *)t->data + s;
  return r;
}

static lpattn_tensor cu(int32_t *c) { return lpattn_tensor_4d(c, LPATTN_I32, 1, 1, 1, NS + 1); }

static lpattn_attn_params params_of(int prec, int causal, const prob_t *p, int dev, int64_t b, int64_t n) {
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = (lpattn_precision)prec, ap.causal = causal, ap.thrift_budget = 0.3f;
  if (prec == LPATTN_PREC_FP8_STATIC) {
    const lpattn_tensor *d = dev ? &p->dsc.d : &p->dsc.h;
    lpattn_tensor *f[3] = {&ap.q_descale, &ap.k_descale, &ap.v_descale};
    for (int i = 0; i < 3; i++)
      *f[i] = lpattn_tensor_4d((float *)d->data + (i * NS + b) * HKV, LPATTN_F32, 1, 1, n, HKV);
  }
  return ap;
}

static lpattn_status varlen(lpattn_ctx *c, prob_t *p, const lpattn_attn_params *ap, int dev) {
  lpattn_tensor tq = packed(dev ? &p->q.d : &p->q.h, 0, TQ), tk = packed(dev ? &p->k.d : &p->k.h, 0, TK);
  lpattn_tensor tv = packed(dev ? &p->v.d : &p->v.h, 0, TK), to = packed(dev ? &p->o.d : &p->o.h, 0, TQ);
  lpattn_tensor a = cu(cq), b = cu(ck);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = dev ? p->lse.d : p->lse.h;
  return lpattn_attention_varlen(c, &tq, &tk, &tv, &to, &a, &b, ap, &aux);
}

/* Per-sequence lpattn_attention on the device slices, into o1/lse1. */
static lpattn_status per_seq(lpattn_ctx *c, prob_t *p, int prec, int causal) {
  for (int s = 0; s < NS; s++) {
    if (!LQ[s]) continue;
    lpattn_tensor tq = packed(&p->q.d, cq[s], LQ[s]), tk = packed(&p->k.d, ck[s], LK[s]);
    lpattn_tensor tv = packed(&p->v.d, ck[s], LK[s]), to = packed(&p->o1.d, cq[s], LQ[s]);
    lpattn_attn_params ap = params_of(prec, causal, p, 1, s, 1);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = lrows(&p->lse1.d, cq[s], LQ[s]);
    lpattn_status st = lpattn_attention(c, &tq, &tk, &tv, &to, &ap, &aux);
    if (st != LPATTN_OK) return st;
  }
  return LPATTN_OK;
}

static int same(const ct_pair *a, const ct_pair *b) { return !memcmp(a->h.data, b->h.data, a->bytes); }

static void parity(lpattn_ctx *gpu, lpattn_ctx *ref, prob_t *p, int prec, int causal) {
  lpattn_attn_params ap = params_of(prec, causal, p, 1, 0, NS);
  ct_poison(&p->o), ct_poison(&p->lse), ct_poison(&p->o1), ct_poison(&p->lse1);
  ht_dsync();
  lpattn_status st = varlen(gpu, p, &ap, 1);
  if (st == LPATTN_ERR_UNSUPPORTED && prec == LPATTN_PREC_FP8_STATIC) {
    printf("D=%lld %s: UNSUPPORTED on this device (%s)\n", (long long)p->D, PN[prec], lpattn_last_error());
    return;
  }
  CHECK(st == LPATTN_OK, "D=%lld %s causal %d: %s", (long long)p->D, PN[prec], causal, lpattn_last_error());
  CHECK_STATUS(per_seq(gpu, p, prec, causal), LPATTN_OK);
  ct_down(&p->o), ct_down(&p->lse), ct_down(&p->o1), ct_down(&p->lse1);
  const int eq = same(&p->o, &p->o1) && same(&p->lse, &p->lse1);
  CHECK(eq, "D=%lld %s causal %d: varlen differs from per-sequence calls", (long long)p->D, PN[prec], causal);
  CHECK(ct_nonfinite(&p->o.h) == 0, "D=%lld %s causal %d: output not finite (a row unwritten?)",
        (long long)p->D, PN[prec], causal);
  double err = -1.0;
  if (prec == LPATTN_PREC_HIGH) { /* against ref on the host copies, into o1/lse1's host side */
    ct_pair o = p->o1, l = p->lse1;
    ap = params_of(prec, causal, p, 0, 0, NS);
    lpattn_tensor tq = packed(&p->q.h, 0, TQ), tk = packed(&p->k.h, 0, TK), tv = packed(&p->v.h, 0, TK);
    lpattn_tensor to = packed(&o.h, 0, TQ), a = cu(cq), b = cu(ck);
    lpattn_attn_aux aux;
    lpattn_attn_aux_init(&aux);
    aux.lse = l.h;
    CHECK_STATUS(lpattn_attention_varlen(ref, &tq, &tk, &tv, &to, &a, &b, &ap, &aux), LPATTN_OK);
    err = ct_maxabs(&p->o.h, &o.h);
    /* f32 output; with bf16 inputs the kernel's P and V are bf16 (P's
     * rounding alone is 2^-9 relative): one bf16 ulp near 1 is 2^-8 */
    const double tol = p->q.h.dtype == LPATTN_BF16 ? 8e-3 : 2e-3;
    CHECK(err < tol, "D=%lld high causal %d: max |gpu - ref| = %g", (long long)p->D, causal, err);
  }
  printf("D=%lld %-10s causal %d: varlen %s per-sequence calls; max |gpu - ref| %g\n", (long long)p->D,
         PN[prec], causal, eq ? "bitwise equal to" : "DIFFERS from", err);
}

/* Eager, then captured on the context's stream and replayed twice: bitwise. */
static void graph(lpattn_ctx *gpu, cudaStream_t st, prob_t *p) {
  lpattn_attn_params ap = params_of(LPATTN_PREC_NVFP4, 1, p, 1, 0, NS);
  CHECK_STATUS(varlen(gpu, p, &ap, 1), LPATTN_OK); /* grows the workspace */
  CHECK(cudaStreamSynchronize(st) == cudaSuccess, "eager run failed");
  ct_down(&p->o), ct_down(&p->lse);
  ct_poison(&p->o), ct_poison(&p->lse);
  ht_dsync();
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  CHECK(e == cudaSuccess, "begin capture: %s", cudaGetErrorString(e));
  lpattn_status s = varlen(gpu, p, &ap, 1);
  e = cudaStreamEndCapture(st, &g);
  CHECK(s == LPATTN_OK && e == cudaSuccess && g, "capture: %s / %s", lpattn_status_string(s),
        cudaGetErrorString(e));
  if (s == LPATTN_OK && e == cudaSuccess && g && cudaGraphInstantiate(&exec, g, 0) == cudaSuccess) {
    size_t nodes = 0;
    cudaGraphGetNodes(g, NULL, &nodes);
    for (int rep = 0; rep < 2; rep++) {
      CHECK(cudaGraphLaunch(exec, st) == cudaSuccess && cudaStreamSynchronize(st) == cudaSuccess, "replay");
      ct_pair o = p->o1, l = p->lse1; /* the replay lands in o/lse; read it into o1/lse1's host side */
      ht_down(o.h.data, p->o.d.data, p->o.bytes), ht_down(l.h.data, p->lse.d.data, p->lse.bytes);
      const int eq = !memcmp(o.h.data, p->o.h.data, p->o.bytes) && !memcmp(l.h.data, p->lse.h.data, p->lse.bytes);
      printf("graph varlen nvfp4: %zu nodes, replay %d %s eager\n", nodes, rep,
             eq ? "bitwise equal to" : "DIFFERS from");
      CHECK(eq, "replay %d differs from the eager call", rep);
      ct_poison(&p->o), ct_poison(&p->lse);
      ht_dsync();
    }
  }
  (void)cudaGetLastError();
  if (exec) cudaGraphExecDestroy(exec);
  if (g) cudaGraphDestroy(g);
}

int main(void) {
  if (!lpattn_backend_available(CT_BACKEND)) return test_skip("no usable GPU device");
  cudaStream_t st = NULL;
  if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) return test_skip("no stream");
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.stream = st;
  lpattn_ctx *gpu = NULL, *ref = NULL;
  if (lpattn_create(CT_BACKEND, &cp, &gpu) != LPATTN_OK) return test_skip("no usable GPU device");
  if (lpattn_create(LPATTN_BACKEND_REF, NULL, &ref) != LPATTN_OK) return test_skip("no ref backend");
  for (int s = 0; s < NS; s++) cq[s + 1] = cq[s] + LQ[s], ck[s + 1] = ck[s] + LK[s];
  if (cq[NS] != TQ || ck[NS] != TK) return test_skip("bad test sizes");
  static const int64_t dims[2] = {128, 64};
  for (int di = 0; di < 2; di++) {
    const int64_t D = dims[di];
    const lpattn_dtype dt = di ? LPATTN_BF16 : LPATTN_F16;
    prob_t p;
    p.D = D;
    p.q = ct_make(dt, 1, TQ, HQ, D), p.k = ct_make(dt, 1, TK, HKV, D), p.v = ct_make(dt, 1, TK, HKV, D);
    p.o = ct_make(LPATTN_F32, 1, TQ, HQ, D), p.o1 = ct_make(LPATTN_F32, 1, TQ, HQ, D);
    p.lse = ct_make(LPATTN_F32, 1, HQ, TQ, 1), p.lse1 = ct_make(LPATTN_F32, 1, HQ, TQ, 1);
    p.dsc = ct_make(LPATTN_F32, 1, 1, 3 * NS, HKV);
    ct_fill(&p.q, 0.0, 1.0), ct_fill(&p.k, 0.3, 1.0), ct_fill(&p.v, 0.0, 1.0);
    ct_fill_unif(&p.dsc, 0.012, 0.004);
    for (int prec = 0; prec < 6; prec++)
      for (int causal = 0; causal < 2; causal++) parity(gpu, ref, &p, prec, causal);
    if (di == 0) graph(gpu, st, &p);
    if (di == 0) { /* cu_seqlens in device memory: refused, not read */
      int32_t *dcu = NULL;
      CHECK(cudaMalloc((void **)&dcu, sizeof cq) == cudaSuccess, "cudaMalloc");
      lpattn_tensor tq = packed(&p.q.d, 0, TQ), tk = packed(&p.k.d, 0, TK), tv = packed(&p.v.d, 0, TK);
      lpattn_tensor to = packed(&p.o.d, 0, TQ), a = cu(dcu), b = cu(ck);
      lpattn_attn_params ap = params_of(LPATTN_PREC_HIGH, 0, &p, 1, 0, NS);
      CHECK_STATUS(lpattn_attention_varlen(gpu, &tq, &tk, &tv, &to, &a, &b, &ap, NULL),
                   LPATTN_ERR_INVALID_ARGUMENT);
      CHECK(strstr(lpattn_last_error(), "cu_seqlens_q is in device memory") != NULL, "%s",
            lpattn_last_error());
      cudaFree(dcu);
    }
    ct_pair *a[] = {&p.q, &p.k, &p.v, &p.o, &p.o1, &p.lse, &p.lse1, &p.dsc};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) ct_free(a[i]);
  }
  CHECK(ht_dsync(), "device error");
  lpattn_free(gpu), lpattn_free(ref);
  cudaStreamDestroy(st);
  return test_finish();
}
