/* The dispatch plan of a GPU prefill call (issue 30 item 2): from the
 * resolved problem, the device (compute capability, warp width, whether the
 * sm_90a images are usable) and LPATTN_NO_WGMMA, one function decides
 * whether the call is taken, which kernel path runs it, its grid and block,
 * and every workspace buffer. gpu_prefill.cu sizes and fills the workspace
 * from it and sets the kernel arguments it implies (qd/kd/vd, init_o, sel),
 * which is what the variant's entry (templates/gpu/kernel_attn.cu.j2,
 * gpu_wg_ok) then reads; tests/cuda/test_cuda_attn.c asks it which path a
 * call takes. Plain C (host only), so that C tests include it. The entry
 * still falls back to the mma.sync kernel where a TMA map cannot be made
 * (strides, alignment) or the shared memory does not fit: facts of the
 * tensors' addresses and the driver, not of the call's arguments. */
#ifndef LP_GPU_PLAN_H
#define LP_GPU_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "lp_gpu_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kernel paths of a prefill variant (the entry's extern "C" kernels) */
typedef enum {
  LP_PATH_NONE = 0, /* not taken: UNSUPPORTED (plan.why) */
  LP_PATH_MMA,      /* mma.sync / HIP kernel: _plain, _<fmt> (spec >= 0) or the generic one */
  LP_PATH_WG,       /* sm_90a HIGH: _wg (lp_gpu_attn_wg.cuh) */
  LP_PATH_WGL,      /* sm_90a low formats: _wgl_<fmt> (lp_gpu_attn_wgl.cuh) */
  LP_PATH_WG8,      /* sm_90a FP8 on E4M3 wgmma, D = 128: _wgl_fp8 (lp_gpu_attn_wg8.cuh) */
  LP_PATH_WG8S      /* static-scale FP8: _wg8s (lp_gpu_attn_wg8.cuh) */
} lp_gpu_path;

/* the kernels a variant's entry has (gen/paths.inc, from codegen/manifest.py attn_paths) */
enum { LP_PATHS_MMA = 1, LP_PATHS_WG = 2, LP_PATHS_WGL = 4, LP_PATHS_WG8 = 8, LP_PATHS_WG8S = 16 };

/* the device a call is planned for */
typedef struct {
  int cc;        /* compute capability, major * 10 + minor */
  int warp;      /* lanes of a warp (wave) */
  int dequant_kv;/* GPU_DEQUANT_KV: bf16 copies of low K/V that cp.async streams (CUDA) */
  int no_wgmma;  /* LPATTN_NO_WGMMA=1 */
  int wg_image;  /* the entry's kernels have sm_90a images here (gpu_wg_image; 1 unless known not) */
  /* LP_PATHS_* of the compiled attn variant (D, dtype), 0 where none (gen/paths.inc:
   * HIP's have no sm_90a kernels, though its cc of gfx90a reads 90) */
  int (*paths)(int64_t D, int dtype);
} lp_gpu_dev;

/* why a call is not taken (all LPATTN_ERR_UNSUPPORTED) */
enum {
  LP_PLAN_OK, LP_PLAN_FP8S_DEV, LP_PLAN_FP8S_BK, LP_PLAN_FP8S_IMAGE,
  LP_PLAN_ARGS /* dtype, blocks, offset, PASA dtype, no variant, sizes: no detail */
};

/* workspace buffer ids: byte offsets at[], total bytes ws */
enum {
  LP_WS_QLOW, LP_WS_KLOW = LP_WS_QLOW + 3, LP_WS_VLOW = LP_WS_KLOW + 3, /* codes, scales, outer */
  LP_WS_KBF16 = LP_WS_VLOW + 3, LP_WS_VBF16, LP_WS_QBF16, LP_WS_INIT_O, LP_WS_INIT_ST,
  LP_WS_KMEAN, LP_WS_SEL, LP_WS_QBAR, LP_WS_KMAX, /* THRIFT: selection lists, Qbar, KMAX scores */
  LP_WS_V8, LP_WS_JMIN, LP_WS_Q8, LP_WS_K8, /* static FP8: V^T codes, NaN marks, cast Q, K */
  LP_WS_N
};

