"""The run configuration, read exactly as the engine reads it (src/forge/io/config.h).

Unknown fields are errors on both sides: a typo that one side ignores and the other honours
would make a comparison meaningless without anyone noticing.
"""

import dataclasses
import json
from dataclasses import dataclass, field

from . import RefError


@dataclass
class ModelConfig:
    family: str = "gpt2"
    vocab_size: int = 256
    padded_vocab_size: int = 0
    n_layer: int = 2
    n_head: int = 4
    n_kv_head: int = 0
    n_embd: int = 64
    block_size: int = 64
    ffn_hidden: int = 0
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    def vocab_rows(self):
        return self.padded_vocab_size if self.padded_vocab_size > 0 else self.vocab_size

    def head_dim(self):
        return self.n_embd // self.n_head


@dataclass
class TrainConfig:
    batch_size: int = 4
    seq_len: int = 64
    grad_accum_steps: int = 1
    steps: int = 100
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 10
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    seed: int = 1337
    threads: int = 0
    eval_interval: int = 50
    eval_batches: int = 8
    checkpoint_interval: int = 0
    log_interval: int = 1


@dataclass
class DataConfig:
    train: str = ""
    val: str = ""


@dataclass
class Config:
    path: str = ""
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    data: DataConfig = field(default_factory=DataConfig)
    out_dir: str = "runs/default"
    numerics: str = "fast"


NUMERICS_PROFILES = ("fast", "torch-cpu", "bf16")
FAMILIES = ("gpt2", "llama")


def _fill(obj, section, where, prefix):
    if not isinstance(section, dict):
        raise RefError(f"{where}: field '{prefix}' must be an object")
    known = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in section.items():
        name = f"{prefix}.{key}"
        if key not in known:
            raise RefError(f"{where}: unknown field '{name}' (known: {', '.join(known)})")
        expected = type(getattr(obj, key))
        # bool is a subclass of int in Python but never a valid number in a config.
        if isinstance(value, bool):
            raise RefError(f"{where}: field '{name}' must be a {expected.__name__}, got a boolean")
        if expected is int:
            if not isinstance(value, int):
                raise RefError(f"{where}: field '{name}' must be an integer, got {value!r}")
        elif expected is float:
            if not isinstance(value, (int, float)):
                raise RefError(f"{where}: field '{name}' must be a number, got {value!r}")
            value = float(value)
        elif expected is str:
            if not isinstance(value, str):
                raise RefError(f"{where}: field '{name}' must be a string, got {value!r}")
        setattr(obj, key, value)


def parse_config(j, where):
    """Builds a Config from an already-parsed JSON object; `where` names it in errors."""
    if not isinstance(j, dict):
        raise RefError(f"{where}: the config must be a JSON object")
    c = Config(path=where)
    for key, value in j.items():
        if key == "model":
            _fill(c.model, value, where, "model")
        elif key == "train":
            _fill(c.train, value, where, "train")
        elif key == "data":
            _fill(c.data, value, where, "data")
        elif key in ("out_dir", "numerics"):
            if not isinstance(value, str):
                raise RefError(f"{where}: field '{key}' must be a string, got {value!r}")
            setattr(c, key, value)
        else:
            raise RefError(f"{where}: unknown field '{key}' "
                           "(known: model, train, data, out_dir, numerics)")
    validate_config(c)
    return c


def load_config(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RefError(f"{path}: cannot read the config: {e.strerror}") from None
    try:
        j = json.loads(text)
    except json.JSONDecodeError as e:
        raise RefError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return parse_config(j, path)


def validate_config(c):
    w = c.path or "<config>"
    m, t = c.model, c.train

    def need(cond, fieldname, what):
        if not cond:
            raise RefError(f"{w}: field '{fieldname}' {what}")

    need(m.family in FAMILIES, "model.family", f"must be one of {', '.join(FAMILIES)}, got '{m.family}'")
    need(m.vocab_size > 0, "model.vocab_size", "must be > 0")
    need(m.padded_vocab_size == 0 or m.padded_vocab_size >= m.vocab_size,
         "model.padded_vocab_size", f"must be 0 or >= model.vocab_size ({m.vocab_size})")
    need(m.n_layer > 0, "model.n_layer", "must be > 0")
    need(m.n_head > 0, "model.n_head", "must be > 0")
    need(m.n_embd > 0 and m.n_embd % m.n_head == 0, "model.n_embd",
         f"must be a positive multiple of model.n_head ({m.n_head})")
    need(m.n_kv_head >= 0 and (m.n_kv_head == 0 or m.n_head % m.n_kv_head == 0),
         "model.n_kv_head", "must be 0 or divide model.n_head")
    need(m.block_size > 0, "model.block_size", "must be > 0")
    need(m.ffn_hidden >= 0, "model.ffn_hidden", "must be >= 0")
    need(m.norm_eps > 0, "model.norm_eps", "must be > 0")
    need(m.rope_theta > 0, "model.rope_theta", "must be > 0")
    if m.family == "llama":  # the engine's validate_config has the same rules
        need((m.n_embd // m.n_head) % 2 == 0, "model.n_embd",
             "must give an even head dimension n_embd/n_head for rotary embeddings")
        need(m.ffn_hidden > 0, "model.ffn_hidden", "must be the SwiGLU width (> 0) for family llama")
    need(t.batch_size > 0, "train.batch_size", "must be > 0")
    need(0 < t.seq_len <= m.block_size, "train.seq_len",
         f"must be in 1..model.block_size ({m.block_size})")
    need(t.grad_accum_steps >= 1, "train.grad_accum_steps", "must be >= 1")
    need(t.steps >= 0, "train.steps", "must be >= 0")
    need(t.lr >= 0, "train.lr", "must be >= 0")
    need(t.min_lr >= 0, "train.min_lr", "must be >= 0")
    need(t.warmup_steps >= 0, "train.warmup_steps", "must be >= 0")
    need(t.weight_decay >= 0, "train.weight_decay", "must be >= 0")
    need(0 <= t.beta1 < 1, "train.beta1", "must be in [0, 1)")
    need(0 <= t.beta2 < 1, "train.beta2", "must be in [0, 1)")
    need(t.eps > 0, "train.eps", "must be > 0")
    need(t.grad_clip >= 0, "train.grad_clip", "must be >= 0 (0 disables clipping)")
    need(0 <= t.seed < 2 ** 64, "train.seed", "must be an unsigned 64-bit integer")
    need(t.threads >= 0, "train.threads", "must be >= 0 (0 = all cores)")
    need(t.eval_interval >= 0, "train.eval_interval", "must be >= 0")
    need(t.eval_batches >= 0, "train.eval_batches", "must be >= 0")
    need(t.checkpoint_interval >= 0, "train.checkpoint_interval", "must be >= 0")
    need(t.log_interval >= 1, "train.log_interval", "must be >= 1")
    need(c.numerics in NUMERICS_PROFILES, "numerics",
         f"must be one of {', '.join(NUMERICS_PROFILES)}, got '{c.numerics}'")


def config_to_json(c):
    return {
        "model": dataclasses.asdict(c.model),
        "train": dataclasses.asdict(c.train),
        "data": dataclasses.asdict(c.data),
        "out_dir": c.out_dir,
        "numerics": c.numerics,
    }
