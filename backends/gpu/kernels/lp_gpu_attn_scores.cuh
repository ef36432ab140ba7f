/* The scores of a KV tile in the attention kernel, expanded inside
 * gpu_attn_body (backends/gpu/kernels/lp_gpu_attn.cuh includes this text in
 * place, after S = Q K^T): the scale (sm_scale, a low tile's outer scales,
 * f16 rounding), the softcap (SEMANTICS "Sliding window and softcap": on
 * every scaled score, before the mask, the max, P and the entropy's r) and
 * the mask of an edge tile (the causal mask and the sliding window: each
 * row's run of keys, core/mask.h lp_mask_range; keys past Skv). Sets s,
 * smax (the row's max of this thread's scores) and vis (the row sees one
 * of the tile's keys). Tiles without a mask, a softcap or f16 rounding take
 * the first two loops, as before windows existed. */

      const bool masked_tile = c0 + BK > Skv || diag; /* diag: an edge tile (edge()) */
      const bool capped = a.softcap != 0.0f;          /* uniform: the call's */
#pragma unroll
      for (int hh = 0; hh < FR; hh++) smax[hh] = gpu_ninf(), vis[hh] = true;
      if (!low && !a.pasa && !a.score_f16 && !masked_tile && !capped) { /* the common case */
#pragma unroll
        for (int hh = 0; hh < FR; hh++)
#pragma unroll
          for (int sl = 0; sl < NS; sl++) {
            s[hh][sl] = __fmul_rn(s[hh][sl], a.sm_scale);
            smax[hh] = fmaxf(smax[hh], s[hh][sl]);
          }
      } else if (low && !masked_tile && !capped) {
#pragma unroll
        for (int hh = 0; hh < FR; hh++) {
          const float qo = qout[warp * 16 + lay.row(hh)];
#pragma unroll
          for (int sl = 0; sl < NS; sl++) {
            float v = __fmul_rn(__fmul_rn(s[hh][sl], __fmul_rn(qo, kout[lay.key(sl)])), a.sm_scale);
            if (a.pasa) v = lpk_round_f16(v);
            s[hh][sl] = v;
            smax[hh] = fmaxf(smax[hh], v);
          }
        }
      } else {
#pragma unroll
        for (int hh = 0; hh < FR; hh++) {
          const int lr = warp * 16 + lay.row(hh), r = row_of(lr);
          /* the row's keys of the tile: columns kf .. ke - 1 (all of them in a
           * tile without a mask; none: the row does not visit the tile) */
          int kf = 0, ke = BK;
          if (masked_tile) {
            int64_t f;
            const int64_t n = lp_mask_range(&msk, r, c0, min(BK, Skv - c0), &f);
            kf = (int)f, ke = (int)(f + n), vis[hh] = n > 0;
          }
#pragma unroll
          for (int sl = 0; sl < NS; sl++) {
            const int col = lay.key(sl);
            float v = s[hh][sl];
            if (low) {
              v = __fmul_rn(__fmul_rn(v, __fmul_rn(qout[lr], kout[col])), a.sm_scale);
              if (a.pasa) v = lpk_round_f16(v);
            } else if (a.pasa) {
              v = lpk_round_f16(v);
            } else if (a.score_f16) {
              v = __fmul_rn(lpk_round_f16(v), a.sm_scale);
            } else {
              v = __fmul_rn(v, a.sm_scale);
            }
            if (capped) v = lp_softcap_f32(v, a.softcap); /* (PASA never has one) */
            if (col < kf || col >= ke) v = gpu_ninf();
            s[hh][sl] = v;
            smax[hh] = fmaxf(smax[hh], v);
          }
        }
      }
