/* The fuzz target (issue 11): the fuzzer's bytes choose an entry point, its
 * parameters, shapes, strides and dtypes, on ref or cpu. Every buffer has
 * guard bytes (fuzz_util.h). Asserted, beyond what the sanitizers report:
 *   - inputs are never written; a failed call writes nothing; a successful
 *     one writes only its outputs' elements;
 *   - an output view with two indices on one element is rejected;
 *   - with finite inputs and sane parameters a successful call gives finite
 *     results (lse may be -inf for a row that sees no key).
 * The paged pool API (SPEC 9) is fuzz_pool.c, ragged batches fuzz_varlen.c. */
#include <limits.h>

#include "fuzz_util.h"

lpattn_ctx *host_ctx(int cpu) {
  static lpattn_ctx *ctx[2];
  static int tried[2];
  if (!tried[cpu]) {
    lpattn_context_params p;
    lpattn_context_params_init(&p);
    p.num_threads = 2;
    tried[cpu] = 1;
    if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, &p, &ctx[cpu]) != LPATTN_OK)
      ctx[cpu] = NULL;
  }
  return ctx[cpu] ? ctx[cpu] : ctx[0];
}

lpattn_dtype float_dtype(fz_in *r) {
  static const lpattn_dtype t[] = {LPATTN_F32, LPATTN_F16, LPATTN_BF16, LPATTN_F32,
                                   LPATTN_F16, LPATTN_BF16, LPATTN_F32, LPATTN_E4M3,
                                   LPATTN_I32, (lpattn_dtype)9};
  return fz_rare(r, 12) ? t[7 + fz_pick(r, 3)] : t[fz_pick(r, 7)];
}

int64_t head_dim(fz_in *r) {
  static const int64_t d[] = {64, 32, 16, 128, 48, 96, 256, 24, 8, 272};
  return fz_rare(r, 10) ? d[7 + fz_pick(r, 3)] : d[fz_pick(r, 7)];
}

static float sm_scale(fz_in *r, int *sane) {
  static const float s[] = {0.0f, 0.125f, 1.0f, 0.0f, LPATTN_SM_SCALE_MAX, 1e-30f,
                            -1.0f, 17.0f, 1e30f, NAN, INFINITY};
  const int i = fz_rare(r, 6) ? 4 + fz_pick(r, 7) : fz_pick(r, 4);
  *sane &= i < 4;
  return s[i];
}

static int block(fz_in *r) {
  static const int b[] = {64, 32, 128, 96, 256, 48, 0, 512};
  return fz_rare(r, 10) ? b[5 + fz_pick(r, 3)] : b[fz_pick(r, 5)];
}

/* The params every attention-like call shares; *sane: results must be finite. */
void attn_params(fz_in *r, lpattn_attn_params *p, int *sane) {
  static const float budget[] = {0.05f, 0.25f, 1.0f, 0.5f, 0.0f, 1.5f, NAN};
  static const int tk[] = {0, 0, 1, 2, 3, 1000, -1};
  static const float beta[] = {0.0f, 0.0f, 0.98f, 0.5f, 1.0f, -0.25f};
  lpattn_attn_params_init(p);
  p->precision = (lpattn_precision)(fz_rare(r, 16) ? 5 + fz_pick(r, 3) : fz_pick(r, 5));
  p->causal = fz_pick(r, 2);
  p->sm_scale = sm_scale(r, sane);
  p->block_q = block(r), p->block_k = block(r);
  p->leaky = fz_rare(r, 8);
  p->thrift_low = (lpattn_format)(fz_rare(r, 16) ? 3 : fz_pick(r, 3));
  p->thrift_budget = budget[fz_rare(r, 8) ? 4 + fz_pick(r, 3) : fz_pick(r, 4)];
  p->thrift_k = tk[fz_rare(r, 8) ? 5 + fz_pick(r, 2) : fz_pick(r, 5)];
  p->selection = (lpattn_selection)(fz_rare(r, 16) ? 2 : fz_pick(r, 2));
  p->pasa = fz_pick(r, 3) == 0;
  p->pasa_beta = beta[fz_rare(r, 8) ? 4 + fz_pick(r, 2) : fz_pick(r, 4)];
  p->score_f16 = fz_rare(r, 8);
  *sane &= !p->score_f16;
  p->mx_scale_round_up = fz_pick(r, 2);
  p->check_finite = fz_pick(r, 4) == 0;
  if (fz_rare(r, 32)) p->struct_size = fz_pick(r, 2) ? 3 : sizeof *p + 8;
  else if (fz_rare(r, 16)) p->struct_size = offsetof(lpattn_attn_params, thrift_low);
}

