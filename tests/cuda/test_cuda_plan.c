/* Decode plans on the CUDA backend (lpattn.h "decode plans"): a plan's run
 * is captured in a CUDA graph (global capture mode) with no eager call
 * before it, and on a stream the context is switched to inside the capture
 * (what torch.cuda.graph does: lpattn_set_stream must not make the captured
 * stream wait on an event recorded outside the capture). Every replay
 * follows lengths and queries written in place and equals lpattn_paged_decode
 * bitwise; HIGH, NVFP4 and THRIFT pools. */
#include "cudatest.h"

#include <cuda_runtime_api.h>

enum { NS = 2, HQ = 8, HKV = 2, D = 128, W = 16, L0 = 190, STEPS = 5, MAXLEN = 1024 };

static void plan_case(lpattn_ctx *cu, cudaStream_t a, cudaStream_t b, lpattn_precision prec) {
  static const char *PN[] = {"high", "fp8", "nvfp4", "mxfp4", "thrift"};
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D, pp.precision = prec;
  pp.num_pages = NS * W, pp.num_slots = NS;
  lpattn_kv_pool *pool = NULL;
  CHECK_STATUS(lpattn_kv_pool_create(cu, &pp, NULL, 0, &pool), LPATTN_OK);
  if (!pool) return;
  int32_t slots[NS], table[NS * W], before[NS], after[NS];
  for (int i = 0; i < NS; i++) {
    slots[i] = i, before[i] = 0, after[i] = L0;
    for (int j = 0; j < W; j++) table[i * W + j] = (NS - 1 - i) * W + j; /* rows backwards */
  }
  int32_t *d_slots = ht_dalloc(sizeof slots), *d_table = ht_dalloc(sizeof table);
  int32_t *d_before = ht_dalloc(sizeof before), *d_after = ht_dalloc(sizeof after);
  ht_up(d_slots, slots, sizeof slots), ht_up(d_table, table, sizeof table);
  ht_up(d_before, before, sizeof before), ht_up(d_after, after, sizeof after);
  lpattn_kv_batch app, dec;
  lpattn_kv_batch_init(&app);
  app.num_seqs = NS, app.max_length = MAXLEN;
  app.slots = lpattn_tensor_4d(d_slots, LPATTN_I32, 1, 1, 1, NS);
  app.lengths = lpattn_tensor_4d(d_before, LPATTN_I32, 1, 1, 1, NS);
  app.page_table = lpattn_tensor_4d(d_table, LPATTN_I32, 1, 1, NS, W);
  dec = app, dec.lengths = lpattn_tensor_4d(d_after, LPATTN_I32, 1, 1, 1, NS);
  ct_pair k = ct_make(LPATTN_F16, NS, HKV, L0, D), v = ct_make(LPATTN_F16, NS, HKV, L0, D),
          qk = ct_make(LPATTN_F16, NS, HQ, L0, D);
  ct_fill(&k, 0.3, 1.0), ct_fill(&v, 0.0, 1.0), ct_fill(&qk, 0.0, 1.0);
  CHECK_STATUS(lpattn_kv_append(cu, pool, &app, &k.d, &v.d, &qk.d), LPATTN_OK);
  ct_pair q = ct_make(LPATTN_F16, NS, HQ, 1, D), o = ct_make(LPATTN_F32, NS, HQ, 1, D),
          l = ct_make(LPATTN_F32, NS, HQ, 1, 1), oe = ct_make(LPATTN_F32, NS, HQ, 1, D),
          le = ct_make(LPATTN_F32, NS, HQ, 1, 1);
  lpattn_attn_aux aux, auxe;
  lpattn_attn_aux_init(&aux), lpattn_attn_aux_init(&auxe);
  aux.lse = l.d, auxe.lse = le.d;
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.thrift_budget = 0.3f;
  lpattn_decode_plan *plan = NULL;
  CHECK_STATUS(lpattn_paged_decode_plan(cu, pool, &dec, &q.d, &o.d, &ap, &aux, &plan), LPATTN_OK);
  ht_dsync();
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaError_t e = cudaStreamBeginCapture(b, cudaStreamCaptureModeGlobal);
  lpattn_status s = lpattn_set_stream(cu, b); /* inside the capture, as torch.cuda.graph */
  lpattn_status r = plan ? lpattn_decode_plan_run(plan, NULL, NULL) : LPATTN_ERR_NULL_POINTER;
  cudaError_t e2 = cudaStreamEndCapture(b, &graph);
  CHECK(e == cudaSuccess && s == LPATTN_OK && r == LPATTN_OK && e2 == cudaSuccess && graph,
        "%s: capture: %s, set_stream %s, run %s, end %s", PN[prec], cudaGetErrorString(e),
        lpattn_status_string(s), lpattn_status_string(r), cudaGetErrorString(e2));
  CHECK_STATUS(lpattn_set_stream(cu, a), LPATTN_OK);
  if (graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
    for (int t = 0; t < STEPS; t++) { /* one token appended (eager), then the replay */
      ct_pair k1 = ct_make(LPATTN_F16, NS, HKV, 1, D), v1 = ct_make(LPATTN_F16, NS, HKV, 1, D);
      ct_fill(&k1, 0.3, 1.0), ct_fill(&v1, 0.0, 1.0), ct_fill(&q, 0.0, 1.0);
      for (int i = 0; i < NS; i++) before[i] = L0 + t, after[i] = L0 + t + 1;
      ht_up(d_before, before, sizeof before), ht_up(d_after, after, sizeof after);
      CHECK_STATUS(lpattn_kv_append(cu, pool, &app, &k1.d, &v1.d, &q.d), LPATTN_OK);
      CHECK(cudaStreamSynchronize(a) == cudaSuccess, "append");
      ct_poison(&o), ct_poison(&l);
      ht_dsync();
      CHECK(cudaGraphLaunch(exec, b) == cudaSuccess && cudaStreamSynchronize(b) == cudaSuccess, "replay");
      CHECK_STATUS(lpattn_paged_decode(cu, pool, &dec, &q.d, &oe.d, &ap, &auxe), LPATTN_OK);
      ct_down(&o), ct_down(&l), ct_down(&oe), ct_down(&le);
      const int eq = !memcmp(o.h.data, oe.h.data, o.bytes) && !memcmp(l.h.data, le.h.data, l.bytes);
      printf("plan graph %-6s: length %d, replay %s eager\n", PN[prec], L0 + t + 1,
             eq ? "bitwise equal to" : "DIFFERS from");
      CHECK(eq, "%s: replay at length %d differs from lpattn_paged_decode", PN[prec], L0 + t + 1);
      ct_free(&k1), ct_free(&v1);
    }
  } else {
    CHECK(0, "%s: plan graph not instantiated", PN[prec]);
  }
  (void)cudaGetLastError();
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  /* misaligned pointers: refused, nothing enqueued */
  CHECK_STATUS(lpattn_decode_plan_run(plan, (const char *)q.d.data + 2, NULL), LPATTN_ERR_INVALID_ARGUMENT);
  lpattn_decode_plan_free(plan);
  ct_free(&k), ct_free(&v), ct_free(&qk), ct_free(&q), ct_free(&o), ct_free(&l), ct_free(&oe), ct_free(&le);
  ht_dfree(d_slots), ht_dfree(d_table), ht_dfree(d_before), ht_dfree(d_after);
  lpattn_kv_pool_free(pool);
}

int main(void) {
  if (!lpattn_backend_available(LPATTN_BACKEND_CUDA)) return test_skip("no usable GPU device");
  cudaStream_t a = NULL, b = NULL;
  if (cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) != cudaSuccess)
    return test_skip("no stream");
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.stream = a;
  lpattn_ctx *cu = NULL;
  if (lpattn_create(LPATTN_BACKEND_CUDA, &cp, &cu) != LPATTN_OK) return test_skip("no usable GPU device");
  plan_case(cu, a, b, LPATTN_PREC_HIGH);
  plan_case(cu, a, b, LPATTN_PREC_NVFP4);
  plan_case(cu, a, b, LPATTN_PREC_THRIFT);
  CHECK(ht_dsync(), "device error");
  lpattn_free(cu);
  cudaStreamDestroy(a), cudaStreamDestroy(b);
  return test_finish();
}