typedef struct {
  lp_gpu_path path;   /* the kernel the entry launches first */
  int why;            /* path NONE: LP_PLAN_* (the front's error detail), else 0 */
  lpattn_status st;   /* path NONE: the status the front answers */
  lpattn_dtype dtype; /* the variant's dtype (static FP8: f16, whose entry has _wg8s) */
  int spec;           /* gpu_attn_spec of the arguments: -1 generic, 0 HIGH, 1 + fmt (a window or
                         softcap: _plain_win for 0, else _win) */
  int split;          /* causal low on sm_90a: init_o/init_st buffers in the arguments */
  int second;         /* the wgmma kernel's launch is followed by mma.sync's from that state */
  int low;            /* Q/K/V quantized into the workspace */
  int kv_bf16, q_bf16;/* bf16 copies of low K/V (every kernel on CUDA), of Q (wgl) */
  int kmean, sel;     /* key-tile means (THRIFT, PASA), THRIFT selection */
  int codes_in;       /* static FP8: E4M3 Q/K read in place (no cast) */
  int vec16;          /* 16-byte rows of q/k/v (HIGH on _wg) */
  unsigned grid[3], block;      /* of the first launch */
  unsigned mma_grid[3], mma_block; /* of the mma.sync launch (fallback, or split's second) */
  size_t at[LP_WS_N], has[LP_WS_N]; /* buffer offsets; has[i]: its bytes (0: none) */
  size_t ws;                    /* workspace bytes */
} lp_gpu_attn_plan;

static inline size_t lp_plan_carve(lp_gpu_attn_plan *p, int id, size_t bytes) {
  p->at[id] = p->ws, p->has[id] = bytes;
  p->ws += (bytes + 255) / 256 * 256; /* 256-byte aligned pieces (gpu_carve) */
  return p->at[id];
}
/* a quantized [shape] tensor: codes, scales, outer (qview_alloc) */
static inline int lp_plan_qview(lp_gpu_attn_plan *p, int id, lpattn_format f, lpattn_axis ax,
                                const int64_t shape[4]) {
  size_t cb, sb, oc;
  p->st = lpattn_qtensor_sizes(f, ax, 64, shape, &cb, &sb, &oc);
  if (p->st != LPATTN_OK) return 0;
  lp_plan_carve(p, id, cb), lp_plan_carve(p, id + 1, sb ? sb : 1), lp_plan_carve(p, id + 2, (oc ? oc : 1) * 4);
  return 1;
}
static inline void lp_plan_grid(unsigned g[3], int64_t Sq, int bq, int64_t Hq, int64_t B) {
  g[0] = (unsigned)((Sq + bq - 1) / bq), g[1] = (unsigned)Hq, g[2] = (unsigned)B;
}
/* rows a CTA of the sm_90a kernels takes (gpu_wg_cfg, gpu_wgl_cfg, gpu_wg8_cfg), threads */
static inline int lp_plan_bq(lp_gpu_path path, int64_t D) { return path == LP_PATH_WG ? 64 * LP_WG_NW(D) : 128; }
static inline int lp_plan_nt(lp_gpu_path path, int64_t D) { return path == LP_PATH_WG ? 128 * (LP_WG_NW(D) + 1) : 384; }

static inline int lp_plan_vec16(const lpattn_tensor *t) { /* vec_ok of gpu_backend.h */
  return t->stride[3] == 1 && t->stride[0] % 8 == 0 && t->stride[1] % 8 == 0 && t->stride[2] % 8 == 0 &&
         ((uintptr_t)t->data % 16) == 0;
}