/* k of the selection output a valid THRIFT call needs. */
static int64_t thrift_k_of(const lpattn_attn_params *p, int64_t skv) {
  const int bk = p->block_k > 0 ? p->block_k : 64, n = (int)((skv + bk - 1) / bk);
  if (p->thrift_k > 0) return p->thrift_k < n ? p->thrift_k : n;
  return lpattn_thrift_k(n, p->thrift_budget, p->causal);
}

void check_rows(const fz_tensor *lse, const fz_tensor *ent, const char *what) {
  if (lse)
    FZ_FOR_EACH(&lse->t, off) {
      const float l = fz_load(&lse->t, off);
      FZ_ASSERT(!isnan(l) && l != INFINITY, "%s: lse %g", what, l);
    }
  if (ent) FZ_ASSERT(fz_all_finite(&ent->t), "%s: entropy not finite", what);
}

/* An output view that repeats elements must have been rejected. */
void check_dup(const fz_tensor *t, lpattn_status s, const char *what) {
  FZ_ASSERT(s != LPATTN_OK || !fz_tensor_dup(t), "%s: accepted an overlapping output view", what);
}

static void fuzz_attention(fz_in *r, lpattn_ctx *ctx) {
  int sane = 1;
  const int64_t B = 1 + fz_pick(r, 2), hkv = 1 + fz_pick(r, 2);
  const int64_t hq = fz_rare(r, 16) ? 3 : hkv * (1 + fz_pick(r, 2));
  int64_t sq = 1 + fz_pick(r, 140), skv = 1 + fz_pick(r, 200);
  const int64_t D = head_dim(r);
  /* One input's work is bounded (issue 28 item 10): B hq sq skv D <= 2^22
   * multiply-adds per product (about a second on ref under ASan+UBSan and
   * coverage), halving the longer of sq and skv; small heads keep every
   * length. */
  while (B * hq * sq * skv * D > ((int64_t)1 << 22)) {
    if (sq >= skv) sq = (sq + 1) / 2;
    else skv = (skv + 1) / 2;
  }
  const int nonfinite = fz_rare(r, 6);
  lpattn_attn_params p;
  attn_params(r, &p, &sane);
  if (fz_rare(r, 8)) { /* absolute positions (lpattn.h): valid, unaligned, negative, bad mode */
    p.positions = fz_rare(r, 16) ? 2 : 1;
    p.q_start = (int64_t)fz_pick(r, 300) - (fz_rare(r, 16) ? 400 : 0);
    p.kv_start = (int64_t)fz_pick(r, 5) * (fz_rare(r, 8) ? 48 : 64);
  }
  const int64_t qs[4] = {B, hq, sq, D}, ks[4] = {B, hkv, skv, D};
  fz_tensor q, k, v, o, lse, ent, sel;
  const lpattn_dtype kd = float_dtype(r);
  fz_tensor_make(&q, r, float_dtype(r), qs, 0, 2.0f, nonfinite);
  fz_tensor_make(&k, r, kd, ks, 0, 2.0f, nonfinite);
  fz_tensor_make(&v, r, fz_rare(r, 16) ? float_dtype(r) : kd, ks, 0, 2.0f, nonfinite);
  fz_tensor_make(&o, r, float_dtype(r), qs, 1, 0, 0);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  const int want_lse = fz_pick(r, 2), want_ent = fz_pick(r, 3) == 0, want_sel = fz_pick(r, 2);
  const int64_t rows[4] = {B, hq, sq, 1};
  const int64_t bq = p.block_q > 0 ? p.block_q : 64;
  const int64_t ss[4] = {B, hq, (sq + bq - 1) / bq, thrift_k_of(&p, skv) + fz_rare(r, 16)};
  fz_tensor_make(&lse, r, fz_rare(r, 16) ? LPATTN_F16 : LPATTN_F32, rows, 1, 0, 0);
  fz_tensor_make(&ent, r, LPATTN_F32, rows, 1, 0, 0);
  fz_tensor_make(&sel, r, LPATTN_I32, ss[3] > 0 ? ss : rows, 1, 0, 0);
  if (want_lse) aux.lse = lse.t;
  if (want_ent) aux.entropy = ent.t;
  if (want_sel) aux.selection = sel.t;
  const lpattn_status s = lpattn_attention(ctx, &q.t, &k.t, &v.t, &o.t, &p, &aux);
  if (s == LPATTN_OK) {
    FZ_ASSERT(q.valid_layout && k.valid_layout && v.valid_layout && o.valid_layout,
              "attention accepted an invalid view");
    if (sane && !nonfinite) {
      FZ_ASSERT(fz_all_finite(&o.t), "attention: non-finite output for finite input");
      check_rows(want_lse ? &lse : NULL, want_ent ? &ent : NULL, "attention");
    }
    if (want_sel)
      FZ_FOR_EACH(&sel.t, off) {
        const float j = fz_load(&sel.t, off);
        FZ_ASSERT(j >= -1 && j < (float)((skv + 31) / 32), "selection index %g", j);
      }
  }
  check_dup(&o, s, "attention out");
  if (want_lse) check_dup(&lse, s, "attention lse");
  if (want_sel) check_dup(&sel, s, "attention selection");
  const int ok = s == LPATTN_OK;
  fz_tensor_done(&q, ok, "q"), fz_tensor_done(&k, ok, "k"), fz_tensor_done(&v, ok, "v");
  fz_tensor_done(&o, ok, "out"), fz_tensor_done(&lse, ok && want_lse, "lse");
  fz_tensor_done(&ent, ok && want_ent, "entropy"), fz_tensor_done(&sel, ok && want_sel, "selection");
}

