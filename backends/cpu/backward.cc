// Highway backward (SPEC 10, SEMANTICS "Backward"): the algorithm of the ref
// backend (backends/ref/ref_backward.c) in f32 with SIMD rows. One work item
// is one (batch, kv head): every q head of its GQA group and every query
// tile, so each item owns its dq rows and its dk/dv rows (no atomics, the
// same sums in the same order on every run: deterministic). The forward's
// Q/K quantization (along D, RNE) is the prefill's SIMD quantizer; the
// backward operands' SR quantization is sr-inl.h's SIMD Philox and element
// step around the shared scalar scale steps (backends/math/lpk_*.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/backward.cc"  // from the source root
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <math.h>
#include <string.h>

#include <new>
#include <vector>

#include "cpu.h"
#include "formats.h"
#include "sr-inl.h"
#include "tiles.h"
#include "window.h"

#ifndef LPATTN_CPU_BACKWARD_ONCE
#define LPATTN_CPU_BACKWARD_ONCE
namespace lpattn_cpu {
struct BwdScratch {
  std::vector<float> K, V, dK, dV, kbar, qbar, score;
  std::vector<float> Q, Qd, dO, O, Kt, Vt, A, Pf, P, dQ, delta, lse, x, y, u, dots;
  // Operands that do not depend on the pair, quantized once: per query tile
  // dO along the rows and along D, Q along the rows; per KV tile (of the
  // item) V along D and K along the keys ([nkt * Bk][D], made on first use),
  // and K's forward quantization along D (lowk, made on first use).
  std::vector<float> dOr, dOd, Qr, Vd, Kc, lowk, U;
  std::vector<float> J;  // [Bq x Bk] softcap's ds/du = 1 - tanh^2 (1 without one)
  std::vector<uint8_t> have_kv, have_lowk;
  std::vector<int64_t> idx;
  std::vector<uint8_t> kind, mode;
};
struct BwdJob {
  const lpattn_bwd_problem *bp;
  int64_t nkt, W;
  std::vector<BwdScratch> *scratch;
  int64_t D, Dt;  // rows are D = CpuPaddedDim(Dt) floats wide, zero past the call's Dt
};
// The eight quantized backward operands, numbered as their Philox streams.
enum { BOP_P_R, BOP_DO_R, BOP_DO_D, BOP_V_D, BOP_DS_C, BOP_K_C, BOP_DS_R, BOP_Q_R };
}  // namespace lpattn_cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {
namespace hb = hwy::HWY_NAMESPACE;
using DB = hb::CappedTag<float, 16>;  // divides D (a multiple of 16)

HWY_INLINE float Dot(const float *a, const float *b, int64_t n) {
  const DB d;
  const int64_t N = (int64_t)hb::Lanes(d);
  auto s = hb::Zero(d);
  for (int64_t i = 0; i < n; i += N) s = hb::MulAdd(hb::LoadU(d, a + i), hb::LoadU(d, b + i), s);
  return hb::GetLane(hb::SumOfLanes(d, s));
}

// out[k] = Dot(a, b + k * bs, n) for k < 4, each summed exactly as Dot: four
// independent chains, so the FMA latency is hidden. Named accumulators, not
// an array: SVE vectors cannot be array elements.
HWY_INLINE void Dot4(const float *a, const float *b, int64_t bs, int64_t n, float *out) {
  const DB d;
  const int64_t N = (int64_t)hb::Lanes(d);
  auto s0 = hb::Zero(d), s1 = hb::Zero(d), s2 = hb::Zero(d), s3 = hb::Zero(d);
  for (int64_t i = 0; i < n; i += N) {
    const auto va = hb::LoadU(d, a + i);
    s0 = hb::MulAdd(va, hb::LoadU(d, b + i), s0);
    s1 = hb::MulAdd(va, hb::LoadU(d, b + bs + i), s1);
    s2 = hb::MulAdd(va, hb::LoadU(d, b + 2 * bs + i), s2);
    s3 = hb::MulAdd(va, hb::LoadU(d, b + 3 * bs + i), s3);
  }
  out[0] = hb::GetLane(hb::SumOfLanes(d, s0)), out[1] = hb::GetLane(hb::SumOfLanes(d, s1));
  out[2] = hb::GetLane(hb::SumOfLanes(d, s2)), out[3] = hb::GetLane(hb::SumOfLanes(d, s3));
}

