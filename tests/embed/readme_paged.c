/* The README's paged decode example: a pool of NVFP4 pages, two sequences
 * that share a 100-token prompt (the second is forked from the first), and
 * a few decode steps of both in one batch, on the CPU. */
#include <lpattn.h>
#include <stdio.h>
#include <stdlib.h>

enum { HKV = 8, HQ = 8, D = 128, PAGE = 64, PAGES = 16, PROMPT = 100, MAXP = 8 };

static float rnd(void) { return (float)rand() / RAND_MAX - 0.5f; }

int main(void) {
  lpattn_ctx *ctx;
  if (lpattn_create(LPATTN_BACKEND_CPU, NULL, &ctx) != LPATTN_OK &&
      lpattn_create(LPATTN_BACKEND_REF, NULL, &ctx) != LPATTN_OK)
    return 1;
  lpattn_kv_pool_params pp;
  lpattn_kv_pool_params_init(&pp); /* NVFP4 pages of 64 tokens, f16 high copies */
  pp.num_kv_heads = HKV, pp.num_q_heads = HQ, pp.head_dim = D;
  pp.num_pages = PAGES, pp.num_slots = 2;
  size_t page_bytes, pool_bytes;
  lpattn_kv_pool *pool;
  lpattn_status s = lpattn_kv_pool_size(&pp, &page_bytes, NULL, &pool_bytes);
  if (s == LPATTN_OK) s = lpattn_kv_pool_create(ctx, &pp, NULL, 0, &pool); /* or caller memory */
  if (s != LPATTN_OK) return fprintf(stderr, "pool: %s\n", lpattn_status_string(s)), 1;
  printf("pool %zu bytes, %.0f bytes per token\n", pool_bytes, (double)page_bytes / PAGE);

  /* Sequence i: slot i, page table row i, length. Page 0 (tokens 0-63 of
   * the prompt) is shared once sequence 1 is forked. */
  int32_t slots[2] = {0, 1}, lens[2] = {0, 0};
  int32_t table[2][MAXP] = {{0, 1, 2, 3, 4, 5, 6, 7}, {0, 9, 10, 11, 12, 13, 14, 15}};
  lpattn_kv_batch b;
  lpattn_kv_batch_init(&b);
  b.slots = lpattn_tensor_4d(slots, LPATTN_I32, 1, 1, 1, 2);
  b.lengths = lpattn_tensor_4d(lens, LPATTN_I32, 1, 1, 1, 2);
  b.page_table = lpattn_tensor_4d(table, LPATTN_I32, 1, 1, 2, MAXP);

  /* Prefill sequence 0's prompt (a batch of one: the first row of each). */
  float *k = malloc(sizeof(float) * 2 * HKV * PROMPT * D), *v = malloc(sizeof(float) * 2 * HKV * PROMPT * D);
  float *q = malloc(sizeof(float) * 2 * HQ * D), *o = malloc(sizeof(float) * 2 * HQ * D);
  if (!k || !v || !q || !o) return 1;
  for (int i = 0; i < 2 * HKV * PROMPT * D; i++) k[i] = rnd(), v[i] = rnd();
  b.num_seqs = 1, b.max_length = 0;
  b.slots.shape[3] = b.lengths.shape[3] = 1, b.page_table.shape[2] = 1;
  lpattn_tensor tk = lpattn_tensor_4d(k, LPATTN_F32, 1, HKV, PROMPT, D);
  lpattn_tensor tv = lpattn_tensor_4d(v, LPATTN_F32, 1, HKV, PROMPT, D);
  s = lpattn_kv_append(ctx, pool, &b, &tk, &tv, NULL);
  lens[0] = PROMPT;
  /* Fork: sequence 1 shares page 0, gets its own page 9 for tokens 64-99
   * (under NVFP4 the incomplete tile lives in the slot), copies the slot. */
  if (s == LPATTN_OK) s = lpattn_kv_slot_copy(ctx, pool, 0, 1);
  lens[1] = PROMPT;

  /* Decode steps: append each sequence's new token, then attend. */
  b.num_seqs = 2;
  b.slots.shape[3] = b.lengths.shape[3] = 2, b.page_table.shape[2] = 2;
  lpattn_tensor k1 = lpattn_tensor_4d(k, LPATTN_F32, 2, HKV, 1, D);
  lpattn_tensor v1 = lpattn_tensor_4d(v, LPATTN_F32, 2, HKV, 1, D);
  lpattn_tensor q1 = lpattn_tensor_4d(q, LPATTN_F32, 2, HQ, 1, D);
  lpattn_tensor o1 = lpattn_tensor_4d(o, LPATTN_F32, 2, HQ, 1, D);
  for (int step = 0; step < 3 && s == LPATTN_OK; step++) {
    for (int i = 0; i < 2 * HQ * D; i++) q[i] = rnd();
    b.max_length = lens[0] > lens[1] ? lens[0] : lens[1];
    s = lpattn_kv_append(ctx, pool, &b, &k1, &v1, NULL); /* lengths: tokens before */
    lens[0]++, lens[1]++;
    b.max_length++;
    if (s == LPATTN_OK) s = lpattn_paged_decode(ctx, pool, &b, &q1, &o1, NULL, NULL);
  }
  if (s == LPATTN_OK) s = lpattn_synchronize(ctx);
  if (s != LPATTN_OK) return fprintf(stderr, "decode: %s\n", lpattn_status_string(s)), 1;
  printf("backend %s, lengths %d %d, out[0] = %f\n",
         lpattn_backend_name(lpattn_context_backend(ctx)), lens[0], lens[1], o[0]);
  lpattn_kv_pool_free(pool);
  lpattn_free(ctx);
  free(k), free(v), free(q), free(o);
  return 0;
}
