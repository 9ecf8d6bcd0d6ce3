"""The reference trainer and dumper.

  python -m forge_ref.train --config C --init-out FILE        draw the init, save, exit
  python -m forge_ref.train --config C [--init FILE] [--steps N] [--dump DIR --dump-level 1|2
         [--dump-act-steps 1,8]] [--threads N] [--val-out FILE] [--log-out FILE]

Prints one JSON line per step: {"step", "loss", "lr", "grad_norm", "ms"}. It does what
docs/formats.md's "Step" says, in plain torch: nothing here may know about the engine.
"""

import argparse
import json
import math
import os
import sys
import time

# Deterministic cuBLAS needs this before CUDA initialises (only matters on a GPU machine).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

from . import RefError  # noqa: E402
from .config import load_config  # noqa: E402
from . import gpt2, llama  # noqa: E402
from .gpt2 import GPT  # noqa: E402
from .safetensors_io import load_file, save_file  # noqa: E402
from .shards import Loader, Shard  # noqa: E402

SOURCE = f"torch-{torch.__version__}"

# model.family -> (model class, its module: activation_names, hf_state_dict, load_hf_state_dict,
# new_capture, to_hf).
FAMILIES = {"gpt2": (GPT, gpt2), "llama": (llama.Llama, llama)}


def lr_at(step, t):
    """docs/formats.md's schedule; step is 0-based."""
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    ratio = (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps)
    return t.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (t.lr - t.min_lr)


def make_optimizer(model, t):
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    # foreach=False: the single-tensor path, the one the engine replicates (both torch 1.13
    # and 2.x accept the argument).
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2), eps=t.eps,
                             weight_decay=t.weight_decay, foreach=False)


class Dumper:
    """Writes docs/formats.md's dump layout: DIR/index.json and DIR/step_%06d.safetensors."""

    def __init__(self, out_dir, level):
        self.dir, self.level = out_dir, level
        self.steps, self.files = [], {}
        os.makedirs(out_dir, exist_ok=True)

    def write_step(self, step, tensors):
        name = f"step_{step:06d}.safetensors"
        save_file(tensors, os.path.join(self.dir, name),
                  metadata={"format": "forge-dump", "source": SOURCE, "step": str(step)})
        self.steps.append(step)
        self.files[str(step)] = name
        # Rewritten after every step so a run that dies still leaves a readable dump.
        index = {"format": "forge-dump", "version": 1, "source": SOURCE, "level": self.level,
                 "steps": self.steps, "files": self.files}
        path = os.path.join(self.dir, "index.json")
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(index, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)


def _f32(t):
    return t.detach().to("cpu", torch.float32).contiguous().clone()


