/* SPEC 2 on the CUDA kernels (issue 28 item 9, docs/SEMANTICS.md
 * "Non-finite inputs"): a NaN or Inf in Q, K, V or dO reaches only the
 * outputs that attend it, although a masked pair of a diagonal tile enters
 * the tensor-core products as an exact 0 (0 x NaN = NaN). For each case
 * (causal; the bad element in the masked future of earlier rows of its
 * diagonal tile):
 *  - every output row that does not attend the bad element is finite where
 *    ref's is (the same input; the backward gets the GPU forward's O and
 *    LSE on both) and bitwise the GPU's result for the input with that
 *    element replaced by 0;
 *  - rows that attend it: where their non-finite elements differ from ref's
 *    (decode's row max passes over a NaN score; 0 x Inf in dQ) is counted
 *    and printed, not failed (SEMANTICS "Non-finite inputs").
 * Paths: the prefill forward (sm_90a: the wgmma HIGH and low kernels; with
 * LPATTN_NO_WGMMA=1, the second meson entry, mma.sync) in every precision,
 * the backward (HIGH, FP8, NVFP4, MXFP4) and paged decode with Sq > 1.
 * Exit 77 without a GPU. */
#include "cudatest.h"

enum { TQ, TK, TV, TDO };
static const char *const tname[] = {"Q", "K", "V", "dO"};

/* Whether output row r of head-row layout attends the bad element of
 * tensor w at row p (causal, offset off = Skv - Sq): kv = 0 for O and dQ
 * (query rows), 1 for dK and dV (key rows). Conservative: heads are not
 * told apart. */
static int attends(int w, int64_t p, int kv, int64_t r, int64_t Sq, int64_t off) {
  if (w == TQ || w == TDO) return kv ? r <= p + off : r == p;
  return kv ? (r == p || (r <= Sq - 1 + off && p - off <= Sq - 1)) : r + off >= p;
}

/* g: the GPU's result, r: ref's, z: the GPU's with the element replaced by 0 */
static void check(const char *tag, const lpattn_tensor *g, const lpattn_tensor *r, const lpattn_tensor *z, int w,
                  int64_t p, int kv, int64_t Sq, int64_t off) {
  const int64_t D = g->shape[3], S = g->shape[2], rows = ct_count(g) / D;
  int64_t pat = 0, pat_att = 0, bits = 0, nf = 0, first_pat = -1, first_bits = -1;
  for (int64_t row = 0; row < rows; row++) {
    const int att = attends(w, p, kv, row % S, Sq, off);
    for (int64_t d = 0; d < D; d++) {
      const int64_t i = row * D + d;
      const float x = ct_get(g, i), y = ct_get(r, i), zz = ct_get(z, i);
      nf += !isfinite(y);
      if (!isfinite(x) != !isfinite(y) && att) pat_att++;
      else if (!isfinite(x) != !isfinite(y) && pat++ == 0) first_pat = i;
      if (!att && memcmp(&x, &zz, 4) != 0 && bits++ == 0) first_bits = i;
    }
  }
  CHECK(pat == 0, "%s: %lld elements non-finite on one side only (first: row %lld ch %lld)", tag, (long long)pat,
        (long long)(first_pat / D), (long long)(first_pat % D));
  CHECK(bits == 0, "%s: %lld elements of rows that do not attend it differ from the zero-replaced run (first: row %lld ch %lld)",
        tag, (long long)bits, (long long)(first_bits / D), (long long)(first_bits % D));
  if (pat_att) printf("%s: %lld elements of rows that attend it non-finite on one side only\n", tag, (long long)pat_att);
  if (pat || bits) printf("FAIL %s\n", tag);
  else if (nf == 0) printf("%s: ref all finite\n", tag);
}

static void put(ct_pair *t, int64_t p, float val) { /* batch 0, head 0, row p, channel 3 */
  lp_store_f32(t->h.data, t->h.dtype, p * t->h.shape[3] + 3, val);
  ct_up(t);
}

static const lpattn_precision precs[] = {LPATTN_PREC_HIGH, LPATTN_PREC_FP8, LPATTN_PREC_NVFP4, LPATTN_PREC_MXFP4,
                                         LPATTN_PREC_THRIFT};

