/* Host-only equivalence check of the prefill dispatch plan (issue 30 item 2):
 * the decisions of gpu_prefill.cu and the kernel entry as they were before
 * backends/gpu/gpu_plan.h (copied below from commit d021e51: the fronts'
 * checks and workspace carving, gpu_attn_spec, gpu_wg_ok, gpu_wg8s_ok, the
 * launch grids of gpu_attn_launch and gpu_wg_go) against lp_gpu_attn_plan_make
 * over every combination of the grid below. Prints the point count; exit 1
 * on the first difference. Build and run (no GPU, no CUDA):
 *   scripts/plan_equiv.sh   */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_plan.h"

/* ---- the old decision code ------------------------------------------------ */
struct Old {
  int st; /* 0 OK, 1 UNSUPPORTED (+ why), 2 other status */
  int why, status;
  int path, spec, second, codes_in;
  unsigned grid[3], block;
  size_t used, at[LP_WS_N];
  int qd, kd, init_o, sel;
};
static size_t carve(size_t *used, size_t bytes) { size_t at = *used; *used += (bytes + 255) / 256 * 256; return at; }
static int qview_alloc(size_t *used, lpattn_format f, lpattn_axis ax, const int64_t shape[4], size_t off[3]) {
  size_t cb, sb, oc;
  lpattn_status s = lpattn_qtensor_sizes(f, ax, 64, shape, &cb, &sb, &oc);
  if (s != LPATTN_OK) return s;
  off[0] = carve(used, cb), off[1] = carve(used, sb ? sb : 1), off[2] = carve(used, (oc ? oc : 1) * 4);
  return LPATTN_OK;
}
/* gpu_attn_spec (lp_gpu_attn.cuh), GPU_ASYNC = dequant_kv */
static int old_spec(int pasa, int score_f16, int prec, int sel, int kd, int low, int async) {
  if (pasa || score_f16) return -1;
  if (prec == LPATTN_PREC_HIGH) return sel || kd ? -1 : 0;
  if (async && !kd) return -1;
  return low >= 0 && low <= 2 ? 1 + low : -1;
}
struct OldDev { /* the old code's view of the device */
  int cc, warp, dequant_kv, no_wgmma, wg_image;
  int (*has_variant)(int64_t D, int dtype);
  int cuda; /* the entries have the sm_90a kernels */
};
static void old_decide(const lpattn_attn_problem *pr, const OldDev *dev, Old *o) {
  memset(o, 0, sizeof *o);
  const int B = (int)pr->B, Hq = (int)pr->Hq, Hkv = (int)pr->Hkv, Sq = (int)pr->Sq, Skv = (int)pr->Skv, D = (int)pr->D;
  const int64_t GPU_OFF_MAX = 1 << 30;
  const bool wgmma_off = dev->no_wgmma;
  if (pr->precision == LPATTN_PREC_FP8_STATIC) { /* gpu_attention_fp8s */
    bool fn = dev->has_variant(pr->D, LPATTN_F16);
    if (!fn || D != 128 || dev->cc != 90 || wgmma_off || (pr->causal && (pr->off > GPU_OFF_MAX || pr->off < -GPU_OFF_MAX)))
      { o->st = 1, o->why = LP_PLAN_FP8S_DEV; return; }
    if (pr->Bk != 64) { o->st = 1, o->why = LP_PLAN_FP8S_BK; return; }
    const bool codes_in = pr->q->dtype == LPATTN_E4M3 && pr->q->stride[3] == 1 && pr->k->stride[3] == 1;
    const int64_t Sp = ((int64_t)Skv + 63) / 64 * 64;
    o->at[LP_WS_V8] = carve(&o->used, (size_t)B * Hkv * D * Sp);
    o->at[LP_WS_JMIN] = carve(&o->used, (size_t)B * Hkv * D * 4);
    o->at[LP_WS_Q8] = codes_in ? 0 : carve(&o->used, (size_t)B * Hq * Sq * D);
    o->at[LP_WS_K8] = codes_in ? 0 : carve(&o->used, (size_t)B * Hkv * Skv * D);
    o->codes_in = codes_in;
    /* the f16 d128 entry: gpu_wg8s_ok (have: the image, LPATTN_NO_WGMMA) */
    int have = dev->cc == 90 ? (dev->no_wgmma ? 0 : dev->wg_image) : -1;
    if (!dev->cuda || !(have > 0 && dev->cc == 90 && dev->warp == 32)) /* HIP's entry: UNSUPPORTED */ { o->st = 1, o->why = LP_PLAN_FP8S_IMAGE; return; }
    o->path = LP_PATH_WG8S, o->spec = -1;
    o->grid[0] = (unsigned)((Sq + 127) / 128), o->grid[1] = Hq, o->grid[2] = B, o->block = 384; /* gpu_wg8_cfg */
    return;
  }
  const lpattn_dtype dt = pr->q->dtype;
  if (pr->k->dtype != dt || (dt != LPATTN_F16 && dt != LPATTN_BF16)) { o->st = 1, o->why = LP_PLAN_ARGS; return; }
  if (pr->Bq != 64 || pr->Bk != 64) { o->st = 1, o->why = LP_PLAN_ARGS; return; }
  if (pr->causal && (pr->off > GPU_OFF_MAX || pr->off < -GPU_OFF_MAX)) { o->st = 1, o->why = LP_PLAN_ARGS; return; }
  if (pr->pasa && dt != LPATTN_F16) { o->st = 1, o->why = LP_PLAN_ARGS; return; }
  if (!dev->has_variant(pr->D, dt)) { o->st = 1, o->why = LP_PLAN_ARGS; return; }
  const int nkt = (Skv + 63) / 64, nqt = (Sq + 63) / 64;
  const bool low = pr->precision != LPATTN_PREC_HIGH, thrift = pr->precision == LPATTN_PREC_THRIFT;
  const int GPU_DEQUANT_KV = dev->dequant_kv;
  size_t *u = &o->used;
  const bool wgl = GPU_DEQUANT_KV && low && !thrift && !pr->pasa && !pr->score_f16 && dev->cc == 90 && !wgmma_off;
  const bool wgl_part = wgl && pr->causal && !pr->leaky;
  const bool qcopy = wgl && !lp_gpu_wg8_takes(pr->low, (int)pr->D);
  const int64_t qs[4] = {B, Hq, Sq, D}, ks[4] = {B, Hkv, Skv, D};
  if (low) {
    int s;
    if ((s = qview_alloc(u, pr->low, LPATTN_AXIS_D, qs, &o->at[LP_WS_QLOW])) ||
        (s = qview_alloc(u, pr->low, LPATTN_AXIS_D, ks, &o->at[LP_WS_KLOW])) ||
        (s = qview_alloc(u, pr->low, LPATTN_AXIS_S, ks, &o->at[LP_WS_VLOW]))) {
      o->st = s == LPATTN_ERR_UNSUPPORTED ? 1 : 2, o->why = LP_PLAN_ARGS, o->status = s;
      return;
    }
    if (GPU_DEQUANT_KV) {
      o->at[LP_WS_KBF16] = carve(u, (size_t)B * Hkv * Skv * D * 2);
      o->at[LP_WS_VBF16] = carve(u, (size_t)B * Hkv * Skv * D * 2);
      if (qcopy) o->at[LP_WS_QBF16] = carve(u, (size_t)B * Hq * Sq * D * 2);
      if (wgl_part) {
        o->at[LP_WS_INIT_O] = carve(u, (size_t)B * Hq * Sq * D * 4);
        o->at[LP_WS_INIT_ST] = carve(u, (size_t)B * Hq * Sq * 16);
      }
    }
  }
  if (thrift || pr->pasa) o->at[LP_WS_KMEAN] = carve(u, (size_t)B * Hkv * nkt * D * 4);
  if (thrift) o->at[LP_WS_SEL] = carve(u, (size_t)B * Hq * nqt * pr->thrift_k * 4);
  if (thrift) { /* lp_gpu_select.cuh's Qbar rows and KMAX scores, one set per KV head under GQA */
    const int64_t Hs = (pr->thrift_rule & LPATTN_THRIFT_RULE_GQA) ? Hkv : Hq;
    o->at[LP_WS_QBAR] = carve(u, (size_t)B * Hs * nqt * D * 4);
    if (pr->thrift_rule & LPATTN_THRIFT_RULE_KMAX) o->at[LP_WS_KMAX] = carve(u, (size_t)B * Hs * nqt * nkt * 4);
  }
  /* the arguments the entry sees */
  o->kd = low && GPU_DEQUANT_KV, o->qd = low && GPU_DEQUANT_KV && qcopy;
  o->init_o = low && GPU_DEQUANT_KV && wgl_part, o->sel = thrift;
  const int vec16 = lp_plan_vec16(pr->q) && lp_plan_vec16(pr->k) && lp_plan_vec16(pr->v);
  /* the entry (kernel_attn.cu.j2): switch (gpu_attn_spec), gpu_wg_ok */
  const int spec = old_spec(pr->pasa, pr->score_f16, pr->precision, o->sel, o->kd, pr->low, GPU_DEQUANT_KV);
  o->spec = spec;
  int have = dev->cc == 90 ? (dev->no_wgmma ? 0 : dev->wg_image) : -1;
  bool ok = dev->cuda; /* the HIP entry has no sm_90a kernels */
  if (have <= 0 || dev->cc != 90 || dev->warp != 32) ok = false;
  bool wg = false;
  if (ok && spec == 0) wg = vec16;
  else if (ok && spec > 0)
    wg = (o->qd || lp_gpu_wg8_takes(pr->low, pr->D)) && o->kd && o->kd /* vd */ && !o->sel &&
         (!pr->causal || pr->leaky || o->init_o);
  o->path = LP_PATH_MMA;
  if (wg) o->path = spec == 0 ? LP_PATH_WG : lp_gpu_wg8_takes(pr->low, pr->D) ? LP_PATH_WG8 : LP_PATH_WGL;
  o->second = wg && spec > 0 && o->init_o;
  if (!wg) { /* gpu_attn_launch */
    o->grid[0] = nqt, o->grid[1] = Hq, o->grid[2] = B, o->block = 4 * dev->warp;
  } else { /* gpu_wg_go: gpu_wg_cfg<D> (NW = D == 64 ? 3 : 2), gpu_wgl_cfg, gpu_wg8_cfg */
    const int NW = D == 64 ? 3 : 2, BQ = spec == 0 ? 64 * NW : 128, NT = spec == 0 ? 128 * (NW + 1) : 384;
    o->grid[0] = (unsigned)((Sq + BQ - 1) / BQ), o->grid[1] = Hq, o->grid[2] = B, o->block = NT;
  }
}

