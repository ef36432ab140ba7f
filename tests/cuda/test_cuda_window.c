/* Sliding window and softcap on a GPU backend (docs/SEMANTICS.md "Sliding
 * window and softcap"): not built yet, so prefill, backward and decode
 * answer UNSUPPORTED with an error naming the field, and write nothing. */
#include "cudatest.h"

enum { H = 2, S = 64, D = 64 };

static void expect(lpattn_status st, const char *field) {
  char want[96];
  snprintf(want, sizeof want, "params.%s: the %s backend has no", field, CT_NAME);
  CHECK(st == LPATTN_ERR_UNSUPPORTED, "%s: %s", field, lpattn_status_string(st));
  CHECK(strstr(lpattn_last_error(), want) != NULL, "%s: \"%s\"", field, lpattn_last_error());
}

int main(void) {
  lpattn_ctx *ctx = NULL;
  if (lpattn_create(CT_BACKEND, NULL, &ctx) != LPATTN_OK) return test_skip("no usable GPU device");
  const size_t n = (size_t)H * S * D;
  uint16_t *x = ht_dalloc(2 * n), *o = ht_dalloc(2 * n), *g = ht_dalloc(3 * 2 * n);
  float *lse = ht_dalloc(4 * (size_t)H * S);
  ht_dset(o, 0x7f, 2 * n);
  lpattn_tensor t = lpattn_tensor_4d(x, LPATTN_F16, 1, H, S, D);
  lpattn_tensor to = lpattn_tensor_4d(o, LPATTN_F16, 1, H, S, D);
  lpattn_tensor tl = lpattn_tensor_4d(lse, LPATTN_F32, 1, H, S, 1);
  const char *fields[3] = {"window_left", "window_right", "softcap"};
  for (int f = 0; f < 3; f++) {
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.causal = f != 1;
    if (f == 0) p.window_left = 16;
    if (f == 1) p.window_right = 16;
    if (f == 2) p.softcap = 30.0f;
    expect(lpattn_attention(ctx, &t, &t, &t, &to, &p, NULL), fields[f]);
    lpattn_attn_grads gr;
    lpattn_attn_grads_init(&gr);
    gr.dq = lpattn_tensor_4d(g, LPATTN_F16, 1, H, S, D);
    gr.dk = lpattn_tensor_4d(g + n, LPATTN_F16, 1, H, S, D);
    gr.dv = lpattn_tensor_4d(g + 2 * n, LPATTN_F16, 1, H, S, D);
    expect(lpattn_attention_backward(ctx, &t, &t, &t, &to, &tl, &t, &p, &gr), fields[f]);
  }
  /* decode through a cache: the same answer */
  lpattn_kv_cache_params cp;
  lpattn_kv_cache_params_init(&cp);
  cp.num_kv_heads = cp.num_q_heads = H, cp.head_dim = D, cp.max_tokens = S, cp.tile = 64;
  lpattn_kv_cache *c = NULL;
  CHECK_STATUS(lpattn_kv_cache_create(ctx, &cp, &c), LPATTN_OK);
  if (c) {
    lpattn_tensor k1 = lpattn_tensor_4d(x, LPATTN_F16, 1, H, 1, D);
    k1.stride[1] = S * D;
    CHECK_STATUS(lpattn_kv_cache_append(ctx, c, 0, &k1, &k1, NULL), LPATTN_OK);
    lpattn_tensor o1 = lpattn_tensor_4d(o, LPATTN_F16, 1, H, 1, D);
    lpattn_attn_params p;
    lpattn_attn_params_init(&p);
    p.window_left = 8;
    expect(lpattn_decode(ctx, c, &k1, &o1, &p, NULL), "window_left");
    lpattn_attn_params_init(&p);
    p.softcap = 50.0f;
    expect(lpattn_decode(ctx, c, &k1, &o1, &p, NULL), "softcap");
    lpattn_kv_cache_free(c);
  }
  /* nothing was written */
  uint16_t *h = malloc(2 * n);
  ht_down(h, o, 2 * n);
  int same = 1;
  for (size_t i = 0; i < n; i++) same &= h[i] == 0x7f7f;
  CHECK(same, "out was written");
  free(h);
  ht_dfree(x), ht_dfree(o), ht_dfree(g), ht_dfree(lse);
  lpattn_free(ctx);
  return test_finish();
}
