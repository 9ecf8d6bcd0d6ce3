"""Tests of the Llama reference (reference/forge_ref/llama.py), from the repository root:

    .venv/bin/python -m unittest reference/tests/test_llama_reference.py
    /usr/bin/python3 -m unittest reference/tests/test_llama_reference.py

The comparison with transformers' LlamaForCausalLM needs the .venv: under another
interpreter it is skipped when transformers is absent, and inside the .venv a missing
transformers fails. Everything else runs under both torch 1.13 and 2.x.
"""

import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REF_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(REF_DIR)
sys.path.insert(0, REF_DIR)

from forge_ref import RefError, config, llama, safetensors_io  # noqa: E402

IN_VENV = os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(ROOT, ".venv"))


def needs_transformers(f):
    if IN_VENV:
        return f
    try:
        import transformers  # noqa: F401
        return f
    except ImportError:
        return unittest.skip(f"transformers is a .venv package; this is {sys.executable}")(f)


def tiny(**kw):
    m = config.ModelConfig(family="llama", vocab_size=61, padded_vocab_size=64, n_layer=2,
                           n_head=4, n_kv_head=2, n_embd=32, ffn_hidden=44, block_size=24,
                           rope_theta=10000.0, norm_eps=1e-5)
    for k, v in kw.items():
        setattr(m, k, v)
    return m


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


class LlamaReferenceTest(unittest.TestCase):
    def test_names_order_and_init(self):
        cfg = tiny(n_layer=3)
        m = llama.Llama(cfg)
        m.init_weights(3)
        names = [n for n, _ in m.named_parameters()]
        self.assertEqual(names[0], "model.embed_tokens.weight")
        self.assertEqual(names[1:10], [f"model.layers.0.{s}.weight" for s in (
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm",
            "post_attention_layernorm")])
        self.assertEqual(names[-2:], ["model.norm.weight", "lm_head.weight"])
        p = dict(m.named_parameters())
        self.assertEqual(tuple(p["model.layers.1.self_attn.k_proj.weight"].shape), (16, 32))
        self.assertTrue(torch.all(p["model.layers.2.input_layernorm.weight"] == 1))
        self.assertFalse(torch.equal(p["lm_head.weight"], p["model.embed_tokens.weight"]))
        # Same seed, same state; another seed, another state.
        m2 = llama.Llama(cfg)
        m2.init_weights(3)
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters())))
        m2.init_weights(4)
        self.assertFalse(torch.equal(p["lm_head.weight"], dict(m2.named_parameters())["lm_head.weight"]))

    def test_capture_has_every_activation_and_gradient(self):
        cfg = tiny()
        m = llama.Llama(cfg)
        m.init_weights(1)
        x = torch.randint(0, cfg.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
        cap = llama.new_capture()
        _, loss = m(x, x, capture=cap)
        loss.backward()
        for name in llama.activation_names(cfg.n_layer):
            self.assertIn(name, cap.acts)
            self.assertIsNotNone(cap.acts[name].grad, name)
            self.assertEqual(cap.acts[name].shape[:2], (2, 9), name)

    def test_rejects_configs_it_cannot_run(self):
        with self.assertRaises(RefError):
            llama.Llama(tiny(ffn_hidden=0))
        with self.assertRaises(RefError):
            llama.Llama(tiny(family="gpt2"))


class LlamaMatchesTransformersTest(unittest.TestCase):
    """Same weights, same tokens: our reference and LlamaForCausalLM (eager attention) agree
    on logits and on every parameter's gradient, in both directions of loading."""

    def hf_model(self, cfg):
        from transformers import LlamaConfig, LlamaForCausalLM
        hc = LlamaConfig(**{k: v for k, v in llama.hf_config(cfg).items()
                            if k not in ("architectures", "torch_dtype")})
        return LlamaForCausalLM(hc), hc

    def check(self, cfg, T, seed):
        torch.manual_seed(seed)
        hf, hc = self.hf_model(cfg)
        hf.config._attn_implementation = "eager"
        hf.eval()
        ours = llama.Llama(cfg)
        ours.init_weights(seed)
        # Randomise the norms too, so that a wrong norm weight cannot hide.
        with torch.no_grad():
            for n, p in ours.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn(p.shape))
        missing, unexpected = hf.load_state_dict(llama.hf_state_dict(ours), strict=False)
        self.assertEqual(list(missing), [])
        self.assertEqual(list(unexpected), [])
        x = torch.randint(0, cfg.vocab_size, (3, T), generator=torch.Generator().manual_seed(seed))
        y = torch.randint(0, cfg.vocab_size, (3, T), generator=torch.Generator().manual_seed(seed + 1))
        got, loss = ours(x, y)
        want = hf(input_ids=x).logits
        self.assertEqual(tuple(want.shape), (3, T, cfg.vocab_rows()))
        self.assertLessEqual(rel_l2(got, want), 1e-5)
        V = cfg.vocab_size
        want_loss = torch.nn.functional.cross_entropy(want[..., :V].reshape(-1, V), y.reshape(-1))
        self.assertLessEqual(abs(loss.item() - want_loss.item()), 1e-5 * abs(want_loss.item()))
        loss.backward()
        want_loss.backward()
        hp = dict(hf.named_parameters())
        for n, p in ours.named_parameters():
            self.assertLessEqual(rel_l2(p.grad, hp[n].grad), 1e-5, n)
        return got.detach(), x

    @needs_transformers
    def test_logits_and_gradients_match(self):
        self.check(tiny(), T=24, seed=1)               # T = block_size
        self.check(tiny(), T=7, seed=2)                # shorter than planned
        self.check(tiny(n_kv_head=1, rope_theta=500000.0, norm_eps=1e-6), T=17, seed=3)
        self.check(tiny(n_kv_head=4, padded_vocab_size=0), T=11, seed=4)

    @needs_transformers
    def test_transformers_checkpoint_loads_in_ours(self):
        cfg = tiny()
        torch.manual_seed(9)
        hf, _ = self.hf_model(cfg)
        hf.config._attn_implementation = "eager"
        hf.eval()
        with tempfile.TemporaryDirectory() as d:
            hf.save_pretrained(d, safe_serialization=True)
            tensors, _ = safetensors_io.load_file(os.path.join(d, "model.safetensors"))
        ours = llama.Llama(cfg)
        llama.load_hf_state_dict(ours, tensors, "hf")
        x = torch.randint(0, cfg.vocab_size, (2, 13), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            self.assertLessEqual(rel_l2(ours(x)[0], hf(input_ids=x).logits), 1e-5)


if __name__ == "__main__":
    unittest.main()