static void fuzz_quant(fz_in *r, lpattn_ctx *ctx) {
  static const int tiles[] = {64, 32, 128, 96, 40, 0};
  const int64_t shape[4] = {1 + fz_pick(r, 2), 1 + fz_pick(r, 3), 1 + fz_pick(r, 130), head_dim(r)};
  const int nonfinite = fz_rare(r, 6);
  lpattn_quant_params p;
  lpattn_quant_params_init(&p);
  p.format = (lpattn_format)(fz_rare(r, 16) ? 3 : fz_pick(r, 3));
  p.rounding = (lpattn_rounding)(fz_rare(r, 16) ? 2 : fz_pick(r, 2));
  p.seed = fz_u32(r);
  p.axis = (lpattn_axis)(fz_rare(r, 16) ? 2 : fz_pick(r, 2));
  p.tile = tiles[fz_rare(r, 8) ? 4 + fz_pick(r, 2) : fz_pick(r, 4)];
  p.mx_scale_round_up = fz_pick(r, 2);
  p.check_finite = fz_pick(r, 3) == 0;
  fz_tensor x, y;
  fz_tensor_make(&x, r, float_dtype(r), shape, 0, fz_pick(r, 2) ? 3.0f : 3e4f, nonfinite);
  lpattn_qtensor q = {p.format, p.axis, p.tile, {shape[0], shape[1], shape[2], shape[3]},
                      NULL, NULL, NULL};
  size_t cb = 0, sb = 0, oc = 0;
  const int sized = lpattn_qtensor_sizes(p.format, p.axis, p.tile, shape, &cb, &sb, &oc) == LPATTN_OK;
  fz_buf bc = {0}, bs = {0}, bo = {0};
  q.codes = (uint8_t *)fz_alloc(&bc, sized ? cb : 8);
  q.scales = (uint8_t *)fz_alloc(&bs, sized && sb ? sb : 8);
  q.outer = (float *)fz_alloc(&bo, sized && oc ? oc * 4 : 8);
  switch (fz_rare(r, 4) ? fz_pick(r, 5) : -1) { /* a wrong qtensor */
    case 0: q.shape[2] += 1; break;
    case 1: q.format = (lpattn_format)((q.format + 1) % 3); break;
    case 2: q.scales = sb ? NULL : q.scales; break;
    case 3: q.outer = oc ? (float *)(void *)q.codes : q.outer; break;
    case 4: q.tile = 48; break;
  }
  lpattn_status s = lpattn_quantize(ctx, &x.t, &q, &p);
  FZ_ASSERT(s != LPATTN_OK || (x.valid_layout && sized), "quantize accepted a bad input");
  fz_tensor_done(&x, s == LPATTN_OK, "quantize x");
  const fz_buf *qb[3] = {&bc, &bs, &bo};
  for (int b = 0; b < 3 && s != LPATTN_OK; b++) /* nothing written */
    for (size_t i = 0; i < qb[b]->bytes; i++)
      FZ_ASSERT(fz_data(qb[b])[i] == FZ_POISON_BYTE, "failed quantize wrote buffer %d", b);
  /* Dequantize what came out (or the poison bytes: any codes must be safe),
   * where the buffers are as large as the (maybe altered) qtensor says: the
   * library cannot see their sizes. */
  size_t cb2 = 0, sb2 = 0, oc2 = 0;
  const int fits =
      lpattn_qtensor_sizes(q.format, q.axis, q.tile, q.shape, &cb2, &sb2, &oc2) != LPATTN_OK ||
      (cb2 <= bc.bytes && (!sb2 || sb2 <= bs.bytes) && (!oc2 || oc2 * 4 <= bo.bytes) &&
       q.outer == (float *)(void *)fz_data(&bo));
  fz_tensor_make(&y, r, float_dtype(r), shape, 1, 0, 0);
  const lpattn_status d = fits ? lpattn_dequantize(ctx, &q, &y.t) : LPATTN_ERR_INVALID_ARGUMENT;
  check_dup(&y, d, "dequantize y");
  if (s == LPATTN_OK && d == LPATTN_OK && !nonfinite && y.t.dtype == LPATTN_F32)
    FZ_ASSERT(fz_all_finite(&y.t), "dequantize of finite input not finite");
  fz_tensor_done(&y, d == LPATTN_OK, "dequantize y");
  fz_release(&bc, "codes"), fz_release(&bs, "scales"), fz_release(&bo, "outer");
}

