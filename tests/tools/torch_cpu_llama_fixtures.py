"""Fixtures for the torch-cpu profile's Llama ops (tests/unit/test_torch_cpu_llama.cpp).

Runs under Debian's PyTorch 1.13.1 (/usr/bin/python3). Each op is run the way
reference/forge_ref/llama.py runs it (its own functions are imported where they exist:
RMSNorm, rope_tables, rotate_half, repeat_kv), autograd included, on awkward shapes: row
widths below, at and above the AVX2 width of 8 and the 4-way ILP of the cascade sums, odd head
dims, element counts around the 32768 grain of the parallel loops, bmm's 400-MAC threshold,
and kv heads repeated 1 to 4 times. Inputs and torch's outputs are written as raw
little-endian files plus index.json, in the format of torch_cpu_fixtures.py.

    /usr/bin/python3 torch_cpu_llama_fixtures.py --out DIR --threads N

The caller pins ATEN_CPU_CAPABILITY=avx2; --threads sets torch.set_num_threads.
"""

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "reference"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from forge_ref.llama import RMSNorm, repeat_kv, rope_tables, rotate_half  # noqa: E402
from torch_cpu_fixtures import Writer, rnd  # noqa: E402


def rmsnorm_cases(w, g):
    shapes = [(1, 3, 1), (1, 3, 5), (2, 3, 8), (2, 5, 12), (2, 5, 16), (1, 4, 100), (2, 7, 127),
              (2, 9, 128), (1, 3, 129), (3, 5, 768), (2, 3, 1031), (4, 64, 64), (8, 64, 192),
              (2, 300, 48), (1, 2, 2050), (8, 256, 512)]
    for i, (B, T, C) in enumerate(shapes):
        eps = 1e-6 if i % 3 == 2 else 1e-5
        norm = RMSNorm(C, eps)
        with torch.no_grad():
            norm.weight.copy_(1 + rnd(g, C, scale=0.1))
        x = (rnd(g, B, T, C) * 2 + 0.3).requires_grad_()
        dy = rnd(g, B, T, C)
        y = norm(x)
        y.backward(dy)
        dinp, dw = x.grad.clone(), norm.weight.grad.clone()
        rstd = torch.rsqrt(x.detach().pow(2).mean(-1, keepdim=True) + eps)
        # The decoder layer's pattern: the input also feeds a residual add made after the norm,
        # whose backward autograd runs first: x.grad = (dres + direct) + through-the-variance.
        norm.weight.grad = None
        xin = x.detach().clone().requires_grad_()
        xr = xin.clone()
        n = norm(xr)
        n.retain_grad()
        M = rnd(g, B, T, C)
        r = xr + n * M
        dres = rnd(g, B, T, C)
        r.backward(dres)
        w.case("rmsnorm", f"rms_{B}x{T}x{C}", {"N": B * T, "C": C, "eps": eps},
               {"x": x, "w": norm.weight, "out": y, "rstd": rstd, "dout": dy, "dinp": dinp,
                "dw": dw, "dout_res": n.grad, "dres": dres, "dinp_res": xin.grad,
                "dw_res": norm.weight.grad})


def rope_table_cases(w, g):
    # Angles over 125 switch Sleef's whole vector to its wide-range path; odd hd/2 and table
    # sizes whose halves (2 threads) start off a vector boundary move the vectors.
    for T, hd, theta in [(64, 16, 10000.0), (256, 64, 10000.0), (7, 6, 10000.0), (17, 2, 10000.0),
                         (33, 34, 500000.0), (100, 80, 10000.0), (50, 130, 1e6), (9, 32, 10.0),
                         (2048, 128, 10000.0), (305, 130, 10000.0), (301, 34, 10000.0)]:
        cos, sin = rope_tables(T, hd, theta)
        w.case("rope_tables", f"ropetab_{T}x{hd}_{theta:g}", {"T": T, "hd": hd, "theta": theta},
               {"cos": cos, "sin": sin})


