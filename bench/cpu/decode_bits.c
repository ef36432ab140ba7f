/* decode_bits (issue 34 item 5): a fingerprint of the CPU paged decode's
 * bits, to diff between two builds (a kernel change that must keep every
 * target's bits: bench/RESULTS_cpu.md). For each Highway target of this
 * machine, each precision (HIGH, FP8, NVFP4, MXFP4, THRIFT) and each shape
 * below (head dims 48..256, pages 32..128, GQA, Sq > 1, two sequences,
 * appends in pieces), one line: an FNV-1a hash of the outputs and LSEs of a
 * paged decode of U(-1, 1)-ish data (K x 3, Q x 2), and the first output.
 * Usage: decode_bits > a.txt (one build), then diff against the other's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpattn.h"

/* backends/cpu/targets.cc (internal) */
int lpattn_cpu_targets(int64_t *targets, int max);
const char *lpattn_cpu_target_name(int64_t target);
void lpattn_cpu_force_target(int64_t target);

static uint64_t rng;
static float u11(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((rng >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

typedef struct {
  int hq, hkv, d, page, len, sq, seqs, pieces;
} shape;

static uint64_t fnv(uint64_t h, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, x + i, 4);
    h = (h ^ u) * 1099511628211ull;
  }
  return h;
}

static int one(lpattn_ctx *ctx, lpattn_precision prec, shape s) {
  const int np = s.len / s.page + 2, S = s.seqs;
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp);
  pp.num_kv_heads = s.hkv, pp.num_q_heads = s.hq, pp.head_dim = s.d, pp.page_size = s.page;
  pp.precision = prec, pp.num_slots = S, pp.num_pages = S * np;
  lpattn_kv_pool *pool;
  if (lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool) != LPATTN_OK) return 1;
  int32_t *table = malloc(sizeof(int32_t) * (size_t)(S * np)), slots[2] = {0, 1}, lens[2] = {0, 0};
  for (int i = 0; i < S * np; i++) table[i] = S * np - 1 - i;
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.num_seqs = S;
  b.slots = lpattn_tensor_4d(slots, LPATTN_I32, 1, 1, 1, S);
  b.lengths = lpattn_tensor_4d(lens, LPATTN_I32, 1, 1, 1, S);
  b.page_table = lpattn_tensor_4d(table, LPATTN_I32, 1, 1, S, np);
  b.max_length = np * s.page;
  const size_t kvn = (size_t)S * s.hkv * s.len * s.d, qn = (size_t)S * s.hq * s.sq * s.d;
  float *k = malloc(4 * kvn), *v = malloc(4 * kvn), *q = malloc(4 * qn), *o = malloc(4 * qn);
  float *lse = malloc(4 * qn / s.d);
  int rc = 0;
  for (int done = 0, step = s.pieces ? 37 : s.len; done < s.len && !rc;) {  /* the last sq with q */
    const int n = s.len - done < step ? s.len - done : step;
    for (size_t i = 0; i < (size_t)S * s.hkv * n * s.d; i++) k[i] = 3 * u11(), v[i] = u11();
    lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, S, s.hkv, n, s.d);
    lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F32, S, s.hkv, n, s.d);
    rc = lpattn_kv_append(ctx, pool, &b, &tk, &tv, NULL) != LPATTN_OK;
    for (int i = 0; i < S; i++) lens[i] += n;
    done += n;
  }
  for (size_t i = 0; i < qn; i++) q[i] = 2 * u11();
  lpattn_tensor tq = lpattn_tensor_4d(q, LPATTN_F32, S, s.hq, s.sq, s.d);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F32, S, s.hq, s.sq, s.d);
  lpattn_attn_params p;
  lpattn_attn_params_init(&p);
  p.precision = prec;
  lpattn_attn_aux ax;
  lpattn_attn_aux_init(&ax);
  ax.lse = lpattn_tensor_4d(lse, LPATTN_F32, S, s.hq, s.sq, 1);
  if (!rc) rc = lpattn_paged_decode(ctx, pool, &b, &tq, &to, &p, &ax) != LPATTN_OK ? 2 : 0;
  if (!rc)
    printf("prec %d Hq %d Hkv %d D %d page %d len %d Sq %d seqs %d: %016llx o0 %a\n", prec, s.hq, s.hkv,
           s.d, s.page, s.len, s.sq, S,
           (unsigned long long)fnv(fnv(1469598103934665603ull, o, qn), lse, qn / s.d), o[0]);
  lpattn_kv_pool_free(pool);
  free(table), free(k), free(v), free(q), free(o), free(lse);
  return rc;
}

int main(void) {
  lpattn_context_params cp;
  lpattn_context_params_init(&cp);
  cp.num_threads = 2;
  lpattn_ctx *ctx;
  if (lpattn_create(LPATTN_BACKEND_CPU, &cp, &ctx) != LPATTN_OK) return 77;
  const shape shapes[] = {{8, 8, 128, 64, 3000, 1, 1, 0}, {32, 8, 128, 64, 2000, 1, 2, 0},
                          {8, 8, 64, 64, 1500, 1, 1, 1},  {8, 8, 256, 64, 1500, 1, 1, 0},
                          {4, 4, 128, 64, 1100, 3, 1, 0}, {8, 2, 128, 64, 2100, 5, 2, 1},
                          {8, 8, 128, 32, 1000, 1, 1, 0}, {8, 8, 128, 128, 2500, 1, 1, 0},
                          {6, 6, 96, 64, 1300, 1, 1, 0},  {8, 8, 80, 64, 1300, 1, 1, 0},
                          {4, 4, 112, 32, 900, 1, 1, 1},  {8, 8, 48, 64, 700, 1, 1, 0}};
  int64_t t[16];
  const int nt = lpattn_cpu_targets(t, 16);
  for (int i = 0; i < nt; i++) {
    lpattn_cpu_force_target(t[i]);
    printf("target %s\n", lpattn_cpu_target_name(t[i]));
    for (unsigned c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
      for (int pr = LPATTN_PREC_HIGH; pr <= LPATTN_PREC_THRIFT; pr++) {
        rng = 88172645463325252ull + c;
        const int rc = one(ctx, (lpattn_precision)pr, shapes[c]);
        if (rc) printf("shape %u prec %d: not run (%d)\n", c, pr, rc);
      }
  }
  lpattn_free(ctx);
  return 0;
}
