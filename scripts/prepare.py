#!/usr/bin/env python3
"""Tokenize a file (or a folder of .txt files) into .bin token shards (header of 256 int32: magic 20240520,
version 1, token count; then uint16 tokens), the layout other C trainers use,
plus a vocabulary file that `catchat sample` decodes with.

   scripts/prepare.py INPUT OUT_PREFIX [--tokenizer bytes|gpt2|PATH/tokenizer.json | --train-tokenizer N]
                      [--val-fraction 0.05] [--shard-tokens 100000000] [--replace] [--allow-binary]

INPUT is a file, or a folder whose *.txt files (sorted by name, each ending
in a newline) are read as one text.

Writes OUT_PREFIX_train_000.bin ..., OUT_PREFIX_val_000.bin ... and
OUT_PREFIX.vocab (one line per token id: its bytes in hex) and prints the
vocab_size to set. The folder of OUT_PREFIX is made if it does not exist.
`catchat sample` finds OUT_PREFIX.vocab by itself from a checkpoint of a run
on these shards (its stored [data] train names them).

Tokenizers: bytes (catchat's built-in, vocab 256: the file's bytes as they are,
never decoded, so any file works, invalid UTF-8 included), gpt2 (GPT-2 BPE
through tiktoken, where installed with its encoding files available: they are
fetched from the network once), or a Hugging Face tokenizer.json through the
`tokenizers` package. --train-tokenizer N instead trains a byte-level BPE of N
tokens (257 to 65535) on the training split of INPUT, offline, with
`tokenizers` (GPT-2's byte-level pre-tokenizer and decoder: every byte sequence
round-trips, and each token's bytes are exact in the .vocab), writes it as
OUT_PREFIX.tokenizer.json (then usable as --tokenizer for more text) and
tokenizes with it; the same input gives the same tokenizer and shards. A text
with fewer distinct pairs to merge gives fewer tokens; the printed vocab_size
is the real one. All but bytes read text: a file that is not valid UTF-8 is
refused (nothing is replaced).

The validation split is the tail of the file, so the two never overlap: the
last --val-fraction of its bytes (bytes) or of its characters (the others).
--val-fraction must lie strictly between 0 and 1, --shard-tokens must be at
least 1, --train-tokenizer an integer from 257 to 65535 (ids are uint16 in the
shards; 256 would be the bytes alone), and both splits must come out
non-empty; a bad value, or an input too short for both splits, is one line on
stderr naming the option, a non-zero exit, and no file written.

Nothing is lost: every file goes to a temporary name and is renamed into
place only when all of them are written, so a failure (a full disk, a
file-size limit, Ctrl-C: one line, exit 130) leaves OUT_PREFIX as it was.
A prefix that already has shards is refused unless --replace is given; then
every earlier file of the prefix (shards, .vocab, .tokenizer.json) is
replaced or removed, so no shard of an earlier, longer run stays behind for a
PREFIX_train_*.bin glob to pick up. An input that looks like a binary file
(a NUL byte, or more than half of its bytes not UTF-8 text: catchat's own
rule for text data) is refused unless --allow-binary is given."""
import argparse, glob, json, os, re, shutil, signal, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # xxh64.py beside it

MAGIC, VERSION = 20240520, 1


def byte_level_chars():
    """GPT-2's byte-to-character table, which the byte-level pre-tokenizer writes
    tokens in: printable bytes stand for themselves, the others for characters
    from U+0100 on."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(bs) - 189)  # 188 printable bytes: the others take U+0100, U+0101, ...
    return dict(zip(bs, map(chr, cs)))


def chunks(text, size=1 << 16):
    """Pieces of about size characters, cut only after a newline that stands
    alone between two printable ASCII characters: GPT-2's split pattern makes
    such a newline a word of its own (a run of them would be one word, or split
    otherwise at the end of a piece), so the byte-level pre-tokenizer gives the
    pieces the words it gives the whole text (the same tokenizer when trained,
    the same ids when encoded), and the pieces spread over the cores."""
    cut = re.compile(r"(?<=[!-~])\n(?=[!-~])")
    pos = 0
    while pos < len(text):
        m = cut.search(text, pos + size)
        end = m.start() + 1 if m else len(text)
        yield text[pos:end]
        pos = end


def hf_tokenizer(tok):
    """encode and vocab of a `tokenizers` Tokenizer. A byte-level one's tokens map
    back to their exact bytes (decoding a single token would turn a piece of a
    UTF-8 character into U+FFFD); others' tokens are their decoded text."""
    spec = json.loads(tok.to_str())
    added = {t["id"] for t in spec.get("added_tokens") or []}
    byte_level = (spec.get("decoder") or {}).get("type") == "ByteLevel"
    inverse = {c: b for b, c in byte_level_chars().items()}
    vocab = []
    for i in range(tok.get_vocab_size()):
        piece = tok.id_to_token(i)
        if piece is None:  # an id the tokenizer leaves unused
            vocab.append(b"")
        elif byte_level and i not in added and all(c in inverse for c in piece):
            vocab.append(bytes(inverse[c] for c in piece))
        else:
            vocab.append(tok.decode([i]).encode("utf-8"))
    if byte_level and (spec.get("pre_tokenizer") or {}).get("type") == "ByteLevel" and not spec.get("normalizer"):
        def encode(s):  # in pieces (chunks: the same ids) over every core
            return [i for e in tok.encode_batch(list(chunks(s))) for i in e.ids]
    else:
        def encode(s):
            return tok.encode(s).ids
    return encode, vocab


