"""Tests of the PyTorch reference (run from the repository root):

    .venv/bin/python -m unittest discover reference/tests
    /usr/bin/python3 -m unittest discover reference/tests

Tests that need packages only the .venv has (safetensors, transformers) are skipped under
Debian's interpreter and fail if the .venv lacks them. The training test runs the trainer
under BOTH interpreters whichever one runs the tests, and fails if either is missing.
"""

import contextlib
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REF_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(REF_DIR)
sys.path.insert(0, REF_DIR)

from forge_ref import RefError  # noqa: E402
from forge_ref import compare, config, gpt2, safetensors_io, shards  # noqa: E402

VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
DEBIAN_PY = "/usr/bin/python3"
IN_VENV = os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(ROOT, ".venv"))


def venv_only(module):
    """Skips under another interpreter; inside the .venv a missing module is a failure."""
    if IN_VENV:
        return lambda f: f
    try:
        __import__(module)
        return lambda f: f
    except ImportError:
        return unittest.skip(f"{module} is a .venv package; this is {sys.executable}")


def tiny_model_config(**kw):
    m = config.ModelConfig(vocab_size=64, n_layer=2, n_head=2, n_embd=16, block_size=16)
    for k, v in kw.items():
        setattr(m, k, v)
    return m


class SafetensorsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def sample(self):
        g = torch.Generator().manual_seed(0)
        return {
            "f32": torch.randn(3, 5, generator=g),
            "bf16": torch.randn(4, 2, generator=g).to(torch.bfloat16),
            "i32": torch.arange(-6, 6, dtype=torch.int32).view(3, 4),
            "i64": torch.tensor([1 << 40, -3], dtype=torch.int64),
            "u8": torch.tensor([0, 7, 255], dtype=torch.uint8),
            "scalar": torch.tensor(2.5),
            "empty": torch.zeros(0, 3),
        }

    def test_round_trip(self):
        path = os.path.join(self.tmp.name, "a.safetensors")
        src = self.sample()
        u16 = np.array([0, 1, 65535], dtype=np.uint16)
        safetensors_io.save_file(dict(src, u16=u16), path, metadata={"k": "v"})
        got, meta = safetensors_io.load_file(path)
        self.assertEqual(meta, {"k": "v"})
        for name, t in src.items():
            self.assertEqual(got[name].dtype, t.dtype, name)
            self.assertTrue(torch.equal(got[name], t), name)
        self.assertEqual(got["u16"].tolist(), [0, 1, 65535])
        arrays, _ = safetensors_io.load_numpy(path)
        self.assertEqual(arrays["u16"].dtype, np.uint16)
        # The data section starts 8-byte aligned, as the real writer lays it out.
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
        self.assertEqual(n % 8, 0)

    def test_corrupt_files_name_the_problem(self):
        path = os.path.join(self.tmp.name, "bad.safetensors")
        safetensors_io.save_file({"x": torch.ones(4)}, path)
        with open(path, "rb") as f:
            raw = f.read()
        with open(path, "wb") as f:
            f.write(raw[:-1])
        with self.assertRaisesRegex(RefError, r"bad\.safetensors.*'x'"):
            safetensors_io.load_file(path)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 1 << 40))
        with self.assertRaisesRegex(RefError, "header length"):
            safetensors_io.load_file(path)

    @venv_only("safetensors")
    def test_compatible_with_the_safetensors_package(self):
        import safetensors
        import safetensors.torch as st
        ours = os.path.join(self.tmp.name, "ours.safetensors")
        theirs = os.path.join(self.tmp.name, "theirs.safetensors")
        src = {k: v for k, v in self.sample().items()}
        safetensors_io.save_file(src, ours, metadata={"format": "pt"})
        loaded = st.load_file(ours)
        for name, t in src.items():
            self.assertEqual(loaded[name].dtype, t.dtype, name)
            self.assertTrue(torch.equal(loaded[name], t), name)
        with safetensors.safe_open(ours, "pt") as f:
            self.assertEqual(f.metadata(), {"format": "pt"})
        st.save_file(src, theirs, metadata={"a": "b"})
        got, meta = safetensors_io.load_file(theirs)
        self.assertEqual(meta, {"a": "b"})
        for name, t in src.items():
            self.assertEqual(got[name].dtype, t.dtype, name)
            self.assertTrue(torch.equal(got[name], t), name)