/* ---- the grid --------------------------------------------------------------- */
/* the built variants: the old code found them in the registry, the plan reads gen/paths.inc */
static int built(int64_t D, int dt) { return (D == 64 || D == 128 || D == 256) && (dt == LPATTN_F16 || dt == LPATTN_BF16); }
static int built_hip(int64_t D, int dt) { return (D == 64 || D == 128) && (dt == LPATTN_F16 || dt == LPATTN_BF16); }
#define LPATTN_ATTN_PATHS(set, hd, dt, paths) {#set[0] == 'D', hd, dt, paths},
static const int cuda_rows[][4] = {
#include "../backends/cuda/gen/paths.inc"
    {0, 0, 0, 0}};
static const int hip_rows[][4] = {
#include "../backends/hip/gen/paths.inc"
    {0, 0, 0, 0}};
#undef LPATTN_ATTN_PATHS
static int find_paths(const int (*rows)[4], int64_t D, int dt) {
  for (int i = 0; rows[i][3]; i++)
    if (rows[i][0] && rows[i][1] == D && rows[i][2] == dt) return rows[i][3]; /* DEFAULT rows */
  return 0;
}
static int paths_cuda(int64_t D, int dt) { return find_paths(cuda_rows, D, dt); }
static int paths_hip(int64_t D, int dt) { return find_paths(hip_rows, D, dt); }