static void params(lpattn_attn_params *ap, lpattn_precision prec) {
  lpattn_attn_params_init(ap);
  ap->causal = 1, ap->precision = prec, ap->thrift_budget = 0.25f;
}

/* The forward, bad element of tensor w (Q, K or V) at row p. */
static void fwd(lpattn_ctx *cu, lpattn_ctx *ref, int64_t D, lpattn_dtype dt, lpattn_precision prec, int w, int64_t p,
                float val) {
  const int64_t Hq = 2, S = 200;
  lpattn_attn_params ap;
  params(&ap, prec);
  ct_rng = 0x5DEECE66Dull + (uint64_t)D;
  ct_pair t[3] = {ct_make(dt, 1, Hq, S, D), ct_make(dt, 1, 1, S, D), ct_make(dt, 1, 1, S, D)};
  ct_fill(&t[0], 0, 1), ct_fill(&t[1], 0.3, 1), ct_fill(&t[2], 0, 1);
  ct_pair o = ct_make(LPATTN_F32, 1, Hq, S, D), ro = ct_make(LPATTN_F32, 1, Hq, S, D), zo = ct_make(LPATTN_F32, 1, Hq, S, D);
  put(&t[w], p, val);
  ct_poison(&o);
  CHECK_STATUS(lpattn_attention(cu, &t[0].d, &t[1].d, &t[2].d, &o.d, &ap, NULL), LPATTN_OK);
  CHECK_STATUS(lpattn_attention(ref, &t[0].h, &t[1].h, &t[2].h, &ro.h, &ap, NULL), LPATTN_OK);
  put(&t[w], p, 0.0f);
  ct_poison(&zo);
  CHECK_STATUS(lpattn_attention(cu, &t[0].d, &t[1].d, &t[2].d, &zo.d, &ap, NULL), LPATTN_OK);
  ct_down(&o), ct_down(&zo);
  char tag[96];
  snprintf(tag, sizeof tag, "fwd D=%lld prec=%d %s[%lld]=%g: O", (long long)D, (int)prec, tname[w], (long long)p, val);
  check(tag, &o.h, &ro.h, &zo.h, w, p, 0, S, 0);
  for (int i = 0; i < 3; i++) ct_free(&t[i]);
  ct_free(&o), ct_free(&ro), ct_free(&zo);
}

/* The backward, bad element of tensor w (Q, K, V or dO) at row p: the GPU
 * forward, then both backwards from its O and LSE; the zero-replaced input
 * takes the same two GPU steps. */
typedef struct {
  ct_pair o, lse, dq, dk, dv;
} grads_t;

static void gpu_fb(lpattn_ctx *cu, ct_pair *t, const lpattn_attn_params *ap, grads_t *g) {
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  aux.lse = g->lse.d;
  CHECK_STATUS(lpattn_attention(cu, &t[0].d, &t[1].d, &t[2].d, &g->o.d, ap, &aux), LPATTN_OK);
  ct_down(&g->o), ct_down(&g->lse);
  lpattn_attn_grads gr;
  lpattn_attn_grads_init(&gr);
  gr.dq = g->dq.d, gr.dk = g->dk.d, gr.dv = g->dv.d, gr.seed = 7;
  ct_poison(&g->dq), ct_poison(&g->dk), ct_poison(&g->dv);
  CHECK_STATUS(lpattn_attention_backward(cu, &t[0].d, &t[1].d, &t[2].d, &g->o.d, &g->lse.d, &t[3].d, ap, &gr), LPATTN_OK);
  ct_down(&g->dq), ct_down(&g->dk), ct_down(&g->dv);
}

static grads_t grads_make(int64_t Hq, int64_t S, int64_t D, lpattn_dtype dt) {
  grads_t g = {ct_make(dt, 1, Hq, S, D), ct_make(LPATTN_F32, 1, Hq, S, 1), ct_make(LPATTN_F32, 1, Hq, S, D),
               ct_make(LPATTN_F32, 1, 1, S, D), ct_make(LPATTN_F32, 1, 1, S, D)};
  return g;
}
static void grads_free(grads_t *g) { ct_free(&g->o), ct_free(&g->lse), ct_free(&g->dq), ct_free(&g->dk), ct_free(&g->dv); }