class ConfigTest(unittest.TestCase):
    def test_defaults_and_fields(self):
        c = config.parse_config({"model": {"n_layer": 3}, "train": {"lr": 1}}, "x.json")
        self.assertEqual(c.model.n_layer, 3)
        self.assertEqual(c.model.vocab_rows(), 256)
        self.assertIsInstance(c.train.lr, float)
        self.assertEqual(c.train.seed, 1337)
        self.assertEqual(c.numerics, "fast")

    def test_errors_name_file_and_field(self):
        cases = [({"model": {"n_layers": 2}}, r"x\.json: unknown field 'model\.n_layers'"),
                 ({"bogus": 1}, r"x\.json: unknown field 'bogus'"),
                 ({"train": {"steps": 2.5}}, r"x\.json: field 'train\.steps' must be an integer"),
                 ({"train": {"steps": True}}, r"'train\.steps'.*boolean"),
                 ({"model": {"n_embd": 30, "n_head": 4}}, r"'model\.n_embd'"),
                 ({"train": {"seq_len": 128}}, r"'train\.seq_len'"),
                 ({"numerics": "fp8"}, r"'numerics'")]
        for j, pattern in cases:
            with self.assertRaisesRegex(RefError, pattern):
                config.parse_config(j, "x.json")


class ShardTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def test_formats(self):
        toks = np.arange(100, dtype=np.int64) % 50
        p = os.path.join(self.tmp.name, "a.bin")
        shards.write_forge_shard(p, toks, 50)
        s = shards.Shard(p)
        self.assertEqual((s.format, len(s), s.vocab_size), ("forge", 100, 50))
        self.assertEqual(np.asarray(s.tokens).tolist(), toks.tolist())
        big = os.path.join(self.tmp.name, "big.bin")
        shards.write_forge_shard(big, [70000, 3], 100000)
        self.assertEqual(np.asarray(shards.Shard(big).tokens).tolist(), [70000, 3])
        nano = os.path.join(self.tmp.name, "nano.bin")
        toks.astype(np.uint16).tofile(nano)
        s = shards.Shard(nano)
        self.assertEqual((s.format, np.asarray(s.tokens).tolist()), ("nanogpt", toks.tolist()))
        llmc = os.path.join(self.tmp.name, "llmc.bin")
        header = np.zeros(256, dtype=np.int32)
        header[:3] = [shards.LLMC_MAGIC, 1, toks.size]
        with open(llmc, "wb") as f:
            f.write(header.tobytes())
            f.write(toks.astype(np.uint16).tobytes())
        s = shards.Shard(llmc)
        self.assertEqual((s.format, np.asarray(s.tokens).tolist()), ("llmc", toks.tolist()))
        with open(p, "ab") as f:
            f.write(b"\0\0")
        with self.assertRaisesRegex(RefError, r"a\.bin: forge shard header says 100 tokens"):
            shards.Shard(p)

    def test_data_order(self):
        p = os.path.join(self.tmp.name, "a.bin")
        shards.write_forge_shard(p, np.arange(30), 64)
        ld = shards.Loader(shards.Shard(p), 2, 4, 64)
        x, y = ld.next()
        self.assertEqual(x.tolist(), [[0, 1, 2, 3], [4, 5, 6, 7]])
        self.assertEqual(y.tolist(), [[1, 2, 3, 4], [5, 6, 7, 8]])
        ld.next()  # [8, 17); then pos = 16, 16 + 8 + 1 <= 30: no wrap
        x, _ = ld.next()
        self.assertEqual(x[0].tolist(), [16, 17, 18, 19])
        x, _ = ld.next()  # pos was 24 > 30 - 9: wrapped to 0
        self.assertEqual(x[0].tolist(), [0, 1, 2, 3])
        # Data parallel: rank 1 of 2 starts one micro-batch later, both advance by two.
        r1 = shards.Loader(shards.Shard(p), 1, 4, 64, rank=1, world=2)
        self.assertEqual(r1.next()[0].tolist(), [[4, 5, 6, 7]])
        self.assertEqual(r1.next()[0].tolist(), [[12, 13, 14, 15]])


