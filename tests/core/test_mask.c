/* core/mask.h against brute force over lp_mask_sees (the one definition of
 * which row sees which key): each row's run of keys (lp_mask_range), each
 * key's run of rows (lp_mask_rows), the unmasked run of key tiles of a query
 * tile (lp_mask_tiles: the tiles lp_mask_kind does not mask, whose last key
 * it takes unclipped) and of query tiles of a key tile (lp_mask_qtiles, the
 * GPU backward's key-major pass: exactly those with a visible pair), and the
 * tile classes (lp_mask_kind): a
 * MASKED pair has no visible pair, a FULL one only visible pairs. Random
 * masks: causal or not, windows on either side, negative and positive
 * offsets, partial tiles. */
#include <stdint.h>
#include <stdlib.h>

#include "mask.h"
#include "testutil.h"

static uint64_t rs = 0x243F6A8885A308D3ull;
static int64_t rnd(int64_t n) { /* [0, n) */
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (int64_t)(rs % (uint64_t)n);
}

static int64_t bad_range, bad_rows, bad_tiles, bad_qtiles, bad_kind;

static void one(void) {
  const int64_t B = 8 << rnd(3), sq = 1 + rnd(300), sk = 1 + rnd(300);
  lp_mask m = {(int)rnd(2), rnd(400) - 200, rnd(3) ? rnd(120) - 1 : -1, rnd(3) ? rnd(120) - 1 : -1, B};
  for (int64_t r = 0; r < sq; r++) { /* a row's keys of a tile */
    const int64_t c0 = rnd(sk), nk = 1 + rnd(sk - c0);
    int64_t f, n = lp_mask_range(&m, r, c0, nk, &f);
    for (int64_t c = c0; c < c0 + nk; c++) bad_range += lp_mask_sees(&m, r, c) != (c >= c0 + f && c < c0 + f + n);
  }
  for (int64_t c = 0; c < sk; c++) { /* a key's rows of a tile */
    const int64_t r0 = rnd(sq), nr = 1 + rnd(sq - r0);
    int64_t f, n = lp_mask_rows(&m, c, r0, nr, &f);
    for (int64_t r = r0; r < r0 + nr; r++) bad_rows += lp_mask_sees(&m, r, c) != (r >= r0 + f && r < r0 + f + n);
  }
  const int64_t nqt = (sq + B - 1) / B, nkt = (sk + B - 1) / B;
  for (int64_t i = 0; i < nqt; i++)
    for (int64_t j = 0; j < nkt; j++) {
      int64_t any = 0, all = 1;
      for (int64_t r = i * B; r < (i + 1) * B && r < sq; r++)
        for (int64_t c = j * B; c < (j + 1) * B && c < sk; c++) {
          const int s = lp_mask_sees(&m, r, c);
          any |= s, all &= s;
        }
      const int64_t r1 = (i + 1) * B - 1 < sq - 1 ? (i + 1) * B - 1 : sq - 1;
      const int k = lp_mask_kind(&m, i * B, r1, j * B, j * B + B - 1);
      bad_kind += (k == LP_TILE_MASKED && any) || (k == LP_TILE_FULL && !all);
      int64_t j0, j1, i0, i1;
      lp_mask_tiles(&m, i * B, r1, B, nkt, &j0, &j1); /* exactly the tiles lp_mask_kind does not mask */
      bad_tiles += (j >= j0 && j < j1) != (k != LP_TILE_MASKED);
      lp_mask_qtiles(&m, j * B, (j + 1) * B - 1 < sk - 1 ? (j + 1) * B - 1 : sk - 1, B, sq, &i0, &i1);
      bad_qtiles += (i >= i0 && i < i1) != (any != 0);
    }
}

int main(void) {
  for (int t = 0; t < 3000; t++) one();
  CHECK(bad_range == 0, "lp_mask_range: %lld keys disagree with lp_mask_sees", (long long)bad_range);
  CHECK(bad_rows == 0, "lp_mask_rows: %lld rows disagree with lp_mask_sees", (long long)bad_rows);
  CHECK(bad_kind == 0, "lp_mask_kind: %lld tile pairs misclassified", (long long)bad_kind);
  CHECK(bad_tiles == 0, "lp_mask_tiles: %lld key tiles misplaced", (long long)bad_tiles);
  CHECK(bad_qtiles == 0, "lp_mask_qtiles: %lld query tiles misplaced", (long long)bad_qtiles);
  return test_finish();
}