def need_tokenizers(what):
    try:
        import tokenizers
        return tokenizers
    except ImportError:
        sys.exit(f"prepare: {what} needs the `tokenizers` package: pip install tokenizers "
                 "(.venv/bin/python -m pip install tokenizers; scripts/install_deps.sh installs it)")


def train_bpe(text, n):
    """A byte-level BPE of at most n tokens trained on text: the 256 byte
    characters, then merges. No special tokens: catchat has no use for them."""
    tk = need_tokenizers("--train-tokenizer")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=n, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     special_tokens=[], show_progress=False)
    tok.train_from_iterator(chunks(text), trainer=trainer)
    return tok


def first_line(e, limit=100):
    """An exception as a short clause of a one-line error (a network error's text runs to lines of its own)."""
    text = (str(e).strip().splitlines() or [""])[0]
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_tokenizer(name):
    if name == "bytes":
        return list, [bytes([i]) for i in range(256)]  # the input is bytes here: one token per byte
    if name == "gpt2":
        # the first line says what is wrong, the indented ones what to do (an 80-column terminal)
        offline = "  offline, train a BPE on this text instead with --train-tokenizer N\n  (or use --tokenizer bytes)"
        try:
            import tiktoken
        except ImportError:
            sys.exit("prepare: --tokenizer gpt2 needs tiktoken, which is not installed\n"
                     "  .venv/bin/python -m pip install tiktoken (scripts/install_deps.sh does not);\n"
                     f"  it fetches its encoding files from the network\n{offline}")
        import socket
        socket.setdefaulttimeout(30)  # its download has no timeout of its own: a dead network would hang here
        try:
            enc = tiktoken.get_encoding("gpt2")
        except Exception as e:  # no network, a proxy, a half-written cache
            sys.exit(f"prepare: --tokenizer gpt2: its encoding files cannot be had\n  ({first_line(e, 76)})\n{offline}")
        return (lambda s: enc.encode_ordinary(s)), [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    tk = need_tokenizers(f"--tokenizer {name}")
    if not os.path.isfile(name):
        sys.exit(f"prepare: --tokenizer {name}: no such file (bytes, gpt2 or a tokenizer.json)")
    try:
        tok = tk.Tokenizer.from_file(name)
    except Exception as e:
        sys.exit(f"prepare: --tokenizer {name}: not a tokenizer.json `tokenizers` reads ({first_line(e)})")
    return hf_tokenizer(tok)


# The tokenizer's identity in header ints the layout leaves reserved (int 3: this
# mark, 4: its token count, 5 and 6: its fingerprint's low and high halves), so
# catchat knows what the ids mean and other C trainers read the shard as before.
TOKENIZER_MARK = 0x4B544343  # "CCTK"


def fingerprint(vocab):
    """The tokenizer's identity as catchat computes it (cc_vocab_fingerprint):
    XXH64 over every token in id order, as its byte count (uint32 LE) and its
    bytes; never 0. None where no xxh64 can be had (the shards then carry none)."""
    from xxh64 import Xxh64, XxhashMissing
    try:
        h = Xxh64()
        for b in vocab:
            h.update(struct.pack("<I", len(b)) + b)
        return int(h.hexdigest(), 16) or 1
    except XxhashMissing:
        return None


def write_shard(path, tokens, vocab_len, vocab_id):
    marked = [TOKENIZER_MARK, vocab_len, vocab_id & 0xFFFFFFFF, vocab_id >> 32] if vocab_id else [0, 0, 0, 0]
    header = struct.pack("<3i4I", MAGIC, VERSION, len(tokens), *marked) + bytes(4 * 249)
    with open(path, "wb") as f:
        f.write(header + struct.pack(f"<{len(tokens)}H", *tokens))


# Bytes that are not UTF-8 text: a byte of an invalid sequence (one escaped
# character each) or a control byte other than whitespace and escape.
ODD_BYTES = re.compile("[\udc80-\udcff\x00-\x08\x0e-\x1a\x1c-\x1f]")


def binary_reason(data):
    """Why bytes read as text look like a binary file (an executable, an archive, raw numbers), or None:
    a NUL byte, which text never holds, or more than half of the bytes not UTF-8 text. The rule catchat
    applies to text data (src/data.c, looks_binary), so the two take or refuse the same files."""
    nul = data.find(b"\0")
    if nul >= 0:
        return f"it holds NUL bytes, the first at byte {nul}"
    odd = len(ODD_BYTES.findall(data.decode("utf-8", errors="surrogateescape")))
    if odd * 2 <= len(data):
        return None
    return f"{100 * odd / len(data):.0f}% of its bytes are not UTF-8 text"


def prefix_files(prefix):
    """The files an earlier run wrote at this prefix: its shards, vocabulary and tokenizer."""
    shards = sorted(glob.glob(glob.escape(prefix) + "_train_*.bin") + glob.glob(glob.escape(prefix) + "_val_*.bin"))
    extra = [f for f in (prefix + ".vocab", prefix + ".tokenizer.json") if os.path.exists(f)]
    return shards, extra


def usage_error(message):
    print(f"prepare: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description="Tokenize a file into .bin token shards and a vocabulary.")
    ap.add_argument("input", help="a text file, or a folder whose .txt files are read in name order as one text")
    ap.add_argument("out_prefix", help="where the files go: PREFIX_train_000.bin ..., PREFIX_val_000.bin, PREFIX.vocab "
                    "(e.g. data/mine; its folder is made if missing)")
    ap.add_argument("--tokenizer", help="bytes (default), gpt2, or PATH/tokenizer.json")
    ap.add_argument("--train-tokenizer", metavar="N", help="train a byte-level BPE of N tokens (257 to 65535) on "
                    "the input's training split, write it as OUT_PREFIX.tokenizer.json and tokenize with it")
    ap.add_argument("--val-fraction", type=float, default=0.05, help="tail of the input held out, 0 < F < 1")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard file, at least 1")
    ap.add_argument("--replace", action="store_true", help="OUT_PREFIX has shards of an earlier run: replace "
                    "all of its files (shards, .vocab, .tokenizer.json) with this run's")
    ap.add_argument("--allow-binary", action="store_true", help="read an input that looks like a binary file "
                    "(a NUL byte, or over half its bytes not UTF-8 text) as bytes anyway")
    ap.error = usage_error  # one line, for argparse's own complaints (a non-number) too
    a = ap.parse_args()
    if not 0 < a.val_fraction < 1:  # also refuses nan
        ap.error(f"--val-fraction must lie strictly between 0 and 1 (got {a.val_fraction!r})")
    if a.shard_tokens < 1:
        ap.error(f"--shard-tokens must be at least 1 (got {a.shard_tokens})")
    bpe_size = None
    if a.train_tokenizer is not None:
        if a.tokenizer is not None:
            ap.error("--train-tokenizer and --tokenizer exclude each other: the trained BPE is the tokenizer")
        try:
            bpe_size = int(a.train_tokenizer, 10)
        except ValueError:
            ap.error(f"--train-tokenizer must be an integer number of tokens (got {a.train_tokenizer!r})")
        # 256 tokens are the bytes alone (--tokenizer bytes); shards hold ids as uint16
        if not 257 <= bpe_size <= 65535:
            ap.error(f"--train-tokenizer must lie between 257 and 65535 (got {bpe_size})")
        need_tokenizers("--train-tokenizer")  # said before a long read
    tokenizer = a.tokenizer or "bytes"
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
    why = None if a.allow_binary else binary_reason(data)
    if why:
        sys.exit(f"prepare: {a.input}: looks like a binary file, not text ({why}): pass --allow-binary to "
                 f"tokenize its bytes anyway")
    old_shards, old_extra = prefix_files(a.out_prefix)
    if old_shards and not a.replace:
        sys.exit(f"prepare: {a.out_prefix} already has {len(old_shards)} shard(s) ({os.path.basename(old_shards[0])} "
                 f"...): pass --replace to replace all of that prefix's files, or choose another OUT_PREFIX")
    what = "--train-tokenizer" if bpe_size else f"--tokenizer {tokenizer}"
    if bpe_size or tokenizer != "bytes":
        try:  # the text tokenizers: strict UTF-8, no silent U+FFFD
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            sys.exit(f"prepare: {a.input}: not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}), "
                     f"which {what} needs; use --tokenizer bytes for raw bytes")
    cut = int(len(data) * (1 - a.val_fraction))  # on bytes for bytes, on characters for text
    trained = None
    if bpe_size:
        if cut == 0:  # nothing to learn merges from: said as the empty train split it is, below
            trained, (encode, vocab) = None, (lambda s: [], [])
        else:
            # the training split only: the validation text stays unseen, by the tokenizer too
            print(f"training a byte-level BPE of {bpe_size} tokens on {cut} characters ...", flush=True)
            trained = train_bpe(data[:cut], bpe_size)
            encode, vocab = hf_tokenizer(trained)
    else:
        encode, vocab = load_tokenizer(tokenizer)
    splits = (("train", encode(data[:cut])), ("val", encode(data[cut:])))
    for split, toks in splits:
        if not toks:
            sys.exit(f"prepare: {a.input}: too short for --val-fraction {a.val_fraction!r}: the {split} split "
                     f"would have no tokens ({len(data)} {'characters' if isinstance(data, str) else 'bytes'} in all)")
        if max(toks) >= 65536:
            sys.exit(f"prepare: token id {max(toks)} does not fit the uint16 shard format")
    vocab_id = fingerprint(vocab)
    if vocab_id is None:
        print("prepare: note: no xxhash (pip install xxhash) nor libxxhash: the shards do not name their tokenizer",
              file=sys.stderr)
    temps, written, said = [], set(), []

    def staged(final):  # where a file is written before it is renamed to final
        tmp = f"{final}.tmp.{os.getpid()}"
        temps.append((final, tmp))
        written.add(final)
        return tmp

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
                write_shard(staged(path), toks[k:k + a.shard_tokens], len(vocab), vocab_id)
                said.append(f"{path}: {len(toks[k:k + a.shard_tokens])} tokens")
        with open(staged(f"{a.out_prefix}.vocab"), "w") as f:
            for b in vocab:
                f.write(b.hex() + "\n")
        if trained:
            # beside the shards, named by their prefix: two corpora in one folder keep their own
            trained.save(staged(f"{a.out_prefix}.tokenizer.json"))
            said.append(f"{a.out_prefix}.tokenizer.json: the BPE ({len(vocab)} tokens; --tokenizer for more text)")
        elif tokenizer not in ("bytes", "gpt2"):
            # a copy beside the shards: a run's checkpoints carry it, and `catchat sample` encodes with its merges
            shutil.copyfile(tokenizer, staged(f"{a.out_prefix}.tokenizer.json"))
        # every file is whole: into place, then the earlier run's files this one did not replace
        for final, tmp in temps:
            os.replace(tmp, final)
        temps.clear()
        for f in old_shards + old_extra:
            if f not in written:
                os.remove(f)
    except OSError as e:  # a file where the folder should be, no permission, a full disk: one line
        # the file it was meant for: a write error names none (the one being written), an open error the temporary
        where = {tmp: final for final, tmp in temps}.get(e.filename, e.filename) or \
            (temps[-1][0] if temps else a.out_prefix)
        sys.exit(f"prepare: cannot write {where}: {e.strerror} (nothing of this run was kept; {a.out_prefix}'s files "
                 f"are as they were)")
    finally:
        for _, tmp in temps:  # a failure, Ctrl-C included: nothing of this run stays
            try:
                os.remove(tmp)
            except OSError:
                pass
    for line in said:
        print(line)
    print(f"{a.out_prefix}.vocab: set [model] vocab_size = {len(vocab)}")


if __name__ == "__main__":
    if hasattr(signal, "SIGXFSZ"):  # past a file-size limit a write fails (one line, the prefix as it was)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        main()
    except KeyboardInterrupt:  # one line, not a traceback; main's cleanup has run
        print("prepare: interrupted: OUT_PREFIX is as it was", file=sys.stderr)
        sys.exit(130)
