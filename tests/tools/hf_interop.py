"""Hugging Face interop checks for tests/integration/test_hf_interop.sh (run with .venv's python,
PYTHONPATH=<checkout>/reference for the shard reader, offline).

  hf_interop.py make-model OUT_DIR [--seed S]
      transformers builds a small GPT-2 (the tiny config's shape), draws every weight, bias and
      norm parameter at random, and writes OUT_DIR with save_pretrained (safetensors).
  hf_interop.py check HF_DIR SHARD --forge-eval JSON [--forge-logits FILE]
      transformers loads HF_DIR with GPT2LMHeadModel.from_pretrained and evaluates the micro-
      batches `forge eval` evaluated (from the start of SHARD, B = 1 and T = n_positions, the
      batch forge uses for a Hugging Face folder); its mean loss must match forge's at
      TOLERANCE (|d| <= 1e-5*|ref|), and with --forge-logits (safetensors: tokens, logits)
      so must its logits (rel_l2 <= 1e-5, no NaN or Inf).
"""

import argparse
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from forge_ref.safetensors_io import load_numpy  # noqa: E402
from forge_ref.shards import Loader, Shard  # noqa: E402

TOL = 1e-5  # EQUIVALENCE.md, TOLERANCE in fp32


def make_model(out_dir, seed):
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                     bos_token_id=255, eos_token_id=255,
                     attn_pdrop=0.0, tie_word_embeddings=True)
    model = GPT2LMHeadModel(cfg)
    # Fresh init leaves biases at 0 and norms at 1/0: loading them into the wrong slot would
    # go unnoticed. Every parameter gets its own random values instead.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(out_dir, safe_serialization=True)
    print(json.dumps({"made": out_dir, "params": sum(p.numel() for p in model.parameters())}))


def load(hf_dir):
    model, info = GPT2LMHeadModel.from_pretrained(hf_dir, local_files_only=True,
                                                  attn_implementation="eager",
                                                  output_loading_info=True)
    # Anything transformers had to draw itself was not in the file: the load proves nothing.
    missing = [k for k in info.get("missing_keys", []) if k != "lm_head.weight"]
    bad = missing + list(info.get("unexpected_keys", [])) + [str(k) for k in info.get("mismatched_keys", [])]
    if bad:
        sys.exit(f"FAIL: {hf_dir}: transformers did not load it cleanly: {bad}")
    model.eval()
    return model


def check(hf_dir, shard, forge_eval, forge_logits):
    with open(forge_eval, encoding="utf-8") as f:
        fe = json.load(f)
    batches = int(fe["batches"])
    model = load(hf_dir)
    V, T = model.config.vocab_size, model.config.n_positions
    loader = Loader(Shard(shard), 1, T, V)
    total, logits = 0.0, []
    with torch.no_grad():
        for _ in range(batches):
            x, y = loader.next()
            out = model(input_ids=x).logits
            logits.append(out.float().numpy())
            total += float(F.cross_entropy(out.view(-1, V), y.view(-1)).item())
    loss = total / batches
    d = abs(fe["val_loss"] - loss)
    print(f"loss over {batches} micro-batches: forge {fe['val_loss']!r}, transformers {loss!r}, "
          f"|d| {d:.3e} (bound {TOL * abs(loss):.3e})")
    if not (math.isfinite(fe["val_loss"]) and d <= TOL * abs(loss)):
        sys.exit("FAIL: losses differ beyond TOLERANCE")
    if forge_logits:
        t, _ = load_numpy(forge_logits)
        ref = np.stack(logits)  # [batches, 1, T, V]
        eng = t["logits"].reshape(ref.shape) if t["logits"].size == ref.size else None
        if eng is None:
            sys.exit(f"FAIL: {forge_logits}: logits of shape {list(t['logits'].shape)}, "
                     f"expected {list(ref.shape)}")
        x0, _ = Loader(Shard(shard), 1, T, V).next()
        if not np.array_equal(t["tokens"].reshape(-1)[:T], x0.numpy().reshape(-1)):
            sys.exit(f"FAIL: {forge_logits}: forge evaluated other tokens than transformers")
        if not (np.isfinite(eng).all() and np.isfinite(ref).all()):
            sys.exit("FAIL: NaN or Inf in the logits")
        diff = eng.astype(np.float64) - ref.astype(np.float64)
        rel = float(np.linalg.norm(diff) / np.linalg.norm(ref.astype(np.float64)))
        print(f"logits {list(ref.shape)}: rel_l2 {rel:.3e}, max abs {np.abs(diff).max():.3e} "
              f"(bound rel_l2 {TOL})")
        if rel > TOL:
            sys.exit("FAIL: logits differ beyond TOLERANCE")
    print("ok: transformers and forge agree at TOLERANCE")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-model")
    m.add_argument("out_dir")
    m.add_argument("--seed", type=int, default=1234)
    c = sub.add_parser("check")
    c.add_argument("hf_dir")
    c.add_argument("shard")
    c.add_argument("--forge-eval", required=True, help="`forge eval --json` output")
    c.add_argument("--forge-logits", help="forge's logits (safetensors with tokens and logits)")
    a = ap.parse_args()
    if a.cmd == "make-model":
        make_model(a.out_dir, a.seed)
    else:
        check(a.hf_dir, a.shard, a.forge_eval, a.forge_logits)


if __name__ == "__main__":
    main()
