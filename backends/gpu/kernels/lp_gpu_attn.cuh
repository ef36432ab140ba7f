/* The prefill/decode attention kernel (SPEC 3-6, SEMANTICS tiles), one
 * text for CUDA and HIP. A CTA of 4 warps (HIP: waves) owns a query tile of
 * 64 rows of one (b, q head) and walks its visible KV tiles of 64 keys in
 * increasing j (a range of them when the KV axis is split). Each KV tile is
 * computed high (f16/bf16 operands, f32 accumulation) or low (codes * group
 * scale, exact in bf16, outer scales applied to the f32 products); P of a
 * low tile is quantized per row in registers. Everything but the two
 * matrix products and where Q lives (the dl.* calls: the dialect's half,
 * templates/gpu/inc/attn_<dialect>.j2) is written against the lane layout
 * gpu_lay of lp_gpu.cuh (which lane holds which row, key and channel), so
 * the masks, the online-softmax/entropy/PASA state (backends/math/lpk_softmax.h), the
 * P quantizer and the split/decode logic are the same code on every GPU. */
#ifndef LP_GPU_ATTN_CUH
#define LP_GPU_ATTN_CUH
#include "lp_gpu.cuh"
#include "lp_gpu_tile_order.cuh"

#include "lp_gpu_ns.cuh"
namespace LP_GPU_NS {
#define GPU_BQ 64
#define GPU_BK 64

#include "lp_gpu_attn_prelude.cuh"

__host__ __device__ __forceinline__ int gpu_floordiv(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
/* Keys [0, kw) that the sm_90a low kernel computes for the 128-row block
 * starting at row q0 of a causal call (init_o): the 64-key tiles every row
 * of the block sees in full (none is diagonal for its two query tiles), cut
 * to whole 128-key stages and to Skv. The mma.sync kernel resumes there. */
__host__ __device__ inline int gpu_wgl_kw(int q0, int off, int Skv) {
  const int k1 = 64 * gpu_floordiv(q0 + off + 1, 64);
  return k1 <= 0 ? 0 : (k1 < Skv ? k1 : Skv) / 128 * 128;
}

/* Shared memory (16-bit elements, then f32 row/column scalars). */
template <int D> struct gpu_smem {
  static constexpr int LD = D + 8;       /* padded rows: conflict-free ldmatrix */
  static constexpr int LDV = GPU_BK + 8; /* low V decoded in-kernel is stored transposed, [d][key] */
  static constexpr int KSZ = GPU_BK * LD;
  static constexpr int VSZ = GPU_BK * LD > D * LDV ? GPU_BK * LD : D * LDV;
  static constexpr int QSZ = GPU_QSMEM ? 2 * GPU_BQ * LD : 0; /* Q and its low copy */
  static constexpr int NBUF = GPU_ASYNC ? 2 : 1;               /* double-buffered KV tiles */
  static constexpr size_t SCAL = (size_t)(2 * GPU_BQ + GPU_BK + 2 * D) * 4;
  static constexpr size_t KC = GPU_KCODES ? (size_t)GPU_BK * D : 0; /* FP8 K codes, bytes */
  static constexpr size_t NFM = (size_t)D * 8; /* per channel: V's non-finite keys, bits (gpu_nf_fix_bits) */
  /* K then V in one buffer where both do not fit (HIP, D = 256: 64 KB of LDS) */
  static constexpr bool SPLIT = (size_t)(QSZ + NBUF * (KSZ + VSZ)) * 2 + SCAL + KC + NFM > GPU_SMEM_MAX;
  static constexpr int KVSZ = NBUF * (SPLIT ? (KSZ > VSZ ? KSZ : VSZ) : KSZ + VSZ);
  static constexpr size_t bytes = (size_t)(QSZ + KVSZ) * 2 + SCAL + KC + NFM;
};

/* ---- the matrix products: S = Q K^T and O += P V of a warp's 16 rows ---- */
#include "lp_gpu_attn_products.cuh"
#include "lp_gpu_attn_plow.cuh"

/* Specialized kernels, so that the compiler drops the paths a call cannot
 * take (registers, instruction cache): SPEC 0, precision HIGH; SPEC 1 + f,
 * low tiles of format f (FP8/NVFP4/MXFP4 or THRIFT over f); both without PASA
 * or f16 scores. SPEC -1: the
 * generic kernel. gpu_attn_spec() says which one a call may take. WIN: the
 * kernels that also take a sliding window and a softcap, the _plain_win
 * entry (SPEC 0) and the _win entry (generic: every other call); every
 * other kernel folds them away (no window, no softcap: the code and
 * registers they had before windows existed). */
__host__ __device__ inline int gpu_attn_spec(const lp_gpu_attn_args &a) {
  if (a.pasa || a.score_f16) return -1;
  if (a.prec == LPATTN_PREC_HIGH) return a.sel || a.kd ? -1 : 0;
  if (GPU_ASYNC && !a.kd) return -1; /* cp.async streams the dequantized copies */
  return a.low >= 0 && a.low <= 2 ? 1 + a.low : -1;
}
template <typename T, int D, int SPEC, bool WIN = false>
__device__ __forceinline__ void gpu_attn_body(const lp_gpu_attn_args a_in) { /* by value: fewer spills */
  constexpr bool PLAIN = SPEC == 0;
  static_assert(!WIN || SPEC <= 0, "windows: HIGH's kernel and the generic one");
  lp_gpu_attn_args a = a_in;
  if (SPEC >= 0) { /* constants the compiler folds (gpu_attn_spec holds) */
    a.pasa = 0, a.score_f16 = 0;
  }
  if (!WIN) a.win_left = a.win_right = -1, a.softcap = 0.0f; /* the entry sends windows to _win */
  if (PLAIN) a.prec = LPATTN_PREC_HIGH, a.sel = nullptr, a.kd = nullptr, a.vd = nullptr;
  if (SPEC > 0) a.low = SPEC - 1;
  typedef gpu_smem<D> SM;
  constexpr int BQ = GPU_BQ, BK = GPU_BK, LD = SM::LD, LDV = SM::LDV;
  constexpr int W = gpu_warp_size(), NT = 4 * W; /* threads of the CTA */
  typedef gpu_lay<W> L;
  constexpr int FR = L::FR, NS = L::NS, NO = D / L::LPR;
  typedef gpu_mma<T> HI;
  typedef gpu_mma<gpu_bf16> LO;
  extern __shared__ __attribute__((aligned(16))) unsigned char gpu_smem_raw[];
  unsigned short *Qs = (unsigned short *)gpu_smem_raw, *Ql = Qs + BQ * LD; /* GPU_QSMEM only */
  unsigned short *Kb = Qs + SM::QSZ, *Vb = SM::SPLIT ? Kb : Kb + SM::NBUF * SM::KSZ;
  float *qout = (float *)(Kb + SM::KVSZ), *crow = qout + BQ, *kout = crow + BQ;
  float *vout = kout + BK, *shift = vout + D;
#if defined(LPATTN_HIP_FP8_MFMA)
  uint8_t *Kc = (uint8_t *)(shift + D); /* raw FP8 K codes (GPU_KCODES) */
#endif
  uint64_t *nfm = (uint64_t *)((unsigned char *)(shift + D) + SM::KC);

  const int tid = threadIdx.x, warp = tid / W, lane = tid % W;
  const L lay{lane};
  const int x = blockIdx.x, G = a.Hq / a.Hkv, b = blockIdx.z;
  const int h = blockIdx.y, hk = h / G;
  const int Skv = a.Skv, Sq = a.Sq, off = a.off;
  const int qi = gpu_tile_order(a.causal, a.nqx, x);
  const int base = qi * BQ; /* row of local index 0 */
  const int r0 = base, r1 = min(base + BQ, Sq) - 1;
  /* call row and q head of local row lr, and whether it is one of the call's */
  auto row_of = [&](int lr) { return base + lr; };
  auto head_of = [&](int) { return h; };
  auto live = [&](int lr) { return base + lr <= r1; };
  if (r0 > r1 || Skv <= 0) return;
  const int nkt = (Skv + BK - 1) / BK;
  /* the causal mask and the sliding window (SEMANTICS "Sliding window and
   * softcap"): the tiles js .. je - 1 are not masked, each is full or an
   * edge (diagonal) tile; a partial last tile is never full, as in decode */
  const lp_mask msk = {a.causal, off, a.win_left, a.win_right, BQ};
  int js, je;
  {
    int64_t j0, j1;
    lp_mask_tiles(&msk, r0, r1, BK, nkt, &j0, &j1);
    js = (int)j0, je = (int)(j1 > j0 ? j1 : j0);
  }
  auto edge = [&](int j) { /* not full: high (but leaky), masked per element */
    return lp_mask_kind(&msk, r0, r1, (int64_t)j * BK, (int64_t)j * BK + BK - 1) != LP_TILE_FULL;
  };
  /* PASA (no window): the last full tile, the shift source of diagonal ones */
  const int jfull = a.causal ? min(nkt - 1, gpu_floordiv(r0 + off + 1, BK) - 1) : nkt - 1;
  /* the sm_90a low kernel did keys [0, kw) of this tile's rows (init_o) */
  const int kw = SPEC > 0 && a.init_o ? gpu_wgl_kw(qi * BQ / 128 * 128, off, Skv) : 0;
  if (kw > 0) js = kw / BK; /* (no window there: gpu_wg_ok) */
  const bool any_low = a.prec != LPATTN_PREC_HIGH;
  const int fmt = a.low;

  /* ---- Q tile (and its low copy), outer scales of the low rows ---------- */
  auto qrow = [&](int lr) { return ((int64_t)b * a.Hq + head_of(lr)) * Sq + row_of(lr); };
  if (any_low)
    for (int lr = tid; lr < BQ; lr += blockDim.x)
      qout[lr] = !live(lr) ? 0.0f : fmt == LPATTN_FMT_MXFP4 ? 1.0f : a.qq.outer[qrow(lr)];
#ifndef LPATTN_HIP /* CUDA */

  for (int i = tid; i < BQ * (D / 8); i += blockDim.x) {
    int lr = i / (D / 8), c = (i % (D / 8)) * 8, r = row_of(lr);
    uint4 w = make_uint4(0, 0, 0, 0);
    if (live(lr)) {
      int64_t o = lpk_off(a.sq, b, head_of(lr), r, c);
      if (a.vec16) {
        w = *(const uint4 *)((const unsigned short *)a.q + o);
      } else {
        unsigned short e[8];
        for (int u = 0; u < 8; u++) e[u] = ((const unsigned short *)a.q)[o + u * a.sq[3]];
        memcpy(&w, e, 16);
      }
    }
    *(uint4 *)&Qs[lr * LD + c] = w;
  }
  if (any_low)
    for (int i = tid; i < BQ * (D / 8); i += blockDim.x) {
      int lr = i / (D / 8), c = (i % (D / 8)) * 8;
      *(uint4 *)&Ql[lr * LD + c] = live(lr) ? gpu_low8(a.qq.codes, a.qq.scales, fmt, qrow(lr) * D + c)
                                            : make_uint4(0, 0, 0, 0);
    }
  auto qval = [&](int lr, int d) { return HI::tof(Qs[lr * LD + d]); };

#else /* HIP */

  gpu_qfrag<W, D> qh, ql;
#if defined(LPATTN_HIP_FP8_MFMA)
  uint64_t qc[D / 32]; /* FP8 codes of the same row, for the FP8 matrix cores */
#endif
  {
    const int lr = warp * 16 + lay.row(0);
    const bool ok = live(lr);
#pragma unroll
    for (int e = 0; e < NO; e++) {
      const int d = lay.chan(e);
      qh.v[e] = ok ? ((const unsigned short *)a.q)[lpk_off(a.sq, b, head_of(lr), row_of(lr), d)] : 0;
      ql.v[e] = ok && any_low ? gpu_low1(a.qq.codes, a.qq.scales, fmt, qrow(lr) * D + d) : 0;
    }
#if defined(LPATTN_HIP_FP8_MFMA)
#pragma unroll
    for (int dk = 0; dk < D / 32; dk++)
      qc[dk] = ok && any_low && fmt == LPATTN_FMT_FP8
                   ? *(const uint64_t *)(a.qq.codes + qrow(lr) * D + dk * 32 + 8 * (lane >> 4)) : 0;
#endif
  }
  auto qval = [&](int lr, int d) {
    return live(lr) ? HI::tof(((const unsigned short *)a.q)[lpk_off(a.sq, b, head_of(lr), row_of(lr), d)])
                    : 0.0f;
  };

#endif

  const int *sel = a.sel ? a.sel + (((int64_t)b * a.Hq + h) * a.sel_tiles + qi) * a.sel_k : nullptr;
  int selp = 0;
  float acc[FR][NO];
#pragma unroll
  for (int hh = 0; hh < FR; hh++)
#pragma unroll
    for (int o = 0; o < NO; o++) acc[hh][o] = 0.0f;
  lpk_row st[FR];
#pragma unroll
  for (int hh = 0; hh < FR; hh++) lpk_row_init(&st[hh]);
  if (kw > 0) /* resume from the warpgroup kernel's state */
#pragma unroll
    for (int hh = 0; hh < FR; hh++) {
      const int lr = warp * 16 + lay.row(hh);
      if (!live(lr)) continue;
      const int64_t row = ((int64_t)b * a.Hq + head_of(lr)) * Sq + row_of(lr);
      const float *is = a.init_st + row * 4;
      st[hh].m = is[0], st[hh].l = is[1], st[hh].r = is[2], st[hh].n = (int)is[3];
#pragma unroll
      for (int o = 0; o < NO; o++) acc[hh][o] = a.init_o[row * D + lay.chan(o)];
    }
  const int64_t kvbh = (int64_t)b * a.Hkv + hk;

  /* Precision of tile j (SEMANTICS); sp walks the ascending THRIFT list. */
  auto is_low = [&](int j, int &sp) -> bool {
    if (a.prec == LPATTN_PREC_HIGH) return false;
    const bool dg = edge(j);
    if (a.leaky) return true;
    if (dg) return false;
    if (a.prec == LPATTN_PREC_THRIFT) {
      while (sp < a.sel_k && sel[sp] >= 0 && sel[sp] < j) sp++;
      return !(sp < a.sel_k && sel[sp] == j);
    }
    return true;
  };
#include "lp_gpu_attn_tiles.cuh"

  int selq = 0; /* lookahead pointer of is_low */
  bool pending = false;
  if (js < je) {
    bool lw = is_low(js, selq);
    if (async_ok(lw)) issue(js, 0, lw), pending = true;
  }

  for (int j = js; j < je; j++) {
    const int c0 = j * BK; /* keys c0 .. c0 + BK - 1, unclipped (SEMANTICS) */
    const bool diag = edge(j);
    const bool low = is_low(j, selp);
    const int sj = diag ? jfull : j; /* PASA shift source tile (SEMANTICS) */
    const int buf = (j - js) & (SM::NBUF - 1);
    unsigned short *Ks = Kb + buf * SM::KSZ, *Vs = Vb + buf * SM::VSZ;

    __syncthreads(); /* the previous tile's smem is no longer read */
    bool next = false;
    if (SM::NBUF > 1 && j + 1 < je) {
      bool lw = is_low(j + 1, selq);
      if (async_ok(lw)) issue(j + 1, buf ^ 1, lw), next = true;
    }
    if (a.pasa)
      for (int d = tid; d < D; d += blockDim.x) shift[d] = kshift(sj, c0, d);
    if (pending) {
      if (low) { /* the tile's outer scales (codes came through cp.async) */
        const int64_t Sp = (a.vq.rows + BK - 1) / BK * BK;
        for (int i = tid; i < BK; i += blockDim.x)
          kout[i] = c0 + i >= Skv ? 0.0f : fmt == LPATTN_FMT_MXFP4 ? 1.0f : a.kq.outer[kvbh * a.kq.rows + c0 + i];
        for (int d = tid; d < D; d += blockDim.x)
          vout[d] = fmt == LPATTN_FMT_MXFP4 ? 1.0f : a.vq.outer[(kvbh * (Sp / BK) + j) * D + d];
      }
      if (next) gpu_cp_wait<1>();
      else gpu_cp_wait<0>();
    } else {
      load_k(j, sj, Ks, low);
      if (!SM::SPLIT) load_v(j, Vs, low);
    }
    const bool loaded = pending;
    pending = next;
    __syncthreads();
    if (a.pasa) { /* c_rj = sm_scale * (q_r . kshift_j): f64 dot, d ascending, then f32 */
      if (tid < BQ) {
        double sum = 0.0;
        for (int d = 0; d < D; d++) sum = __dadd_rn(sum, __dmul_rn((double)qval(tid, d), (double)shift[d]));
        crow[tid] = (float)__dmul_rn((double)a.sm_scale, sum);
      }
      __syncthreads();
    }

    /* warps whose 16 rows hold no row of the call skip the math */
    const bool idle = base + warp * 16 > r1;
    float s[FR][NS], pout[FR];
    if (!idle) {
      /* ---- S = Q K^T for this warp's 16 rows ----------------------------- */
#pragma unroll
      for (int hh = 0; hh < FR; hh++)
#pragma unroll
        for (int sl = 0; sl < NS; sl++) s[hh][sl] = 0.0f;
#ifndef LPATTN_HIP /* CUDA */

      bool native = false;
#if defined(__CUDA_ARCH_FEAT_SM120_ALL)
      if (D % 64 == 0 && low && fmt != LPATTN_FMT_FP8) { /* whole k64 steps (D = 96: the f16 path) */
        gpu_fp4_scores<D>(a, s, kvbh, ((int64_t)b * a.Hq + h) * Sq, base, c0, Skv, r0, r1);
        native = true;
      }
#endif
      if (!native) {
        if (low) gpu_mm_scores<LO, D>(s, Ql + warp * 16 * LD, Ks, lane);
        else gpu_mm_scores<HI, D>(s, Qs + warp * 16 * LD, Ks, lane);
      }

#else /* HIP */

      bool native = false;
#if defined(LPATTN_HIP_FP8_MFMA)
      if constexpr (W == 64)
        if (low && fmt == LPATTN_FMT_FP8) {
          gpu_mm_scores_fp8<D>(s, qc, Kc, lane);
          native = true;
        }
#endif
      if (!native) {
        if (low) gpu_mm_scores<LO, W, D>(s, ql, Ks, lane);
        else gpu_mm_scores<HI, W, D>(s, qh, Ks, lane);
      }

#endif

      /* ---- scores, masks, softcap, then the online softmax ------------------ */
      float smax[FR];
      bool vis[FR]; /* a row that sees none of the tile's keys does not visit it */
#include "lp_gpu_attn_scores.cuh"
      lpk_step stp[FR];
      float psum[FR], pssum[FR];
#pragma unroll
      for (int hh = 0; hh < FR; hh++) {
        const float m = gpu_rmax<W>(smax[hh]);
        const float c = a.pasa ? crow[warp * 16 + lay.row(hh)] : 0.0f;
        stp[hh] = lpk_row_begin(&st[hh], m, c);
        if (!vis[hh]) stp[hh].alpha = 1.0f, stp[hh].bias = 0.0f; /* P = exp(-inf) = 0 */
        psum[hh] = pssum[hh] = 0.0f;
      }
      if (SPEC >= 0) { /* specialized kernels (no PASA): P = 2^(v log2 e + bias log2 e) (masked v = -inf: 0) */
        constexpr float L2E = 1.4426950408889634f;
        const bool ent = a.ent != nullptr; /* the entropy sum only where it is returned */
        /* HIGH: one FFMA + MUFU. Low tiles: (v + bias) log2 e, so that the row's
         * max gives P = 1 exactly, as exp(0) does (MXFP4's power-of-two P scale
         * jumps at amax = 1: a P of 1 - 2^-24 would saturate to 0.75) */
        auto pexp = [&](float v, float bias, float b2) {
          return PLAIN ? gpu_exp2_fast(fmaf(v, L2E, b2)) : gpu_exp2_fast((v + bias) * L2E);
        };
#pragma unroll
        for (int hh = 0; hh < FR; hh++) {
          const float bias = stp[hh].bias, b2 = bias * L2E;
          if (ent) {
#pragma unroll
            for (int sl = 0; sl < NS; sl++) {
              const float v = s[hh][sl], p = pexp(v, bias, b2);
              psum[hh] += p;
              if (p != 0.0f) pssum[hh] += p * v;
              s[hh][sl] = p;
            }
          } else {
#pragma unroll
            for (int sl = 0; sl < NS; sl++) {
              const float p = pexp(s[hh][sl], bias, b2);
              psum[hh] += p;
              s[hh][sl] = p;
            }
          }
        }
      } else {
#pragma unroll
        for (int hh = 0; hh < FR; hh++)
#pragma unroll
          for (int sl = 0; sl < NS; sl++) {
            const float v = s[hh][sl];
            const float p = v == gpu_ninf() ? 0.0f : __expf(v + stp[hh].bias);
            psum[hh] += p;
            if (p != 0.0f) pssum[hh] += p * v;
            s[hh][sl] = p;
          }
      }
#pragma unroll
      for (int hh = 0; hh < FR; hh++) {
        const float sp = gpu_rsum<W>(psum[hh]), sps = gpu_rsum<W>(pssum[hh]);
        if (vis[hh]) lpk_row_end(&st[hh], &stp[hh], sp, sps);
        if (gpu_warp_any(stp[hh].alpha != 1.0f)) /* alpha 1 (the max held): acc is unchanged */
#pragma unroll
          for (int o = 0; o < NO; o++) acc[hh][o] *= stp[hh].alpha;
      }

      if (low) gpu_p_low<W>(s, pout, fmt, a.mx_round_up); /* lp_gpu_attn_plow.cuh */
    }
    if (SM::SPLIT) { /* V takes K's place once every warp has its scores */
      __syncthreads();
      if (!loaded) load_v(j, Vs, low);
      __syncthreads();
    }
    /* SPEC 2: a non-finite V element at a key that some row of the (edge)
     * tile does not see is zeroed before the product (nfm: per channel the
     * bits of such keys) and re-applied to the rows that see one of them,
     * each row's run of keys (lp_gpu_nonfinite.cuh; the window's leak rule) */
    bool vnf = false;
    if (diag && GPU_NF) {
      const bool tv = low && vt; /* [d][key] */
      const bool bf = low || gpu_nf_bf<T>::v;
      vnf = __syncthreads_or(gpu_nf_scan(Vs, tv ? D : BK, tv ? BK : D, tv ? LDV : LD, bf, tid, NT));
      if (vnf) {
        if (tv) gpu_nf_fix_bits(Vs, BK, D, [&](int k, int d) { return d * LDV + k; }, bf, nfm, tid, NT);
        else gpu_nf_fix_bits(Vs, BK, D, [&](int k, int d) { return k * LD + d; }, bf, nfm, tid, NT);
        __syncthreads();
      }
    }
    if (idle) continue;

    /* ---- O += P V --------------------------------------------------------- */
#ifndef LPATTN_HIP /* CUDA */

    if (!low) gpu_mm_pv<HI, D>(acc, s, Vs, lane);
    else gpu_mm_pv_low<D>(acc, s, Vs, vt, pout, vout, lane);

#else /* HIP */

    if (!low) gpu_mm_pv_any<HI, W, D>(acc, s, Vs, false, 0.0f, nullptr, lane);
    else gpu_mm_pv_any<LO, W, D>(acc, s, Vs, vt, pout[0], vout, lane);

#endif

    if (vnf)
#pragma unroll
      for (int hh = 0; hh < FR; hh++) { /* the keys of the tile the row sees, as bits */
        int64_t f;
        const int64_t n = lp_mask_range(&msk, row_of(warp * 16 + lay.row(hh)), c0, min(BK, Skv - c0), &f);
        const uint64_t seen = n <= 0 ? 0 : (n >= 64 ? ~0ull : (1ull << n) - 1) << f;
#pragma unroll
        for (int o = 0; o < NO; o++)
          if (nfm[lay.chan(o)] & seen) acc[hh][o] += gpu_nf_nan();
      }
  }

  /* ---- finish: O = acc / l, LSE, H ------------------------------------------ */
#pragma unroll
  for (int hh = 0; hh < FR; hh++) {
    const int lr = warp * 16 + lay.row(hh), r = row_of(lr);
    if (!live(lr)) continue;
    float inv_l, lse, ent;
    lpk_row_finish(&st[hh], &inv_l, &lse, &ent);
#pragma unroll
    for (int o = 0; o < NO; o++)
      gpu_store(a.out, a.out_dtype, lpk_off(a.so, b, h, r, lay.chan(o)), acc[hh][o] * inv_l);
    if (lay.lead()) {
      if (a.lse) a.lse[lpk_off(a.sl, b, h, r, 0)] = lse;
      if (a.ent) a.ent[lpk_off(a.se, b, h, r, 0)] = ent;
    }
  }
}

/* Launch of kernel K (the variant's extern "C" entry) for a->nqx query
 * tiles of every (b, head), with 4 warps of a->warp lanes. */
template <void (*K)(lp_gpu_attn_args), int D>
static lpattn_status gpu_attn_launch(const lp_gpu_attn_args *a, cudaStream_t stream) {
  const size_t smem = gpu_smem<D>::bytes;
  gpu_nf_env();
  if (cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
    return LPATTN_ERR_BACKEND;
  dim3 grid((unsigned)a->nqx, (unsigned)a->Hq, (unsigned)a->B);
  K<<<grid, 4 * a->warp, smem, stream>>>(*a);
  return cudaGetLastError() == cudaSuccess ? LPATTN_OK : LPATTN_ERR_BACKEND;
}
} // namespace LP_GPU_NS
#endif
