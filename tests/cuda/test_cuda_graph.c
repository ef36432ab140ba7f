/* lpattn_attention can be captured in a CUDA graph: no synchronization and
 * no allocation inside the call once the context's workspace is large
 * enough (an eager call first). The call is captured on the context's own
 * stream (lpattn_context_params.stream) in global capture mode, the graph
 * replayed twice, and every output (O, LSE, entropy, THRIFT selection)
 * compared bitwise with the eager call's. HIGH, NVFP4 (with PASA) and
 * THRIFT; causal, GQA, a partial last tile. Also a decode step through a
 * THRIFT KV cache (selection and k on the device), and the backward. */
#include "cudatest.h"

#include <cuda_runtime_api.h>

typedef struct {
  ct_pair q, k, v, o, lse, ent, sel;
} graph_prob;

enum { B = 1, HQ = 4, HKV = 2, SQ = 200, SKV = 200, D = 64, KSEL = 2 };

static int same(ct_pair *p, const void *want) {
  ct_down(p);
  return memcmp(p->h.data, want, p->bytes) == 0;
}

static void *copy_of(const ct_pair *p) {
  void *c = malloc(p->bytes);
  memcpy(c, p->h.data, p->bytes);
  return c;
}

static void graph_case(lpattn_ctx *cu, cudaStream_t st, lpattn_precision prec, int pasa) {
  static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift"};
  const int thrift = prec == LPATTN_PREC_THRIFT;
  graph_prob p;
  p.q = ct_make(LPATTN_F16, B, HQ, SQ, D);
  p.k = ct_make(LPATTN_F16, B, HKV, SKV, D);
  p.v = ct_make(LPATTN_F16, B, HKV, SKV, D);
  p.o = ct_make(LPATTN_F32, B, HQ, SQ, D);
  p.lse = ct_make(LPATTN_F32, B, HQ, SQ, 1);
  p.ent = ct_make(LPATTN_F32, B, HQ, SQ, 1);
  p.sel = ct_make(LPATTN_I32, B, HQ, (SQ + 63) / 64, KSEL);
  ct_fill(&p.q, 0.0, 1.0), ct_fill(&p.k, 0.3, 1.0), ct_fill(&p.v, 0.0, 1.0);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = prec, ap.causal = 1, ap.pasa = pasa, ap.thrift_k = KSEL;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = p.lse.d, aux.entropy = p.ent.d;
  if (thrift) aux.selection = p.sel.d;
  ct_pair *outs[4] = {&p.o, &p.lse, &p.ent, &p.sel};
  const int nout = thrift ? 4 : 3;
  void *eager[4] = {NULL, NULL, NULL, NULL};

  /* eager: also grows the workspace to what the call needs */
  for (int i = 0; i < nout; i++) ct_poison(outs[i]);
  ht_dsync(); /* the poison (default stream) lands before the call */
  CHECK_STATUS(lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, &aux), LPATTN_OK);
  CHECK(cudaStreamSynchronize(st) == cudaSuccess, "eager run failed");
  for (int i = 0; i < nout; i++) ct_down(outs[i]), eager[i] = copy_of(outs[i]);
  CHECK(ct_nonfinite(&p.o.h) == 0, "%s: eager output not finite", PN[prec]);

  /* captured: nothing may run or synchronize while the stream records */
  for (int i = 0; i < nout; i++) ct_poison(outs[i]);
  ht_dsync();
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  CHECK(e == cudaSuccess, "begin capture: %s", cudaGetErrorString(e));
  lpattn_status s = lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, &aux);
  e = cudaStreamEndCapture(st, &graph);
  CHECK(s == LPATTN_OK, "%s pasa=%d: captured call returned %s", PN[prec], pasa, lpattn_status_string(s));
  CHECK(e == cudaSuccess && graph, "%s pasa=%d: end capture: %s", PN[prec], pasa, cudaGetErrorString(e));
  if (s == LPATTN_OK && e == cudaSuccess && graph) {
    size_t nodes = 0;
    cudaGraphGetNodes(graph, NULL, &nodes);
    e = cudaGraphInstantiate(&exec, graph, 0);
    CHECK(e == cudaSuccess, "instantiate: %s", cudaGetErrorString(e));
    int ok = e == cudaSuccess;
    for (int rep = 0; ok && rep < 2; rep++) {
      CHECK(cudaGraphLaunch(exec, st) == cudaSuccess, "graph launch");
      CHECK(cudaStreamSynchronize(st) == cudaSuccess, "graph run failed");
      int eq = 1;
      for (int i = 0; i < nout; i++) eq &= same(outs[i], eager[i]);
      printf("graph %-6s pasa=%d: %zu nodes, replay %d %s eager\n", PN[prec], pasa, nodes, rep,
             eq ? "bitwise equal to" : "DIFFERS from");
      CHECK(eq, "%s pasa=%d: replay %d differs from the eager call", PN[prec], pasa, rep);
      for (int i = 0; i < nout; i++) ct_poison(outs[i]);
      ht_dsync();
    }
  }
  (void)cudaGetLastError();
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  for (int i = 0; i < 4; i++) free(eager[i]);
  ct_free(&p.q), ct_free(&p.k), ct_free(&p.v), ct_free(&p.o);
  ct_free(&p.lse), ct_free(&p.ent), ct_free(&p.sel);
}

