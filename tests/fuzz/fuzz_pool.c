/* The paged KV pool API (lpattn.h "paged KV storage", SPEC 9) under the
 * fuzz target: a pool in library or caller memory (guarded; sometimes too
 * small, misaligned or larger), then a few appends, decodes and slot copies
 * with page tables, lengths and slots that are mostly right and sometimes
 * wrong (out of range, repeated, shared incomplete pages, short tables,
 * lengths off by one or past max_length, Sq past the page), sometimes with
 * the context freed before the pool. Asserted, besides fuzz_api.c's
 * promises for the tensors (id tensors included):
 *   - a call that an injected fault makes invalid fails;
 *   - a failed call leaves the whole pool memory as it was; a successful one
 *     writes only the slots of its sequences and the pages of their tables
 *     (append), those slots (decode: THRIFT's query rows) or the target slot
 *     (slot_copy); caller memory past the pool is never written;
 *   - decode of finite appended data with sane params is finite.
 * A small model (length and pages of each slot) keeps most calls valid. */
#include "fuzz_util.h"
#include "internal.h" /* struct lpattn_kv_pool: where library memory lies */
#include "kvpage.h"

enum { MAXS = 6, MAXW = 8, MAXB = 4, AG = 256 };
/* What one input may ask of one call (issue 28 item 10): the elements of one
 * tensor of a batch (MAXB sequences x rows x heads x D). Huge head counts
 * (rare) get fewer rows; usual pools (heads <= 4) are never cut. */
enum { CALL_ELEMS = 1 << 21 };

typedef struct {
  lpattn_ctx *ctx, *own; /* own: made here, maybe freed before the pool */
  lpattn_kv_pool *pool;
  lpattn_kv_pool_params p;
  lp_kv_layout L;
  uint8_t *base, *mem; /* caller memory: guard, payload, guard (base NULL: library) */
  size_t bytes, alloc; /* pool bytes; caller payload bytes */
  uint8_t *snap;
  int64_t len[MAXS];   /* model: slot length, -1 unknown */
  int32_t tbl[MAXS][MAXW];
  int next_page, tainted, detached;
} pz;

/* ---- the batch of one call ------------------------------------------------ */
typedef struct {
  fz_tensor slots, lengths, table;
  lpattn_kv_batch b;
  int S, must_fail, wide; /* wide: the table's one id broadcast over 2^60 columns */
  int32_t slot[MAXB], len[MAXB]; /* as the views read back */
  int64_t need[MAXB], width;
} pz_batch;

static int32_t id_get(const fz_tensor *x, int64_t c, int64_t d) {
  int32_t v;
  memcpy(&v, (const uint8_t *)x->t.data + 4 * fz_off(&x->t, 0, 0, c, d), 4);
  return v;
}
static void id_set(const fz_tensor *x, int64_t c, int64_t d, int32_t v) {
  memcpy((uint8_t *)x->t.data + 4 * fz_off(&x->t, 0, 0, c, d), &v, 4);
}

static int32_t new_page(pz *z) { return (int32_t)(z->next_page++ % z->p.num_pages); }

/* A row of fresh pages for a new sequence in slot s. */
static void fresh_row(pz *z, int s) {
  for (int j = 0; j < MAXW; j++) z->tbl[s][j] = new_page(z);
}

/* rows (tokens appended, or decode queries) cut so that a batch's tensor
 * holds at most CALL_ELEMS elements; at least 1. */
static int64_t cap_rows(const pz *z, int64_t rows) {
  const int64_t h = z->p.num_q_heads > z->p.num_kv_heads ? z->p.num_q_heads : z->p.num_kv_heads;
  const int64_t per_row = (int64_t)MAXB * (h > 0 ? h : 1) * (z->p.head_dim > 0 ? z->p.head_dim : 1);
  const int64_t most = CALL_ELEMS / per_row;
  return rows <= most ? rows : most > 1 ? most : 1;
}

