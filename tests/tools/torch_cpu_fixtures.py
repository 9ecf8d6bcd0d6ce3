"""Fixtures for the torch-cpu profile's per-op tests (tests/unit/test_torch_cpu.cpp).

Runs under Debian's PyTorch 1.13.1 (/usr/bin/python3): for each op and many shapes (odd
sizes, sizes below and above the AVX2 vector width of 8, the 32768 grain of the parallel
loops, the 400-flop threshold of the naive bmm) it draws inputs, runs the op the way
reference/forge_ref/gpt2.py and torch.optim.AdamW run it (autograd included), and writes the
inputs and torch's outputs as raw little-endian files plus index.json.

    /usr/bin/python3 torch_cpu_fixtures.py --out DIR --threads N

The caller pins ATEN_CPU_CAPABILITY=avx2; --threads sets torch.set_num_threads.
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F


class Writer:
    def __init__(self, out):
        self.out = out
        self.cases = []
        self.n = 0

    def tensor(self, t):
        t = t.detach().contiguous()
        if t.dtype == torch.int64:
            t = t.to(torch.int32)
        name = f"t{self.n:05d}.bin"
        self.n += 1
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(t.numpy().tobytes())
        return {"file": name, "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape)}

    def case(self, op, name, params, tensors):
        self.cases.append({"op": op, "name": name, "params": params,
                           "tensors": {k: self.tensor(v) for k, v in tensors.items()}})

    def finish(self):
        with open(os.path.join(self.out, "index.json"), "w") as f:
            json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(),
                       "capability": os.environ.get("ATEN_CPU_CAPABILITY", ""),
                       "cases": self.cases}, f)


def rnd(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g) * scale


def linear_cases(w, g):
    shapes = [(2, 5, 3, 8), (1, 7, 9, 13), (2, 37, 53, 101), (4, 16, 64, 192), (3, 17, 96, 40),
              (2, 50, 100, 300), (2, 128, 128, 512), (4, 64, 64, 256), (3, 11, 24, 7)]
    for bias in (True, False):
        for B, T, IC, OC in shapes:
            x = rnd(g, B, T, IC).requires_grad_()
            W = rnd(g, OC, IC, scale=0.1).requires_grad_()
            b = rnd(g, OC, scale=0.1).requires_grad_() if bias else None
            y = F.linear(x, W, b)
            dy = rnd(g, B, T, OC)
            y.backward(dy)
            t = {"x": x, "w": W, "dout": dy, "out": y, "dinp": x.grad, "dw": W.grad}
            if bias:
                t["b"] = b
                t["dbias"] = b.grad
            w.case("linear", f"linear_{B}x{T}x{IC}x{OC}_{'bias' if bias else 'nobias'}",
                   {"N": B * T, "IC": IC, "OC": OC, "bias": bias}, t)


def layernorm_cases(w, g):
    for B, T, C in [(1, 3, 5), (2, 3, 8), (2, 5, 16), (1, 4, 100), (2, 7, 127), (2, 9, 128),
                    (1, 3, 129), (3, 5, 768), (2, 3, 1031), (4, 64, 64), (8, 64, 192),
                    (2, 300, 48), (1, 2, 2050)]:
        x = (rnd(g, B, T, C) * 2 + 0.5).requires_grad_()
        W = (1 + rnd(g, C, scale=0.1)).requires_grad_()
        b = rnd(g, C, scale=0.1).requires_grad_()
        y = F.layer_norm(x, (C,), W, b, 1e-5)
        _, mean, rstd = torch.native_layer_norm(x.detach(), [C], W.detach(), b.detach(), 1e-5)
        dy = rnd(g, B, T, C)
        y.backward(dy)
        w.case("layernorm", f"ln_{B}x{T}x{C}", {"N": B * T, "C": C, "eps": 1e-5},
               {"x": x, "w": W, "b": b, "out": y, "mean": mean, "rstd": rstd, "dout": dy,
                "dinp": x.grad, "dw": W.grad, "db": b.grad})


def gelu_cases(w, g):
    for n in [1, 7, 8, 15, 16, 17, 31, 33, 100, 1000, 16384, 16385, 16399, 32768, 32769,
              40007, 65536, 98321, 200003]:
        x = (rnd(g, n) * 3).requires_grad_()
        y = F.gelu(x, approximate="tanh")
        dy = rnd(g, n)
        y.backward(dy)
        w.case("gelu", f"gelu_{n}", {"n": n}, {"x": x, "out": y, "dout": dy, "dinp": x.grad})


def attention_cases(w, g):
    # T*T*hd < 400 takes bmm's naive loop, larger the per-batch sgemm. With B == 1 or
    # NH == 1 matmul hands bmm views of qkv instead of contiguous copies.
    for B, T, C, NH in [(1, 3, 4, 2), (2, 5, 12, 3), (1, 7, 8, 1), (2, 8, 16, 2),
                        (2, 9, 24, 4), (2, 17, 48, 4), (1, 33, 64, 4), (2, 64, 64, 4),
                        (1, 64, 128, 4), (2, 31, 36, 6), (1, 128, 96, 6), (3, 24, 20, 1)]:
        hd = C // NH
        qkv = rnd(g, B, T, 3 * C).requires_grad_()
        mask = torch.tril(torch.ones(T + 3, T + 3)).view(1, 1, T + 3, T + 3)  # block_size > T
        q, k, v = qkv.split(C, dim=2)
        k = k.view(B, T, NH, hd).transpose(1, 2)
        q = q.view(B, T, NH, hd).transpose(1, 2)
        v = v.view(B, T, NH, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        dy = rnd(g, B, T, C)
        y.backward(dy)
        w.case("attention", f"attn_{B}x{T}x{C}x{NH}", {"B": B, "T": T, "C": C, "NH": NH},
               {"qkv": qkv, "out": y, "att": att, "dout": dy, "dqkv": qkv.grad})


def xent_cases(w, g):
    for B, T, V, Vp, accum in [(1, 3, 5, 5, 1), (2, 3, 7, 8, 1), (2, 4, 8, 8, 1),
                               (2, 5, 16, 16, 2), (1, 9, 17, 24, 1), (4, 16, 256, 256, 1),
                               (2, 33, 100, 128, 4), (4, 64, 256, 256, 1), (2, 17, 1000, 1024, 1),
                               (8, 64, 256, 256, 1), (1, 300, 65, 72, 1)]:
        logits = (rnd(g, B, T, Vp) * 2).requires_grad_()
        targets = torch.randint(0, V, (B, T), generator=g)
        lv = logits[..., :V] if logits.size(-1) != V else logits
        loss = F.cross_entropy(lv.reshape(-1, V), targets.reshape(-1))
        (loss / accum if accum != 1 else loss).backward()
        dloss = torch.tensor(1.0) / accum if accum != 1 else torch.tensor(1.0)
        w.case("xent", f"xent_{B}x{T}x{V}x{Vp}_acc{accum}",
               {"N": B * T, "V": V, "Vp": Vp},
               {"logits": logits, "targets": targets, "loss": loss.reshape(1),
                "dloss": dloss.reshape(1), "dlogits": logits.grad})


def embedding_cases(w, g):
    for B, T, V, C in [(1, 3, 5, 4), (2, 5, 7, 9), (2, 8, 256, 16), (4, 64, 256, 64),
                       (3, 17, 11, 33), (8, 64, 256, 192), (2, 100, 50, 300)]:
        idx = torch.randint(0, V, (B, T), generator=g)
        wte = rnd(g, V, C).requires_grad_()
        wpe = rnd(g, T + 2, C).requires_grad_()
        H = rnd(g, V, C)  # stands for the tied LM head's gradient, which arrives first
        pos = torch.arange(0, T, dtype=torch.long)
        out = F.embedding(idx, wte) + F.embedding(pos, wpe)
        dout = rnd(g, B, T, C)
        ((out * dout).sum() + (wte * H).sum()).backward()
        w.case("embedding", f"emb_{B}x{T}x{V}x{C}", {"B": B, "T": T, "V": V, "C": C},
               {"tokens": idx, "wte": wte, "wpe": wpe, "out": out, "dout": dout, "head_grad": H,
                "dwte": wte.grad, "dwpe": wpe.grad[:T]})


def optimizer_cases(w, g):
    configs = [
        # sizes, max_norm, lr, wd, betas, eps
        ([(5,), (8, 3), (17,), (40, 9)], 1.0, 1e-3, 0.1, (0.9, 0.95), 1e-8),
        ([(64, 64), (192,), (256, 64), (33, 7), (3,)], 0.5, 6e-4, 0.1, (0.9, 0.95), 1e-8),
        ([(40000,), (16400,), (70001,), (8,), (300, 129)], 1.0, 3e-4, 0.01, (0.9, 0.999), 1e-8),
        ([(11, 13), (9,)], 0.0, 1e-2, 0.1, (0.8, 0.9), 1e-6),
        ([(200, 300), (5,)], 1e3, 1e-3, 0.0, (0.9, 0.95), 1e-8),  # norm below max: coef 1
    ]
    for ci, (sizes, max_norm, lr, wd, betas, eps) in enumerate(configs):
        params = [torch.nn.Parameter(rnd(g, *s, scale=0.1)) for s in sizes]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=lr, betas=betas, eps=eps)
        t = {}
        for i, p in enumerate(params):
            t[f"p{i}_init"] = p.detach().clone()
        steps = 3
        lrs = [lr * (s + 1) / steps for s in range(steps)]  # the lr changes step to step
        norms = []
        for s in range(steps):
            for i, p in enumerate(params):
                p.grad = rnd(g, *p.shape, scale=0.05 * (i + 1))
                t[f"s{s}_g{i}"] = p.grad.clone()
            if max_norm > 0:
                norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
            else:
                norms.append(0.0)
            for group in opt.param_groups:
                group["lr"] = lrs[s]
            opt.step()
            for i, p in enumerate(params):
                t[f"s{s}_p{i}"] = p.detach().clone()
                t[f"s{s}_m{i}"] = opt.state[p]["exp_avg"].clone()
                t[f"s{s}_v{i}"] = opt.state[p]["exp_avg_sq"].clone()
                t[f"s{s}_gc{i}"] = p.grad.clone()
        w.case("optimizer", f"adamw_{ci}",
               {"count": len(params), "steps": steps, "max_norm": max_norm, "lrs": lrs,
                "wd": wd, "beta1": betas[0], "beta2": betas[1], "eps": eps,
                "decay": [p.dim() >= 2 for p in params],
                "numel": [p.numel() for p in params],
                "norms_f32": [float(torch.tensor(n, dtype=torch.float32)) for n in norms]},
               t)


def add_cases(w, g):
    for n in [7, 16, 33, 40000, 70001]:
        a, b = rnd(g, n), rnd(g, n)
        w.case("add", f"add_{n}", {"n": n}, {"a": a, "b": b, "out": a + b})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--ops", default="linear,layernorm,gelu,attention,xent,embedding,optimizer,add")
    args = ap.parse_args()
    if not torch.__version__.startswith("1.13"):
        sys.exit(f"torch_cpu_fixtures: needs PyTorch 1.13.x (Debian's python3-torch), found {torch.__version__}")
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    w = Writer(args.out)
    g = torch.Generator().manual_seed(1234)
    table = {"linear": linear_cases, "layernorm": layernorm_cases, "gelu": gelu_cases,
             "attention": attention_cases, "xent": xent_cases, "embedding": embedding_cases,
             "optimizer": optimizer_cases, "add": add_cases}
    for op in args.ops.split(","):
        table[op](w, g)
    w.finish()


if __name__ == "__main__":
    main()