/* Plans static-scale FP8 (SPEC 11): the E4M3 kernel of the f16 variant at D = 128. */
static inline int lp_gpu_plan_fp8s(const lpattn_attn_problem *pr, const lp_gpu_dev *dev, lp_gpu_attn_plan *p) {
  const int64_t B = pr->B, Hq = pr->Hq, Hkv = pr->Hkv, Sq = pr->Sq, Skv = pr->Skv, D = pr->D;
  const int64_t Sp = (Skv + 63) / 64 * 64, offmax = (int64_t)1 << 30;
  p->dtype = LPATTN_F16;
  const int paths = dev->paths(D, LPATTN_F16);
  if (!paths || D != 128 || dev->cc != 90 || dev->no_wgmma || /* the front's check (its detail says D = 128) */
      (pr->causal && (pr->off > offmax || pr->off < -offmax)))
    return p->why = LP_PLAN_FP8S_DEV, 0;
  if (pr->Bk != 64) return p->why = LP_PLAN_FP8S_BK, 0;
  p->codes_in = pr->q->dtype == LPATTN_E4M3 && pr->q->stride[3] == 1 && pr->k->stride[3] == 1;
  lp_plan_carve(p, LP_WS_V8, (size_t)(B * Hkv * D * Sp));
  lp_plan_carve(p, LP_WS_JMIN, (size_t)(B * Hkv * D * 4));
  if (!p->codes_in) {
    lp_plan_carve(p, LP_WS_Q8, (size_t)(B * Hq * Sq * D));
    lp_plan_carve(p, LP_WS_K8, (size_t)(B * Hkv * Skv * D));
  }
  /* gpu_wg8s_ok: an sm_90a image and 32-lane warps, else the entry answers UNSUPPORTED */
  if (!(paths & LP_PATHS_WG8S) || !dev->wg_image || dev->warp != 32) return p->why = LP_PLAN_FP8S_IMAGE, 0;
  p->path = LP_PATH_WG8S, p->spec = -1, p->st = LPATTN_OK;
  lp_plan_grid(p->grid, Sq, 128, Hq, B), p->block = 384;
  return 1;
}

/* Fills *p for call pr on dev; returns 1 when the call is taken (p->path != NONE),
 * 0 with p->why (LPATTN_ERR_UNSUPPORTED), p->ws still the workspace the front
 * sizes before the launch (static FP8 without an image). */
/* Whether call pr is one the sm_90a low-format kernels (wgl, wg8) take where
 * its variant has them: every tile low (no THRIFT, PASA or f16 scores), a
 * 9.0 device, no sliding window or softcap. gpu_prefill.cu passes over a
 * variant without them (D = 96) for the next larger that has them. */
static inline int lp_gpu_plan_wgl(const lpattn_attn_problem *pr, const lp_gpu_dev *dev) {
  const int win = lp_gpu_win_any(pr->causal, (int)pr->window_left, (int)pr->window_right, pr->softcap);
  const int low = pr->precision != LPATTN_PREC_HIGH && pr->precision != LPATTN_PREC_FP8_STATIC;
  return low && dev->dequant_kv && pr->precision != LPATTN_PREC_THRIFT && !pr->pasa && !pr->score_f16 &&
         dev->cc == 90 && !dev->no_wgmma && !win;
}
/* The head dim a prefill of head dim pr->D runs at on dev (gpu_prefill.cu
 * pads the call to it): the first built variant D' >= pr->D that has every
 * path the call needs (the sm_90a low kernels where lp_gpu_plan_wgl: CUDA's
 * D = 96 has none, so such calls run at 128); 0: none (UNSUPPORTED). */
