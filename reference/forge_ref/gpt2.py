"""GPT-2 in plain torch.nn: the model the engine must reproduce.

Written the way nanoGPT writes it (manual attention, tied head), because that is the
arithmetic the `torch-cpu` profile replicates op for op: changing an op here (say, to
scaled_dot_product_attention, which torch 1.13 lacks anyway) changes the bits it must match.
Module names equal Hugging Face's GPT2LMHeadModel names, so the only difference from the
file layout is the transpose of the Conv1D weights.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import RefError
from .common import copy_checked, new_capture, nocap as _nocap  # noqa: F401 (new_capture: the family API)

# Linear weights that Hugging Face stores as Conv1D, i.e. [in, out] in files.
CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# Buffers older transformers versions saved; they carry no parameters.
_HF_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.n_head = cfg.n_head
        self.n_embd = C
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        T = cfg.block_size
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T), persistent=False)

    def forward(self, x, cap, prefix):
        B, T, C = x.size()
        nh, hd = self.n_head, C // self.n_head
        qkv = cap(prefix + "attn.c_attn", self.c_attn(x))
        q, k, v = qkv.split(self.n_embd, dim=2)
        k = k.view(B, T, nh, hd).transpose(1, 2)
        q = q.view(B, T, nh, hd).transpose(1, 2)
        v = v.view(B, T, nh, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = cap(prefix + "attn.sdpa", y)
        return cap(prefix + "attn.c_proj", self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x, cap, prefix):
        h = cap(prefix + "mlp.c_fc", self.c_fc(x))
        h = cap(prefix + "mlp.gelu", F.gelu(h, approximate="tanh"))
        return cap(prefix + "mlp.c_proj", self.c_proj(h))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cap, prefix):
        x = cap(prefix + "res_1", x + self.attn(cap(prefix + "ln_1", self.ln_1(x)), cap, prefix))
        x = cap(prefix + "res_2", x + self.mlp(cap(prefix + "ln_2", self.ln_2(x)), cap, prefix))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        """cfg: forge_ref.config.ModelConfig."""
        super().__init__()
        if cfg.family != "gpt2":
            raise RefError(f"model.family '{cfg.family}': the reference implements gpt2 only")
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_rows(), cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps),
        ))

    @torch.no_grad()
    def init_weights(self, seed):
        """docs/formats.md's GPT-2 init, drawn in named_parameters() order after
        torch.manual_seed(seed), so a seed names one initial state."""
        torch.manual_seed(seed)
        std_proj = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            elif name.endswith("attn.c_proj.weight") or name.endswith("mlp.c_proj.weight"):
                p.normal_(0.0, std_proj)
            else:
                p.normal_(0.0, 0.02)

    def forward(self, idx, targets=None, capture=None):
        """Returns (logits [B,T,Vp], mean loss or None). capture: a new_capture() to record the
        dump's level-2 activations (their .grad is kept after backward)."""
        cap = capture if capture is not None else _nocap
        B, T = idx.size()
        if T > self.cfg.block_size:
            raise RefError(f"sequence length {T} exceeds model.block_size {self.cfg.block_size}")
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = cap("embed", tok_emb + pos_emb)
        for i, block in enumerate(self.transformer.h):
            x = block(x, cap, f"h.{i}.")
        x = cap("ln_f", self.transformer.ln_f(x))
        logits = cap("logits", F.linear(x, self.transformer.wte.weight))
        loss = None
        if targets is not None:
            V = self.cfg.vocab_size
            # Padded vocabulary columns exist for alignment only; they are not classes.
            lv = logits[..., :V] if logits.size(-1) != V else logits
            loss = F.cross_entropy(lv.reshape(-1, V), targets.reshape(-1))
        return logits, loss


def activation_names(n_layer):
    """The dump's module names in forward order (docs/formats.md, level 2)."""
    names = ["embed"]
    for i in range(n_layer):
        p = f"h.{i}."
        names += [p + "ln_1", p + "attn.c_attn", p + "attn.sdpa", p + "attn.c_proj", p + "res_1",
                  p + "ln_2", p + "mlp.c_fc", p + "mlp.gelu", p + "mlp.c_proj", p + "res_2"]
    return names + ["ln_f", "logits"]


def _is_conv1d(name):
    return name.endswith(CONV1D_SUFFIXES)


def to_hf(tensors):
    """{internal name: tensor} -> {HF name: tensor}: Conv1D weights are transposed to
    [in, out]. Works for parameters and for anything laid out like them (grads, moments)."""
    return {n: (t.t().contiguous() if _is_conv1d(n) else t.contiguous()) for n, t in tensors.items()}


def from_hf(tensors):
    return {n: (t.t().contiguous() if _is_conv1d(n) else t) for n, t in tensors.items()}


def hf_state_dict(model):
    return to_hf({n: p.detach() for n, p in model.named_parameters()})


def load_hf_state_dict(model, tensors, where):
    """Copies an HF-layout {name: tensor} into model, checking names and shapes exactly."""
    tensors = dict(tensors)
    if "lm_head.weight" in tensors:
        # A tied head saved anyway must equal the embedding, or the model is not GPT-2 tied.
        head = tensors.pop("lm_head.weight")
        wte = tensors.get("transformer.wte.weight")
        if wte is None or head.shape != wte.shape or not torch.equal(head.float(), wte.float()):
            raise RefError(f"{where}: lm_head.weight differs from transformer.wte.weight "
                           "(the reference's head is tied)")
    for n in list(tensors):
        if n.endswith(_HF_IGNORED_SUFFIXES):
            del tensors[n]
    copy_checked(model, from_hf(tensors), where, file_tensors=tensors,
                 file_shape=lambda n, shape: shape[::-1] if _is_conv1d(n) else shape)