static long npts, ntaken, npath[6];
static int cmp(const lpattn_attn_problem *pr, const OldDev *dev) {
  Old o;
  lp_gpu_attn_plan p;
  /* A sliding window or a softcap (after the old code, which never saw one
   * on a GPU): the mma.sync kernels (_plain_win, _win), as with
   * LPATTN_NO_WGMMA=1, an offset within the kernels' int range (static FP8:
   * core refuses them before the plan) */
  const bool win = lp_gpu_win_any(pr->causal, (int)pr->window_left, (int)pr->window_right, pr->softcap) &&
                   pr->precision != LPATTN_PREC_FP8_STATIC;
  OldDev od = *dev;
  if (win) od.no_wgmma = 1;
  old_decide(pr, &od, &o);
  const bool wmask = win && lp_gpu_win_any(pr->causal, (int)pr->window_left, (int)pr->window_right, 0.0f);
  if (wmask && o.st == 0 && (pr->off > ((int64_t)1 << 30) || pr->off < -((int64_t)1 << 30)))
    o.st = 1, o.why = LP_PLAN_ARGS;
  const lp_gpu_dev nd = {dev->cc, dev->warp, dev->dequant_kv, dev->no_wgmma, dev->wg_image,
                         dev->cuda ? paths_cuda : paths_hip};
  const int taken = lp_gpu_attn_plan_make(pr, &nd, &p);
  /* HIP: the paths of its gen/paths.inc (no sm_90a kernels), whatever its cc */
  npts++;
  bool same = true;
  if (o.st) {
    same = !taken && p.why == o.why && (o.st != 2 || p.st == o.status);
    if (o.st == 1 && o.why == LP_PLAN_FP8S_IMAGE) same = same && p.ws == o.used; /* sized before the entry said no */
  } else {
    same = taken && p.path == o.path && p.spec == o.spec && p.second == o.second && p.ws == o.used &&
           !memcmp(p.grid, o.grid, sizeof o.grid) && p.block == o.block && p.codes_in == o.codes_in &&
           (p.q_bf16 != 0) == (o.qd != 0) && (p.kv_bf16 != 0) == (o.kd != 0) && (p.split != 0) == (o.init_o != 0) &&
           (p.sel != 0) == (o.sel != 0);
    for (int i = 0; i < LP_WS_N; i++) same = same && p.at[i] == o.at[i];
    if (p.path != LP_PATH_WG8S) /* a.nqx of the mma.sync launch (fallback, split's second): old nqt */
      same = same && p.mma_grid[0] == (unsigned)((pr->Sq + 63) / 64) && p.mma_grid[1] == (unsigned)pr->Hq &&
             p.mma_grid[2] == (unsigned)pr->B && p.mma_block == (unsigned)(4 * dev->warp);
    if (same) ntaken++, npath[p.path]++;
  }
  if (!same) {
    fprintf(stderr, "DIFF prec=%d D=%lld dt=%d causal=%d leaky=%d pasa=%d sf16=%d Sq=%lld Skv=%lld Hq=%lld Hkv=%lld "
            "cc=%d nowg=%d img=%d cuda=%d: old st=%d why=%d path=%d spec=%d ws=%zu grid=%u,%u,%u block %u; new taken=%d "
            "why=%d path=%d spec=%d ws=%zu grid=%u,%u,%u block %u\n", pr->precision, (long long)pr->D, pr->q->dtype,
            pr->causal, pr->leaky, pr->pasa, pr->score_f16, (long long)pr->Sq, (long long)pr->Skv, (long long)pr->Hq,
            (long long)pr->Hkv, dev->cc, dev->no_wgmma, dev->wg_image, dev->cuda, o.st, o.why, o.path, o.spec, o.used,
            o.grid[0], o.grid[1], o.grid[2], o.block, taken, p.why, p.path, p.spec, p.ws, p.grid[0], p.grid[1], p.grid[2],
            p.block);
    return 1;
  }
  return 0;
}