static inline int64_t lp_gpu_plan_dim(const lpattn_attn_problem *pr, const lp_gpu_dev *dev) {
  const int need = lp_gpu_plan_wgl(pr, dev) ? LP_PATHS_WGL : 0;
  for (int64_t d = pr->D; d <= LP_HEAD_DIM_MAX; d++) {
    const int paths = dev->paths(d, pr->q->dtype);
    if (paths && (paths & need) == need) return d;
  }
  return 0;
}
static inline int lp_gpu_attn_plan_make(const lpattn_attn_problem *pr, const lp_gpu_dev *dev, lp_gpu_attn_plan *p) {
  memset(p, 0, sizeof *p);
  p->spec = -1, p->st = LPATTN_ERR_UNSUPPORTED;
  if (pr->precision == LPATTN_PREC_FP8_STATIC) return lp_gpu_plan_fp8s(pr, dev, p);
  const lpattn_dtype dt = pr->q->dtype;
  const int64_t B = pr->B, Hq = pr->Hq, Hkv = pr->Hkv, Sq = pr->Sq, Skv = pr->Skv, D = pr->D;
  const int64_t offmax = (int64_t)1 << 30;
  p->dtype = dt;
  if (pr->k->dtype != dt || (dt != LPATTN_F16 && dt != LPATTN_BF16)) return p->why = LP_PLAN_ARGS, 0;
  if (pr->Bq != 64 || pr->Bk != 64) return p->why = LP_PLAN_ARGS, 0;
  if (pr->causal && (pr->off > offmax || pr->off < -offmax)) return p->why = LP_PLAN_ARGS, 0;
  if (pr->pasa && dt != LPATTN_F16) return p->why = LP_PLAN_ARGS, 0;
  const int paths = dev->paths(D, dt);
  if (!paths) return p->why = LP_PLAN_ARGS, 0;
  const int wg8 = pr->low == LPATTN_FMT_FP8 && (paths & LP_PATHS_WG8); /* FP8 on E4M3 wgmma */
  const int64_t nkt = (Skv + 63) / 64, nqt = (Sq + 63) / 64;
  /* a sliding window or a softcap: the mma.sync kernels alone (gpu_wg_ok) */
  const int win = lp_gpu_win_any(pr->causal, (int)pr->window_left, (int)pr->window_right, pr->softcap);
  /* a window's bounds are offsets from the diagonal (int in the kernels); a
   * softcap alone does not read the offset */
  const int wmask = lp_gpu_win_any(pr->causal, (int)pr->window_left, (int)pr->window_right, 0.0f);
  if (wmask && (pr->off > offmax || pr->off < -offmax)) return p->why = LP_PLAN_ARGS, 0;
  const int thrift = pr->precision == LPATTN_PREC_THRIFT, wg_dev = dev->cc == 90 && !dev->no_wgmma && !win;
  p->low = pr->precision != LPATTN_PREC_HIGH;
  p->kv_bf16 = p->low && dev->dequant_kv;
  /* the sm_90a low kernels take calls whose every tile is low */
  const int wgl = lp_gpu_plan_wgl(pr, dev);
  p->split = wgl && pr->causal && !pr->leaky;
  p->q_bf16 = wgl && !wg8; /* the E4M3 kernel reads Q's codes */
  p->kmean = thrift || pr->pasa, p->sel = thrift;
  const int64_t qs[4] = {B, Hq, Sq, D}, ks[4] = {B, Hkv, Skv, D};
  if (p->low) {
    if (!lp_plan_qview(p, LP_WS_QLOW, pr->low, LPATTN_AXIS_D, qs) ||
        !lp_plan_qview(p, LP_WS_KLOW, pr->low, LPATTN_AXIS_D, ks) ||
        !lp_plan_qview(p, LP_WS_VLOW, pr->low, LPATTN_AXIS_S, ks))
      return p->why = LP_PLAN_ARGS, 0; /* p->st: lpattn_qtensor_sizes' */
    if (p->kv_bf16) {
      lp_plan_carve(p, LP_WS_KBF16, (size_t)(B * Hkv * Skv * D * 2));
      lp_plan_carve(p, LP_WS_VBF16, (size_t)(B * Hkv * Skv * D * 2));
      if (p->q_bf16) lp_plan_carve(p, LP_WS_QBF16, (size_t)(B * Hq * Sq * D * 2));
      if (p->split) {
        lp_plan_carve(p, LP_WS_INIT_O, (size_t)(B * Hq * Sq * D * 4));
        lp_plan_carve(p, LP_WS_INIT_ST, (size_t)(B * Hq * Sq * 16));
      }
    }
  }
  if (p->kmean) lp_plan_carve(p, LP_WS_KMEAN, (size_t)(B * Hkv * nkt * D * 4));
  if (thrift) { /* lp_gpu_select.cuh: one selection per KV head under the GQA rule */
    const int64_t Hs = (pr->thrift_rule & LPATTN_THRIFT_RULE_GQA) ? Hkv : Hq;
    lp_plan_carve(p, LP_WS_SEL, (size_t)(B * Hq * nqt * pr->thrift_k * 4));
    lp_plan_carve(p, LP_WS_QBAR, (size_t)(B * Hs * nqt * D * 4));
    if (pr->thrift_rule & LPATTN_THRIFT_RULE_KMAX) lp_plan_carve(p, LP_WS_KMAX, (size_t)(B * Hs * nqt * nkt * 4));
  }
  /* gpu_attn_spec of the arguments these buffers give (CUDA: low K/V always
   * have their bf16 copies, so both backends' low calls take 1 + fmt) */
  if (pr->pasa || pr->score_f16) p->spec = -1; /* (win: spec 0 _plain_win, else _win) */
  else if (!p->low) p->spec = 0;
  else p->spec = (int)pr->low >= 0 && (int)pr->low <= 2 ? 1 + (int)pr->low : -1;
  p->st = LPATTN_OK;
  p->vec16 = lp_plan_vec16(pr->q) && lp_plan_vec16(pr->k) && lp_plan_vec16(pr->v);
  const int wg_ok = wg_dev && dev->wg_image && dev->warp == 32; /* gpu_wg_ok's device half */
  p->path = LP_PATH_MMA;
  if (p->spec == 0 && wg_ok && (paths & LP_PATHS_WG) && p->vec16) p->path = LP_PATH_WG;
  /* gpu_wg_ok: bf16 copies (Q's unless E4M3), no selection, causal: leaky or split */
  else if (p->spec > 0 && wg_ok && (paths & (wg8 ? LP_PATHS_WG8 : LP_PATHS_WGL)) && (p->q_bf16 || wg8) &&
           p->kv_bf16 && !p->sel && (!pr->causal || pr->leaky || p->split))
    p->path = wg8 ? LP_PATH_WG8 : LP_PATH_WGL;
  p->second = p->split && (p->path == LP_PATH_WGL || p->path == LP_PATH_WG8); /* else the entry drops init_o */
  lp_plan_grid(p->mma_grid, Sq, 64, Hq, B), p->mma_block = (unsigned)(4 * dev->warp);
  if (p->path == LP_PATH_MMA) {
    memcpy(p->grid, p->mma_grid, sizeof p->grid), p->block = p->mma_block;
  } else {
    lp_plan_grid(p->grid, Sq, lp_plan_bq(p->path, D), Hq, B), p->block = (unsigned)lp_plan_nt(p->path, D);
  }
  return 1;
}