def rope_cases(w, g):
    for B, T, H, hd in [(1, 3, 1, 2), (2, 5, 3, 6), (2, 64, 4, 16), (2, 64, 2, 16),
                        (1, 7, 5, 34), (3, 17, 2, 64), (4, 64, 8, 64), (1, 300, 2, 130),
                        (8, 256, 2, 64)]:
        cos, sin = rope_tables(T + 5, hd, 10000.0)  # block_size > T: the model slices
        c, s = cos[:T][:, None, :], sin[:T][:, None, :]
        x = rnd(g, B, T, H * hd).requires_grad_()
        xv = x.view(B, T, H, hd)
        y = (xv * c + rotate_half(xv) * s).view(B, T, H * hd)
        dy = rnd(g, B, T, H * hd)
        y.backward(dy)
        w.case("rope", f"rope_{B}x{T}x{H}x{hd}", {"B": B, "T": T, "H": H, "hd": hd},
               {"x": x, "cos": cos[:T], "sin": sin[:T], "out": y, "dout": dy, "dinp": x.grad})


def swiglu_cases(w, g):
    for shape in [(1,), (7,), (3, 17), (2, 5, 33), (4, 64, 176), (2, 9, 1408), (8, 64, 176),
                  (3, 7, 4099), (32769,), (16, 5, 1001)]:
        gate = (rnd(g, *shape) * 3).requires_grad_()
        up = rnd(g, *shape).requires_grad_()
        y = F.silu(gate) * up
        dy = rnd(g, *shape)
        y.backward(dy)
        n = gate.numel()
        w.case("swiglu", "swiglu_" + "x".join(map(str, shape)), {"n": n},
               {"gate": gate, "up": up, "out": y, "dout": dy, "dgate": gate.grad, "dup": up.grad})


def gqa_cases(w, g):
    # T*T*hd < 400 takes bmm's naive loop, larger the per-batch sgemm; n_rep = NH/KVH 1..4.
    # With B == 1 or NH == 1 matmul hands bmm views of q (and of k, v without repeats or
    # with one kv head: then repeat_kv is a view too).
    for B, T, NH, KVH, hd in [(1, 3, 2, 1, 2), (2, 5, 4, 2, 6), (1, 7, 4, 4, 8), (2, 9, 6, 3, 10),
                              (2, 64, 4, 2, 16), (3, 17, 8, 2, 16), (2, 33, 4, 1, 12),
                              (2, 20, 6, 2, 12), (1, 64, 8, 2, 64), (2, 31, 4, 4, 18),
                              (2, 128, 8, 2, 64), (1, 24, 3, 3, 8), (2, 20, 1, 1, 12),
                              (1, 24, 4, 1, 8)]:
        q_in = rnd(g, B, T, NH * hd).requires_grad_()
        k_in = rnd(g, B, T, KVH * hd).requires_grad_()
        v_in = rnd(g, B, T, KVH * hd).requires_grad_()
        mask = torch.tril(torch.ones(T + 3, T + 3)).view(1, 1, T + 3, T + 3)  # block_size > T
        # reference/forge_ref/llama.py Attention.forward from the roped q, k on.
        q = q_in.view(B, T, NH, hd).transpose(1, 2)
        k = k_in.view(B, T, KVH, hd).transpose(1, 2)
        v = v_in.view(B, T, KVH, hd).transpose(1, 2)
        k = repeat_kv(k, NH // KVH)
        v = repeat_kv(v, NH // KVH)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, NH * hd)
        dy = rnd(g, B, T, NH * hd)
        y.backward(dy)
        w.case("gqa", f"gqa_{B}x{T}x{NH}x{KVH}x{hd}",
               {"B": B, "T": T, "NH": NH, "KVH": KVH, "hd": hd},
               {"q": q_in, "k": k_in, "v": v_in, "out": y, "att": att, "dout": dy,
                "dq": q_in.grad, "dk": k_in.grad, "dv": v_in.grad})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--ops", default="rmsnorm,rope_tables,rope,swiglu,gqa")
    args = ap.parse_args()
    if not torch.__version__.startswith("1.13"):
        sys.exit("torch_cpu_llama_fixtures: needs PyTorch 1.13.x (Debian's python3-torch), "
                 f"found {torch.__version__}")
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    w = Writer(args.out)
    g = torch.Generator().manual_seed(4321)
    table = {"rmsnorm": rmsnorm_cases, "rope_tables": rope_table_cases, "rope": rope_cases,
             "swiglu": swiglu_cases, "gqa": gqa_cases}
    for op in args.ops.split(","):
        table[op](w, g)
    w.finish()


if __name__ == "__main__":
    main()