// out[c] = Dot(a, b + c * D, D) for c < n.
HWY_INLINE void DotRows(const float *a, const float *b, int64_t D, int64_t n, float *out) {
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) Dot4(a, b + c * D, D, D, out + c);
  for (; c < n; c++) out[c] = Dot(a, b + c * D, D);
}

// y += a * x
HWY_INLINE void Axpy(float a, const float *x, float *y, int64_t n) {
  const DB d;
  const int64_t N = (int64_t)hb::Lanes(d);
  const auto va = hb::Set(d, a);
  for (int64_t i = 0; i < n; i += N) hb::StoreU(hb::MulAdd(va, hb::LoadU(d, x + i), hb::LoadU(d, y + i)), d, y + i);
}

struct Lin {
  int64_t base, rs, cs;  // logical index of (r, c) = base + r * rs + c * cs
};

// dst = src ([R x C], row-major) quantized along its rows (a domain per
// column) or its columns (a domain per row) with SR, then dequantized. The
// uniforms of all R x C elements come first, a row of consecutive indices
// at a time (SIMD Philox, a block for sixteen elements); then each domain's
// values and uniforms are gathered (x, u) for the SIMD SR quantizer
// (sr-inl.h), which writes y.
HWY_INLINE void Qdq(const BwdJob &job, BwdScratch &w, int op, const float *src, int64_t R, int64_t C,
                    bool along_rows, Lin ix, float *dst) {
  const lpattn_attn_problem &pr = job.bp->f;
  const int fmt = QpFormat(pr.low);
  const uint64_t key = job.bp->seed + (uint64_t)(op + 1) * 0x9E3779B97F4A7C15ull;
  const int64_t nd = along_rows ? C : R, n = along_rows ? R : C;
  const int64_t es = along_rows ? C : 1, ds = along_rows ? 1 : C;
  float *x = w.x.data(), *u = w.u.data(), *y = w.y.data(), *U = w.U.data();
  for (int64_t r = 0; r < R; r++) {
    if (ix.cs == 1) {
      SrUniformsRun(key, (uint64_t)(ix.base + r * ix.rs), C, U + r * C);
    } else {
      int64_t *idx = w.idx.data();
      for (int64_t c = 0; c < C; c++) idx[c] = ix.base + r * ix.rs + c * ix.cs;
      SrUniforms(key, idx, C, U + r * C);
    }
  }
  if (along_rows && SrQdqColumns(fmt, pr.mx_round_up, src, U, R, C, dst)) return;
  for (int64_t a = 0; a < nd; a++) {
    const float *s = src + a * ds, *su = U + a * ds;
    float *o = dst + a * ds;
    for (int64_t e = 0; e < n; e++) x[e] = s[e * es], u[e] = su[e * es];
    SrQdqDomain(fmt, pr.mx_round_up, x, u, n, y);
    for (int64_t e = 0; e < n; e++) o[e * es] = y[e];
  }
}