/* The path the plan gives a one-tile f16 call of head dim D (B = H = 1,
 * Sq = Skv = 64, tiles 64; pasa: PASA or f16 scores) in precision prec on
 * dev: what the tests and the equivalence harness ask of the plan. */
static inline lp_gpu_path lp_gpu_plan_probe(int64_t D, lpattn_precision prec, int pasa, const lp_gpu_dev *dev) {
  lpattn_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = LPATTN_F16, t.stride[3] = 1, t.stride[2] = D;
  lpattn_attn_problem pr;
  memset(&pr, 0, sizeof pr);
  pr.q = pr.k = pr.v = pr.out = &t;
  pr.B = pr.Hq = pr.Hkv = 1, pr.Sq = pr.Skv = 64, pr.D = D, pr.Bq = pr.Bk = 64;
  pr.window_left = pr.window_right = -1; /* no sliding window */
  pr.precision = prec, pr.low = prec == LPATTN_PREC_FP8 ? LPATTN_FMT_FP8 : LPATTN_FMT_NVFP4, pr.pasa = pasa;
  pr.D = lp_gpu_plan_dim(&pr, dev), t.stride[2] = pr.D; /* the head dim the call runs at */
  lp_gpu_attn_plan p;
  return pr.D && lp_gpu_attn_plan_make(&pr, dev, &p) ? p.path : LP_PATH_NONE;
}

#ifdef __cplusplus
}
#endif
#endif
