/* Host-only equivalence check of the paged decode's dispatch plan (issue 30
 * item 2): the decisions of kv_pool.cu's decode_setup, the variant entry of
 * templates/gpu/kernel_decode.cu.j2 and lpd_launch / lph_grid as they were
 * before backends/gpu/gpu_decode_plan.h (copied below from commit f7ee9b1)
 * against lp_gpu_decode_plan_make over every combination of the grid below:
 * status, kernel, grid, block, chunks and every workspace offset and size.
 * Prints the point count; exit 1 on the first difference. Run by
 * scripts/plan_equiv.sh (no GPU, no CUDA). */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_decode_plan.h"

/* ---- the old decision code ------------------------------------------------ */
struct Old {
  int st, kernel, pasa, nchunk, words, quant_q, select;
  unsigned grid[3], block;
  size_t o, l, h, qc, qs, qo, sel, need;
};
static int old_has(int64_t D, int dt) { return (D == 64 || D == 128 || D == 256) && (dt == LPATTN_F16 || dt == LPATTN_BF16); }
static void old_decide(const lp_gpu_decode_problem *p, int hip, Old *o) {
  memset(o, 0, sizeof *o);
  o->st = LPATTN_ERR_UNSUPPORTED;
  if (p->qdt != p->hdt) return;
  if (!p->unit_strides || p->score_f16) return;
  if (!old_has(p->D, p->hdt)) return;
  const int ns = p->num_seqs, Hq = p->Hq, D = p->D, Sq = p->Sq;
  if (Sq < 1 || Sq > p->T) { o->st = LPATTN_ERR_INVALID_ARGUMENT; return; }
  const int64_t span = (int64_t)p->T * LP_DECODE_CHUNK_TILES;
  const int shard = p->sharded;
  const int nchunk = (int)((p->max_length + span - 1) / span > 0 ? (p->max_length + span - 1) / span : 1) + shard;
  const size_t rows = (size_t)nchunk * ns * Hq * Sq, qrows = (size_t)ns * Hq * Sq;
  const size_t qbytes = p->has_low && hip ? (qrows * (D + D / 16 + 4) + 16 + 255) / 256 * 256 : 0;
  const int64_t maxtiles = (p->max_length + p->T - 1) / p->T;
  const int words = p->has_qmean ? (int)((maxtiles + 31) / 32 > 0 ? (maxtiles + 31) / 32 : 1) : 0;
  const size_t sbytes = ((size_t)ns * Hq * 2 * words * 4 + 255) / 256 * 256;
  o->need = rows * ((size_t)D + 2) * 4 + qbytes + sbytes;
  o->nchunk = nchunk;
  o->o = 0, o->l = rows * D * 4, o->h = o->l + rows * 4; /* part + rows * D, part_l + rows */
  if (p->has_low && hip) {
    const size_t qb = o->h + rows * 4;
    const int G = p->fmt == LPATTN_FMT_MXFP4 ? 32 : 16;
    const size_t oo = (qrows * (D + D / G) + 15) / 16 * 16;
    o->qc = qb, o->qs = qb + qrows * D, o->qo = qb + oo, o->quant_q = 1;
  }
  if (p->has_qmean) o->sel = o->h + rows * 4 + qbytes, o->words = words, o->select = 1;
  /* the entry: PASA pools f16 only; the kernel by format */
  if (p->pasa && (p->hdt != LPATTN_F16 || hip)) { o->st = LPATTN_ERR_UNSUPPORTED; return; }
  o->pasa = p->pasa;
  if (!p->has_low) o->kernel = LP_DEC_HIGH;
  else if (p->fmt == LPATTN_FMT_NVFP4) o->kernel = LP_DEC_NVFP4;
  else if (p->fmt == LPATTN_FMT_MXFP4) o->kernel = LP_DEC_MXFP4;
  else o->kernel = LP_DEC_FP8;
  /* lpd_launch (8 rows, 128 threads), lph_grid (LPH_R 8, LPH_NT 256) */
  const int G = p->Hq / p->Hkv, nrb = (G * Sq + 7) / 8;
  o->grid[0] = (unsigned)nchunk, o->grid[1] = (unsigned)(p->Hkv * nrb), o->grid[2] = (unsigned)ns;
  o->block = hip ? 256 : 128;
  o->st = LPATTN_OK;
}

