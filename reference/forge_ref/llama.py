"""Llama in plain torch.nn: the second model family the engine must reproduce.

The arithmetic is Hugging Face's LlamaForCausalLM (transformers' modeling_llama.py, eager
attention), written out so that it runs unchanged under torch 1.13 and 2.x: RMSNorm computed
as LlamaRMSNorm does, rotary embeddings with rotate_half over split halves and cos/sin of
position * theta^(-2i/hd) rounded to fp32 the way LlamaRotaryEmbedding rounds them, grouped
query attention through repeat_kv, SwiGLU MLP, no biases, untied LM head. Parameter names are
LlamaForCausalLM's and nn.Linear's [out, in] layout is the file layout too: nothing is
transposed on the way to or from a safetensors file.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import RefError
from .common import copy_checked, new_capture, nocap as _nocap  # noqa: F401 (new_capture: the family API)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rope_tables(T, hd, theta, device=None):
    """cos, sin [T, hd] (each half repeated, as Hugging Face concatenates freqs twice)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64, device=device).float() / hd))
    pos = torch.arange(T, dtype=torch.int64, device=device).float()
    freqs = pos[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, n_rep):
    """[B, KVH, T, hd] -> [B, KVH * n_rep, T, hd]: kv head g serves query heads g*n_rep..."""
    if n_rep == 1:
        return x
    B, KVH, T, hd = x.shape
    return x[:, :, None, :, :].expand(B, KVH, n_rep, T, hd).reshape(B, KVH * n_rep, T, hd)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, nh = cfg.n_embd, cfg.n_head
        self.n_head = nh
        self.n_kv_head = cfg.n_kv_head if cfg.n_kv_head > 0 else nh
        self.hd = C // nh
        self.q_proj = nn.Linear(C, nh * self.hd, bias=False)
        self.k_proj = nn.Linear(C, self.n_kv_head * self.hd, bias=False)
        self.v_proj = nn.Linear(C, self.n_kv_head * self.hd, bias=False)
        self.o_proj = nn.Linear(nh * self.hd, C, bias=False)
        T = cfg.block_size
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T), persistent=False)

    def forward(self, x, cos, sin, cap, prefix):
        B, T, _ = x.size()
        nh, kvh, hd = self.n_head, self.n_kv_head, self.hd
        q = cap(prefix + "self_attn.q_proj", self.q_proj(x))
        k = cap(prefix + "self_attn.k_proj", self.k_proj(x))
        v = cap(prefix + "self_attn.v_proj", self.v_proj(x))
        # x * cos + rotate_half(x) * sin, as apply_rotary_pos_emb (elementwise, so computing
        # it before the heads are transposed changes no bits; it lets the dump capture it).
        c, s = cos[:, None, :], sin[:, None, :]  # [T, 1, hd] against [B, T, heads, hd]
        q = q.view(B, T, nh, hd)
        k = k.view(B, T, kvh, hd)
        q = cap(prefix + "self_attn.q_rope", (q * c + rotate_half(q) * s).view(B, T, nh * hd))
        k = cap(prefix + "self_attn.k_rope", (k * c + rotate_half(k) * s).view(B, T, kvh * hd))
        q = q.view(B, T, nh, hd).transpose(1, 2)
        k = k.view(B, T, kvh, hd).transpose(1, 2)
        v = v.view(B, T, kvh, hd).transpose(1, 2)
        k = repeat_kv(k, nh // kvh)
        v = repeat_kv(v, nh // kvh)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = cap(prefix + "self_attn.sdpa", y.transpose(1, 2).contiguous().view(B, T, nh * hd))
        return cap(prefix + "self_attn.o_proj", self.o_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, f = cfg.n_embd, cfg.ffn_hidden
        self.gate_proj = nn.Linear(C, f, bias=False)
        self.up_proj = nn.Linear(C, f, bias=False)
        self.down_proj = nn.Linear(f, C, bias=False)

    def forward(self, x, cap, prefix):
        g = cap(prefix + "mlp.gate_proj", self.gate_proj(x))
        u = cap(prefix + "mlp.up_proj", self.up_proj(x))
        h = cap(prefix + "mlp.swiglu", F.silu(g) * u)
        return cap(prefix + "mlp.down_proj", self.down_proj(h))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        # Registration order = LlamaDecoderLayer's = named_parameters() order.
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.n_embd, cfg.norm_eps)

    def forward(self, x, cos, sin, cap, prefix):
        h = cap(prefix + "input_layernorm", self.input_layernorm(x))
        x = cap(prefix + "res_1", x + self.self_attn(h, cos, sin, cap, prefix))
        h = cap(prefix + "post_attention_layernorm", self.post_attention_layernorm(x))
        x = cap(prefix + "res_2", x + self.mlp(h, cap, prefix))
        return x


class Llama(nn.Module):
    def __init__(self, cfg):
        """cfg: forge_ref.config.ModelConfig with family 'llama'."""
        super().__init__()
        if cfg.family != "llama":
            raise RefError(f"model.family '{cfg.family}': this is the llama reference")
        if cfg.ffn_hidden <= 0:
            raise RefError("model.ffn_hidden: expected the SwiGLU width (> 0) for family llama")
        if (cfg.n_embd // cfg.n_head) % 2 != 0:
            raise RefError("model.n_embd: rotary embeddings need an even head dimension n_embd/n_head")
        self.cfg = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg.vocab_rows(), cfg.n_embd)
        self.model.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_layer)])
        self.model.norm = RMSNorm(cfg.n_embd, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_rows(), bias=False)
        cos, sin = rope_tables(cfg.block_size, cfg.n_embd // cfg.n_head, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @torch.no_grad()
    def init_weights(self, seed):
        """N(0, 0.02), o_proj and down_proj N(0, 0.02/sqrt(2L)), norms 1; drawn in
        named_parameters() order after torch.manual_seed(seed)."""
        torch.manual_seed(seed)
        std_proj = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                p.normal_(0.0, std_proj)
            else:
                p.normal_(0.0, 0.02)

    def forward(self, idx, targets=None, capture=None):
        """Returns (logits [B,T,Vp], mean loss or None)."""
        cap = capture if capture is not None else _nocap
        B, T = idx.size()
        if T > self.cfg.block_size:
            raise RefError(f"sequence length {T} exceeds model.block_size {self.cfg.block_size}")
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = cap("embed", self.model.embed_tokens(idx))
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, cap, f"h.{i}.")
        x = cap("norm", self.model.norm(x))
        logits = cap("logits", self.lm_head(x))
        loss = None
        if targets is not None:
            V = self.cfg.vocab_size
            lv = logits[..., :V] if logits.size(-1) != V else logits
            loss = F.cross_entropy(lv.reshape(-1, V), targets.reshape(-1))
        return logits, loss