/* n: tokens appended (0: decode, Sq > 0 then). */
static void make_batch(pz *z, fz_in *r, pz_batch *c, int64_t n, int64_t Sq) {
  const int ns = z->p.num_slots, T = z->p.page_size;
  memset(c, 0, sizeof *c);
  c->S = 1 + fz_pick(r, ns < MAXB - 1 ? ns : MAXB - 1);
  if (fz_rare(r, 16)) c->S = MAXB;
  int perm[MAXS] = {0};
  for (int i = 0; i < ns; i++) perm[i] = i;
  for (int i = ns - 1; i > 0; i--) {
    const int j = fz_pick(r, i + 1), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  if (!n) /* decode: sequences long enough first */
    for (int i = 0, m = 0; i < ns; i++)
      if (z->len[perm[i]] >= Sq) {
        const int t = perm[i];
        perm[i] = perm[m], perm[m++] = t;
      }
  int32_t slot[MAXB], len[MAXB];
  int64_t maxlen = 0;
  for (int i = 0; i < c->S; i++) {
    slot[i] = i < ns ? perm[i] : perm[0];
    if (fz_rare(r, 24)) slot[i] = fz_pick(r, 2) ? ns + fz_pick(r, 3) : -1;
    const int s = slot[i] >= 0 && slot[i] < ns ? slot[i] : 0;
    len[i] = z->len[s] < 0 ? 0 : (int32_t)z->len[s];
    if (n && (z->len[s] < 0 || fz_pick(r, 5) == 0)) len[i] = 0; /* a new sequence */
    if (n && len[i] == 0 && slot[i] == s) fresh_row(z, s);
    if (fz_rare(r, 24)) len[i] += fz_pick(r, 2) ? 1 : -1;
    if (len[i] > maxlen) maxlen = len[i];
  }
  int64_t width = 1;
  for (int i = 0; i < c->S; i++) {
    const int64_t w = (len[i] + n + T - 1) / T;
    if (w > width) width = w;
  }
  if (width > MAXW) width = MAXW;
  if (fz_rare(r, 16) && width > 1) width--; /* short */
  else if (fz_rare(r, 8) && width < MAXW) width++;
  c->width = width;
  c->wide = fz_rare(r, 32);
  const int64_t ss[4] = {1, 1, 1, c->S}, ts[4] = {1, 1, c->S, c->wide ? 1 : width};
  fz_tensor_make(&c->slots, r, fz_rare(r, 32) ? LPATTN_F32 : LPATTN_I32, ss, 0, 0, 0);
  fz_tensor_make(&c->lengths, r, LPATTN_I32, ss, 0, 0, 0);
  fz_tensor_make(&c->table, r, LPATTN_I32, ts, 0, 0, 0);
  int ok = c->slots.valid_layout && c->lengths.valid_layout && c->table.valid_layout &&
           c->slots.t.dtype == LPATTN_I32;
  if (ok && c->wide) c->table.t.shape[3] = (int64_t)1 << 60, c->table.t.stride[3] = 0;
  if (ok) {
    for (int i = 0; i < c->S; i++) {
      id_set(&c->slots, 0, i, slot[i]), id_set(&c->lengths, 0, i, len[i]);
      const int s = slot[i] >= 0 && slot[i] < ns ? slot[i] : 0;
      for (int64_t j = 0; j < width; j++) id_set(&c->table, i, j, z->tbl[s][j]);
    }
    if (fz_rare(r, 6)) { /* a wrong id among those used */
      const int i = fz_pick(r, c->S);
      const int64_t j = fz_pick(r, (int)width);
      const int32_t bad[4] = {-1, z->p.num_pages, z->p.num_pages + 7, INT32_MIN};
      int32_t id = fz_pick(r, 2) ? bad[fz_pick(r, 4)]
                                 : id_get(&c->table, i, fz_pick(r, (int)width));
      if (fz_pick(r, 2) && c->S > 1) id = id_get(&c->table, (i + 1) % c->S, j); /* shared */
      id_set(&c->table, i, j, id);
    }
    /* What the views hold now (layouts may overlap). */
    for (int i = 0; i < c->S; i++) {
      c->slot[i] = id_get(&c->slots, 0, i), c->len[i] = id_get(&c->lengths, 0, i);
      if (c->len[i] > maxlen) maxlen = c->len[i];
    }
    memcpy(c->slots.before, c->slots.t.data, c->slots.buf.bytes);
    memcpy(c->lengths.before, c->lengths.t.data, c->lengths.buf.bytes);
    memcpy(c->table.before, c->table.t.data, c->table.buf.bytes);
  }
  lpattn_kv_batch_init(&c->b);
  c->b.num_seqs = c->S;
  c->b.slots = c->slots.t, c->b.lengths = c->lengths.t, c->b.page_table = c->table.t;
  c->b.max_length = maxlen + (fz_pick(r, 3) == 0 ? fz_pick(r, 100) : 0);
  if (fz_rare(r, 24)) c->b.max_length = maxlen - 1;
  if (fz_rare(r, 24)) c->b.max_length = fz_pick(r, 2) ? INT32_MAX : (int64_t)INT32_MAX + 1;
  if (fz_rare(r, 64)) c->b.struct_size = sizeof c->b + 8;
  /* The faults that must make the call fail. */
  c->must_fail = !ok || c->b.max_length < 0 || c->b.max_length > INT32_MAX ||
                 c->b.struct_size != sizeof c->b;
  for (int i = 0; ok && i < c->S; i++) {
    const int32_t s = c->slot[i], l = c->len[i];
    int rep = 0;
    for (int k = 0; k < i; k++) rep |= c->slot[k] == s;
    const int in = s >= 0 && s < ns;
    c->need[i] = l >= 0 ? (l + n + T - 1) / T : 0;
    c->must_fail |= !in || rep || l < 0 || l > c->b.max_length;
    c->must_fail |= in && z->len[s] >= 0 && (n ? l != 0 : 1) && l != z->len[s];
    const int64_t wlim = c->wide ? (int64_t)1 << 60 : width;
    c->must_fail |= (l + n + T - 1) / T > wlim || (!n && l < Sq);
    for (int64_t j = 0; j < c->need[i] && j < width; j++) {
      const int32_t id = id_get(&c->table, i, j);
      c->must_fail |= id < 0 || id >= z->p.num_pages;
      for (int64_t k = 0; k < j; k++) c->must_fail |= id_get(&c->table, i, k) == id;
    }
  }
}

static void batch_done(pz_batch *c) {
  if (c->wide) c->table.t.shape[3] = 1;
  fz_tensor_done(&c->slots, 0, "pool slots");
  fz_tensor_done(&c->lengths, 0, "pool lengths");
  fz_tensor_done(&c->table, 0, "pool page table");
}

/* ---- pool memory ------------------------------------------------------------ */
static void snap(pz *z) {
  if (z->mem) memcpy(z->snap, z->mem, z->bytes);
}

/* Every slot or page that changed must be allowed: slots[s] / pages[p]. */
static void check_pool(const pz *z, int ok, const uint8_t *slots, const uint8_t *pages,
                       const char *what) {
  if (!z->mem) return;
  const lp_kv_layout *L = &z->L;
  if (!ok) {
    FZ_ASSERT(memcmp(z->snap, z->mem, z->bytes) == 0, "failed %s wrote the pool", what);
    return;
  }
  for (int s = 0; s < z->p.num_slots; s++) {
    const size_t o = lp_kv_slot_off(L, s);
    FZ_ASSERT((slots && slots[s]) || !memcmp(z->snap + o, z->mem + o, L->slot_bytes),
              "%s wrote slot %d, not one of its own", what, s);
  }
  for (int p = 0; p < z->p.num_pages; p++) {
    const size_t o = lp_kv_page_off(L, z->p.num_slots, p);
    FZ_ASSERT((pages && pages[p]) || !memcmp(z->snap + o, z->mem + o, L->page_bytes),
              "%s wrote page %d, not in its tables", what, p);
  }
}

/* A float view that fits its buffer. */
static int good(const fz_tensor *x) {
  const lpattn_dtype t = x->t.dtype;
  return x->valid_layout && (t == LPATTN_F32 || t == LPATTN_F16 || t == LPATTN_BF16);
}

/* ---- calls ------------------------------------------------------------------- */
static lpattn_ctx *call_ctx(pz *z, fz_in *r, int *wrong) {
  *wrong = z->detached || fz_rare(r, 32);
  if (!*wrong) return z->ctx;
  lpattn_ctx *o = host_ctx(fz_pick(r, 2));
  if (o == z->ctx) *wrong = 0;
  return o;
}

static void do_append(pz *z, fz_in *r) {
  static const int64_t ns[] = {1, 1, 2, 3, 5, 31, 32, 64, 65, 130};
  int wrong;
  lpattn_ctx *ctx = call_ctx(z, r, &wrong);
  const int64_t n = cap_rows(z, ns[fz_pick(r, 10)]);
  pz_batch c;
  make_batch(z, r, &c, n, 0);
  const int nonfinite = fz_rare(r, 8), with_q = fz_pick(r, 2);
  const int64_t ks[4] = {c.S, z->p.num_kv_heads, n, z->p.head_dim};
  const int64_t qs[4] = {c.S, z->p.num_q_heads, n, z->p.head_dim};
  fz_tensor k, v, q;
  fz_tensor_make(&k, r, float_dtype(r), ks, 0, 2.0f, nonfinite);
  fz_tensor_make(&v, r, float_dtype(r), ks, 0, 2.0f, nonfinite);
  fz_tensor_make(&q, r, float_dtype(r), qs, 0, 2.0f, nonfinite);
  snap(z);
  const lpattn_status s = lpattn_kv_append(ctx, z->pool, &c.b, &k.t, &v.t, with_q ? &q.t : NULL);
  const int ok = s == LPATTN_OK;
  FZ_ASSERT(!ok || (!c.must_fail && !wrong && good(&k) && good(&v) && (!with_q || good(&q))),
            "append accepted a bad call");
  uint8_t slots[MAXS] = {0}, pages[64] = {0};
  for (int i = 0; ok && i < c.S; i++) {
    slots[c.slot[i]] = 1;
    for (int64_t j = 0; j < c.need[i]; j++) pages[id_get(&c.table, i, j)] = 1;
    z->len[c.slot[i]] = c.len[i] + n;
    for (int64_t j = 0; j < c.width; j++) z->tbl[c.slot[i]][j] = id_get(&c.table, i, j);
  }
  check_pool(z, ok, slots, pages, "append");
  z->tainted |= ok && nonfinite;
  fz_tensor_done(&k, ok, "append k"), fz_tensor_done(&v, ok, "append v");
  fz_tensor_done(&q, ok, "append q");
  batch_done(&c);
}

static void do_decode(pz *z, fz_in *r) {
  int wrong, sane = 1;
  lpattn_ctx *ctx = call_ctx(z, r, &wrong);
  const int T = z->p.page_size;
  int64_t Sq = 1 + fz_pick(r, 3);
  if (fz_rare(r, 8)) Sq = fz_pick(r, 2) ? T : T + 1;
  else if (fz_pick(r, 2)) Sq = 1;
  Sq = cap_rows(z, Sq);
  pz_batch c;
  make_batch(z, r, &c, 0, Sq);
  int32_t kvs[MAXB], qss[MAXB];
  if (fz_rare(r, 6)) { /* sharded decode (lpattn_kv_batch kv_start/q_start): the last run, an
                          earlier one, or nonsense */
    for (int i = 0; i < c.S; i++) {
      const int64_t len = c.len[i] > 0 ? c.len[i] : 0;
      const int m = fz_pick(r, 4);
      kvs[i] = m == 3 ? (int32_t)fz_pick(r, 200) - 50 : (int32_t)(T * fz_pick(r, 3));
      qss[i] = m == 0   ? (int32_t)(kvs[i] + len - Sq)
               : m == 1 ? (int32_t)(kvs[i] + len + T * fz_pick(r, 3))
                        : (int32_t)fz_pick(r, 1000) - 10;
    }
    c.b.kv_start = lpattn_tensor_4d(kvs, LPATTN_I32, 1, 1, 1, c.S);
    if (!fz_rare(r, 16)) c.b.q_start = lpattn_tensor_4d(qss, LPATTN_I32, 1, 1, 1, c.S);
  }
  lpattn_attn_params p;
  attn_params(r, &p, &sane);
  const int64_t qs[4] = {c.S, z->p.num_q_heads, Sq, z->p.head_dim}, rows[4] = {c.S, qs[1], Sq, 1};
  fz_tensor q, o, lse, ent;
  fz_tensor_make(&q, r, float_dtype(r), qs, 0, 2.0f, 0);
  fz_tensor_make(&o, r, float_dtype(r), qs, 1, 0, 0);
  fz_tensor_make(&lse, r, LPATTN_F32, rows, 1, 0, 0);
  fz_tensor_make(&ent, r, LPATTN_F32, rows, 1, 0, 0);
  lpattn_attn_aux aux;
  lpattn_attn_aux_init(&aux);
  const int want_lse = fz_pick(r, 2), want_ent = fz_pick(r, 3) == 0;
  if (want_lse) aux.lse = lse.t;
  if (want_ent) aux.entropy = ent.t;
  snap(z);
  const lpattn_status s = lpattn_paged_decode(ctx, z->pool, &c.b, &q.t, &o.t, &p, &aux);
  const int ok = s == LPATTN_OK;
  FZ_ASSERT(!ok || (!c.must_fail && !wrong && Sq <= T && good(&q) && good(&o)),
            "decode accepted a bad call");
  uint8_t slots[MAXS] = {0};
  for (int i = 0; ok && i < c.S && z->p.precision == LPATTN_PREC_THRIFT; i++) slots[c.slot[i]] = 1;
  check_pool(z, ok, slots, NULL, "decode");
  if (ok && sane && !z->tainted && !z->p.pasa) {
    FZ_ASSERT(fz_all_finite(&o.t), "paged decode: non-finite output for finite input");
    check_rows(want_lse ? &lse : NULL, want_ent ? &ent : NULL, "paged decode");
  }
  check_dup(&o, s, "paged decode out");
  fz_tensor_done(&q, ok, "paged decode q"), fz_tensor_done(&o, ok, "paged decode out");
  fz_tensor_done(&lse, ok && want_lse, "paged decode lse");
  fz_tensor_done(&ent, ok && want_ent, "paged decode entropy");
  batch_done(&c);
}

/* Fork: dst gets src's length and pages; the caller copies a high page of
 * the incomplete tile (HIGH/THRIFT) into a page of dst's own. */
static void do_copy(pz *z, fz_in *r) {
  int wrong;
  lpattn_ctx *ctx = call_ctx(z, r, &wrong);
  const int ns = z->p.num_slots;
  int32_t src = fz_pick(r, ns), dst = fz_pick(r, ns);
  if (fz_rare(r, 8)) src = fz_pick(r, 2) ? -1 : ns;
  if (fz_rare(r, 8)) dst = fz_pick(r, 2) ? INT32_MIN : ns + 1;
  const int in = src >= 0 && src < ns && dst >= 0 && dst < ns;
  snap(z);
  const lpattn_status s = lpattn_kv_slot_copy(ctx, z->pool, src, dst);
  const int ok = s == LPATTN_OK;
  FZ_ASSERT(!ok || (in && !wrong), "slot copy accepted a bad call");
  uint8_t slots[MAXS] = {0};
  if (ok) slots[dst] = 1;
  check_pool(z, ok, slots, NULL, "slot copy");
  if (!ok || src == dst) return;
  z->len[dst] = z->len[src];
  memcpy(z->tbl[dst], z->tbl[src], sizeof z->tbl[dst]);
  const int T = z->p.page_size;
  if (z->len[src] > 0 && z->len[src] % T && z->L.has_high_pages && z->mem) {
    const int64_t j = z->len[src] / T;
    if (j >= MAXW) return;
    const int32_t from = z->tbl[src][j], to = new_page(z);
    const size_t pb = z->L.page_bytes;
    if (from != to)
      memcpy(z->mem + lp_kv_page_off(&z->L, ns, to), z->mem + lp_kv_page_off(&z->L, ns, from), pb);
    z->tbl[dst][j] = to;
  }
}

/* FP8_STATIC: every slot's descales (lpattn_kv_pool_set_descales), sometimes
 * with one bad value: rejected, nothing written; else the slots emptied. */
static void do_descales(pz *z, fz_in *r) {
  enum { H = 4 };
  const int n = z->p.num_slots, h = z->p.num_kv_heads;
  if (n < 1 || n > MAXS || h > H) return;
  int32_t slots[MAXS];
  float ds[2][MAXS * H];
  for (int i = 0; i < n; i++) slots[i] = i;
  for (int i = 0; i < n * h; i++) ds[0][i] = 0.25f * (float)(1 + fz_pick(r, 8)), ds[1][i] = 0.5f * ds[0][i];
  const int bad = fz_rare(r, 8);
  if (bad) ds[fz_pick(r, 2)][fz_pick(r, n * h)] = fz_pick(r, 2) ? NAN : 0.0f;
  lpattn_tensor ts = lpattn_tensor_4d(slots, LPATTN_I32, 1, 1, 1, n);
  lpattn_tensor tk = lpattn_tensor_4d(ds[0], LPATTN_F32, 1, 1, n, h), tv = lpattn_tensor_4d(ds[1], LPATTN_F32, 1, 1, n, h);
  snap(z);
  const lpattn_status st = lpattn_kv_pool_set_descales(z->ctx, z->pool, &ts, &tk, &tv);
  FZ_ASSERT((st == LPATTN_OK) == !bad, "set_descales: status %d with a bad value: %d", (int)st, bad);
  uint8_t sl[MAXS] = {0};
  for (int i = 0; i < n; i++) sl[i] = st == LPATTN_OK, z->len[i] = st == LPATTN_OK ? 0 : z->len[i];
  check_pool(z, st == LPATTN_OK, sl, NULL, "set_descales");
}

/* ---- the pool ---------------------------------------------------------------- */
static void pool_params(fz_in *r, lpattn_kv_pool_params *p) {
  static const int ps[] = {32, 64, 32, 64, 128, 96, 48, 0, 288};
  static const int np[] = {0, -1, 64, 65};
  lpattn_kv_pool_params_init(p);
  p->num_kv_heads = fz_rare(r, 64) ? 1 << (8 + fz_pick(r, 23)) : 1 + fz_pick(r, 2);
  /* Huge head counts stay huge without overflowing int: the group is 1 there. */
  const int group = p->num_kv_heads > (1 << 29) ? 1 : 1 + fz_pick(r, 2);
  p->num_q_heads = fz_rare(r, 32) ? 3 : p->num_kv_heads * group;
  p->head_dim = (int)head_dim(r);
  p->page_size = ps[fz_rare(r, 8) ? 5 + fz_pick(r, 4) : fz_pick(r, 5)];
  p->high_dtype = fz_rare(r, 16) ? LPATTN_E4M3 : (lpattn_dtype)fz_pick(r, 3);
  p->precision = (lpattn_precision)(fz_rare(r, 16) ? 5 : fz_pick(r, 5));
  p->thrift_low = (lpattn_format)(fz_rare(r, 16) ? 3 : fz_pick(r, 3));
  p->pasa = fz_pick(r, 4) == 0;
  if (fz_rare(r, 8)) p->pasa_beta = fz_pick(r, 2) ? 0.9f : 1.5f;
  p->mx_scale_round_up = fz_pick(r, 2);
  p->check_finite = fz_pick(r, 4) == 0;
  p->num_pages = fz_rare(r, 16) ? np[fz_pick(r, 4)] : 1 + fz_pick(r, 24);
  p->num_slots = fz_rare(r, 16) ? fz_pick(r, 2) - 1 : 1 + fz_pick(r, MAXS);
  if (fz_rare(r, 32)) p->struct_size = sizeof *p + 8;
}

void fuzz_pool(fz_in *r, int cpu) {
  pz z;
  memset(&z, 0, sizeof z);
  z.ctx = host_ctx(cpu);
  if (fz_rare(r, 6)) {
    lpattn_context_params cp;
    lpattn_context_params_init(&cp);
    cp.num_threads = 1 + fz_pick(r, 2);
    if (lpattn_create(cpu ? LPATTN_BACKEND_CPU : LPATTN_BACKEND_REF, &cp, &z.own) != LPATTN_OK)
      return;
    z.ctx = z.own;
  }
  pool_params(r, &z.p);
  size_t page = 0, slot = 0, total = 0;
  const int sized = lpattn_kv_pool_size(&z.p, &page, &slot, &total) == LPATTN_OK;
  /* Memory: 0 library, 1 caller, 2 caller too small, 3 misaligned, 4 larger. */
  int mode = fz_pick(r, 3) ? fz_pick(r, 2) : 2 + fz_pick(r, 3);
  const int garbage = mode && fz_rare(r, 8);
  size_t want = sized ? total : 4096;
  if (mode == 2) want = want > 1 ? want - 1 - (size_t)fz_pick(r, 2) * 255 : 0;
  if (mode == 4) want += 1 + fz_pick(r, 300);
  if (sized && total > ((size_t)64 << 20)) mode = 2, want = 4096; /* too large to hold */
  const size_t off = mode == 3 ? 16 * (1 + (size_t)fz_pick(r, 15)) : 0;
  if (mode && want <= ((size_t)64 << 20)) {
    z.alloc = want;
    const size_t all = (AG + off + want + AG + 255) / 256 * 256;
    z.base = (uint8_t *)aligned_alloc(256, all);
    if (!z.base) abort();
    memset(z.base, FZ_GUARD_BYTE, all);
    z.mem = z.base + AG + off;
    if (garbage) for (size_t i = 0; i < want; i++) z.mem[i] = (uint8_t)fz_next(r);
    else memset(z.mem, 0, want);
    FZ_POISON(z.base, AG + off);
    FZ_POISON(z.mem + want, all - AG - off - want);
  }
  uint8_t *caller = z.mem, *payload_before = NULL;
  if (caller) {
    payload_before = (uint8_t *)malloc(z.alloc ? z.alloc : 1);
    memcpy(payload_before, caller, z.alloc);
  }
  z.pool = (lpattn_kv_pool *)&z;
  const lpattn_status s =
      lpattn_kv_pool_create(z.ctx, &z.p, mode ? caller : NULL, z.alloc, &z.pool);
  FZ_ASSERT((s == LPATTN_OK) == (z.pool != NULL), "pool create: status and pool disagree");
  FZ_ASSERT(s != LPATTN_OK || (sized && !(caller && (mode == 2 || mode == 3))),
            "pool create accepted a bad pool");
  if (caller)
    FZ_ASSERT(s == LPATTN_OK || !memcmp(payload_before, caller, z.alloc),
              "failed pool create wrote caller memory");
  if (s == LPATTN_OK) {
    FZ_ASSERT(lpattn_kv_pool_bytes(z.pool) == total, "pool bytes %zu, size said %zu",
              lpattn_kv_pool_bytes(z.pool), total);
    z.bytes = total;
    z.mem = z.pool->mem;
    FZ_ASSERT(!caller || z.mem == caller, "pool not in caller memory");
    lp_kv_layout_init(&z.L, &z.pool->p);
    FZ_ASSERT(z.L.slot_bytes == slot && z.L.page_bytes == page, "layout and pool size disagree");
    z.snap = (uint8_t *)malloc(total ? total : 1);
    z.tainted = garbage;
    for (int i = 0; i < MAXS; i++) {
      z.len[i] = garbage ? -1 : 0;
      fresh_row(&z, i);
    }
    if (z.p.precision == LPATTN_PREC_FP8_STATIC) do_descales(&z, r);
    const int steps = 1 + fz_pick(r, 6), free_at = z.own ? fz_pick(r, steps + 1) : -1;
    for (int i = 0; i < steps && z.p.num_pages <= 64; i++) {
      if (i == free_at) { /* the context goes before its pool */
        lpattn_free(z.own);
        z.own = NULL, z.detached = 1;
        z.ctx = NULL;
        if (!caller) z.mem = NULL; /* released with the context */
      }
      const int op = i == 0 ? 0 : fz_pick(r, 8); /* a first append fills the pool */
      if (op < 4) do_append(&z, r);
      else if (op < 7) do_decode(&z, r);
      else do_copy(&z, r);
    }
    if (z.own && fz_pick(r, 2)) lpattn_free(z.own), z.own = NULL;
    FZ_ASSERT(lpattn_kv_pool_bytes(z.pool) == total, "pool bytes changed");
    lpattn_kv_pool_free(z.pool);
  }
  lpattn_free(z.own);
  if (z.base) {
    const size_t all = (AG + off + z.alloc + AG + 255) / 256 * 256;
    FZ_UNPOISON(z.base, all);
    for (size_t i = 0; i < all; i++)
      FZ_ASSERT((z.base + i >= caller && z.base + i < caller + z.alloc) ||
                    z.base[i] == FZ_GUARD_BYTE,
                "guard byte %zu of caller pool memory written", i);
    free(z.base);
  }
  free(payload_before), free(z.snap);
}
