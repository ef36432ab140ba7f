/* THRIFT's KMAX selection rule on the GPU (issue 33; backends/gpu/kernels/
 * lp_gpu_select.cuh gpu_kmax_kernel) against ref, bitwise: the selection
 * output of THRIFT prefills whose key tiles span many of the kernel's blocks
 * and query-tile groups (Sq, Skv not multiples of 64, up to 4500), D 40, 64,
 * 111, 128, 256 (the staged Qbar chunk's partial and scalar tails), GQA with
 * and without the GQA rule, causal (Sq < Skv too) and not, paper selection,
 * a sliding window, and K with Inf/NaN elements (the block's exact slow
 * path). K is drawn with a few strong keys so that the max, not the mean,
 * decides. Exit 77 without a GPU. */
#include "cudatest.h"

typedef struct {
  int64_t B, Hq, Hkv, Sq, Skv, D;
  lpattn_dtype in;
  int causal, rule, paper, win_left, nonfinite; /* win_left >= 0 (causal only): a sliding window */
} kmax_case;

static const kmax_case cases[] = {
    {1, 4, 2, 1000, 1000, 64, LPATTN_BF16, 1, 2, 0, -1, 0},
    {1, 4, 2, 1100, 1100, 128, LPATTN_F16, 1, 2 | 4, 0, -1, 0},
    {1, 2, 1, 700, 1500, 256, LPATTN_BF16, 1, 2 | 1, 0, -1, 0},
    {2, 2, 2, 900, 700, 128, LPATTN_F16, 0, 2, 0, -1, 0},
    {1, 2, 2, 1300, 1300, 111, LPATTN_F16, 1, 2, 0, -1, 0},
    {1, 2, 1, 600, 600, 40, LPATTN_F16, 1, 2, 1, -1, 0},
    {1, 2, 2, 1200, 1200, 64, LPATTN_F16, 1, 2, 0, 300, 0},
    {1, 4, 2, 1000, 1000, 128, LPATTN_F16, 1, 2, 0, -1, 1},
    {1, 2, 2, 777, 777, 64, LPATTN_BF16, 0, 2 | 4, 0, -1, 1},
    {1, 2, 1, 520, 1000, 256, LPATTN_F16, 1, 2, 0, -1, 1},
    /* more than 64 query tiles read a key tile: each warp loops over 8-tile groups */
    {1, 1, 1, 4500, 4500, 64, LPATTN_BF16, 1, 2, 0, -1, 1},
};

/* a few keys per tile far above the rest along the query mean's direction */
static void fill_k(ct_pair *k) {
  const int64_t D = k->h.shape[3], n = ct_count(&k->h) / D;
  for (int64_t r = 0; r < n; r++) {
    const double lift = ct_unif() < 0.03 ? 4.0 : 0.0;
    for (int64_t d = 0; d < D; d++)
      lp_store_f32(k->h.data, k->h.dtype, r * D + d, (float)(0.3 + lift + ct_normal()));
  }
}

/* Inf and NaN in K (head 0 and the last head): in a mid tile, the last
 * (partial) tile, and a whole key row of tile 3 */
static void poison_k(ct_pair *k) {
  const int64_t H = k->h.shape[1], S = k->h.shape[2], D = k->h.shape[3];
  const float bad[3] = {INFINITY, -INFINITY, NAN};
  for (int64_t h = 0; h < H; h += H - 1 > 0 ? H - 1 : 1) {
    const int64_t base = h * S * D;
    lp_store_f32(k->h.data, k->h.dtype, base + (S / 2) * D + 5, bad[h % 3]);
    lp_store_f32(k->h.data, k->h.dtype, base + (S - 1) * D + D - 1, NAN);
    for (int64_t d = 0; d < D; d++)
      if (3 * 64 + 7 < S) lp_store_f32(k->h.data, k->h.dtype, base + (3 * 64 + 7) * D + d, bad[d % 3]);
  }
  ct_up(k);
}