// Y[j] += (s * A[i * ai + j * aj]) * X[i] over i = 0..ni-1 in that order, for
// j < nj (rows of D floats): each element sees the MulAdds of Axpy in the
// same order, the sums held in registers (two rows of Y, four vectors each:
// eight chains, each X vector loaded once for both).
HWY_INLINE void AccumOuter(const float *A, int64_t ai, int64_t aj, float s, const float *X, int64_t ni,
                           float *Y, int64_t nj, int64_t D) {
  const DB d;
  const int64_t N = (int64_t)hb::Lanes(d);
  int64_t j = 0;
  for (; j + 2 <= nj && D % (4 * N) == 0; j += 2) {
    float *y = Y + j * D, *z = y + D;
    const float *a = A + j * aj, *b = a + aj;
    for (int64_t d0 = 0; d0 < D; d0 += 4 * N) {
      auto y0 = hb::LoadU(d, y + d0), y1 = hb::LoadU(d, y + d0 + N);
      auto y2 = hb::LoadU(d, y + d0 + 2 * N), y3 = hb::LoadU(d, y + d0 + 3 * N);
      auto z0 = hb::LoadU(d, z + d0), z1 = hb::LoadU(d, z + d0 + N);
      auto z2 = hb::LoadU(d, z + d0 + 2 * N), z3 = hb::LoadU(d, z + d0 + 3 * N);
      for (int64_t i = 0; i < ni; i++) {
        const auto va = hb::Set(d, s * a[i * ai]), vb = hb::Set(d, s * b[i * ai]);
        const float *x = X + i * D + d0;
        const auto x0 = hb::LoadU(d, x), x1 = hb::LoadU(d, x + N);
        const auto x2 = hb::LoadU(d, x + 2 * N), x3 = hb::LoadU(d, x + 3 * N);
        y0 = hb::MulAdd(va, x0, y0), y1 = hb::MulAdd(va, x1, y1);
        y2 = hb::MulAdd(va, x2, y2), y3 = hb::MulAdd(va, x3, y3);
        z0 = hb::MulAdd(vb, x0, z0), z1 = hb::MulAdd(vb, x1, z1);
        z2 = hb::MulAdd(vb, x2, z2), z3 = hb::MulAdd(vb, x3, z3);
      }
      hb::StoreU(y0, d, y + d0), hb::StoreU(y1, d, y + d0 + N);
      hb::StoreU(y2, d, y + d0 + 2 * N), hb::StoreU(y3, d, y + d0 + 3 * N);
      hb::StoreU(z0, d, z + d0), hb::StoreU(z1, d, z + d0 + N);
      hb::StoreU(z2, d, z + d0 + 2 * N), hb::StoreU(z3, d, z + d0 + 3 * N);
    }
  }
  for (; j < nj; j++) {  // one row at a time
    float *y = Y + j * D;
    const float *a = A + j * aj;
    for (int64_t d0 = 0; d0 < D; d0 += N) {
      auto y0 = hb::LoadU(d, y + d0);
      for (int64_t i = 0; i < ni; i++) y0 = hb::MulAdd(hb::Set(d, s * a[i * ai]), hb::LoadU(d, X + i * D + d0), y0);
      hb::StoreU(y0, d, y + d0);
    }
  }
}

// The forward's quantization of n rows of D values along D (RNE).
HWY_INLINE void ForwardRows(const BwdJob &job, const float *x, int64_t n, float *y) {
  const lpattn_attn_problem &pr = job.bp->f;
  for (int64_t r = 0; r < n; r++)
    lpattn_cpu_quantize_p_row(QpFormat(pr.low), pr.mx_round_up, x + r * job.D, job.D, y + r * job.D);
}

// A low (query tile, KV tile) pair: the four SR-quantized products.
HWY_INLINE void LowPair(const BwdJob &job, BwdScratch &w, int64_t b, int64_t hq, int64_t hk, int64_t r0,
                        int64_t nr, int64_t c0, int64_t nk) {
  const lpattn_attn_problem &pr = job.bp->f;
  const int64_t D = job.D, Dt = job.Dt, Bq = pr.Bq, Bk = pr.Bk, Sq = pr.Sq, Skv = pr.Skv;
  const float sm = pr.sm_scale;
  const Lin iP = {((b * pr.Hq + hq) * Sq + r0) * Skv + c0, Skv, 1};
  const Lin iK = {((b * pr.Hkv + hk) * Skv + c0) * Dt, Dt, 1};  // SR: logical index, true D
  float *A = w.A.data(), *Pf = w.Pf.data();
  const int64_t j = c0 / Bk;
  if (!w.have_kv[j]) {  // this KV tile's V along D and K along the keys, once per item
    Qdq(job, w, BOP_V_D, w.Vt.data(), Bk, D, false, iK, w.Vd.data() + c0 * D);
    Qdq(job, w, BOP_K_C, w.Kt.data(), Bk, D, true, iK, w.Kc.data() + c0 * D);
    w.have_kv[j] = 1;
  }
  const float *Vd = w.Vd.data() + c0 * D, *Kc = w.Kc.data() + c0 * D;
  // dV = P^T dO, along the query rows
  Qdq(job, w, BOP_P_R, w.P.data(), Bq, Bk, true, iP, A);
  AccumOuter(A, Bk, 1, 1.0f, w.dOr.data(), nr, w.dV.data() + c0 * D, nk, D);
  // dP = dO V^T along D; dS = P (dP - Delta)
  memset(Pf, 0, sizeof(float) * (size_t)(Bq * Bk));
  for (int64_t r = 0; r < nr; r++) {
    float *dots = w.dots.data();
    DotRows(w.dOd.data() + r * D, Vd, D, nk, dots);
    for (int64_t c = 0; c < nk; c++) {
      const float p = w.P[r * Bk + c];
      Pf[r * Bk + c] = p != 0.0f ? p * (dots[c] - w.delta[r]) * w.J[r * Bk + c] : 0.0f;
    }
  }
  // dQ = dS K, along the keys
  Qdq(job, w, BOP_DS_C, Pf, Bq, Bk, false, iP, A);
  AccumOuter(A, 1, Bk, sm, Kc, nk, w.dQ.data(), nr, D);
  // dK = dS^T Q, along the query rows
  Qdq(job, w, BOP_DS_R, Pf, Bq, Bk, true, iP, A);
  AccumOuter(A, Bk, 1, sm, w.Qr.data(), nr, w.dK.data() + c0 * D, nk, D);
}