static void mk(lpattn_tensor *t, lpattn_dtype dt, int64_t B, int64_t H, int64_t S, int64_t D, int odd) {
  memset(t, 0, sizeof *t);
  t->data = (void *)(uintptr_t)(odd == 2 ? 0x1008 : 0x1000), t->dtype = dt;
  const int64_t sh[4] = {B, H, S, D};
  memcpy(t->shape, sh, sizeof sh);
  t->stride[3] = odd == 1 ? 2 : 1, t->stride[2] = D * t->stride[3], t->stride[1] = S * t->stride[2], t->stride[0] = H * t->stride[1];
}

int main(void) {
  static const int64_t Ds[] = {64, 128, 256, 96}, Ss[] = {0, 1, 63, 64, 65, 127, 128, 129, 1000, 4096};
  static const int64_t G[][2] = {{1, 1}, {4, 4}, {8, 2}, {8, 1}, {6, 3}};
  static const int ccs[] = {80, 86, 89, 90, 120};
  static const lpattn_dtype dts[] = {LPATTN_F16, LPATTN_BF16, LPATTN_F32, LPATTN_E4M3};
  int bad = 0;
  for (int back = 0; back < 2; back++)                     /* CUDA, HIP (nvcc shim) */
  for (int ic = 0; ic < 5; ic++) for (int nowg = 0; nowg < 2; nowg++) for (int img = 0; img < 2; img++)
  for (int warp = 32; warp <= 64; warp += 32) {
    if (back == 0 && warp == 64) continue;
    OldDev dev = {ccs[ic], warp, back ? 0 : 1, nowg, img, back ? built_hip : built, !back};
    for (int prec = 0; prec <= LPATTN_PREC_FP8_STATIC; prec++) for (int lowf = 0; lowf < 3; lowf++)
    for (unsigned id = 0; id < 4; id++) for (unsigned idt = 0; idt < 4; idt++)
    for (int mask = 0; mask < 4; mask++) for (int feat = 0; feat < 4; feat++) /* pasa, score_f16 */
    for (unsigned iq = 0; iq < 10; iq++) for (unsigned ik = 0; ik < 10; ik += (iq < 3 ? 1 : 3))
    for (unsigned ig = 0; ig < 5; ig++) for (int lay = 0; lay < 3; lay++) { /* layouts: plain, strided, misaligned */
      if (prec == LPATTN_PREC_HIGH && lowf) continue;
      if ((prec != LPATTN_PREC_THRIFT && prec != LPATTN_PREC_FP8_STATIC) && prec != LPATTN_PREC_HIGH && lowf) continue;
      if (lay && (iq % 3 || ig > 1)) continue;
      const int64_t D = Ds[id], B = 2, Hq = G[ig][0], Hkv = G[ig][1], Sq = Ss[iq], Skv = Ss[ik];
      const lpattn_dtype dt = dts[idt];
      const int64_t Dp = D == 96 ? 128 : D; /* gpu_attention pads before planning (unchanged) */
      lpattn_tensor q, k, v, out;
      mk(&q, dt, B, Hq, Sq, Dp, lay), mk(&k, dt, B, Hkv, Skv, Dp, lay), mk(&v, dt, B, Hkv, Skv, Dp, lay);
      mk(&out, LPATTN_F32, B, Hq, Sq, Dp, 0);
      lpattn_attn_problem pr;
      memset(&pr, 0, sizeof pr);
      pr.window_left = pr.window_right = -1;
      pr.q = &q, pr.k = &k, pr.v = &v, pr.out = &out;
      pr.B = B, pr.Hq = Hq, pr.Hkv = Hkv, pr.Sq = Sq, pr.Skv = Skv, pr.D = Dp;
      pr.causal = mask == 1 || mask == 2, pr.leaky = mask == 2;
      if (mask == 3) pr.window_left = 100, pr.window_right = 0; /* window: the _win kernel (cmp) */
      pr.Bq = pr.Bk = 64, pr.precision = (lpattn_precision)prec;
      pr.low = prec == LPATTN_PREC_HIGH ? LPATTN_FMT_NVFP4 : prec == LPATTN_PREC_THRIFT || prec == LPATTN_PREC_FP8_STATIC
               ? (lpattn_format)lowf : prec == LPATTN_PREC_FP8 ? LPATTN_FMT_FP8 : prec == LPATTN_PREC_NVFP4 ? LPATTN_FMT_NVFP4 : LPATTN_FMT_MXFP4;
      pr.thrift_k = prec == LPATTN_PREC_THRIFT ? 1 + (int)((Skv + 63) / 64) / 3 : 0;
      pr.pasa = feat & 1, pr.score_f16 = (feat >> 1) & 1, pr.off = Skv - Sq;
      bad |= cmp(&pr, &dev);
      if (iq == 5 && ik == 6 && ig == 0 && !lay) { /* edges: offsets out of range, blocks, thrift_rule */
        lpattn_attn_problem e = pr;
        e.off = ((int64_t)1 << 30) + 1, bad |= cmp(&e, &dev);
        e.off = -((int64_t)1 << 30) - 1, bad |= cmp(&e, &dev);
        if (!pr.causal && pr.window_left < 0) { /* a softcap alone reads no offset */
          e = pr, e.softcap = 30.0f, e.off = ((int64_t)1 << 30) + 1, bad |= cmp(&e, &dev);
          e.window_right = 8, bad |= cmp(&e, &dev); /* a window does */
        }
        e = pr, e.Bk = 128, bad |= cmp(&e, &dev);
        e = pr, e.Bq = 32, bad |= cmp(&e, &dev);
        e = pr, e.thrift_rule = 7, bad |= cmp(&e, &dev);
        lpattn_tensor k2 = k;
        k2.dtype = dt == LPATTN_F16 ? LPATTN_BF16 : LPATTN_F16;
        e = pr, e.k = &k2, bad |= cmp(&e, &dev);
      }
      if (bad) return 1;
    }
  }
  /* tests/cuda/test_cuda_attn.c: wg8_takes (the plan of an f16 call) against its old
   * wg8_device rule (D == 128, no PASA, a 9.0 device, LPATTN_NO_WGMMA unset) */
  long ntest = 0;
  for (int ic = 0; ic < 5; ic++) for (int nowg = 0; nowg < 2; nowg++) for (int id = 0; id < 4; id++)
  for (int pasa = 0; pasa < 2; pasa++) for (int prec = 0; prec <= LPATTN_PREC_FP8_STATIC; prec++) {
    const int64_t D = Ds[id];
    lp_gpu_dev dev = {ccs[ic], 32, 1, nowg, 1, paths_cuda};
    const int now = prec == LPATTN_PREC_FP8 && lp_gpu_plan_probe(D, (lpattn_precision)prec, pasa, &dev) == LP_PATH_WG8;
    /* (D = 96: the call pads on to 128, lp_gpu_plan_dim) */
    const int old = prec == LPATTN_PREC_FP8 && (D == 128 || D == 96) && !pasa && ccs[ic] == 90 && !nowg;
    ntest++;
    if (now != old) return fprintf(stderr, "DIFF test rule cc=%d nowg=%d D=%lld pasa=%d prec=%d\n", ccs[ic], nowg, (long long)D, pasa, prec), 1;
  }
  printf("plan_equiv: the test's wg8 rule: %ld points, all the same\n", ntest);
  printf("plan_equiv: %ld points, all the same (%ld taken: mma %ld, wg %ld, wgl %ld, wg8 %ld, wg8s %ld)\n", npts, ntaken,
         npath[LP_PATH_MMA], npath[LP_PATH_WG], npath[LP_PATH_WGL], npath[LP_PATH_WG8], npath[LP_PATH_WG8S]);
  return 0;
}