static int fail(const char *what, long long a, long long b, int n) {
  fprintf(stderr, "decode_plan_equiv: point %d: %s: old %lld, plan %lld\n", n, what, a, b);
  return 1;
}

int main(void) {
  static const int Ds[] = {64, 80, 128, 256}, hqkv[][2] = {{1, 1}, {8, 8}, {32, 8}, {16, 1}, {128, 1}, {12, 4}};
  static const int Ts[] = {16, 64}, Sqs[] = {0, 1, 2, 5, 16, 64, 65}, nss[] = {1, 3, 16};
  static const int64_t lens[] = {0, 1, 63, 64, 1024, 1025, 32768, 40001};
  int n = 0;
  for (int hip = 0; hip < 2; hip++)
  for (int D : Ds) for (auto &h : hqkv) for (int T : Ts) for (int Sq : Sqs) for (int ns : nss)
  for (int64_t len : lens) for (int hdt = LPATTN_F16; hdt <= LPATTN_BF16; hdt++)
  for (int low = 0; low < 4; low++) for (int thr = 0; thr < 2; thr++) for (int pasa = 0; pasa < 2; pasa++)
  for (int misc = 0; misc < 5; misc++) for (int sh = 0; sh < 2; sh++) {
    lp_gpu_decode_problem p;
    memset(&p, 0, sizeof p);
    p.D = D, p.Hq = h[0], p.Hkv = h[1], p.T = T, p.Sq = Sq, p.num_seqs = ns, p.max_length = len;
    p.hdt = (lpattn_dtype)hdt, p.qdt = misc == 1 ? (hdt == LPATTN_F16 ? LPATTN_BF16 : LPATTN_F16) : p.hdt;
    p.has_low = low > 0, p.fmt = low > 0 ? low - 1 : 0, p.has_qmean = thr, p.pasa = pasa;
    p.unit_strides = misc != 2, p.score_f16 = misc == 3, p.sharded = sh;
    Old o;
    old_decide(&p, hip, &o);
    lp_gpu_decode_dev dev = {hip, hip ? 256 : 128, 8, old_has};
    lp_gpu_decode_plan q;
    lp_gpu_decode_plan_make(&p, &dev, &q);
    /* HIP pools refuse PASA at creation (kv_pool.cu); the HIP entry also did */
    if (hip && pasa && q.st == LPATTN_OK) q.st = LPATTN_ERR_UNSUPPORTED;
    n++;
    if (o.st != q.st) return fail("status", o.st, q.st, n);
    if (o.st != LPATTN_OK) continue;
    if (o.need != q.ws) return fail("workspace", (long long)o.need, (long long)q.ws, n);
    if (o.kernel != q.k.kernel || o.pasa != q.k.pasa) return fail("kernel", o.kernel, q.k.kernel, n);
    for (int i = 0; i < 3; i++) if (o.grid[i] != q.k.grid[i]) return fail("grid", o.grid[i], q.k.grid[i], n);
    if (o.block != q.k.block) return fail("block", o.block, q.k.block, n);
    if (o.nchunk != q.nchunk || o.words != q.words) return fail("chunks/words", o.nchunk, q.nchunk, n);
    if (o.quant_q != q.quant_q || o.select != q.select) return fail("launches", o.quant_q, q.quant_q, n);
    const size_t a[] = {o.o, o.l, o.h}, b[] = {q.at_o, q.at_l, q.at_h};
    for (int i = 0; i < 3; i++) if (a[i] != b[i]) return fail("partial offsets", (long long)a[i], (long long)b[i], n);
    if (o.quant_q && (o.qc != q.at_qc || o.qs != q.at_qs || o.qo != q.at_qo)) return fail("query offsets", (long long)o.qo, (long long)q.at_qo, n);
    if (o.select && o.sel != q.at_sel) return fail("selection offset", (long long)o.sel, (long long)q.at_sel, n);
  }
  printf("decode_plan_equiv: %d points, plan == old decisions\n", n);
  return 0;
}