static void fuzz_merge(fz_in *r, lpattn_ctx *ctx) {
  const int64_t shape[4] = {1 + fz_pick(r, 2), 1 + fz_pick(r, 3), 1 + fz_pick(r, 40), 1 + fz_pick(r, 70)};
  const int64_t rows[4] = {shape[0], shape[1], shape[2], 1};
  const int with_h = fz_pick(r, 2), nonfinite = fz_rare(r, 6);
  fz_tensor t[9];
  for (int i = 0; i < 9; i++) {
    const int out = i >= 6, row = i % 3 != 0;
    fz_tensor_make(&t[i], r, row ? (fz_rare(r, 16) ? LPATTN_F16 : LPATTN_F32) : float_dtype(r),
                   row ? rows : shape, out, 3.0f, nonfinite);
  }
  /* t: o_a lse_a h_a o_b lse_b h_b o lse h; an lse of -inf is an empty part. */
  for (int i = 1; i <= 4; i += 3)
    if (t[i].valid_layout && fz_pick(r, 4) == 0) {
      FZ_FOR_EACH(&t[i].t, off) if (fz_next(r) & 1) fz_store(&t[i].t, off, -INFINITY);
      memcpy(t[i].before, t[i].t.data, t[i].buf.bytes);
    }
  const lpattn_status s =
      lpattn_merge_states(ctx, &t[0].t, &t[1].t, with_h ? &t[2].t : NULL, &t[3].t, &t[4].t,
                          with_h ? &t[5].t : NULL, &t[6].t, &t[7].t, with_h ? &t[8].t : NULL);
  if (s == LPATTN_OK && !nonfinite) {
    FZ_ASSERT(fz_all_finite(&t[6].t), "merge: o not finite");
    check_rows(&t[7], with_h ? &t[8] : NULL, "merge");
  }
  check_dup(&t[6], s, "merge o"), check_dup(&t[7], s, "merge lse");
  for (int i = 0; i < 9; i++)
    fz_tensor_done(&t[i], s == LPATTN_OK && (i < 8 || with_h), "merge tensor");
}

