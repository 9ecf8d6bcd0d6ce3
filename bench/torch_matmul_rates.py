#!/usr/bin/env python3
"""GFLOP/s of PyTorch's own CPU matmuls on a config's linear-layer shapes: the forward
(x @ W^T), the input gradient (dout @ W) and the weight gradient (dout^T @ x), each in bf16
(what CPU autocast runs: bf16 operands and a bf16 result) and in fp32. The counterpart of
bench_kernels' gemm/onednn_bf16/* and gemm/onednn*/* for the reference side of `forge bench`:
which library is faster on the GEMMs themselves, apart from the step around them.

  .venv/bin/python bench/torch_matmul_rates.py --config configs/small.json [--threads 2]

Median of --repeats timed calls after 5 warm-up calls, per shape and pass.
"""
import argparse
import json
import sys
import time

import torch


def linear_shapes(config):
    """(name, rows, in, out) of each distinct linear layer of the model, rows = B * T."""
    m, t = config["model"], config["train"]
    rows, c = t["batch_size"] * t["seq_len"], m["n_embd"]
    if m["family"] == "gpt2":
        return [("qkv", rows, c, 3 * c), ("attn_proj", rows, c, c), ("fc", rows, c, 4 * c),
                ("mlp_proj", rows, 4 * c, c)]
    if m["family"] == "llama":
        hd = c // m["n_head"]
        kv = m.get("n_kv_head", m["n_head"]) * hd
        ffn = m["ffn_hidden"]
        return [("qkv", rows, c, c + 2 * kv), ("o_proj", rows, c, c),
                ("gate_up", rows, c, 2 * ffn), ("down", rows, ffn, c)]
    raise SystemExit(f"{config.get('_path')}: model.family: expected gpt2 or llama")


def median_seconds(fn, repeats):
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    try:
        with open(args.config) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"torch_matmul_rates: {args.config}: {e}")
    config["_path"] = args.config
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.config}: GFLOP/s, "
          f"median of {args.repeats}")
    print("| dtype | layer | rows x in x out | fwd | dinp | dweight |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for dtype in (torch.bfloat16, torch.float32):
        for name, n, k, m in linear_shapes(config):
            x, w, g = (torch.randn(n, k, dtype=dtype), torch.randn(m, k, dtype=dtype),
                       torch.randn(n, m, dtype=dtype))
            passes = (lambda: torch.nn.functional.linear(x, w), lambda: g @ w, lambda: g.t() @ x)
            rates = [2 * n * k * m / median_seconds(p, args.repeats) / 1e9 for p in passes]
            print(f"| {str(dtype).removeprefix('torch.')} | {name} | {n} x {k} x {m} | "
                  + " | ".join(f"{r:.1f}" for r in rates) + " |")


if __name__ == "__main__":
    main()