static void bwd(lpattn_ctx *cu, lpattn_ctx *ref, int64_t D, lpattn_dtype dt, lpattn_precision prec, int w, int64_t p,
                float val) {
  const int64_t Hq = 2, S = 200;
  lpattn_attn_params ap;
  params(&ap, prec);
  ct_rng = 0x2545F4914F6CDD1Dull + (uint64_t)D;
  ct_pair t[4] = {ct_make(dt, 1, Hq, S, D), ct_make(dt, 1, 1, S, D), ct_make(dt, 1, 1, S, D), ct_make(dt, 1, Hq, S, D)};
  ct_fill(&t[0], 0, 1), ct_fill(&t[1], 0.3, 1), ct_fill(&t[2], 0, 1), ct_fill(&t[3], 0, 1);
  grads_t g = grads_make(Hq, S, D, dt), z = grads_make(Hq, S, D, dt);
  ct_pair rq = ct_make(LPATTN_F32, 1, Hq, S, D), rk = ct_make(LPATTN_F32, 1, 1, S, D), rv = ct_make(LPATTN_F32, 1, 1, S, D);
  put(&t[w], p, val);
  gpu_fb(cu, t, &ap, &g);
  lpattn_attn_grads gr;
  lpattn_attn_grads_init(&gr);
  gr.dq = rq.h, gr.dk = rk.h, gr.dv = rv.h, gr.seed = 7;
  CHECK_STATUS(lpattn_attention_backward(ref, &t[0].h, &t[1].h, &t[2].h, &g.o.h, &g.lse.h, &t[3].h, &ap, &gr), LPATTN_OK);
  put(&t[w], p, 0.0f);
  gpu_fb(cu, t, &ap, &z);
  char tag[96];
  snprintf(tag, sizeof tag, "bwd D=%lld prec=%d %s[%lld]=%g: dQ", (long long)D, (int)prec, tname[w], (long long)p, val);
  check(tag, &g.dq.h, &rq.h, &z.dq.h, w, p, 0, S, 0);
  snprintf(tag, sizeof tag, "bwd D=%lld prec=%d %s[%lld]=%g: dK", (long long)D, (int)prec, tname[w], (long long)p, val);
  check(tag, &g.dk.h, &rk.h, &z.dk.h, w, p, 1, S, 0);
  snprintf(tag, sizeof tag, "bwd D=%lld prec=%d %s[%lld]=%g: dV", (long long)D, (int)prec, tname[w], (long long)p, val);
  check(tag, &g.dv.h, &rv.h, &z.dv.h, w, p, 1, S, 0);
  for (int i = 0; i < 4; i++) ct_free(&t[i]);
  grads_free(&g), grads_free(&z);
  ct_free(&rq), ct_free(&rk), ct_free(&rv);
}

/* Paged decode of the last Sq = 8 rows (positions 100..107, in the diagonal
 * tile 64..127), the bad element of K or V (w) at new token nb (position
 * 100 + nb): caches on the GPU (bad, zero-replaced) and on ref (bad). */
