"""lpattn.transformers: a small LlamaForCausalLM (random weights, nothing
downloaded) generates with attn_implementation="lpattn" and an LpattnCache.
HIGH pools give the same greedy tokens as "sdpa" (float32, CPU); KVPool.prefill
and the append + decode path (GPUs') give the same tokens; FP8, NVFP4 and
MXFP4 pools run with quantized pages (32-token pages on the CPU; on a GPU,
whose pools take 64-token pages, a 192-token prompt).
Skipped without torch or transformers. LPATTN_TEST_DEVICE=cuda runs it on a
GPU (float16 model, backend "auto")."""
import os
import unittest

try:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    import lpattn.transformers as lt
    IMPORT_ERROR = None
except Exception as e:  # not installed, or a version without the cache-layer API
    torch = transformers = None
    IMPORT_ERROR = f"{type(e).__name__}: {e}"

import lpattn

DEVICE = os.environ.get("LPATTN_TEST_DEVICE", "cpu")
PROMPT, NEW = 40, 24
# GPU pools take pages of 64 tokens only; the CPU's also 32 (so that a
# 40-token prompt's first page is quantized). Quantized pools keep their
# two newest pages in high precision: on a GPU their test takes a prompt
# of 3 pages.
QPAGE = 32 if DEVICE == "cpu" else 64
QPROMPT = PROMPT if DEVICE == "cpu" else 3 * 64


def _skip_reason():
    if transformers is None:
        return f"lpattn.transformers cannot be imported ({IMPORT_ERROR})"
    if DEVICE == "cpu" and "cpu" not in lpattn.available_backends():
        return "lpattn's cpu backend is not built"
    if DEVICE != "cpu" and not torch.cuda.is_available():
        return f"LPATTN_TEST_DEVICE={DEVICE} but torch sees no GPU"
    return None


@unittest.skipIf(_skip_reason() is not None, _skip_reason() or "")
class TransformersTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.backend = "cpu" if DEVICE == "cpu" else "auto"
        cls.dtype = torch.float32 if DEVICE == "cpu" else torch.float16
        config = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             head_dim=64, max_position_embeddings=256, pad_token_id=0,
                             bos_token_id=1, eos_token_id=2)
        torch.manual_seed(0)
        cls.model = LlamaForCausalLM(config).to(device=DEVICE, dtype=cls.dtype).eval()
        g = torch.Generator().manual_seed(1)
        cls.prompt = torch.randint(3, config.vocab_size, (2, PROMPT), generator=g).to(DEVICE)
        cls.kw = lt.cache_kwarg(cls.model)
        cls.want = {b: cls._generate(b, "sdpa") for b in (1, 2)}

    @classmethod
    def _generate(cls, batch, impl, cache=None, prompt=None):
        cls.model.set_attn_implementation(impl)
        ids = cls.prompt[:batch] if prompt is None else prompt
        extra = {cls.kw: cache} if cache is not None else {}
        with torch.no_grad():
            out = cls.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=NEW, min_new_tokens=NEW, **extra)
        return out[:, ids.shape[1]:]

    def _cache(self, precision, **kw):
        return lt.LpattnCache(self.model.config, PROMPT + NEW, precision=precision,
                              backend=self.backend, **kw)

    def test_high_matches_sdpa(self):
        for batch in (1, 2):
            for page, prefill in ((64, None), (QPAGE, None), (QPAGE, False)):
                with self.subTest(batch=batch, page_size=page, use_prefill=prefill):
                    got = self._generate(batch, "lpattn",
                                         self._cache("high", page_size=page, use_prefill=prefill))
                    want = self.want[batch]
                    same = int((got == want).sum())
                    print(f"high B={batch} page={page} prefill={prefill}: {same}/{want.numel()} "
                          "greedy tokens equal sdpa's")
                    if DEVICE == "cpu":  # float32: the same tokens
                        self.assertEqual(got.tolist(), want.tolist())
                    else:  # float16 roundings may flip a near tie, then the rest differ
                        self.assertGreaterEqual(same, want.numel() // 2)

    def test_quantized_pools_run(self):
        g = torch.Generator().manual_seed(2)
        prompt = (self.prompt if QPROMPT == PROMPT else
                  torch.randint(3, 512, (2, QPROMPT), generator=g).to(DEVICE))
        want = self.want[2] if QPROMPT == PROMPT else self._generate(2, "sdpa", prompt=prompt)
        for precision in ("fp8", "nvfp4", "mxfp4"):
            with self.subTest(precision=precision):
                cache = lt.LpattnCache(self.model.config, QPROMPT + NEW, precision=precision,
                                       backend=self.backend, page_size=QPAGE)
                got = self._generate(2, "lpattn", cache, prompt=prompt)
                self.assertEqual(tuple(got.shape), (2, NEW))
                self.assertTrue(bool(((got >= 0) & (got < 512)).all()))
                same = int((got == want).sum())
                print(f"{precision} B=2 prompt={QPROMPT} page={QPAGE}: {same}/{got.numel()} "
                      "greedy tokens equal sdpa's")
                # GPUs' append + decode path is bitwise KVPool.prefill's (SEMANTICS)
                if DEVICE == "cpu":
                    alt = self._generate(2, "lpattn", self._cache(precision, page_size=32,
                                                                  use_prefill=False))
                    self.assertEqual(alt.tolist(), got.tolist())

    def test_follow_up_turn(self):
        """A second generate() on the same cache prefills the new turn's tokens
        (Sq > 1 against a cached prefix), as sdpa with a DynamicCache does."""
        def two_turns(impl, cache):
            first = self.prompt
            ids = torch.cat([first, self._generate(2, impl, cache, first)], dim=1)
            ids = torch.cat([ids, self.prompt[:, :12]], dim=1)
            return self._generate(2, impl, cache, ids)
        want = two_turns("sdpa", transformers.DynamicCache(config=self.model.config))
        got = two_turns("lpattn", lt.LpattnCache(self.model.config, 2 * (PROMPT + NEW),
                                                 precision="high", page_size=QPAGE,
                                                 backend=self.backend))
        same = int((got == want).sum())
        print(f"follow-up turn: {same}/{want.numel()} tokens equal sdpa's")
        if DEVICE == "cpu":
            self.assertEqual(got.tolist(), want.tolist())
        else:  # float16: a flipped near tie changes the rest
            self.assertGreaterEqual(same, want.numel() // 2)

    def test_without_cache(self):
        ids = self.prompt
        logits = {}
        for impl in ("sdpa", "lpattn"):
            self.model.set_attn_implementation(impl)
            with torch.no_grad():
                logits[impl] = self.model(ids, use_cache=False).logits.float()
        tol = 1e-4 if self.dtype == torch.float32 else 2e-2
        torch.testing.assert_close(logits["lpattn"], logits["sdpa"], atol=tol, rtol=tol)

    def test_errors(self):
        with self.assertRaisesRegex(RuntimeError, "lpattn"):  # the cache needs "lpattn"
            self._generate(1, "sdpa", self._cache("high"))
        self.model.set_attn_implementation("lpattn")
        ids = self.prompt
        mask = torch.ones_like(ids)
        mask[1, :3] = 0  # left padding
        with self.assertRaisesRegex(NotImplementedError, "padding"), torch.no_grad():
            self.model.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False,
                                **{self.kw: self._cache("high")})
        with self.assertRaisesRegex(ValueError, "max_cache_len"):
            self._generate(1, "lpattn", lt.LpattnCache(self.model.config, PROMPT,
                                                       precision="high", backend=self.backend))


if __name__ == "__main__":
    unittest.main()