/* lpattn_decode on a THRIFT cache (with PASA too): eager, then captured and
 * replayed twice, bitwise equal (the decode records its queries, selects
 * and merges on the device: no host synchronization inside). */
static void graph_decode(lpattn_ctx *cu, cudaStream_t st, int pasa) {
  const int S = 2, L = 1000;
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_seqs = S, cp.num_q_heads = HQ, cp.num_kv_heads = HKV, cp.head_dim = D;
  cp.max_tokens = 1100, cp.precision = LPATTN_PREC_THRIFT, cp.pasa = pasa;
  lpattn_kv_cache *c = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &c), LPATTN_OK);
  if (!c) return;
  ct_pair k = ct_make(LPATTN_F16, 1, HKV, L, D), v = ct_make(LPATTN_F16, 1, HKV, L, D),
          q = ct_make(LPATTN_F16, 1, HQ, L, D);
  ct_fill(&k, 0.3, 1.0), ct_fill(&v, 0.0, 1.0), ct_fill(&q, 0.0, 1.0);
  for (int s = 0; s < S; s++) {
    lpattn_tensor kk = k.d, vv = v.d, qq = q.d;
    kk.shape[2] = vv.shape[2] = qq.shape[2] = L - 300 * s;
    CHECK_STATUS(lpattn_kv_cache_append(cu, c, s, &kk, &vv, &qq), LPATTN_OK);
  }
  ct_pair qd = ct_make(LPATTN_F16, S, HQ, 1, D), o = ct_make(LPATTN_F32, S, HQ, 1, D),
          l = ct_make(LPATTN_F32, S, HQ, 1, 1);
  ct_fill(&qd, 0.0, 1.0);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.thrift_budget = 0.2f;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = l.d;
  CHECK_STATUS(lpattn_decode(cu, c, &qd.d, &o.d, &ap, &aux), LPATTN_OK);
  CHECK(cudaStreamSynchronize(st) == cudaSuccess, "eager decode failed");
  ct_down(&o), ct_down(&l);
  void *eo = copy_of(&o), *el = copy_of(&l);
  ct_poison(&o), ct_poison(&l);
  ht_dsync();
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  CHECK(e == cudaSuccess, "begin capture: %s", cudaGetErrorString(e));
  lpattn_status s = lpattn_decode(cu, c, &qd.d, &o.d, &ap, &aux);
  e = cudaStreamEndCapture(st, &graph);
  CHECK(s == LPATTN_OK && e == cudaSuccess && graph, "thrift decode capture: %s / %s",
        lpattn_status_string(s), cudaGetErrorString(e));
  if (s == LPATTN_OK && e == cudaSuccess && graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
    for (int rep = 0; rep < 2; rep++) {
      CHECK(cudaGraphLaunch(exec, st) == cudaSuccess && cudaStreamSynchronize(st) == cudaSuccess, "replay");
      const int eq = same(&o, eo) && same(&l, el);
      printf("graph thrift decode pasa=%d: replay %d %s eager\n", pasa, rep, eq ? "bitwise equal to" : "DIFFERS from");
      CHECK(eq, "thrift decode pasa=%d: replay %d differs", pasa, rep);
      ct_poison(&o), ct_poison(&l);
      ht_dsync();
    }
  } else {
    CHECK(0, "thrift decode graph not instantiated");
  }
  (void)cudaGetLastError();
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  free(eo), free(el);
  ct_free(&k), ct_free(&v), ct_free(&q), ct_free(&qd), ct_free(&o), ct_free(&l);
  lpattn_kv_cache_free(c);
}

/* lpattn_attention_backward (HIGH: the sm_90a wgmma kernels on Hopper; NVFP4:
 * the quantize passes and the LOW kernels): eager first (the workspace grows),
 * then captured and replayed twice, dQ/dK/dV bitwise equal to the eager call. */
