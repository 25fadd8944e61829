#!/usr/bin/env python3
"""Tokenize text into .bin token shards (header of 256 int32: magic 20240520,
version 1, token count; then uint16 tokens), the layout other C trainers use,
plus a vocabulary file that `catchat sample --vocab` decodes with.

   scripts/prepare.py INPUT.txt OUT_PREFIX [--tokenizer bytes|gpt2|PATH/tokenizer.json]
                      [--val-fraction 0.05] [--shard-tokens 100000000]

Writes OUT_PREFIX_train_000.bin ..., OUT_PREFIX_val_000.bin and OUT_PREFIX.vocab
(one line per token id: its bytes in hex) and prints the vocab_size to set.
Tokenizers: bytes (catchat's built-in, vocab 256), gpt2 (GPT-2 BPE through
tiktoken, where installed with its encoding files available), or a Hugging
Face tokenizer.json through the `tokenizers` package. The validation split is
the tail of the text, so the two never overlap."""
import argparse, struct, sys

MAGIC, VERSION = 20240520, 1


def load_tokenizer(name):
    if name == "bytes":
        return (lambda s: list(s.encode("utf-8"))), [bytes([i]) for i in range(256)]
    if name == "gpt2":
        try:
            import tiktoken
            enc = tiktoken.get_encoding("gpt2")
        except Exception as e:  # not installed, or its BPE files cannot be fetched
            sys.exit(f"prepare: the gpt2 tokenizer needs tiktoken and its encoding files ({e}); "
                     "use --tokenizer bytes or a local tokenizer.json")
        return (lambda s: enc.encode_ordinary(s)), [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("prepare: a tokenizer.json needs the `tokenizers` package (pip install tokenizers)")
    tok = Tokenizer.from_file(name)
    vocab = [b""] * tok.get_vocab_size()
    for i in range(len(vocab)):
        vocab[i] = tok.decode([i]).encode("utf-8")
    return (lambda s: tok.encode(s).ids), vocab


def write_shard(path, tokens):
    if tokens and max(tokens) >= 65536:
        sys.exit(f"prepare: token id {max(tokens)} does not fit the uint16 shard format")
    header = struct.pack("<3i", MAGIC, VERSION, len(tokens)) + bytes(4 * 253)
    with open(path, "wb") as f:
        f.write(header + struct.pack(f"<{len(tokens)}H", *tokens))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("out_prefix")
    ap.add_argument("--tokenizer", default="bytes")
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--shard-tokens", type=int, default=100_000_000)
    a = ap.parse_args()
    encode, vocab = load_tokenizer(a.tokenizer)
    text = open(a.input, encoding="utf-8", errors="replace").read()
    cut = int(len(text) * (1 - a.val_fraction))
    for split, part in (("train", text[:cut]), ("val", text[cut:])):
        toks = encode(part)
        for k in range(0, max(len(toks), 1), a.shard_tokens):
            path = f"{a.out_prefix}_{split}_{k // a.shard_tokens:03d}.bin"
            write_shard(path, toks[k:k + a.shard_tokens])
            print(f"{path}: {len(toks[k:k + a.shard_tokens])} tokens")
    with open(f"{a.out_prefix}.vocab", "w") as f:
        for b in vocab:
            f.write(b.hex() + "\n")
    print(f"{a.out_prefix}.vocab: set [model] vocab_size = {len(vocab)}")


if __name__ == "__main__":
    main()