HWY_INLINE void HighPair(const BwdJob &job, BwdScratch &w, int64_t nr, int64_t c0, int64_t nk) {
  const lpattn_attn_problem &pr = job.bp->f;
  const int64_t D = job.D, Bk = pr.Bk;
  for (int64_t r = 0; r < nr; r++) {
    float *dots = w.dots.data();
    DotRows(w.dO.data() + r * D, w.Vt.data(), D, nk, dots);  // (reads nothing the Axpys write)
    for (int64_t c = 0; c < nk; c++) {
      const float p = w.P[r * Bk + c];
      if (p == 0.0f) continue;
      const float *dO = w.dO.data() + r * D;
      const float ds = p * (dots[c] - w.delta[r]) * w.J[r * Bk + c];
      Axpy(p, dO, w.dV.data() + (c0 + c) * D, D);
      Axpy(pr.sm_scale * ds, w.Kt.data() + c * D, w.dQ.data() + r * D, D);
      Axpy(pr.sm_scale * ds, w.Q.data() + r * D, w.dK.data() + (c0 + c) * D, D);
    }
  }
}

// n rows of Dt values into rows D wide (zero past Dt), and back.
HWY_INLINE void LoadRows(const BwdJob &job, const lpattn_tensor *t, int64_t b, int64_t h, int64_t s0, int64_t n,
                         float *dst) {
  const int64_t D = job.D;
  for (int64_t s = 0; s < n; s++) LoadRowPad(t, lp_off4(t, b, h, s0 + s, 0), t->stride[3], job.Dt, D, dst + s * D);
}

HWY_INLINE void StoreRows(const BwdJob &job, const lpattn_tensor *t, int64_t b, int64_t h, int64_t s0, int64_t n,
                          const float *src) {
  const int64_t D = job.D;
  for (int64_t s = 0; s < n; s++)
    for (int64_t d = 0; d < job.Dt; d++)
      lp_store_f32(t->data, t->dtype, lp_off4(t, b, h, s0 + s, d), src[s * D + d]);
}