/* A KV cache through a few appends and decodes; sometimes its context goes first. */
static void fuzz_cache(fz_in *r, int cpu) {
  static const int tiles[] = {64, 32, 128, 96, 48};
  lpattn_ctx *own = NULL, *ctx = host_ctx(cpu);
  const int early = fz_rare(r, 8);
  if (early) {
    lpattn_context_params cp;
    lpattn_context_params_init(&cp);
    cp.num_threads = 1;
    if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, &cp, &own) != LPATTN_OK) return;
    ctx = own;
  }
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_seqs = 1 + fz_pick(r, 3), cp.num_kv_heads = 1 + fz_pick(r, 2);
  cp.num_q_heads = cp.num_kv_heads * (1 + fz_pick(r, 2));
  cp.head_dim = (int)head_dim(r), cp.max_tokens = 1 + fz_pick(r, 250);
  cp.tile = tiles[fz_rare(r, 8) ? 4 : fz_pick(r, 4)];
  cp.high_dtype = fz_rare(r, 16) ? LPATTN_E4M3 : (lpattn_dtype)fz_pick(r, 3);
  cp.precision = (lpattn_precision)(fz_rare(r, 16) ? 5 : fz_pick(r, 5));
  cp.thrift_low = (lpattn_format)fz_pick(r, 3), cp.pasa = fz_pick(r, 3) == 0;
  cp.mx_scale_round_up = fz_pick(r, 2);
  lpattn_kv_cache *c = NULL;
  if (lpattn_kv_cache_create(ctx, &cp, &c) != LPATTN_OK) {
    FZ_ASSERT(c == NULL, "failed create left a cache");
    lpattn_free(own);
    return;
  }
  const int steps = 1 + fz_pick(r, 6);
  for (int i = 0; i < steps; i++) {
    int64_t len = 0;
    const int seq = fz_pick(r, cp.num_seqs + 1) - (fz_rare(r, 16) ? 1 : 0);
    if (fz_pick(r, 2)) {
      const int64_t n = 1 + fz_pick(r, 90);
      const int64_t ks[4] = {1, cp.num_kv_heads, n, cp.head_dim}, qs[4] = {1, cp.num_q_heads, n, cp.head_dim};
      fz_tensor k, v, q;
      const int with_q = fz_pick(r, 2);
      fz_tensor_make(&k, r, float_dtype(r), ks, 0, 2.0f, 0);
      fz_tensor_make(&v, r, float_dtype(r), ks, 0, 2.0f, 0);
      fz_tensor_make(&q, r, float_dtype(r), qs, 0, 2.0f, 0);
      lpattn_kv_cache_append(ctx, c, seq, &k.t, &v.t, with_q ? &q.t : NULL);
      fz_tensor_done(&k, 1, "append k"), fz_tensor_done(&v, 1, "append v");
      fz_tensor_done(&q, 1, "append q");
    } else {
      int sane = 1;
      lpattn_attn_params p;
      attn_params(r, &p, &sane);
      const int64_t sq = 1 + fz_pick(r, 4);
      const int64_t qs[4] = {cp.num_seqs, cp.num_q_heads, sq, cp.head_dim}, rows[4] = {qs[0], qs[1], sq, 1};
      fz_tensor q, o, lse;
      fz_tensor_make(&q, r, float_dtype(r), qs, 0, 2.0f, 0);
      fz_tensor_make(&o, r, float_dtype(r), qs, 1, 0, 0);
      fz_tensor_make(&lse, r, LPATTN_F32, rows, 1, 0, 0);
      lpattn_attn_aux aux;
      lpattn_attn_aux_init(&aux);
      aux.lse = lse.t;
      const lpattn_status s = lpattn_decode(ctx, c, &q.t, &o.t, &p, &aux);
      if (s == LPATTN_OK && sane && !cp.pasa) { /* cached K is not range-limited under PASA */
        FZ_ASSERT(fz_all_finite(&o.t), "decode: non-finite output for finite input");
        check_rows(&lse, NULL, "decode");
      }
      check_dup(&o, s, "decode out");
      fz_tensor_done(&q, s == LPATTN_OK, "decode q"), fz_tensor_done(&o, s == LPATTN_OK, "decode out");
      fz_tensor_done(&lse, s == LPATTN_OK, "decode lse");
    }
    if (lpattn_kv_cache_length(c, seq, &len) == LPATTN_OK)
      FZ_ASSERT(len >= 0 && len <= cp.max_tokens, "length %lld", (long long)len);
  }
  if (own) lpattn_free(own); /* before its cache: the cache is detached */
  lpattn_kv_cache_free(c);
}