class HFLayoutTest(unittest.TestCase):
    def test_round_trip_and_transposes(self):
        m = gpt2.GPT(tiny_model_config())
        m.init_weights(7)
        hf = gpt2.hf_state_dict(m)
        C = 16
        self.assertEqual(list(hf["transformer.h.0.attn.c_attn.weight"].shape), [C, 3 * C])
        self.assertEqual(list(hf["transformer.h.1.mlp.c_proj.weight"].shape), [4 * C, C])
        self.assertEqual(list(hf["transformer.wte.weight"].shape), [64, C])
        self.assertNotIn("lm_head.weight", hf)
        self.assertTrue(torch.equal(hf["transformer.h.0.mlp.c_fc.weight"],
                                    m.transformer.h[0].mlp.c_fc.weight.t()))
        m2 = gpt2.GPT(tiny_model_config())
        gpt2.load_hf_state_dict(m2, hf, "mem")
        for (n, a), (_, b) in zip(m.named_parameters(), m2.named_parameters()):
            self.assertTrue(torch.equal(a, b), n)
        bad = dict(hf)
        bad["transformer.h.0.attn.c_attn.weight"] = bad["transformer.h.0.attn.c_attn.weight"].t()
        with self.assertRaisesRegex(RefError, r"mem: tensor 'transformer\.h\.0\.attn\.c_attn\.weight' "
                                              r"has shape \[48, 16\], expected \[16, 48\]"):
            gpt2.load_hf_state_dict(m2, bad, "mem")
        del bad["transformer.ln_f.bias"]
        with self.assertRaisesRegex(RefError, "missing tensor 'transformer.ln_f.bias'"):
            gpt2.load_hf_state_dict(m2, {k: v for k, v in hf.items() if k != "transformer.ln_f.bias"}, "mem")

    def test_init_statistics(self):
        cfg = tiny_model_config(n_layer=4, n_embd=64, n_head=4, vocab_size=512)
        m = gpt2.GPT(cfg)
        m.init_weights(1)
        sd = dict(m.named_parameters())
        self.assertAlmostEqual(sd["transformer.wte.weight"].std().item(), 0.02, delta=0.001)
        self.assertAlmostEqual(sd["transformer.h.0.mlp.c_proj.weight"].std().item(),
                               0.02 / math.sqrt(8), delta=0.0005)
        self.assertEqual(sd["transformer.h.0.attn.c_attn.bias"].abs().max().item(), 0.0)
        self.assertEqual(sd["transformer.h.3.ln_2.weight"].min().item(), 1.0)

    def test_padded_vocab_is_excluded_from_the_loss(self):
        torch.manual_seed(0)
        padded = gpt2.GPT(tiny_model_config(padded_vocab_size=80))
        padded.init_weights(3)
        plain = gpt2.GPT(tiny_model_config())
        hf = gpt2.hf_state_dict(padded)
        hf["transformer.wte.weight"] = hf["transformer.wte.weight"][:64]
        gpt2.load_hf_state_dict(plain, hf, "mem")
        x = torch.randint(0, 64, (2, 8))
        lp, loss_p = padded(x, x)
        l0, loss_0 = plain(x, x)
        self.assertEqual(list(lp.shape), [2, 8, 80])
        self.assertTrue(torch.allclose(lp[..., :64], l0, atol=1e-6))
        self.assertAlmostEqual(loss_p.item(), loss_0.item(), places=5)


