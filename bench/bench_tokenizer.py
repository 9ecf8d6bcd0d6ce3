#!/usr/bin/env python3
"""Tokens/s of forge's GPT-2 encoder, tiktoken and HF tokenizers on the same text in one run:
the fortunes corpus concatenated --repeat times, one thread on the whole text and all threads
over the documents (one per fortune). Every engine's token count must agree.

  .venv/bin/python bench/bench_tokenizer.py --forge build/bench_tokenizer [--repeat 4]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tools"))
import bpe_reference  # noqa: E402


def fortune_files():
    return sorted(p for p in glob.glob("/usr/share/games/fortunes/*")
                  if os.path.isfile(p) and not os.path.islink(p) and not p.endswith((".dat", ".u8")))


def best_of(n, fn):
    best, out = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--forge", required=True, help="the bench_tokenizer binary")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--vocab-dir", default=None)
    args = ap.parse_args()
    vocab_dir = args.vocab_dir or bpe_reference.default_vocab_dir()
    files = fortune_files()
    if not files:
        sys.exit("bench_tokenizer.py: the fortunes corpus is missing (/usr/share/games/fortunes)")
    threads = os.cpu_count()

    forge = json.loads(subprocess.run([args.forge, "--repeat", str(args.repeat), "--vocab-dir", vocab_dir] + files,
                                      check=True, capture_output=True, text=True).stdout)

    one = b"".join(open(f, "rb").read() for f in files).decode("utf-8")
    text = one * args.repeat
    docs = text.split("\n%\n")
    tt = bpe_reference.load_tiktoken(vocab_dir)
    hf = bpe_reference.load_hf(vocab_dir)
    rows = [("forge", forge["tokens_1"], forge["seconds_1"], forge["tokens_n"], forge["seconds_n"])]
    s1, ids = best_of(3, lambda: tt.encode_ordinary(text))
    sn, batch = best_of(3, lambda: tt.encode_ordinary_batch(docs, num_threads=threads))
    rows.append(("tiktoken", len(ids), s1, sum(map(len, batch)), sn))
    # HF: one call on the whole text runs on one thread; encode_batch uses all (rayon).
    s1, ids = best_of(3, lambda: hf.backend_tokenizer.encode(text, add_special_tokens=False).ids)
    sn, batch = best_of(3, lambda: hf.backend_tokenizer.encode_batch(docs, add_special_tokens=False))
    rows.append(("hf-tokenizers", len(ids), s1, sum(len(e.ids) for e in batch), sn))

    print("text: fortunes x%d = %.1f MB, %d documents, %d threads" % (args.repeat, len(text.encode()) / 1e6, len(docs), threads))
    print("%-14s %12s %14s %14s" % ("engine", "tokens", "1 thread tok/s", "%d threads tok/s" % threads))
    for name, n1, s1, nn, sn in rows:
        print("%-14s %12d %14.0f %14.0f" % (name, n1, n1 / s1, nn / sn))
    counts = {(r[1], r[3]) for r in rows}
    if len(counts) != 1:
        sys.exit("token counts differ between engines: %s" % rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