static void fuzz_helpers(fz_in *r) {
  static const int ns[] = {1, 2, 7, 64, 1000, 65537, INT_MAX, INT_MAX - 1, 0, -5, INT_MIN};
  const int n = fz_pick(r, 3) ? (int)(fz_u32(r) % 5000) : ns[fz_pick(r, 11)];
  const uint32_t bits = fz_u32(r);
  float f;
  memcpy(&f, &bits, 4);
  if (fz_pick(r, 2)) f = fz_unit(r);
  const int k = lpattn_thrift_k(n, f, fz_pick(r, 2));
  FZ_ASSERT(n < 1 ? k == 0 : k >= 1 && k <= n, "thrift_k(%d, %g) = %d", n, f, k);
  const double beta = lpattn_pasa_beta((lpattn_dtype)fz_pick(r, 4), (int)(fz_u16(r) % 5000) - 2,
                                       fz_pick(r, 2) ? 0.0 : (double)fz_unit(r) * 1.2);
  FZ_ASSERT(isnan(beta) || (beta > 0.0 && beta < 1.0), "pasa_beta %g", beta);
  const uint8_t c = (uint8_t)fz_u8(r);
  const float e4 = lpattn_e4m3_to_f32(c);
  FZ_ASSERT(isnan(e4) || lpattn_e4m3_to_f32(lpattn_f32_to_e4m3(e4)) == e4, "e4m3 round trip %u", c);
  const float e2 = lpattn_e2m1_to_f32(c & 15), h = lpattn_f16_to_f32((uint16_t)bits);
  FZ_ASSERT(lpattn_e2m1_to_f32(lpattn_f32_to_e2m1(e2)) == e2, "e2m1 round trip %u", c & 15);
  FZ_ASSERT(isnan(h) || lpattn_f16_to_f32(lpattn_f32_to_f16(h)) == h, "f16 round trip %x", bits);
  FZ_ASSERT(!isfinite(f) || isfinite(lpattn_e2m1_to_f32(lpattn_f32_to_e2m1(f))), "e2m1 of %g", f);
  int64_t shape[4];
  for (int i = 0; i < 4; i++) shape[i] = fz_pick(r, 4) ? (int64_t)fz_u16(r) : (int64_t)fz_u32(r) << 31;
  size_t cb, sb, oc;
  (void)lpattn_qtensor_sizes((lpattn_format)fz_pick(r, 4), (lpattn_axis)fz_pick(r, 3),
                             block(r), shape, &cb, &sb, &oc);
  (void)lpattn_status_string((lpattn_status)(int)fz_u8(r));
}

static void fuzz_context(fz_in *r) {
  static const int threads[] = {0, 1, 2, -1, LPATTN_MAX_THREADS + 1, INT_MAX, INT_MIN};
  lpattn_context_params p;
  lpattn_context_params_init(&p);
  p.num_threads = threads[fz_pick(r, 7)];
  p.device = fz_pick(r, 4) - 1;
  if (fz_rare(r, 8)) p.struct_size = fz_u8(r);
  lpattn_ctx *c = (lpattn_ctx *)&p;
  const lpattn_status s = lpattn_create((lpattn_backend)(fz_pick(r, 3) + 1), &p, &c);
  FZ_ASSERT((s == LPATTN_OK) == (c != NULL), "create: status and context disagree");
  if (c) {
    FZ_ASSERT(lpattn_synchronize(c) == LPATTN_OK, "synchronize");
    FZ_ASSERT(lpattn_backend_name(lpattn_context_backend(c)) != NULL, "backend name");
  }
  lpattn_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_in r = {data, size, 0};
  r.rng = fz_u32(&r);
  const int cpu = fz_pick(&r, 2);
  const unsigned entry = fz_u8(&r); /* the top values were added for the pool */
  if (entry >= 216) {
    fuzz_pool(&r, cpu);
    return 0;
  }
  if (entry >= 208) { /* added for ragged batches */
    fuzz_varlen(&r, cpu);
    return 0;
  }
  switch (entry % 10) {
    case 0: case 1: case 2: fuzz_attention(&r, host_ctx(cpu)); break;
    case 3: case 4: fuzz_quant(&r, host_ctx(cpu)); break;
    case 5: case 6: fuzz_cache(&r, cpu); break;
    case 7: fuzz_merge(&r, host_ctx(cpu)); break;
    case 8: fuzz_helpers(&r); break;
    default: fuzz_context(&r); break;
  }
  return 0;
}