HWY_INLINE void QueryTile(const BwdJob &job, BwdScratch &w, int64_t b, int64_t hq, int64_t hk, int64_t i) {
  const lpattn_bwd_problem &bp = *job.bp;
  const lpattn_attn_problem &pr = bp.f;
  const int64_t D = job.D, Bq = pr.Bq, Bk = pr.Bk;
  const int64_t r0 = i * Bq, nr = pr.Sq - r0 < Bq ? pr.Sq - r0 : Bq;
  const lp_mask msk = lp_mask_of(&pr);  // causal and sliding window (core/window.c)
  memset(w.Q.data(), 0, sizeof(float) * (size_t)(Bq * D));
  memset(w.dO.data(), 0, sizeof(float) * (size_t)(Bq * D));
  LoadRows(job, pr.q, b, hq, r0, nr, w.Q.data());
  LoadRows(job, bp.dout, b, hq, r0, nr, w.dO.data());
  LoadRows(job, pr.out, b, hq, r0, nr, w.O.data());
  for (int64_t r = 0; r < nr; r++) {
    w.delta[r] = Dot(w.dO.data() + r * D, w.O.data() + r * D, D);
    w.lse[r] = lp_load_f32(pr.lse->data, LPATTN_F32, lp_off4(pr.lse, b, hq, r0 + r, 0));
  }
  lp_tile_plan(&pr, w.K.data(), D, w.kbar.data(), w.qbar.data(), w.score.data(), b, hq, i, job.nkt,
               w.kind.data(), w.mode.data());
  bool any_low = false;
  for (int64_t j = 0; j < job.nkt; j++) any_low |= w.mode[j] == LP_MODE_LOW;
  if (any_low) {
    const Lin iQ = {((b * pr.Hq + hq) * pr.Sq + r0) * job.Dt, job.Dt, 1};  // SR: true D
    ForwardRows(job, w.Q.data(), nr, w.Qd.data());
    Qdq(job, w, BOP_DO_R, w.dO.data(), Bq, D, true, iQ, w.dOr.data());
    Qdq(job, w, BOP_DO_D, w.dO.data(), Bq, D, false, iQ, w.dOd.data());
    Qdq(job, w, BOP_Q_R, w.Q.data(), Bq, D, true, iQ, w.Qr.data());
  }
  memset(w.dQ.data(), 0, sizeof(float) * (size_t)(Bq * D));
  for (int64_t j = 0; j < job.nkt; j++) {
    if (w.mode[j] == LP_MODE_SKIP) continue;
    const bool low = w.mode[j] == LP_MODE_LOW;
    const int64_t c0 = j * Bk, nk = pr.Skv - c0 < Bk ? pr.Skv - c0 : Bk;
    if (!low || !w.have_kv[j] || !w.have_lowk[j]) {  // (a low pair reads them only to fill its caches)
      const size_t used = (size_t)(nk * D), pad = (size_t)((Bk - nk) * D);
      memcpy(w.Kt.data(), w.K.data() + c0 * D, sizeof(float) * used);
      memcpy(w.Vt.data(), w.V.data() + c0 * D, sizeof(float) * used);
      memset(w.Kt.data() + used, 0, sizeof(float) * pad);
      memset(w.Vt.data() + used, 0, sizeof(float) * pad);
    }
    float *lowk = w.lowk.data() + c0 * D;
    if (low && !w.have_lowk[j]) ForwardRows(job, w.Kt.data(), nk, lowk), w.have_lowk[j] = 1;
    const float *qs = low ? w.Qd.data() : w.Q.data(), *ks = low ? lowk : w.Kt.data();
    memset(w.P.data(), 0, sizeof(float) * (size_t)(Bq * Bk));
    for (int64_t r = 0; r < nr; r++) {
      int64_t f;
      const int64_t nvis = lp_mask_range(&msk, r0 + r, c0, nk, &f);
      if (w.lse[r] == -INFINITY) continue;
      float *dots = w.dots.data();
      DotRows(qs + r * D, ks + f * D, D, nvis, dots);
      for (int64_t c = 0; c < nvis; c++) {  // the forward's (softcapped) score; J its slope
        const float u = dots[c] * pr.sm_scale, t = pr.softcap > 0.0f ? tanhf(u / pr.softcap) : 0.0f;
        w.P[r * Bk + f + c] = expf(lp_softcap_f32(u, pr.softcap) - w.lse[r]);
        w.J[r * Bk + f + c] = 1.0f - t * t;
      }
    }
    if (low)
      LowPair(job, w, b, hq, hk, r0, nr, c0, nk);
    else
      HighPair(job, w, nr, c0, nk);
  }
  StoreRows(job, bp.dq, b, hq, r0, nr, w.dQ.data());
}