class HFLogitsTest(unittest.TestCase):
    """Our GPT-2 and transformers' GPT2LMHeadModel agree on logits with the same weights."""

    def hf_config(self, cfg):
        from transformers import GPT2Config
        return GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.block_size, n_embd=cfg.n_embd,
                          n_layer=cfg.n_layer, n_head=cfg.n_head, activation_function="gelu_new",
                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                          layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                          bos_token_id=0, eos_token_id=0)

    @venv_only("transformers")
    def test_our_file_loads_in_transformers(self):
        from transformers import GPT2LMHeadModel
        cfg = tiny_model_config()
        ours = gpt2.GPT(cfg)
        ours.init_weights(11)
        with tempfile.TemporaryDirectory() as d:
            safetensors_io.save_file(gpt2.hf_state_dict(ours), os.path.join(d, "model.safetensors"),
                                     metadata={"format": "pt"})
            self.hf_config(cfg).save_pretrained(d)
            hf = GPT2LMHeadModel.from_pretrained(d, local_files_only=True, attn_implementation="eager")
        hf.eval()
        x = torch.randint(0, cfg.vocab_size, (3, cfg.block_size), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            want = hf(x).logits
            got, _ = ours(x)
        self.assertLessEqual((got - want).abs().max().item(), 1e-5)

    @venv_only("transformers")
    def test_transformers_model_loads_in_ours(self):
        from transformers import GPT2LMHeadModel
        cfg = tiny_model_config()
        torch.manual_seed(5)
        hf = GPT2LMHeadModel(self.hf_config(cfg)).eval()
        with tempfile.TemporaryDirectory() as d:
            hf.save_pretrained(d, safe_serialization=True)
            tensors, _ = safetensors_io.load_file(os.path.join(d, "model.safetensors"))
        ours = gpt2.GPT(cfg)
        gpt2.load_hf_state_dict(ours, tensors, "hf")
        x = torch.randint(0, cfg.vocab_size, (2, 11), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            want = hf(x).logits
            got, _ = ours(x)
        self.assertLessEqual((got - want).abs().max().item(), 1e-5)


def write_dump(d, steps, source="test"):
    os.makedirs(d, exist_ok=True)
    files = {}
    for s, tensors in steps.items():
        files[str(s)] = f"step_{s:06d}.safetensors"
        safetensors_io.save_file(tensors, os.path.join(d, files[str(s)]))
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"format": "forge-dump", "version": 1, "source": source, "level": 1,
                   "steps": sorted(steps), "files": files}, f)


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        g = torch.Generator().manual_seed(0)
        self.base = {
            "loss": torch.tensor([3.5]),
            "grad_norm": torch.tensor([1.25]),
            "act.h.0.attn.sdpa": torch.randn(2, 3, 4, generator=g),
            "grad.transformer.h.0.attn.c_attn.weight": torch.randn(4, 12, generator=g),
            "param.transformer.wte.weight": torch.randn(8, 4, generator=g),
        }

    def run_compare(self, engine, required="TOLERANCE", profile="fast", extra=()):
        ref = os.path.join(self.tmp.name, "ref")
        eng = os.path.join(self.tmp.name, "eng")
        write_dump(ref, {1: self.base, 2: self.base})
        write_dump(eng, {1: self.base, 2: engine})
        js = os.path.join(self.tmp.name, "out.json")
        md = os.path.join(self.tmp.name, "out.md")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = compare.main([eng, ref, "--gate", "alignment", "--profile", profile,
                               "--required", required, "--json", js, "--md", md, *extra])
        with open(js) as f:
            rep = json.load(f)
        with open(md) as f:
            self.assertIn("# gate alignment", f.read())
        return rc, rep, out.getvalue().strip().splitlines()[-1]

    def test_identical_is_bitwise(self):
        rc, rep, last = self.run_compare(dict(self.base), required="BITWISE", profile="torch-cpu")
        self.assertEqual((rc, rep["verdict"], last), (0, "BITWISE", "gate alignment profile torch-cpu: BITWISE"))
        self.assertTrue(all(r["max_ulp"] == 0 for r in rep["tensors"]))

    def test_one_ulp_is_tolerance(self):
        t = dict(self.base)
        w = t["grad.transformer.h.0.attn.c_attn.weight"].clone()
        w[1, 5] = float(np.nextafter(np.float32(w[1, 5].item()), np.float32(np.inf)))
        t["grad.transformer.h.0.attn.c_attn.weight"] = w
        rc, rep, last = self.run_compare(t)
        self.assertEqual((rc, rep["verdict"], last), (0, "TOLERANCE", "gate alignment profile fast: TOLERANCE"))
        rec = [r for r in rep["tensors"] if r["step"] == 2 and r["name"].startswith("grad.transformer")][0]
        self.assertEqual((rec["rung"], rec["max_ulp"], rec["first_diff"]["index"]), ("TOLERANCE", 1, [1, 5]))
        # The same dump fails a BITWISE requirement and names that tensor.
        rc, rep, last = self.run_compare(t, required="BITWISE", profile="torch-cpu")
        self.assertEqual((rc, last), (1, "gate alignment profile torch-cpu: TOLERANCE"))
        self.assertEqual(rep["first_failure"]["name"], "grad.transformer.h.0.attn.c_attn.weight")

    def test_big_change_is_none_and_named(self):
        t = dict(self.base)
        a = t["act.h.0.attn.sdpa"].clone()
        a[1, 2, 3] *= 1.5
        t["act.h.0.attn.sdpa"] = a
        t["param.transformer.wte.weight"] = t["param.transformer.wte.weight"] * 2
        rc, rep, last = self.run_compare(t)
        self.assertEqual((rc, rep["verdict"], last), (1, "NONE", "gate alignment profile fast: NONE"))
        ff = rep["first_failure"]
        # Activations come before parameters within a step: the divergence's origin is named.
        self.assertEqual((ff["step"], ff["name"], ff["first_diff"]["index"], ff["first_diff"]["flat"]),
                         (2, "act.h.0.attn.sdpa", [1, 2, 3], 23))

    def test_loss_bound_and_nonfinite(self):
        t = dict(self.base, loss=torch.tensor([3.5 * (1 + 5e-4)]))
        self.assertEqual(self.run_compare(t)[1]["verdict"], "NONE")
        self.assertEqual(self.run_compare(t, profile="bf16")[1]["verdict"], "TOLERANCE")
        t = dict(self.base, grad_norm=torch.tensor([float("nan")]))
        rc, rep, _ = self.run_compare(t, profile="bf16")
        self.assertEqual((rc, rep["first_failure"]["name"]), (1, "grad_norm"))
        self.assertIn("non-finite", rep["first_failure"]["note"])

    def test_missing_tensor_fails_and_exclude_is_reported(self):
        t = {k: v for k, v in self.base.items() if k != "grad_norm"}
        rc, rep, _ = self.run_compare(t)
        self.assertEqual((rc, rep["first_failure"]["name"]), (1, "grad_norm"))
        rc, rep, _ = self.run_compare(t, extra=["--exclude", "^grad_norm$"])
        self.assertEqual((rc, len(rep["excluded"]["tensors"])), (0, 2))  # present at step 1, missing at 2

    def test_unwritable_report_is_the_comparers_failure(self):
        # A report that cannot be written (a full disk, a missing folder) is named, leaves no
        # temporary file, and is not a verdict: RefError, which the CLI exits 2 on.
        missing = os.path.join(self.tmp.name, "no-such-folder", "report.json")
        with self.assertRaises(RefError) as ctx:
            compare._write_text(missing, "{}")
        self.assertIn("report.json: cannot write report", str(ctx.exception))
        self.assertEqual(os.listdir(self.tmp.name).count("no-such-folder"), 0)

    def test_key_bias_exemption(self):
        # A model without c_attn biases (Llama) has no key slice to leave out: the report
        # must not say one was.
        rc, rep, _ = self.run_compare(dict(self.base), extra=["--exempt-k-bias"])
        self.assertEqual((rc, rep["exempt_k_bias"]), (0, False))
        with open(os.path.join(self.tmp.name, "out.md")) as f:
            self.assertNotIn("key slice", f.read())
        name = "param.transformer.h.0.attn.c_attn.bias"
        self.base[name] = torch.linspace(-1, 1, 12)
        t = dict(self.base)
        t[name] = self.base[name].clone()
        t[name][5] = -t[name][5]  # inside the key slice [4, 8)
        rc, rep, _ = self.run_compare(t)
        self.assertEqual((rc, rep["first_failure"]["name"]), (1, name))
        rc, rep, _ = self.run_compare(t, extra=["--exempt-k-bias"])
        self.assertEqual((rc, rep["verdict"], rep["exempt_k_bias"]), (0, "BITWISE", True))
        rec = [r for r in rep["tensors"] if r["name"] == name and r["step"] == 2][0]
        self.assertIn("key slice [4, 8) exempt", rec["note"])
        t[name][9] += 1.0  # the value slice still counts
        rc, rep, _ = self.run_compare(t, extra=["--exempt-k-bias"])
        self.assertEqual((rc, rep["first_failure"]["first_diff"]["flat"]), (1, 9))

    def test_convergent_from_logs(self):
        eng, ref = (os.path.join(self.tmp.name, n) for n in ("e.jsonl", "r.jsonl"))
        with open(eng, "w") as fe, open(ref, "w") as fr:
            for s in range(1, 201):
                r = 5.0 - s / 100
                fr.write(json.dumps({"step": s, "loss": r}) + "\n")
                fe.write(json.dumps({"step": s, "loss": r * 1.005}) + "\n")
        args = [eng, ref, "--gate", "long-horizon", "--profile", "fast", "--required", "CONVERGENT"]
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(compare.main(args + ["--engine-val", "3.01", "--ref-val", "3.0"]), 0)
            self.assertEqual(compare.main(args + ["--engine-val", "3.1", "--ref-val", "3.0"]), 1)
            self.assertEqual(compare.main(args), 1)  # no validation losses: not convergent

    def test_surpass_needs_convergence_speed_and_validation(self):
        def verdict(eng_ms, eng_loss_scale, val_e, val_r="3.0"):
            eng, ref = (os.path.join(self.tmp.name, n) for n in ("e.jsonl", "r.jsonl"))
            with open(eng, "w") as fe, open(ref, "w") as fr:
                for s in range(1, 201):
                    r = 5.0 - s / 100
                    # the first steps are slow on both sides and must not count
                    slow = 50.0 if s <= compare.PERF_WARMUP else 0.0
                    fr.write(json.dumps({"step": s, "loss": r, "ms": 10.0 + slow}) + "\n")
                    fe.write(json.dumps({"step": s, "loss": r * eng_loss_scale,
                                         "ms": eng_ms + slow}) + "\n")
            js = os.path.join(self.tmp.name, "perf.json")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = compare.main([eng, ref, "--gate", "perf", "--profile", "fast", "--required",
                                   "SURPASS", "--engine-val", val_e, "--ref-val", val_r, "--json", js])
            with open(js) as f:
                rep = json.load(f)
            return rc, out.getvalue().strip().splitlines()[-1], rep["perf"]

        rc, last, perf = verdict(4.0, 1.002, "3.01")
        self.assertEqual((rc, last), (0, "gate perf profile fast: SURPASS"))
        self.assertAlmostEqual(perf["speedup"], 2.5)
        # slower than the reference: convergent, not surpassing
        rc, last, perf = verdict(12.0, 1.002, "3.01")
        self.assertEqual((rc, last), (1, "gate perf profile fast: CONVERGENT"))
        self.assertIn("not faster", perf["reason"])
        # faster, but the validation loss is 0.8% worse (inside CONVERGENT's 1%, not 0.5%)
        rc, last, perf = verdict(4.0, 1.002, "3.024")
        self.assertEqual((rc, last), (1, "gate perf profile fast: CONVERGENT"))
        # faster but not convergent
        rc, last, _ = verdict(4.0, 1.05, "3.0")
        self.assertEqual((rc, last), (1, "gate perf profile fast: NONE"))


