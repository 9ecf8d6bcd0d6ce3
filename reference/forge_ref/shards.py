"""Token shards and the data order both sides follow (docs/formats.md, "Data order").

Formats (src/forge/data/shard.h):
  forge:   64-byte header: "FRGTOKS\\0", u32 version 1, u32 bytes per token (2|4),
           u64 token count, u64 vocabulary size, 32 zero bytes; then the tokens.
  llm.c:   256 int32 header: magic 20240520, version 1, token count; then uint16 tokens.
  nanoGPT: headerless uint16 tokens.
"""

import os
import struct

import numpy as np
import torch

from . import RefError

FORGE_MAGIC = b"FRGTOKS\0"
FORGE_HEADER = 64
LLMC_MAGIC = 20240520
LLMC_HEADER = 256 * 4
FORMATS = ("auto", "forge", "nanogpt", "llmc")


class Shard:
    """A read-only memory-mapped view of a shard's tokens."""

    def __init__(self, path, fmt="auto"):
        if fmt not in FORMATS:
            raise RefError(f"{path}: unknown shard format '{fmt}' (known: {', '.join(FORMATS)})")
        self.path = path
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                head = f.read(LLMC_HEADER)
        except OSError as e:
            raise RefError(f"{path}: cannot read token shard: {e.strerror}") from None
        if fmt == "auto":
            if head[:8] == FORGE_MAGIC:
                fmt = "forge"
            elif len(head) >= 4 and struct.unpack("<i", head[:4])[0] == LLMC_MAGIC:
                fmt = "llmc"
            else:
                fmt = "nanogpt"
        self.format = fmt
        self.vocab_size = 0
        if fmt == "forge":
            if len(head) < FORGE_HEADER or head[:8] != FORGE_MAGIC:
                raise RefError(f"{path}: not a forge shard (bad magic)")
            version, bpt, count, vocab = struct.unpack("<IIQQ", head[8:32])
            if version != 1:
                raise RefError(f"{path}: forge shard version {version} is not supported (expected 1)")
            if bpt not in (2, 4):
                raise RefError(f"{path}: forge shard bytes per token is {bpt}, expected 2 or 4")
            if size != FORGE_HEADER + count * bpt:
                raise RefError(f"{path}: forge shard header says {count} tokens of {bpt} bytes "
                               f"but the file has {size - FORGE_HEADER} data bytes")
            dtype, offset = (np.uint16 if bpt == 2 else np.uint32), FORGE_HEADER
            self.vocab_size = vocab
        elif fmt == "llmc":
            if len(head) < LLMC_HEADER:
                raise RefError(f"{path}: llm.c shard shorter than its 1024-byte header")
            magic, version, count = struct.unpack("<iii", head[:12])
            if magic != LLMC_MAGIC:
                raise RefError(f"{path}: not an llm.c shard (magic {magic}, expected {LLMC_MAGIC})")
            if version != 1:
                raise RefError(f"{path}: llm.c shard version {version} is not supported (expected 1)")
            if size != LLMC_HEADER + 2 * count:
                raise RefError(f"{path}: llm.c shard header says {count} tokens but the file "
                               f"has {size - LLMC_HEADER} data bytes")
            dtype, offset = np.uint16, LLMC_HEADER
        else:
            if size % 2:
                raise RefError(f"{path}: nanoGPT shard size {size} is odd (uint16 tokens expected)")
            dtype, offset, count = np.uint16, 0, size // 2
        self.count = int(count)
        if self.count == 0:
            self.tokens = np.zeros(0, dtype=dtype)
        else:
            self.tokens = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(self.count,))

    def __len__(self):
        return self.count


def write_forge_shard(path, tokens, vocab_size):
    """Writes a forge shard atomically. Used by tests and small tools; the engine's
    `forge data prepare` is the production writer."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise RefError(f"{path}: tokens must be in [0, {vocab_size})")
    bpt = 2 if vocab_size <= 65536 else 4
    data = tokens.astype("<u2" if bpt == 2 else "<u4").tobytes()
    header = FORGE_MAGIC + struct.pack("<IIQQ", 1, bpt, tokens.size, vocab_size) + bytes(32)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(header)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Loader:
    """The micro-batch stream of docs/formats.md. Rank r of W reads from pos + r*B*T; after
    each micro-batch pos += W*B*T and wraps to 0 when pos + W*B*T + 1 > n_tokens."""

    def __init__(self, shard, B, T, vocab_size, rank=0, world=1):
        self.shard, self.B, self.T, self.V = shard, B, T, vocab_size
        self.rank, self.world = rank, world
        self.pos = 0
        need = world * B * T + 1
        if shard.count < need:
            raise RefError(f"{shard.path}: {shard.count} tokens, but one micro-batch of "
                           f"{world}x{B}x{T} needs {need}")
        if shard.vocab_size > vocab_size:
            raise RefError(f"{shard.path}: shard was made with a vocabulary of {shard.vocab_size} "
                           f"but model.vocab_size is {vocab_size}")

    def next(self):
        """Returns (inputs, targets) as int64 [B, T] tensors and advances the cursor."""
        BT = self.B * self.T
        start = self.pos + self.rank * BT
        buf = np.asarray(self.shard.tokens[start:start + BT + 1]).astype(np.int64)
        if buf.max() >= self.V:
            bad = int(np.argmax(buf >= self.V))
            raise RefError(f"{self.shard.path}: token {int(buf[bad])} at index {start + bad} "
                           f"is >= model.vocab_size {self.V}")
        x = torch.from_numpy(buf[:-1].copy()).view(self.B, self.T)
        y = torch.from_numpy(buf[1:].copy()).view(self.B, self.T)
        step = self.world * BT
        self.pos += step
        if self.pos + step + 1 > self.shard.count:
            self.pos = 0
        return x, y