void BackwardItemT(const BwdJob &job, int64_t item, int tid) {
  const lpattn_bwd_problem &bp = *job.bp;
  const lpattn_attn_problem &pr = bp.f;
  BwdScratch &w = (*job.scratch)[tid];
  const int64_t D = job.D, b = item / pr.Hkv, hk = item % pr.Hkv, G = pr.Hq / pr.Hkv;
  LoadRows(job, pr.k, b, hk, 0, pr.Skv, w.K.data());
  LoadRows(job, pr.v, b, hk, 0, pr.Skv, w.V.data());
  if (D == job.Dt) {
    lp_tile_means(&pr, w.K.data(), job.nkt, w.kbar.data());
  } else {  // lp_tile_means on rows D wide: the means of the true Dt channels
    for (int64_t j = 0; j < job.nkt; j++) {
      const int64_t n = pr.Skv - j * pr.Bk < pr.Bk ? pr.Skv - j * pr.Bk : pr.Bk;
      lp_mean_rows_f32(w.K.data(), LPATTN_F32, j * pr.Bk * D, D, 1, n, job.Dt, (float)n,
                       w.kbar.data() + j * job.Dt);
    }
  }
  memset(w.dK.data(), 0, sizeof(float) * (size_t)(pr.Skv * D));
  memset(w.dV.data(), 0, sizeof(float) * (size_t)(pr.Skv * D));
  memset(w.have_kv.data(), 0, (size_t)job.nkt);
  memset(w.have_lowk.data(), 0, (size_t)job.nkt);
  for (int64_t g = 0; g < G; g++)
    for (int64_t i = 0; i < lp_tile_count(pr.Sq, pr.Bq); i++) QueryTile(job, w, b, hk * G + g, hk, i);
  StoreRows(job, bp.dk, b, hk, 0, pr.Skv, w.dK.data());
  StoreRows(job, bp.dv, b, hk, 0, pr.Skv, w.dV.data());
}
}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn_cpu {
HWY_EXPORT(BackwardItemT);

static void RunBwdItem(void *arg, int64_t i, int tid) {
  HWY_DYNAMIC_DISPATCH(BackwardItemT)(*static_cast<const BwdJob *>(arg), i, tid);
}

lpattn_status Backward(lpattn_ctx *ctx, const lpattn_bwd_problem *bp) {
  Ctx *c = static_cast<Ctx *>(ctx->impl);
  const lpattn_attn_problem &pr = bp->f;
  std::vector<BwdScratch> scratch;
  BwdJob job = {bp, lp_tile_count(pr.Skv, pr.Bk), 0, &scratch, 0, pr.D};
  job.D = CpuPaddedDim(pr.D, pr.low, pr.precision != LPATTN_PREC_HIGH);
  job.W = pr.Bq > pr.Bk ? pr.Bq : pr.Bk;
  if (job.D > job.W) job.W = job.D;
  try {
    scratch.resize((size_t)PoolThreads(c->pool));
    const size_t S = (size_t)(pr.Skv * job.D), WW = (size_t)(job.W * job.W), W = (size_t)job.W;
    const size_t n = (size_t)job.nkt, D = (size_t)job.D;
    for (BwdScratch &w : scratch) {
      for (auto *v : {&w.K, &w.V, &w.dK, &w.dV}) v->resize(S);
      for (auto *v : {&w.Q, &w.Qd, &w.dO, &w.O, &w.Kt, &w.Vt, &w.A, &w.Pf, &w.P, &w.dQ})
        v->resize(WW);
      for (auto *v : {&w.delta, &w.lse, &w.x, &w.y, &w.u, &w.dots}) v->resize(W);
      for (auto *v : {&w.dOr, &w.dOd, &w.Qr, &w.U, &w.J}) v->resize(WW);
      for (auto *v : {&w.Vd, &w.Kc, &w.lowk}) v->resize(n * (size_t)pr.Bk * D);
      w.have_kv.resize(n), w.have_lowk.resize(n);
      w.kbar.resize(n * D), w.qbar.resize(D), w.score.resize(n);
      w.idx.resize(W), w.kind.resize(n), w.mode.resize(n);
    }
  } catch (const std::bad_alloc &) {
    return LPATTN_ERR_OUT_OF_MEMORY;
  }
  return PoolRun(c->pool, pr.B * pr.Hkv, RunBwdItem, &job) ? LPATTN_OK : LPATTN_ERR_OUT_OF_MEMORY;
}
}  // namespace lpattn_cpu
#endif
