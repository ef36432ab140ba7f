/* The KV tile loaders of the attention kernel, expanded inside gpu_attn_body
 * (backends/gpu/kernels/lp_gpu_attn.cuh includes this text in place): cp.async
 * prefetch of a tile (issue), the PASA shift, and the in-step loads (load_k,
 * load_v) of the paths without prefetch, which decode low tiles from their
 * codes. */

  /* Tiles copied as they are (high without PASA, or low from the dequantized
   * prefill workspace) are prefetched with cp.async one tile ahead. */
  const bool lowdq = GPU_ASYNC && (SPEC > 0 || a.kd != nullptr); /* SPEC > 0: gpu_attn_spec checked kd */
  const bool vt = !lowdq; /* low V decoded in-kernel is transposed; streamed (lowdq) is not */
  auto async_ok = [&](bool lw) { return GPU_ASYNC && (lw ? lowdq : (a.vec16 && !a.pasa)); };
  /* A thread copies the same 16-byte column c of rows r0, r0 + RS, ... of
   * every tile: the addresses are the tile's base plus fixed steps (high:
   * vec16, so d is contiguous; low copies: [kvbh][Skv][D]). */
  auto issue = [&](int j, int buf, bool lw) {
    constexpr int CPR = D / 8, RS = NT / CPR; /* 16-byte columns per row, rows per pass */
    const int c0 = j * BK, c = (tid % CPR) * 8, r0 = tid / CPR;
    const unsigned short *ks = (const unsigned short *)(lw ? a.kd : a.k);
    const unsigned short *vs = (const unsigned short *)(lw ? a.vd : a.v);
    const int64_t kst = lw ? D : a.sk[2], vst = lw ? D : a.sv[2];
    const unsigned short *kp = ks + (lw ? (kvbh * a.Skv + c0 + r0) * D : lpk_off(a.sk, b, hk, c0 + r0, 0)) + c;
    const unsigned short *vp = vs + (lw ? (kvbh * a.Skv + c0 + r0) * D : lpk_off(a.sv, b, hk, c0 + r0, 0)) + c;
    unsigned short *kd = &Kb[buf * SM::KSZ + r0 * LD + c], *vd = &Vb[buf * SM::VSZ + r0 * LD + c];
#pragma unroll
    for (int cr = r0; cr < BK; cr += RS) {
      const bool ok = c0 + cr < Skv; /* past the end: zeros, read nothing */
      gpu_cp16(kd, ok ? kp : ks, ok ? 16 : 0);
      gpu_cp16(vd, ok ? vp : vs, ok ? 16 : 0);
      kp += RS * kst, vp += RS * vst, kd += RS * LD, vd += RS * LD;
    }
    gpu_cp_commit();
  };
  /* PASA shift of tile j (SEMANTICS): beta * Kbar of source tile sj, or for
   * a diagonal tile with no full tile before it (sj < 0) beta * its first key
   * c0, which every row that sees the tile sees (decode: the cache's copy). */
  auto kshift = [&](int sj, int c0, int d) -> float {
    const float src = sj >= 0 ? a.kmean[(kvbh * a.kmean_tiles + sj) * D + d]
                              : HI::tof(((const unsigned short *)a.k)[lpk_off(a.sk, b, hk, c0, d)]);
    return __fmul_rn(a.pasa_beta, src);
  };
  /* K (or V) of tile j into shared memory in step: high from the tensor
   * (K' = fl16((k - kshift) * sm_scale) under PASA, T is f16 there), low
   * decoded from the codes (V transposed, [d][key]), with outer scales. */
  auto load_k = [&](int j, int sj, unsigned short *Ks, bool low) {
    const int c0 = j * BK;
    if (!low) {
      for (int i = tid; i < BK * (D / 8); i += blockDim.x) {
        int cr = i / (D / 8), c = (i % (D / 8)) * 8, key = c0 + cr;
        uint4 wk = make_uint4(0, 0, 0, 0);
        if (key < Skv) {
          int64_t o = lpk_off(a.sk, b, hk, key, c);
          unsigned short ek[8];
          if (a.vec16) memcpy(ek, (const unsigned short *)a.k + o, 16);
          else
            for (int u = 0; u < 8; u++) ek[u] = ((const unsigned short *)a.k)[o + u * a.sk[3]];
          if (a.pasa)
            for (int u = 0; u < 8; u++) {
              float kv = __fmul_rn(__fsub_rn(HI::tof(ek[u]), kshift(sj, c0, c + u)), a.sm_scale);
              ek[u] = gpu_mma<gpu_f16>::bits(lpk_round_f16(kv));
            }
          memcpy(&wk, ek, 16);
        }
        *(uint4 *)&Ks[cr * LD + c] = wk;
      }
      return;
    }
    /* all code loads of a pass in flight before any is decoded */
    constexpr int NC = BK * (D / 8) / NT;
    uint2 raw[NC];
    uint8_t rsc[NC];
#pragma unroll
    for (int it = 0; it < NC; it++) {
      int i = tid + it * NT, cr = i / (D / 8), c = (i % (D / 8)) * 8, key = c0 + cr;
      int64_t e = (kvbh * a.kq.rows + (key < Skv ? key : 0)) * D + c;
      raw[it] = gpu_raw8(a.kq.codes, fmt, e);
      rsc[it] = fmt == LPATTN_FMT_FP8 ? 0 : a.kq.scales[e >> (fmt == LPATTN_FMT_MXFP4 ? 5 : 4)];
    }
#pragma unroll
    for (int it = 0; it < NC; it++) {
      int i = tid + it * NT, cr = i / (D / 8), c = (i % (D / 8)) * 8, key = c0 + cr;
      bool ok = key < Skv;
      *(uint4 *)&Ks[cr * LD + c] = ok ? gpu_dec8(fmt, raw[it], rsc[it]) : make_uint4(0, 0, 0, 0);
#if defined(LPATTN_HIP_FP8_MFMA)
      if (fmt == LPATTN_FMT_FP8) *(uint2 *)&Kc[cr * D + c] = ok ? raw[it] : make_uint2(0, 0);
#endif
      if (c == 0)
        kout[cr] = !ok ? 0.0f : fmt == LPATTN_FMT_MXFP4 ? 1.0f : a.kq.outer[kvbh * a.kq.rows + key];
    }
  };
  auto load_v = [&](int j, unsigned short *Vs, bool low) {
    const int c0 = j * BK;
    if (!low) {
      for (int i = tid; i < BK * (D / 8); i += blockDim.x) {
        int cr = i / (D / 8), c = (i % (D / 8)) * 8, key = c0 + cr;
        uint4 wv = make_uint4(0, 0, 0, 0);
        if (key < Skv) {
          int64_t o = lpk_off(a.sv, b, hk, key, c);
          if (a.vec16) {
            wv = *(const uint4 *)((const unsigned short *)a.v + o);
          } else {
            unsigned short ev[8];
            for (int u = 0; u < 8; u++) ev[u] = ((const unsigned short *)a.v)[o + u * a.sv[3]];
            memcpy(&wv, ev, 16);
          }
        }
        *(uint4 *)&Vs[cr * LD + c] = wv;
      }
      return;
    }
    const int64_t Sp = (a.vq.rows + BK - 1) / BK * BK;
    /* V codes are [d][S]: 8 keys of one channel per chunk, stored as Vt[d][key] */
    constexpr int NC = BK * (D / 8) / NT;
    uint2 raw[NC];
    uint8_t rsc[NC];
#pragma unroll
    for (int it = 0; it < NC; it++) {
      int i = tid + it * NT, d = i / (BK / 8), kc = (i % (BK / 8)) * 8, key = c0 + kc;
      int64_t e = (kvbh * D + d) * Sp + key;
      raw[it] = gpu_raw8(a.vq.codes, fmt, e);
      rsc[it] = fmt == LPATTN_FMT_FP8 ? 0 : a.vq.scales[e >> (fmt == LPATTN_FMT_MXFP4 ? 5 : 4)];
    }
#pragma unroll
    for (int it = 0; it < NC; it++) {
      int i = tid + it * NT, d = i / (BK / 8), kc = (i % (BK / 8)) * 8, key = c0 + kc;
      uint4 w = gpu_dec8(fmt, raw[it], rsc[it]);
      if (key + 8 > Skv) { /* keys past the sequence hold padding or stale data: zero */
        unsigned short e[8];
        memcpy(e, &w, 16);
#pragma unroll
        for (int u = 0; u < 8; u++)
          if (key + u >= Skv) e[u] = 0;
        memcpy(&w, e, 16);
      }
      *(uint4 *)&Vs[d * LDV + kc] = w;
      if (kc == 0)
        vout[d] = fmt == LPATTN_FMT_MXFP4 ? 1.0f : a.vq.outer[(kvbh * (Sp / BK) + j) * D + d];
    }
  };