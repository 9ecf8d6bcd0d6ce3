"""Times the reference's training step for `forge bench` (one process per measurement).

  python -m forge_ref.bench --config C --mode eager|compile --dtype fp32|bf16
         --warmup W --steps N --threads T [--batch B --seq T]

Prints one JSON object: per-step seconds after warm-up, tokens per step, peak RSS. The
step is the reference's real one (forward, backward, clip_grad_norm_, AdamW) on random
tokens; `bf16` runs forward and backward under CPU autocast to bfloat16 with fp32 master
weights, as a PyTorch user would. The malloc settings of BENCHMARKS.md are the caller's
job (they must be in the environment before the process starts).
"""

import argparse
import json
import resource
import sys
import time

import torch

from .config import load_config
from .train import FAMILIES, make_optimizer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--seq", type=int, default=0)
    a = ap.parse_args(argv)

    cfg = load_config(a.config)
    torch.set_num_threads(a.threads)
    B = a.batch or cfg.train.batch_size
    T = a.seq or cfg.train.seq_len
    model = FAMILIES[cfg.model.family][0](cfg.model)
    model.init_weights(cfg.train.seed)
    opt = make_optimizer(model, cfg.train)
    step_fn = model
    if a.mode == "compile":
        if not hasattr(torch, "compile"):
            print(json.dumps({"error": f"torch {torch.__version__} has no torch.compile"}))
            return 1
        step_fn = torch.compile(model)
    gen = torch.Generator().manual_seed(0)
    V = cfg.model.vocab_size

    def one_step():
        x = torch.randint(0, V, (B, T), generator=gen)
        y = torch.randint(0, V, (B, T), generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            _, loss = step_fn(x, y)
        loss.backward()
        if cfg.train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(a.warmup):
        one_step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        one_step()
        times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"side": f"torch-{torch.__version__} {a.mode} {a.dtype}",
                      "step_seconds": times, "tokens_per_step": B * T,
                      "peak_rss_bytes": rss}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
