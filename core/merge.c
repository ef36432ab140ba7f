/* SPEC 7: merging partial attention states over disjoint key sets, on host
 * memory. Computed in f64; an empty partial (LSE = -inf) is the identity. */
#include <math.h>

#include "formats.h"
#include "internal.h"


/* w log w with 0 log 0 = 0. */
static double xlogx(double w) { return w > 0.0 ? w * log(w) : 0.0; }

lpattn_status lp_host_merge(const lpattn_tensor *o_a, const lpattn_tensor *lse_a,
                            const lpattn_tensor *h_a, const lpattn_tensor *o_b,
                            const lpattn_tensor *lse_b, const lpattn_tensor *h_b,
                            const lpattn_tensor *o, const lpattn_tensor *lse,
                            const lpattn_tensor *h) {
  const int64_t B = o_a->shape[0], H = o_a->shape[1], S = o_a->shape[2], D = o_a->shape[3];
  for (int64_t b = 0; b < B; b++)
    for (int64_t hh = 0; hh < H; hh++)
      for (int64_t s = 0; s < S; s++) {
        double la = lp_load_f32(lse_a->data, LPATTN_F32, lp_off4(lse_a, b, hh, s, 0));
        double lb = lp_load_f32(lse_b->data, LPATTN_F32, lp_off4(lse_b, b, hh, s, 0));
        double ha = h ? lp_load_f32(h_a->data, LPATTN_F32, lp_off4(h_a, b, hh, s, 0)) : 0.0;
        double hb = h ? lp_load_f32(h_b->data, LPATTN_F32, lp_off4(h_b, b, hh, s, 0)) : 0.0;
        double l, wa, wb;
        if (la == -INFINITY && lb == -INFINITY) {
          l = -INFINITY, wa = wb = 0.0;
        } else {
          double m = la > lb ? la : lb;
          l = m + log(exp(la - m) + exp(lb - m));
          wa = exp(la - l), wb = exp(lb - l);
        }
        /* Read both rows fully before writing: outputs may alias inputs. */
        for (int64_t d = 0; d < D; d++) {
          double xa = lp_load_f32(o_a->data, o_a->dtype, lp_off4(o_a, b, hh, s, d));
          double xb = lp_load_f32(o_b->data, o_b->dtype, lp_off4(o_b, b, hh, s, d));
          double y = (wa > 0.0 ? wa * xa : 0.0) + (wb > 0.0 ? wb * xb : 0.0);
          lp_store_f32(o->data, o->dtype, lp_off4(o, b, hh, s, d), (float)y);
        }
        lp_store_f32(lse->data, LPATTN_F32, lp_off4(lse, b, hh, s, 0), (float)l);
        if (h) {
          double hm = (wa > 0.0 ? wa * ha : 0.0) + (wb > 0.0 ? wb * hb : 0.0) - xlogx(wa) - xlogx(wb);
          lp_store_f32(h->data, LPATTN_F32, lp_off4(h, b, hh, s, 0), (float)hm);
        }
      }
  return LPATTN_OK;
}