static void dec(lpattn_ctx *cu, lpattn_ctx *ref, lpattn_precision prec, int w, int nb, float val) {
  const int64_t Hq = 2, D = 64, P0 = 100, Sq = 8;
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_seqs = 1, cp.num_q_heads = (int)Hq, cp.num_kv_heads = 1, cp.head_dim = (int)D;
  cp.max_tokens = 300, cp.high_dtype = LPATTN_F16, cp.precision = prec;
  lpattn_kv_cache *c[3] = {NULL, NULL, NULL}; /* GPU bad, GPU zero, ref bad */
  CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &c[0]), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_cache_create(cu, &cp, &c[1]), LPATTN_OK);
  CHECK_STATUS(lpattn_kv_cache_create(ref, &cp, &c[2]), LPATTN_OK);
  if (!c[0] || !c[1] || !c[2]) return;
  ct_rng = 0x9E3779B97F4A7C15ull + (uint64_t)prec;
  ct_pair k = ct_make(LPATTN_F16, 1, 1, P0, D), v = ct_make(LPATTN_F16, 1, 1, P0, D), q = ct_make(LPATTN_F16, 1, Hq, P0, D);
  ct_fill(&k, 0.4, 1), ct_fill(&v, 0, 1), ct_fill(&q, 0, 1);
  for (int i = 0; i < 3; i++)
    CHECK_STATUS(lpattn_kv_cache_append(i < 2 ? cu : ref, c[i], 0, i < 2 ? &k.d : &k.h, i < 2 ? &v.d : &v.h,
                                        i < 2 ? &q.d : &q.h), LPATTN_OK);
  ct_free(&k), ct_free(&v), ct_free(&q);
  ct_pair nk = ct_make(LPATTN_F16, 1, 1, Sq, D), nv = ct_make(LPATTN_F16, 1, 1, Sq, D);
  ct_fill(&nk, 0.4, 1), ct_fill(&nv, 0, 1);
  ct_pair *bad = w == TK ? &nk : &nv;
  for (int i = 0; i < 3; i++) {
    put(bad, nb, i == 1 ? 0.0f : val);
    CHECK_STATUS(lpattn_kv_cache_append(i < 2 ? cu : ref, c[i], 0, i < 2 ? &nk.d : &nk.h, i < 2 ? &nv.d : &nv.h, NULL),
                 LPATTN_OK);
  }
  ct_pair qq = ct_make(LPATTN_F16, 1, Hq, Sq, D);
  ct_fill(&qq, 0, 1);
  ct_pair o = ct_make(LPATTN_F32, 1, Hq, Sq, D), zo = ct_make(LPATTN_F32, 1, Hq, Sq, D), ro = ct_make(LPATTN_F32, 1, Hq, Sq, D);
  lpattn_attn_params ap;
  params(&ap, prec);
  ct_poison(&o), ct_poison(&zo);
  CHECK_STATUS(lpattn_decode(cu, c[0], &qq.d, &o.d, &ap, NULL), LPATTN_OK);
  CHECK_STATUS(lpattn_decode(cu, c[1], &qq.d, &zo.d, &ap, NULL), LPATTN_OK);
  CHECK_STATUS(lpattn_decode(ref, c[2], &qq.h, &ro.h, &ap, NULL), LPATTN_OK);
  ct_down(&o), ct_down(&zo);
  char tag[96];
  snprintf(tag, sizeof tag, "decode prec=%d %s[%lld]=%g: O", (int)prec, tname[w], (long long)(P0 + nb), val);
  check(tag, &o.h, &ro.h, &zo.h, w, nb, 0, Sq, 0);
  for (int i = 0; i < 3; i++) lpattn_kv_cache_free(c[i]);
  ct_free(&nk), ct_free(&nv), ct_free(&qq), ct_free(&o), ct_free(&zo), ct_free(&ro);
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return test_skip("no usable GPU device");
  const float vals[2] = {NAN, INFINITY};
  /* rows 41 and 150: in the masked future of rows of their 64-key tile, of
   * the sm_90a kernels' 128-key tile and of their 128/192-row CTAs */
  const int64_t pos[2] = {41, 150};
  const struct {
    int64_t D;
    lpattn_dtype dt;
  } fd[4] = {{64, LPATTN_BF16}, {128, LPATTN_F16}, {256, LPATTN_BF16}, {96, LPATTN_F16}}; /* 96: 64-byte swizzle */
  for (int di = 0; di < 4; di++)
    for (size_t pi = 0; pi < sizeof precs / sizeof precs[0]; pi++)
      for (int w = TQ; w <= TV; w++)
        for (int vi = 0; vi < 2; vi++)
          for (int xi = 0; xi < 2; xi++) {
            if (fd[di].D == 256 && (precs[pi] != LPATTN_PREC_HIGH || xi == 0)) continue; /* the wgmma HIGH D = 256 */
            fwd(cu, ref, fd[di].D, fd[di].dt, precs[pi], w, pos[xi], vals[vi]);
          }
  for (int di = 0; di < 2; di++)
    for (size_t pi = 0; pi < 4; pi++)
      for (int w = TQ; w <= TDO; w++)
        for (int vi = 0; vi < 2; vi++)
          for (int xi = 0; xi < 2; xi++) bwd(cu, ref, fd[di].D, fd[1 - di].dt, precs[pi], w, pos[xi], vals[vi]);
  for (size_t pi = 0; pi < sizeof precs / sizeof precs[0]; pi++)
    for (int w = TK; w <= TV; w++)
      for (int vi = 0; vi < 2; vi++) dec(cu, ref, precs[pi], w, 2, vals[vi]);
  lpattn_free(cu), lpattn_free(ref);
  return test_finish();
}