class TrainingRunTest(unittest.TestCase):
    """3 steps of the trainer under both interpreters, on a shard made by our writer."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        text = np.frombuffer(b"forge trains what torch trains, bit for bit. " * 60, dtype=np.uint8)
        shards.write_forge_shard(os.path.join(d, "train.bin"), text, 256)
        shards.write_forge_shard(os.path.join(d, "val.bin"), text[:600], 256)
        cls.cfg = os.path.join(d, "tiny.json")
        with open(cls.cfg, "w") as f:
            json.dump({"model": {"vocab_size": 256, "padded_vocab_size": 320, "n_layer": 2, "n_head": 2,
                                 "n_embd": 32, "block_size": 32},
                       "train": {"batch_size": 4, "seq_len": 32, "grad_accum_steps": 2, "steps": 3,
                                 "lr": 3e-3, "warmup_steps": 1, "threads": 1, "eval_batches": 2},
                       "data": {"train": os.path.join(d, "train.bin"), "val": os.path.join(d, "val.bin")}},
                      f)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def train(self, py, *args):
        self.assertTrue(os.path.exists(py), f"{py} is missing: the reference must run under it")
        env = dict(os.environ, PYTHONPATH=REF_DIR)
        p = subprocess.run([py, "-m", "forge_ref.train", "--config", self.cfg, *args],
                           capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 0, f"{py}: {p.stderr}")
        return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]

    def check_run(self, py, tag):
        d = self.tmp.name
        dump = os.path.join(d, f"dump_{tag}")
        lines = self.train(py, "--dump", dump, "--dump-level", "2", "--val-out", os.path.join(d, f"val_{tag}.json"))
        steps = [l for l in lines if "step" in l]
        losses = [l["loss"] for l in steps]
        self.assertEqual([l["step"] for l in steps], [1, 2, 3])
        self.assertTrue(all(math.isfinite(x) for x in losses), losses)
        self.assertLess(losses[2], losses[1])
        self.assertLess(losses[1], losses[0])
        self.assertAlmostEqual(losses[0], math.log(256), delta=0.3)  # near-uniform at init
        with open(os.path.join(dump, "index.json")) as f:
            idx = json.load(f)
        self.assertEqual((idx["format"], idx["version"], idx["level"], idx["steps"]), ("forge-dump", 1, 2, [1, 2, 3]))
        s1, _ = safetensors_io.load_numpy(os.path.join(dump, idx["files"]["1"]))
        s2, _ = safetensors_io.load_numpy(os.path.join(dump, idx["files"]["2"]))
        self.assertEqual(list(s1["act.logits"].shape), [4, 32, 320])
        self.assertEqual(list(s1["grad.transformer.h.1.mlp.c_fc.weight"].shape), [32, 128])
        self.assertEqual(float(np.abs(s1["actgrad.logits"][..., 256:]).max()), 0.0)
        self.assertNotIn("act.embed", s2)  # level 2 activations are for step 1 only
        self.assertAlmostEqual(float(s1["loss"][0]), losses[0], places=5)
        return dump

    def test_both_interpreters(self):
        d13 = self.check_run(DEBIAN_PY, "debian")
        d2 = self.check_run(VENV_PY, "venv")
        # Same initial state on both: the seed names the init whatever torch draws it.
        a, _ = safetensors_io.load_numpy(os.path.join(d13, "step_000001.safetensors"))
        b, _ = safetensors_io.load_numpy(os.path.join(d2, "step_000001.safetensors"))
        self.assertTrue(np.array_equal(a["act.embed"], b["act.embed"]))

    def test_init_file_and_determinism(self):
        d = self.tmp.name
        init = os.path.join(d, "init.safetensors")
        self.train(DEBIAN_PY, "--init-out", init)
        a = os.path.join(d, "det_a")
        b = os.path.join(d, "det_b")
        self.train(DEBIAN_PY, "--steps", "2", "--dump", a)
        self.train(DEBIAN_PY, "--steps", "2", "--dump", b, "--init", init)
        with contextlib.redirect_stdout(io.StringIO()):
            rc = compare.main([b, a, "--gate", "determinism", "--profile", "torch-cpu", "--required", "BITWISE"])
        self.assertEqual(rc, 0)


if __name__ == "__main__":
    unittest.main()