def autocast(device, dtype):
    """Mixed precision for the bf16 profile's perf gate: matmuls in bf16 under torch.autocast,
    fp32 master weights and optimizer (what a PyTorch user runs for bf16 on CPU)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")


def evaluate(model, cfg, device, amp="none"):
    """Mean over eval_batches of the micro-batch mean losses, from position 0 of val."""
    t = cfg.train
    if not cfg.data.val or t.eval_batches == 0:
        return None
    loader = Loader(Shard(cfg.data.val), t.batch_size, t.seq_len, cfg.model.vocab_size)
    model.eval()
    total = 0.0
    with torch.no_grad():
        for _ in range(t.eval_batches):
            x, y = loader.next()
            with autocast(device, amp):
                _, loss = model(x.to(device), y.to(device))
            total += float(loss.item())
    model.train()
    return total / t.eval_batches


def parse_steps_list(s):
    try:
        out = sorted({int(v) for v in s.split(",") if v.strip()})
    except ValueError:
        raise RefError(f"--dump-act-steps: expected a comma-separated list of steps, got '{s}'") from None
    if not out or out[0] < 1:
        raise RefError(f"--dump-act-steps: steps are 1-based, got '{s}'")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m forge_ref.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="the run's config JSON (same file as the engine)")
    ap.add_argument("--init-out", metavar="FILE", help="draw the initial state, save it (HF layout), exit")
    ap.add_argument("--init", metavar="FILE", help="start from this safetensors file (HF layout)")
    ap.add_argument("--steps", type=int, help="override train.steps (the LR schedule follows)")
    ap.add_argument("--dump", metavar="DIR", help="write a dump (docs/formats.md) to DIR")
    ap.add_argument("--dump-level", type=int, choices=(1, 2), default=1)
    ap.add_argument("--dump-act-steps", default="1", metavar="S1,S2",
                    help="level 2: steps whose first micro-batch activations are dumped (default 1)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (default: train.threads; 0 = torch's default)")
    ap.add_argument("--val-out", metavar="FILE", help="write {\"val_loss\": ...} here at the end")
    ap.add_argument("--log-out", metavar="FILE", help="also write the per-step JSON lines here")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--autocast", choices=("none", "bf16"), default="none",
                    help="bf16: forward under torch.autocast to bfloat16 (the bf16 perf gate's peer)")
    args = ap.parse_args(argv)

    cfg = load_config(args.config)
    t = cfg.train
    if args.steps is not None:
        if args.steps < 0:
            raise RefError(f"--steps must be >= 0, got {args.steps}")
        t.steps = args.steps
    threads = args.threads if args.threads is not None else t.threads
    if threads > 0:
        torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    device = torch.device(args.device)

    model_class, fam = FAMILIES[cfg.model.family]
    model = model_class(cfg.model)
    if args.init_out:
        if args.init:
            raise RefError("--init-out and --init are exclusive")
        model.init_weights(t.seed)
        save_file(fam.hf_state_dict(model), args.init_out,
                  metadata={"format": "forge-init", "source": SOURCE, "seed": str(t.seed)})
        print(json.dumps({"init_out": args.init_out, "seed": t.seed,
                          "params": sum(p.numel() for p in model.parameters())}), flush=True)
        return 0
    if args.init:
        tensors, _ = load_file(args.init)
        fam.load_hf_state_dict(model, tensors, args.init)
    else:
        model.init_weights(t.seed)
    torch.manual_seed(t.seed)  # nothing random runs after init; pinned anyway
    model.to(device)
    model.train()

    if not cfg.data.train:
        raise RefError(f"{cfg.path}: field 'data.train' is required for training")
    loader = Loader(Shard(cfg.data.train), t.batch_size, t.seq_len, cfg.model.vocab_size)
    opt = make_optimizer(model, t)
    params = list(model.parameters())
    named = list(model.named_parameters())
    dumper = Dumper(args.dump, args.dump_level) if args.dump else None
    act_steps = set(parse_steps_list(args.dump_act_steps)) if args.dump_level == 2 else set()
    log = open(args.log_out, "w", encoding="utf-8") if args.log_out else None

    for s in range(t.steps):
        step = s + 1
        t0 = time.perf_counter()
        lr = lr_at(s, t)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        want_acts = dumper is not None and step in act_steps
        acts = {}
        loss_sum = 0.0
        for m in range(t.grad_accum_steps):
            x, y = loader.next()
            cap = fam.new_capture() if (want_acts and m == 0) else None
            with autocast(device, args.autocast):
                _, loss = model(x.to(device), y.to(device), capture=cap)
            (loss / t.grad_accum_steps).backward()
            loss_sum += float(loss.item())
            if cap is not None:
                for name in fam.activation_names(cfg.model.n_layer):
                    a = cap.acts[name]
                    acts["act." + name] = _f32(a)
                    acts["actgrad." + name] = _f32(a.grad)
                del cap
        step_loss = loss_sum / t.grad_accum_steps

        grads = None
        if dumper is not None:
            grads = fam.to_hf({n: _f32(p.grad) for n, p in named})
        # max_norm=inf when clipping is off: the same norm arithmetic, and a multiply by 1.
        max_norm = t.grad_clip if t.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        opt.step()
        ms = (time.perf_counter() - t0) * 1000.0

        if dumper is not None:
            out = {"loss": torch.tensor([step_loss], dtype=torch.float32),
                   "grad_norm": torch.tensor([grad_norm], dtype=torch.float32)}
            out.update({"grad." + n: g for n, g in grads.items()})
            out.update({"param." + n: v for n, v in fam.to_hf({n: _f32(p) for n, p in named}).items()})
            out.update(acts)
            dumper.write_step(step, out)
        if not math.isfinite(step_loss):
            print(f"forge_ref: non-finite loss at step {step}", file=sys.stderr)
        line = json.dumps({"step": step, "loss": step_loss, "lr": lr, "grad_norm": grad_norm,
                           "ms": round(ms, 3)})
        if step % t.log_interval == 0 or step == t.steps:
            print(line, flush=True)
        if log:  # every step, whatever log_interval says: the comparer needs the whole curve
            log.write(line + "\n")
            log.flush()

    val = evaluate(model, cfg, device, args.autocast)
    if val is not None:
        line = json.dumps({"val_loss": val})
        print(line, flush=True)
        if log:
            log.write(line + "\n")
    if log:
        log.close()
    if args.val_out:
        if val is None:
            raise RefError(f"--val-out: no validation data ({cfg.path}: data.val is empty "
                           "or train.eval_batches is 0)")
        with open(args.val_out, "w", encoding="utf-8") as f:
            json.dump({"val_loss": val, "eval_batches": t.eval_batches, "source": SOURCE}, f)
            f.write("\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RefError as e:
        print(f"forge_ref: {e}", file=sys.stderr)
        sys.exit(2)
