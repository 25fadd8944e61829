#!/usr/bin/env python3
"""Tokenize a file (or a folder of .txt files) into .bin token shards (header of 256 int32: magic 20240520,
version 1, token count; then uint16 tokens), the layout other C trainers use,
plus a vocabulary file that `catchat sample --vocab` decodes with.

   scripts/prepare.py INPUT OUT_PREFIX [--tokenizer bytes|gpt2|PATH/tokenizer.json]
                      [--val-fraction 0.05] [--shard-tokens 100000000]

INPUT is a file, or a folder whose *.txt files (sorted by name, each ending
in a newline) are read as one text.

Writes OUT_PREFIX_train_000.bin ..., OUT_PREFIX_val_000.bin ... and
OUT_PREFIX.vocab (one line per token id: its bytes in hex) and prints the
vocab_size to set. The folder of OUT_PREFIX is made if it does not exist.

Tokenizers: bytes (catchat's built-in, vocab 256: the file's bytes as they are,
never decoded, so any file works, invalid UTF-8 included), gpt2 (GPT-2 BPE
through tiktoken, where installed with its encoding files available), or a
Hugging Face tokenizer.json through the `tokenizers` package. The last two
read text: a file that is not valid UTF-8 is refused (nothing is replaced).

The validation split is the tail of the file, so the two never overlap: the
last --val-fraction of its bytes (bytes) or of its characters (the others).
--val-fraction must lie strictly between 0 and 1, --shard-tokens must be at
least 1, and both splits must come out non-empty; a bad value, or an input too
short for both splits, is one line on stderr naming the option, a non-zero
exit, and no file written."""
import argparse, glob, os, struct, sys

MAGIC, VERSION = 20240520, 1


def load_tokenizer(name):
    if name == "bytes":
        return list, [bytes([i]) for i in range(256)]  # the input is bytes here: one token per byte
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
    header = struct.pack("<3i", MAGIC, VERSION, len(tokens)) + bytes(4 * 253)
    with open(path, "wb") as f:
        f.write(header + struct.pack(f"<{len(tokens)}H", *tokens))


def usage_error(message):
    print(f"prepare: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description="Tokenize a file into .bin token shards and a vocabulary.")
    ap.add_argument("input", help="a text file, or a folder whose .txt files are read in name order as one text")
    ap.add_argument("out_prefix", help="where the files go: PREFIX_train_000.bin ..., PREFIX_val_000.bin, PREFIX.vocab "
                    "(e.g. data/mine; its folder is made if missing)")
    ap.add_argument("--tokenizer", default="bytes", help="bytes (default), gpt2, or PATH/tokenizer.json")
    ap.add_argument("--val-fraction", type=float, default=0.05, help="tail of the input held out, 0 < F < 1")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard file, at least 1")
    ap.error = usage_error  # one line, for argparse's own complaints (a non-number) too
    a = ap.parse_args()
    if not 0 < a.val_fraction < 1:  # also refuses nan
        ap.error(f"--val-fraction must lie strictly between 0 and 1 (got {a.val_fraction:g})")
    if a.shard_tokens < 1:
        ap.error(f"--shard-tokens must be at least 1 (got {a.shard_tokens})")
    if a.out_prefix.endswith(os.sep) or os.path.isdir(a.out_prefix):
        ap.error(f"OUT_PREFIX {a.out_prefix} names a folder: give a file-name prefix inside it, e.g. "
                 f"{os.path.join(a.out_prefix, 'mine')}")
    try:
        if os.path.isdir(a.input):  # a folder: its .txt files in name order, as one text
            names = sorted(glob.glob(os.path.join(a.input, "*.txt")))
            if not names:
                sys.exit(f"prepare: {a.input}: a folder without .txt files")
            parts = []
            for n in names:
                with open(n, "rb") as f:
                    b = f.read()
                parts.append(b if b.endswith(b"\n") else b + b"\n")
            data = b"".join(parts)
        else:
            with open(a.input, "rb") as f:
                data = f.read()
    except OSError as e:
        sys.exit(f"prepare: {e.filename or a.input}: {e.strerror}")
    if a.tokenizer != "bytes":
        try:  # the text tokenizers: strict UTF-8, no silent U+FFFD
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            sys.exit(f"prepare: {a.input}: not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}), "
                     f"which --tokenizer {a.tokenizer} needs; use --tokenizer bytes for raw bytes")
    encode, vocab = load_tokenizer(a.tokenizer)
    cut = int(len(data) * (1 - a.val_fraction))  # on bytes for bytes, on characters for text
    splits = (("train", encode(data[:cut])), ("val", encode(data[cut:])))
    for split, toks in splits:
        if not toks:
            sys.exit(f"prepare: {a.input}: too short for --val-fraction {a.val_fraction:g}: the {split} split "
                     f"would have no tokens ({len(data)} {'bytes' if a.tokenizer == 'bytes' else 'characters'} in all)")
        if max(toks) >= 65536:
            sys.exit(f"prepare: token id {max(toks)} does not fit the uint16 shard format")
    try:
        # OUT_PREFIX may name a folder not made yet (data/mine/train): made here, after every
        # check, so a refused input leaves nothing behind
        folder = os.path.dirname(a.out_prefix)
        if folder and os.path.exists(folder) and not os.path.isdir(folder):
            sys.exit(f"prepare: {folder}: not a folder, so OUT_PREFIX {a.out_prefix} cannot be written")
        if folder:
            os.makedirs(folder, exist_ok=True)
        for split, toks in splits:
            for k in range(0, len(toks), a.shard_tokens):
                path = f"{a.out_prefix}_{split}_{k // a.shard_tokens:03d}.bin"
                write_shard(path, toks[k:k + a.shard_tokens])
                print(f"{path}: {len(toks[k:k + a.shard_tokens])} tokens")
        with open(f"{a.out_prefix}.vocab", "w") as f:
            for b in vocab:
                f.write(b.hex() + "\n")
    except OSError as e:  # a file where the folder should be, no permission, a full disk: one line
        sys.exit(f"prepare: {e.filename or a.out_prefix}: {e.strerror}")
    print(f"{a.out_prefix}.vocab: set [model] vocab_size = {len(vocab)}")


if __name__ == "__main__":
    main()