def activation_names(n_layer):
    """The dump's module names in forward order (level 2)."""
    names = ["embed"]
    for i in range(n_layer):
        p = f"h.{i}."
        names += [p + m for m in ("input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                                  "self_attn.v_proj", "self_attn.q_rope", "self_attn.k_rope",
                                  "self_attn.sdpa", "self_attn.o_proj", "res_1",
                                  "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                                  "mlp.swiglu", "mlp.down_proj", "res_2")]
    return names + ["norm", "logits"]


def to_hf(tensors):
    """{internal name: tensor} -> {HF name: tensor}: the same names and layouts."""
    return {n: t.contiguous() for n, t in tensors.items()}


def from_hf(tensors):
    return dict(tensors)


def hf_state_dict(model):
    return to_hf({n: p.detach() for n, p in model.named_parameters()})


def load_hf_state_dict(model, tensors, where):
    """Copies an HF-layout {name: tensor} into model, checking names, shapes and dtypes."""
    tensors = {n: t for n, t in tensors.items() if not n.endswith("rotary_emb.inv_freq")}
    copy_checked(model, tensors, where)


def hf_config(cfg):
    """transformers' LlamaConfig fields for this model (what `forge export --hf` writes)."""
    nkv = cfg.n_kv_head if cfg.n_kv_head > 0 else cfg.n_head
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": cfg.vocab_rows(), "hidden_size": cfg.n_embd,
            "intermediate_size": cfg.ffn_hidden, "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head, "num_key_value_heads": nkv,
            "head_dim": cfg.n_embd // cfg.n_head, "max_position_embeddings": cfg.block_size,
            "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
            "attention_dropout": 0.0, "initializer_range": 0.02, "torch_dtype": "float32",
            # HF's vocab_size counts the padded rows; forge's own vocabulary rides along
            "forge_vocab_size": cfg.vocab_size}