static void graph_backward(lpattn_ctx *cu, cudaStream_t st, lpattn_precision prec) {
  static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift"};
  ct_pair q = ct_make(LPATTN_F16, B, HQ, SQ, D), k = ct_make(LPATTN_F16, B, HKV, SKV, D),
          v = ct_make(LPATTN_F16, B, HKV, SKV, D), o = ct_make(LPATTN_F16, B, HQ, SQ, D),
          l = ct_make(LPATTN_F32, B, HQ, SQ, 1), dout = ct_make(LPATTN_F16, B, HQ, SQ, D),
          dq = ct_make(LPATTN_F32, B, HQ, SQ, D), dk = ct_make(LPATTN_F32, B, HKV, SKV, D),
          dv = ct_make(LPATTN_F32, B, HKV, SKV, D);
  ct_fill(&q, 0.0, 1.0), ct_fill(&k, 0.3, 1.0), ct_fill(&v, 0.0, 1.0), ct_fill(&dout, 0.0, 1.0);
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = prec, ap.causal = 1;
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = l.d;
  lpattn_attn_grads g;
  lpattn_attn_grads_init(&g);
  g.dq = dq.d, g.dk = dk.d, g.dv = dv.d, g.seed = 11;
  ct_pair *outs[3] = {&dq, &dk, &dv};
  void *eager[3] = {NULL, NULL, NULL};
  CHECK_STATUS(lpattn_attention(cu, &q.d, &k.d, &v.d, &o.d, &ap, &aux), LPATTN_OK);
  for (int i = 0; i < 3; i++) ct_poison(outs[i]);
  ht_dsync();
  CHECK_STATUS(lpattn_attention_backward(cu, &q.d, &k.d, &v.d, &o.d, &l.d, &dout.d, &ap, &g), LPATTN_OK);
  CHECK(cudaStreamSynchronize(st) == cudaSuccess, "eager backward failed");
  for (int i = 0; i < 3; i++) ct_down(outs[i]), eager[i] = copy_of(outs[i]);
  CHECK(ct_nonfinite(&dq.h) == 0 && ct_nonfinite(&dk.h) == 0 && ct_nonfinite(&dv.h) == 0,
        "%s: eager gradients not finite", PN[prec]);
  for (int i = 0; i < 3; i++) ct_poison(outs[i]);
  ht_dsync();
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
  CHECK(e == cudaSuccess, "begin capture: %s", cudaGetErrorString(e));
  lpattn_status s = lpattn_attention_backward(cu, &q.d, &k.d, &v.d, &o.d, &l.d, &dout.d, &ap, &g);
  e = cudaStreamEndCapture(st, &graph);
  CHECK(s == LPATTN_OK && e == cudaSuccess && graph, "%s backward capture: %s / %s", PN[prec],
        lpattn_status_string(s), cudaGetErrorString(e));
  if (s == LPATTN_OK && e == cudaSuccess && graph) {
    e = cudaGraphInstantiate(&exec, graph, 0);
    CHECK(e == cudaSuccess, "instantiate: %s", cudaGetErrorString(e));
    for (int rep = 0; e == cudaSuccess && rep < 2; rep++) {
      CHECK(cudaGraphLaunch(exec, st) == cudaSuccess, "graph launch");
      CHECK(cudaStreamSynchronize(st) == cudaSuccess, "graph run failed");
      int eq = 1;
      for (int i = 0; i < 3; i++) eq &= same(outs[i], eager[i]);
      printf("graph backward %-6s: replay %d %s eager\n", PN[prec], rep, eq ? "bitwise equal to" : "DIFFERS from");
      CHECK(eq, "%s backward: replay %d differs from the eager call", PN[prec], rep);
      for (int i = 0; i < 3; i++) ct_poison(outs[i]);
      ht_dsync();
    }
  }
  (void)cudaGetLastError();
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  for (int i = 0; i < 3; i++) free(eager[i]);
  ct_free(&q), ct_free(&k), ct_free(&v), ct_free(&o), ct_free(&l), ct_free(&dout);
  ct_free(&dq), ct_free(&dk), ct_free(&dv);
}

int main(void) {
  if (!lpattn_backend_available(LPATTN_BACKEND_CUDA)) return test_skip("no usable GPU device");
  cudaStream_t st = NULL;
  if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) return test_skip("no stream");
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.stream = st;
  lpattn_ctx *cu = NULL;
  if (lpattn_create(LPATTN_BACKEND_CUDA, &cp, &cu) != LPATTN_OK) return test_skip("no usable GPU device");
  graph_case(cu, st, LPATTN_PREC_HIGH, 0);
  graph_case(cu, st, LPATTN_PREC_NVFP4, 0);
  graph_case(cu, st, LPATTN_PREC_NVFP4, 1);
  graph_case(cu, st, LPATTN_PREC_THRIFT, 0);
  graph_decode(cu, st, 0);
  graph_decode(cu, st, 1);
  graph_backward(cu, st, LPATTN_PREC_HIGH);
  graph_backward(cu, st, LPATTN_PREC_NVFP4);
  CHECK(ht_dsync(), "device error");
  lpattn_free(cu);
  cudaStreamDestroy(st);
  return test_finish();
}
