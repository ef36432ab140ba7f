// Highway paged decode (SEMANTICS "Decode"): one chunk of one (sequence, kv
// head) per call (cpu.h DecItem). Tiles are read in place from the pool:
// high tiles converted from f16/bf16/f32 with SIMD, quantized tiles decoded
// from their packed codes and scales in registers, a key (K) or channel (V)
// at a time into an L1 line, each read once for all rows of the GQA group.
// The softmax state, the P quantizer and the row primitives are the prefill
// engine's (attn-inl.h, quantp-inl.h, backends/math/lpk_*.h).
#if defined(LPATTN_CPU_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LPATTN_CPU_DECODE_INL_H_
#undef LPATTN_CPU_DECODE_INL_H_
#else
#define LPATTN_CPU_DECODE_INL_H_
#endif

#include "decode-fmt-inl.h"
#include "decode-int-x86-inl.h"  // (and decode-int-inl.h)
#include "decode-fp8-x86-inl.h"
#include "fp8s.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn_cpu {
namespace HWY_NAMESPACE {

// Tile modes of the rows of q head g whose query tile is i (w = 0: the
// first row's tile, 1: the last row's), for tiles 0..i; without THRIFT a
// tile's mode is its own, so only the item's tiles [jlo, jhi] are filled.
HWY_INLINE void RowModes(const DecJob &job, const DecSeq &sq, int64_t hkv, int64_t g, int64_t i,
                         DecScratch *w, uint8_t *mode, int64_t jlo, int64_t jhi) {
  const lpattn_attn_problem &pr = *job.pr;
  uint8_t *kind = w->kind.data();
  float *score = w->score.data();
  // Without a window: tiles j < i full, tile i diagonal. A sliding window
  // (core/window.c, as ref_decode.c) masks tiles before it and makes its
  // left edge diagonal; an FP8/NVFP4/MXFP4 pool reads that edge low.
  const lp_mask msk = {1, 0, pr.window_left, -1, job.T};
  const int64_t T = job.T;
  if (!job.thrift) {
    const int64_t hi = i < jhi ? i : jhi;
    for (int64_t j = jlo; j <= hi; j++)
      kind[j] = (uint8_t)lp_mask_kind(&msk, i * T, i * T, j * T, j * T + T - 1);
    if (hi >= jlo) lp_tile_modes(pr.precision, 0, sq.k, hi - jlo + 1, kind + jlo, nullptr, mode + jlo);
    for (int64_t j = jlo; job.low && j <= hi && j < i; j++)
      if (kind[j] == LP_TILE_DIAG) mode[j] = LP_MODE_LOW;
    return;
  }
  for (int64_t j = 0; j <= i; j++)
    kind[j] = (uint8_t)lp_mask_kind(&msk, i * T, i * T, j * T, j * T + T - 1), score[j] = 0.0f;
  if (job.thrift) {
    const int64_t qt = pr.selection_mode == LPATTN_SELECT_CAUSAL ? i - 1 : i;
    if (qt >= 0) {
      lp_kv_seq_qmean(&sq.s, (int)(hkv * job.G + g), qt, w->qbar.data());
      for (int64_t j = 0; j < i; j++)
        if (kind[j] == LP_TILE_FULL)
          score[j] = lp_dot_f32(w->qbar.data(), lp_kv_seq_kmean(&sq.s, (int)hkv, j), job.D);
    }
  }
  lp_tile_modes(pr.precision, 0, sq.k, i + 1, kind, score, mode);
}

// The bytes the next tile of an item will read (its low part of this kv head,
// or its high K and V rows), fetched into L2 a part at a time while the
// current tile is computed, so the stream never waits on a page boundary.
struct NextTile {
  const uint8_t *a = nullptr, *b = nullptr;
  size_t n = 0;  // bytes at a and at b (b may be NULL)
  size_t cur = 0, per = 0;  // next line; lines a step
  // Spread the lines over `steps` calls of Step (one division a tile).
  void Plan(int64_t steps) { per = ((n + 63) / 64 + (size_t)steps - 1) / (size_t)steps; }
  // The next `per` lines: a quantized tile (~10 KiB a head) into L1, a high
  // one (32 KiB) into L2.
  void Step() {
    const size_t end = cur + per < (n + 63) / 64 ? cur + per : (n + 63) / 64;
    for (; cur < end; cur++) {
      if (b) {
        __builtin_prefetch(a + 64 * cur, 0, 2);
        __builtin_prefetch(b + 64 * cur, 0, 2);
      } else {
        __builtin_prefetch(a + 64 * cur, 0, 3);
      }
    }
  }
};

HWY_INLINE NextTile NextOf(const DecJob &job, const DecSeq &sq, int64_t h, int64_t j,
                           const uint8_t *mode, int64_t nt, bool modes_known = true) {
  NextTile nx;
  if (j >= nt) return nx;
  const lp_kv_layout &L = sq.s.L;
  // Tiles before the last are low in FP8/NVFP4/MXFP4 pools; else the mode of
  // the first q head's last row (its tile is i1) says.
  const bool low = modes_known ? mode[nt + j] == LP_MODE_LOW
                               : L.has_low && !job.thrift && j < nt - 1;
  if (low) {
    nx.a = lp_kv_page_ptr(&sq.s, j) + (size_t)h * L.head_bytes, nx.n = L.head_bytes;
  } else {
    int64_t nk = 0;
    nx.a = lp_kv_high_ptr(&sq.s, 0, (int)h, j, &nk);
    nx.b = lp_kv_high_ptr(&sq.s, 1, (int)h, j, &nk);
    nx.n = nx.a && nx.b ? (size_t)(nk * job.D * L.esz) : 0;
  }
  return nx;
}

HWY_INLINE void DecodeItem(const DecJob &job, int64_t item, DecScratch *w) {
  const lpattn_attn_problem &pr = *job.pr;
  const DecItem it = job.items[item];
  const DecSeq &sq = job.seqs[it.seq];
  const lp_kv_layout &L = sq.s.L;
  const int64_t T = job.T, D = job.D, R = job.R, Sq = job.Sq, G = job.G;
  const int64_t i0 = sq.row0 / T, i1 = sq.i1, h = it.h;
  const lpattn_dtype hdt = sq.s.pool->p.high_dtype;
  float *q = w->q.data(), *ql = w->ql.data(), *S = w->s.data(), *P = w->p.data();
  float *Pp = w->pp.data(), *acc = w->acc.data(), *kd = w->kd.data(), *vd = w->vd.data();
  int64_t *pos = w->pos.data(), *nvis = w->nvis.data(), *nf = w->nfirst.data();
  const bool win = pr.window_left >= 0, capped = pr.softcap > 0.0f;
  int32_t *list = w->list.data();
  lpk_row *rows = w->rows.data();
  uint8_t *mode = w->mode.data();  // [G][2][nt]
  const int64_t nt = sq.nt;  // i1 + 1, or fewer in an earlier shard (all tiles full)
  const int64_t j0 = lp_decode_chunk_start(it.chunk, sq.s.tile0);
  const int64_t jc = lp_decode_chunk_start(it.chunk + 1, sq.s.tile0) - 1;
  const int64_t j1 = jc < nt - 1 ? jc : nt - 1;
  {  // the first tile, while Q is prepared
    NextTile first = NextOf(job, sq, h, j0, mode, nt, false);
    first.Plan(1);
    first.Step();
  }
  // FP8_STATIC (SPEC 11, as attn-inl.h): the slot's k/v descales, the call's q_descale
  const float *ds = job.fp8s ? lp_kv_seq_descales(&sq.s) : nullptr;
  const float qd = lp_fp8s_descale(pr.q_descale, sq.b, h), od = job.fp8s ? ds[L.Hkv + h] : 1.0f;
  for (int64_t g = 0; g < G; g++) {
    RowModes(job, sq, h, g, i1, w, mode + (g * 2 + 1) * nt, j0, j1);
    if (i0 != i1) RowModes(job, sq, h, g, i0, w, mode + g * 2 * nt, j0, j1);
  }
#if LP_DEC_INT
  const bool use_int = job.low && job.fp4 && D % 64 == 0 && D <= 256 && T % 64 == 0;  // IntRow: D <= 256
  const bool use_int8 = use_int && T == 64 && D <= 128;  // eight keys / channels at a time
  IntRow *qi = reinterpret_cast<IntRow *>(w->ib.data()), *pi = qi + R;
  alignas(32) float sl[64 * 8];  // ScaleLanes of the current tile (64 keys or <= 64 channel pairs)
#endif
  for (int64_t r = 0; r < R; r++) {
    const int64_t g = r / Sq, qr = r % Sq, hq = h * G + g;
    pos[r] = sq.row0 + qr;
    LoadRowPad(pr.q, lp_off4(pr.q, sq.b, hq, qr, 0), pr.q->stride[3], pr.q->shape[3], D, q + r * D);
#if LP_DEC_INT
    if (use_int) ToIntRow(job, q + r * D, D, false, &w->sc, &qi[r]);
#endif
    if (job.fp8s) {  // Q^: E4M3(q / q_descale) as code values (channels past q's: zero)
      lp_fp8s_row(pr.q, lp_off4(pr.q, sq.b, hq, qr, 0), pr.q->stride[3], pr.q->shape[3], qd, ql + r * D);
      for (int64_t d = pr.q->shape[3]; d < D; d++) ql[r * D + d] = 0.0f;
    } else if (job.low) {
      QuantizePRow(job.qfmt, pr.mx_round_up, q + r * D, D, &w->sc, kd);
      if (job.fp4) Fp4Order(kd, D, ql + r * D);
      else memcpy(ql + r * D, kd, sizeof(float) * (size_t)D);
    }
    lpk_row_init(&rows[r]);
    for (int64_t d = 0; d < D; d++) acc[r * D + d] = 0.0f;
  }
  const float ss = job.fp8s ? qd * ds[h] * pr.sm_scale : pr.sm_scale;
  for (int64_t j = j0; j <= j1; j++) {
    NextTile nx = j < j1 ? NextOf(job, sq, h, j + 1, mode, nt) : NextTile();
    for (int md = LP_MODE_HIGH; md <= LP_MODE_LOW; md++) {
      int64_t n = 0, maxvis = 0;
      for (int64_t r = 0; r < R; r++) {
        const int64_t i = pos[r] / T, g = r / Sq;
        if (j > i || mode[(g * 2 + (i == i1)) * nt + j] != md) continue;
        nvis[r] = pos[r] - j * T + 1 < T ? pos[r] - j * T + 1 : T;  // keys [nf, nvis) of the tile
        nf[r] = win && pos[r] - pr.window_left - j * T > 0 ? pos[r] - pr.window_left - j * T : 0;
        if (nf[r] >= nvis[r]) continue;  // an edge tile wholly before this row's window
        list[n++] = (int32_t)r;
        maxvis = nvis[r] > maxvis ? nvis[r] : maxvis;
      }
      if (!n) continue;
      const bool low = md == LP_MODE_LOW;
      int64_t nk = T;
      const uint8_t *hk = nullptr, *hv = nullptr;
      LowTile lt = {nullptr, &L};
      if (low) {
        lt.p = lp_kv_page_ptr(&sq.s, j) + (size_t)h * L.head_bytes;
      } else {
        hk = lp_kv_high_ptr(&sq.s, 0, (int)h, j, &nk);
        hv = lp_kv_high_ptr(&sq.s, 1, (int)h, j, &nk);
      }
      const size_t row_bytes = (size_t)(D * L.esz);
      if (job.pasa) {  // shift of tile j for each row (SEMANTICS "PASA", as prefill)
        for (int64_t l = 0; l < n; l++) {
          const int64_t r = list[l], i = pos[r] / T;
          const float *src = nullptr;
          if (j < i || i > 0) {
            src = lp_kv_seq_kmean(&sq.s, (int)h, j < i ? j : i - 1);
          } else {  // tile 0, diagonal: its own first key
            int64_t n0;
            ConvertHigh(lp_kv_high_ptr(&sq.s, 0, (int)h, 0, &n0), hdt, D, vd);
            src = vd;
          }
          for (int64_t d = 0; d < D; d++) w->sh[r * D + d] = job.beta * src[d];
        }
      }
      // Scores: each key decoded once for every row of the list.
      if (job.pasa && !low) {
        for (int64_t l = 0; l < n; l++)
          ScoresPasa(hdt, q + list[l] * D, hk, w->sh.data() + list[l] * D, ss, D, maxvis,
                     S + list[l] * T);
      } else
#if LP_DEC_INT
      if (low && use_int8) {
        nx.Plan(T / 8 + D / 8);  // a step a call, scores then P.V
        ScaleLanes(job, lt, 0, qi[list[0]].idx, sl);
        for (int64_t c = 0; c < T; c += 8) {
          nx.Step();
          for (int64_t l = 0; l < n; l++) Scores8Int(job, lt, c, qi[list[l]], sl, S + list[l] * T);
        }
      } else if (low && use_int) {
        for (int64_t c = 0; c < maxvis; c++)
          for (int64_t l = 0; l < n; l++) S[list[l] * T + c] = DotLowInt(job, lt, 0, c, qi[list[l]]);
      } else
#endif
      if (low && n == 1) {  // one row: decode and dot in registers
        const int64_t r = list[0];
        nx.Plan((maxvis + 3) / 4 + (D + 3) / 4);  // a step every 4 keys, then every 4 channels
        int64_t c = 0;
        for (; LP_FP8_LINES && !job.fp4 && c + LP_FP8_LINES <= maxvis; c += LP_FP8_LINES) {
          for (int64_t k = 0; k < LP_FP8_LINES; k += 4) nx.Step();
          Fp8LinesLow(job, lt, 0, c, ql + r * D, S + r * T + c, false);
        }
        for (; c < maxvis; c++) {
          if (c % 4 == 0) nx.Step();
          S[r * T + c] = DotLow(job, lt, 0, c, ql + r * D, kd);
        }
      } else if (n == 1) {
        nx.Plan((maxvis + 3) / 4);
        for (int64_t c = 0; c < maxvis; c += 4) {
          nx.Step();
          ScoresHigh(hdt, q + list[0] * D, hk + c * row_bytes, D, maxvis - c < 4 ? maxvis - c : 4,
                     S + list[0] * T + c);
        }
      } else if (LP_FP8_LINES) {  // rows of a GQA group: LP_FP8_LINES keys decoded, then dotted
        nx.Plan(maxvis);            // a step a key: a few lines at a time
        for (int64_t c = 0; c < maxvis; c += LP_FP8_LINES) {
          const int64_t m = maxvis - c < LP_FP8_LINES ? maxvis - c : LP_FP8_LINES;
          for (int64_t k = 0; k < m; k++) {
            nx.Step();
            if (low) DecodeLow(job, lt, 0, c + k, kd + k * D);
            else ConvertHigh(hk + (c + k) * row_bytes, hdt, D, kd + k * D);
          }
          for (int64_t l = 0; l < n; l++) {
            const int64_t r = list[l];
            const float *x = low ? ql + r * D : q + r * D;
            if (m == LP_FP8_LINES) DotLines(x, kd, D, S + r * T + c, false);
            else for (int64_t k = 0; k < m; k++) S[r * T + c + k] = Dot(x, kd + k * D, D);
          }
        }
      } else for (int64_t c = 0; c < maxvis; c++) {
        if (c == 0) nx.Plan((maxvis + 7) / 8);  // a step every 8 keys
        if (c % 8 == 0) nx.Step();
        if (low) DecodeLow(job, lt, 0, c, kd);
        else ConvertHigh(hk + c * row_bytes, hdt, D, kd);
        for (int64_t l = 0; l < n; l++) {
          const int64_t r = list[l];
          S[r * T + c] = Dot(low ? ql + r * D : q + r * D, kd, D);
        }
      }
      for (int64_t l = 0; l < n; l++) {
        const int64_t r = list[l];
        float *s = S + r * T, *p = P + r * T;
        float corr = 0.0f;
        if (job.pasa) {  // f16 scores of the shifted keys; c undoes the shift
          for (int64_t c = 0; c < T; c++)
            s[c] = c >= nvis[r] ? -INFINITY : low ? lpk_round_f16(s[c] * ss) : s[c];
          corr = ss * lp_dot_f32(q + r * D, w->sh.data() + r * D, D);
        } else if (win || capped) {
          ScaleMaskRange(s, T, nf[r], nvis[r], ss, pr.softcap);
        } else {
          ScaleMask(s, T, nvis[r], ss);
        }
        const lpk_step st = lpk_row_begin(&rows[r], RowMax(s, T), corr);
        float sum_p, sum_ps;
        ExpRow(s, T, st.bias, p, &sum_p, &sum_ps);
        lpk_row_end(&rows[r], &st, sum_p, sum_ps);
        if (st.alpha != 1.0f) ScaleRow(acc + r * D, st.alpha, D);
#if LP_DEC_INT
        if (low && use_int) {
          ToIntRow(job, p, T, true, &w->sc, &pi[r]);
          continue;
        }
#endif
        if (low) {
          QuantizePRow(job.pfmt, pr.mx_round_up, p, T, &w->sc, p);
          if (job.fp4) Fp4Order(p, T, Pp + r * T);
          else memcpy(Pp + r * T, p, sizeof(float) * (size_t)T);
        }
      }
      bool clip = false;  // FP8_STATIC: a row's keys outside [nf, nvis) may be another's (or stale)
      for (int64_t l = 0; job.fp8s && l < n; l++) clip |= nf[list[l]] > 0 || nvis[list[l]] < T;
      if (clip) {  // V codes outside each row's run never reach it (SPEC 4)
        alignas(64) float vr[256];
        for (int64_t d = 0; d < D; d++) {
          DecodeLow(job, lt, 1, d, vd);
          for (int64_t l = 0; l < n; l++) {
            const int64_t r = list[l];
            for (int64_t c = 0; c < T; c++) vr[c] = c >= nf[r] && c < nvis[r] ? vd[c] : 0.0f;
            acc[r * D + d] += Dot(Pp + r * T, vr, T);
          }
        }
      } else if (low) {  // acc[d] += P^ . V[:, d], a channel at a time
#if LP_DEC_INT
        if (use_int8) {
          ScaleLanes(job, lt, 1, pi[list[0]].idx, sl);
          for (int64_t d = 0; d < D; d += 8) {
            nx.Step();
            for (int64_t l = 0; l < n; l++) PV8Int(job, lt, d, pi[list[l]], sl, acc + list[l] * D);
          }
        } else if (use_int) {
          for (int64_t d = 0; d < D; d++)
            for (int64_t l = 0; l < n; l++) acc[list[l] * D + d] += DotLowInt(job, lt, 1, d, pi[list[l]]);
        } else
#endif
        if (n == 1) {
          const int64_t r = list[0];
          int64_t d = 0;
          for (; LP_FP8_LINES && !job.fp4 && d + LP_FP8_LINES <= D; d += LP_FP8_LINES) {
            for (int64_t k = 0; k < LP_FP8_LINES; k += 4) nx.Step();
            Fp8LinesLow(job, lt, 1, d, Pp + r * T, acc + r * D + d, true);
          }
          for (; d < D; d++) {
            if (d % 4 == 0) nx.Step();
            acc[r * D + d] += DotLow(job, lt, 1, d, Pp + r * T, vd);
          }
        } else if (LP_FP8_LINES) {  // rows of a GQA group: LP_FP8_LINES channels decoded, then dotted
          for (int64_t d = 0; d < D; d += LP_FP8_LINES) {
            const int64_t m = D - d < LP_FP8_LINES ? D - d : LP_FP8_LINES;
            for (int64_t k = 0; k < m; k++) DecodeLow(job, lt, 1, d + k, vd + k * T);
            for (int64_t l = 0; l < n; l++) {
              const int64_t r = list[l];
              if (m == LP_FP8_LINES) DotLines(Pp + r * T, vd, T, acc + r * D + d, true);
              else for (int64_t k = 0; k < m; k++) acc[r * D + d + k] += Dot(Pp + r * T, vd + k * T, T);
            }
          }
        } else for (int64_t d = 0; d < D; d++) {
          DecodeLow(job, lt, 1, d, vd);
          for (int64_t l = 0; l < n; l++) {
            const int64_t r = list[l];
            acc[r * D + d] += Dot(Pp + r * T, vd, T);
          }
        }
      } else if (n == 1) {
        const int64_t f = nf[list[0]];  // V before the row's window is never read
        AccumHigh(hdt, P + list[0] * T + f, hv + f * row_bytes, D, maxvis - f, acc + list[0] * D);
      } else {  // acc += sum_c P[c] V[c], a key at a time
        for (int64_t c = 0; c < maxvis; c++) {
          ConvertHigh(hv + c * row_bytes, hdt, D, vd);
          for (int64_t l = 0; l < n; l++) {
            const int64_t r = list[l];
            if (c >= nf[r] && c < nvis[r] && P[r * T + c] != 0.0f) Axpy(acc + r * D, P[r * T + c], vd, D);
          }
        }
      }
    }
  }
  float *out = job.part + item * R * (D + 2);
  for (int64_t r = 0; r < R; r++) {
    float inv_l, lse, ent;
    lpk_row_finish(&rows[r], &inv_l, &lse, &ent);
    for (int64_t d = 0; d < D; d++) out[r * (D + 2) + d] = acc[r * D + d] * inv_l * od;  // x * 1: exact
    out[r * (D + 2) + D] = lse, out[r * (D + 2) + D + 1] = ent;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lpattn_cpu
HWY_AFTER_NAMESPACE();

#endif  // include guard