static void run_case(lpattn_ctx *cu, lpattn_ctx *ref, const kmax_case *c) {
  const ct_shape s = {c->B, c->Hq, c->Hkv, c->Sq, c->Skv, c->D, c->in, LPATTN_F32};
  lpattn_attn_params ap;
  lpattn_attn_params_init(&ap);
  ap.precision = LPATTN_PREC_THRIFT, ap.causal = c->causal, ap.thrift_budget = 0.3f;
  ap.thrift_rule = c->rule, ap.selection = c->paper ? LPATTN_SELECT_PAPER : LPATTN_SELECT_CAUSAL;
  if (c->win_left >= 0) ap.window_left = c->win_left, ap.window_right = -1;
  int k = lpattn_thrift_k((int)((c->Skv + 63) / 64), ap.thrift_budget, c->causal);
  if (c->win_left >= 0 && c->causal) { /* causal window: the non-causal rule over the tiles it spans */
    const int64_t n = (c->win_left + 64 - 1 + 63) / 64 + 1, nkt = (c->Skv + 63) / 64; /* as test_cuda_window.c */
    k = lpattn_thrift_k((int)(n < nkt ? n : nkt), ap.thrift_budget, 0);
  }
  ct_prob p = ct_prob_make(&s, k), r = ct_prob_make(&s, k);
  ct_fill(&p.q, 0.2, 1.0), ct_fill(&p.v, 0.0, 1.0);
  fill_k(&p.k);
  if (c->nonfinite) poison_k(&p.k);
  ct_up(&p.k);
  lpattn_attn_aux ah, ad;
  lpattn_attn_aux_init(&ah), lpattn_attn_aux_init(&ad);
  ah.selection = r.sel.h, ad.selection = p.sel.d;
  ct_poison(&p.sel);
  const lpattn_status sr = lpattn_attention(ref, &p.q.h, &p.k.h, &p.v.h, &r.o.h, &ap, &ah);
  const lpattn_status sc = lpattn_attention(cu, &p.q.d, &p.k.d, &p.v.d, &p.o.d, &ap, &ad);
  printf("kmax B%lld Hq%lld Hkv%lld Sq%lld Skv%lld D%lld %s causal=%d rule=%d paper=%d win=%d nonfinite=%d: ",
         (long long)c->B, (long long)c->Hq, (long long)c->Hkv, (long long)c->Sq, (long long)c->Skv,
         (long long)c->D, c->in == LPATTN_F16 ? "f16" : "bf16", c->causal, c->rule, c->paper, c->win_left,
         c->nonfinite);
  CHECK(sr == LPATTN_OK && sc == LPATTN_OK, "status ref %s " CT_NAME " %s", lpattn_status_string(sr),
        lpattn_status_string(sc));
  if (sr == LPATTN_OK && sc == LPATTN_OK) {
    ct_down(&p.sel);
    const int32_t *a = (const int32_t *)p.sel.h.data, *b = (const int32_t *)r.sel.h.data;
    const int64_t n = ct_count(&p.sel.h);
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
      if (a[i] != b[i] && diff++ == 0) first = i;
    printf("%lld of %lld selection entries differ\n", (long long)diff, (long long)n);
    CHECK(diff == 0, "KMAX selection differs from ref (first at entry %lld: " CT_NAME " %d ref %d)", (long long)first,
          first >= 0 ? a[first] : 0, first >= 0 ? b[first] : 0);
  } else {
    printf("not run\n");
  }
  ct_prob_free(&p), ct_prob_free(&r);
}

int main(void) {
  lpattn_ctx *cu = NULL, *ref = NULL;
  if (!ct_setup(&cu, &ref)) return test_skip("no usable GPU device");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(cu, ref, &cases[i]);
  CHECK(ht_dsync(), "device error");
  lpattn_free(cu);
  lpattn_free(ref);
  return test_finish();
}
