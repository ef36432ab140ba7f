/* Tile-precision simulator for the Thrift selection ablation. The library
 * only selects tiles by block-mean top-k; to compare other selections at the
 * same k, this recomputes a causal THRIFT call for any per-tile high/low
 * choice, following docs/SEMANTICS.md ("A low tile", "High tiles"):
 *   high tile: S = q.k * scale in f64 on the inputs, exact P, exact V;
 *   low tile:  S from Q, K quantized per token (lpattn_quantize, AXIS_D),
 *              l from the unquantized P, P quantized per row of the tile
 *              along keys, V quantized per (channel, tile) (AXIS_S).
 * A low tile's P is quantized relative to its own row max instead of the
 * running max: NVFP4 codes (local f32 outer scale) are invariant to that
 * common factor up to f32 rounding, so the result matches the library to
 * ~1e-6 (the report prints the difference). MXFP4's power-of-two scales and
 * FP8's fixed P scale are not invariant, so only NVFP4 is simulated.
 * Requires Sq = Skv, both multiples of the tile. */
#ifndef LPATTN_BENCH_TILESIM_H
#define LPATTN_BENCH_TILESIM_H

#include "common.h"

/* high[s] is a [B, Hq, nqt, nkt] array of flags (1 = compute high) for
 * selection s; diagonal tiles are high whatever the flag. out[s] receives
 * [B, Hq, Sq, D]. Quantization runs on ref contexts of its own (formats
 * are bit-exact on every backend); heads are split over `threads`. */
int tilesim_run(const bench_problem *p, int tile, double sm_scale, int threads, int nsel,
                uint8_t *const *high, float *const *out);

#endif
