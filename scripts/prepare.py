#!/usr/bin/env python3
"""Tokenize a file, a folder of .txt files or a glob of files into .bin token shards (header of 256 int32:
magic 20240520, version 1, token count; then uint16 tokens), the layout other C trainers use,
plus a vocabulary file that `catchat sample` decodes with.

   scripts/prepare.py INPUT OUT_PREFIX [--tokenizer bytes|gpt2|PATH/tokenizer.json | --train-tokenizer N
                      [--tokenizer-sample 1G]] [--val-fraction 0.05] [--shard-tokens 100000000] [--replace]
                      [--allow-binary]

INPUT is a file, a folder whose *.txt files (sorted by name, each ending in a
newline) are read as one text, or a glob pattern in quotes ('data/*.txt': the
files it matches, sorted by name, each ending in a newline, as one text).

Writes OUT_PREFIX_train_000.bin ..., OUT_PREFIX_val_000.bin ... and
OUT_PREFIX.vocab (one line per token id: its bytes in hex) and prints the
vocab_size to set. The folder of OUT_PREFIX is made if it does not exist.
`catchat sample` finds OUT_PREFIX.vocab by itself from a checkpoint of a run
on these shards (its stored [data] train names them).

The input streams: it is read in pieces of 16 MB cut only after a newline
that stands alone between two printable ASCII characters (where GPT-2's
byte-level pre-tokenizer splits anyway, so the ids are the ones the whole
text gives), the pieces are tokenized on every core and their tokens go
straight into the shard being written, so memory stays at a few pieces
(under 1 GB) whatever the size of the input. On a terminal a progress line
says what has been read and written.

Tokenizers: bytes (catchat's built-in, vocab 256: the file's bytes as they are,
never decoded, so any file works, invalid UTF-8 included), gpt2 (GPT-2 BPE
through tiktoken, where installed with its encoding files available: they are
fetched from the network once), or a Hugging Face tokenizer.json through the
`tokenizers` package (one that is not byte-level, such as a SentencePiece
one, is given the pieces one at a time, and may give other ids than on the
whole text at those few cuts). --train-tokenizer N instead trains a byte-level
BPE of N tokens (257 to 65535) on the training split of INPUT, offline, with
`tokenizers` (GPT-2's byte-level pre-tokenizer and decoder: every byte sequence
round-trips, and each token's bytes are exact in the .vocab), writes it as
OUT_PREFIX.tokenizer.json (then usable as --tokenizer for more text) and
tokenizes with it; the same input gives the same tokenizer and shards. It
learns from at most --tokenizer-sample bytes of the training split (default
1G; K, M, G, T are powers of 1024): all of it where it is smaller, else
pieces of about 1 MB taken at evenly spaced places over it. A text with fewer
distinct pairs to merge gives fewer tokens; the printed vocab_size is the
real one. All but bytes read text: a file that is not valid UTF-8 is refused
(nothing is replaced), naming the file and the byte's offset in it.

The validation split is the tail of the input, so the two never overlap: the
last --val-fraction of its bytes, taken from the files' sizes before
anything is read (for the text tokenizers the cut moves on to the next
character's first byte, so a character is never split; on ASCII that is the
last --val-fraction of the characters, as before). --val-fraction must lie
strictly between 0 and 1, --shard-tokens from 1 to 2147483647,
--train-tokenizer an integer from 257 to 65535 (ids are uint16 in the shards;
256 would be the bytes alone), --tokenizer-sample a size of at least 1 byte
and only with --train-tokenizer, and both splits must come out non-empty; a
bad value, or an input too short for both splits, is one line on stderr
naming the option, a non-zero exit, and no file written.

Nothing is lost: every file goes to a temporary name and is renamed into
place only when all of them are written, so a failure (a full disk, a
file-size limit, a refusal late in the input, Ctrl-C: one line, exit 130)
leaves OUT_PREFIX as it was. A prefix that already has shards is refused
unless --replace is given; then every earlier file of the prefix (shards,
.vocab, .tokenizer.json) is replaced or removed, so no shard of an earlier,
longer run stays behind for a PREFIX_train_*.bin glob to pick up. An input
file that looks like a binary file (a NUL byte, or more than half of its
bytes not UTF-8 text: catchat's own rule for text data, applied to each file
as it is read) is refused unless --allow-binary is given."""
import argparse, glob, itertools, json, os, re, shutil, signal, struct, sys, time
from array import array

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # xxh64.py beside it

MAGIC, VERSION = 20240520, 1
PIECE = 16 << 20         # bytes tokenized at a time
SAMPLE_PIECE = 1 << 20   # bytes of one place the tokenizer's sample is taken from


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


# A newline that stands alone between two printable ASCII characters: GPT-2's
# split pattern makes it a word of its own (a run of them would be one word, or
# split otherwise at the end of a piece), so the byte-level pre-tokenizer gives
# pieces cut after it the words it gives the whole text (the same tokenizer when
# trained, the same ids when encoded).
SAFE_CUT = re.compile(r"(?<=[!-~])\n(?=[!-~])")
SAFE_CUT_BYTES = re.compile(rb"(?<=[!-~])\n(?=[!-~])")
# Where a text has no such newline for long: before a space that follows a printable
# character and precedes a letter (the space begins the next word, ` ?\p{L}+`).
SPACE_CUT_BYTES = re.compile(rb"(?<=[!-~]) (?=[A-Za-z])")


def chunks(text, size=1 << 16):
    """Pieces of about size characters, cut only at SAFE_CUT, so that the pieces
    spread over the cores and give the words of the whole text."""
    pos = 0
    while pos < len(text):
        m = SAFE_CUT.search(text, pos + size)
        end = m.start() + 1 if m else len(text)
        yield text[pos:end]
        pos = end


def char_start(data, i):
    """i moved back to the first byte of the UTF-8 character it is in (continuation bytes are 10xxxxxx)."""
    for _ in range(3):
        if 0 < i < len(data) and 0x80 <= data[i] < 0xC0:
            i -= 1
    return i


def next_char(data, i):
    """i moved on to the first byte of the next UTF-8 character where it is inside one."""
    for _ in range(3):
        if i < len(data) and 0x80 <= data[i] < 0xC0:
            i += 1
    return i


def as_ids(ids):
    """Token ids (an iterable of ints, or bytes: one id each) as an array of uint16, refusing an id the
    shard format cannot hold."""
    if isinstance(ids, (bytes, bytearray)):  # bytes widened to uint16 in C, not one int at a time
        wide = bytearray(2 * len(ids))
        wide[0 if sys.byteorder == "little" else 1::2] = ids
        out = array("H")
        out.frombytes(wide)
        return out
    ids = ids if isinstance(ids, list) else list(ids)
    try:
        return array("H", ids)
    except OverflowError:
        sys.exit(f"prepare: token id {max(ids)} does not fit the uint16 shard format")


def hf_tokenizer(tok):
    """encode (text to ids) and vocab of a `tokenizers` Tokenizer. A byte-level one's tokens map
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
        batch = getattr(tok, "encode_batch_fast", tok.encode_batch)  # ids only, without the offsets
        group = 16 * (os.cpu_count() or 1)  # pieces of 64 KB an encode_batch: every core busy, the results small

        def encode(s):  # in pieces (chunks: the same ids) over every core
            ids, pieces = [], list(chunks(s))
            for k in range(0, len(pieces), group):
                ids += itertools.chain.from_iterable(e.ids for e in batch(pieces[k:k + group]))
            return ids
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


def train_bpe(texts, n):
    """A byte-level BPE of at most n tokens trained on texts (an iterator of str, read as it goes): the
    256 byte characters, then merges. No special tokens: catchat has no use for them."""
    tk = need_tokenizers("--train-tokenizer")
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=n, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     special_tokens=[], show_progress=False)
    tok.train_from_iterator((c for t in texts for c in chunks(t)), trainer=trainer)
    return tok


def first_line(e, limit=100):
    """An exception as a short clause of a one-line error (a network error's text runs to lines of its own)."""
    text = (str(e).strip().splitlines() or [""])[0]
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_tokenizer(name):
    if name == "bytes":  # the input is bytes here: one token per byte
        return (lambda b: b), [bytes([i]) for i in range(256)]
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
        if hasattr(enc, "encode_ordinary_batch"):  # pieces cut as chunks cuts them (the same ids) over every core
            def encode(s):
                return [i for ids in enc.encode_ordinary_batch(list(chunks(s)), num_threads=os.cpu_count() or 1)
                        for i in ids]
        else:
            encode = enc.encode_ordinary
        return encode, [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
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


def shard_header(count, vocab_len, vocab_id):
    marked = [TOKENIZER_MARK, vocab_len, vocab_id & 0xFFFFFFFF, vocab_id >> 32] if vocab_id else [0, 0, 0, 0]
    return struct.pack("<3i4I", MAGIC, VERSION, count, *marked) + bytes(4 * 249)


class Shards:
    """One split's shards, written as the tokens come: each file under its temporary name (staged), its
    header (the token count) written when it is full or the split ends."""

    def __init__(self, prefix, split, per, staged, said):
        self.prefix, self.split, self.per, self.staged, self.said = prefix, split, per, staged, said
        self.f, self.index, self.count, self.total, self.marks = None, 0, 0, 0, (0, None)

    def write(self, ids):
        at = 0  # an offset into ids, not slices of what is left: small shards would copy the rest again and again
        while at < len(ids):
            if self.f is None:
                self.path = f"{self.prefix}_{self.split}_{self.index:03d}.bin"
                self.f = open(self.staged(self.path), "wb")
                self.f.write(bytes(1024))  # the header, once the count is known
                self.count = 0
            part = ids[at:at + self.per - self.count]
            if sys.byteorder != "little":
                part.byteswap()  # the shards are little-endian
            self.f.write(part)
            self.count += len(part)
            self.total += len(part)
            at += len(part)
            if self.count == self.per:
                self.close()

    def close(self):
        if self.f is not None:
            self.f.seek(0)
            self.f.write(shard_header(self.count, *self.marks))
            self.f.close()
            self.f = None
            self.index += 1
            self.said.append(f"{self.path}: {self.count} tokens")


# Bytes that are not UTF-8 text: a byte of an invalid sequence or a control byte other than whitespace
# and escape.
CONTROL_BYTES = bytes(list(range(0x00, 0x09)) + list(range(0x0e, 0x1b)) + list(range(0x1c, 0x20)))
ESCAPED = re.compile("[\udc80-\udcff]")  # an invalid sequence's byte, decoded with surrogateescape


def complete_utf8(data):
    """The length of data less an unfinished UTF-8 sequence at its end (the next read completes it)."""
    for k in range(1, min(4, len(data)) + 1):
        b = data[-k]
        if b < 0x80:
            return len(data)
        if b >= 0xC0:  # the sequence's first byte: how many it needs
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return len(data) - k if need > k else len(data)
    return len(data)


class BinaryCheck:
    """Whether one file, read in pieces, looks like a binary file (an executable, an archive, raw numbers):
    a NUL byte, which text never holds (refused as it comes), or more than half of its bytes not UTF-8
    text (control bytes, and those of invalid sequences where count_invalid: a text tokenizer refuses
    those anyway; decided when the file ends). The rule catchat applies to text data (src/data.c,
    looks_binary), so the two take or refuse the same files."""

    def __init__(self, name, count_invalid):
        self.name, self.count_invalid = name, count_invalid
        self.n, self.odd, self.tail = 0, 0, b""

    def refuse(self, why):
        sys.exit(f"prepare: {self.name}: looks like a binary file, not text ({why}): pass --allow-binary to "
                 f"tokenize its bytes anyway")

    def feed(self, data):
        nul = data.find(b"\0")
        if nul >= 0:
            self.refuse(f"it holds NUL bytes, the first at byte {self.n + nul}")
        self.n += len(data)
        self.odd += len(data) - len(data.translate(None, CONTROL_BYTES))
        if self.count_invalid:
            data = self.tail + data
            end = complete_utf8(data)
            self.tail = data[end:]
            self.odd += self.invalid(data[:end])

    @staticmethod
    def invalid(data):
        try:
            data.decode("utf-8")
            return 0
        except UnicodeDecodeError:
            return len(ESCAPED.findall(data.decode("utf-8", errors="surrogateescape")))

    def end(self):
        self.odd += self.invalid(self.tail) if self.count_invalid else 0
        if self.odd * 2 > self.n:
            self.refuse(f"{100 * self.odd / self.n:.0f}% of its bytes are not UTF-8 text")


class Input:
    """The input as one stream of bytes: a file; or a folder's .txt files, or the files a glob matches,
    in name order, each followed by a newline where it does not end in one. Sizes come from the files
    before anything is read."""

    def __init__(self, spec):
        self.spec = spec
        if os.path.isdir(spec):
            names = sorted(glob.glob(os.path.join(glob.escape(spec), "*.txt")))
            if not names:
                sys.exit(f"prepare: {spec}: a folder without .txt files")
            joined = True
        elif not os.path.exists(spec) and glob.has_magic(spec):
            names = sorted(n for n in glob.glob(spec) if os.path.isfile(n))
            if not names:
                sys.exit(f"prepare: {spec}: no file matches the pattern")
            joined = True
        else:
            names, joined = [spec], False
        self.files = []  # (name, start in the stream, size, a newline added)
        pos = 0
        for n in names:
            try:
                size = os.stat(n).st_size
                with open(n, "rb") as f:
                    if joined and size:
                        f.seek(size - 1)
                    added = joined and (size == 0 or f.read(1) != b"\n")
            except OSError as e:
                sys.exit(f"prepare: {e.filename or n}: {e.strerror}")
            self.files.append((n, pos, size, added))
            pos += size + added
        self.total = pos
        self.joined = joined

    def where(self, offset):
        """The file a stream offset lies in and the offset in it, for a message."""
        for name, start, size, added in self.files:
            if offset < start + size + added:
                return name if self.joined else self.spec, offset - start
        return self.spec, offset

    def blocks(self, start, end, size=PIECE):
        """(file index, offset in the file, bytes) from stream offset start to end, each within one file;
        a newline added after a file is a block of its own, at the file's size."""
        for i, (name, fstart, fsize, added) in enumerate(self.files):
            lo, hi = max(start, fstart), min(end, fstart + fsize)
            if lo < hi:
                try:
                    with open(name, "rb") as f:
                        f.seek(lo - fstart)
                        while lo < hi:
                            data = f.read(min(size, hi - lo))
                            if not data:  # the file shrank while read
                                raise OSError(0, "shorter than its size when the run began", name)
                            yield i, lo - fstart, data
                            lo += len(data)
                except OSError as e:
                    sys.exit(f"prepare: {e.filename or name}: {e.strerror}")
            if added and start <= fstart + fsize < end:
                yield i, fsize, b"\n"

    def read(self, start, end):
        return b"".join(data for _, _, data in self.blocks(start, end))

    def pieces(self, start, end, text, on_block=None):
        """(stream offset, bytes) of [start, end) in pieces of about PIECE bytes; for a text tokenizer cut
        only at SAFE_CUT (where a text has none for long, before a space and a letter; failing that, at a
        character's first byte), for bytes anywhere."""
        buf, base, scan = bytearray(), start, PIECE
        for i, off, data in self.blocks(start, end):
            if on_block:
                on_block(i, off, data)
            if not text:
                yield base, data
                base += len(data)
                continue
            buf += data
            while len(buf) > PIECE:
                m = SAFE_CUT_BYTES.search(buf, max(PIECE, scan - 2))
                cut = m.start() + 1 if m else None
                if cut is None and len(buf) > 4 * PIECE:  # memory stays bounded: a cut of a second kind
                    m = SPACE_CUT_BYTES.search(buf, PIECE)
                    cut = m.start() if m else char_start(buf, PIECE)
                if cut is None:
                    scan = len(buf)
                    break
                yield base, bytes(buf[:cut])
                base += cut
                del buf[:cut]
                scan = PIECE
        if buf:
            yield base, bytes(buf)

    def sample(self, end, size):
        """(stream offset, bytes): about size bytes of [0, end) in pieces of about SAMPLE_PIECE at evenly
        spaced places, each begun and ended at SAFE_CUT where it can be (else at a character's first byte)."""
        k = -(-size // SAMPLE_PIECE)
        want = size // k
        for j in range(k):
            lo = j * end // k
            hi = min((j + 1) * end // k, lo + want + SAMPLE_PIECE)
            data = self.read(lo, hi)
            a = 0
            if lo > 0:
                m = SAFE_CUT_BYTES.search(data, 0, 1 << 16)
                a = m.start() + 1 if m else next_char(data, 0)
            if hi == end and a + want >= len(data):
                b = len(data)  # the split's end, a character's end
            else:
                m = SAFE_CUT_BYTES.search(data, min(a + want, len(data)))
                b = m.start() + 1 if m else complete_utf8(data[:a + want])
            if b > a:
                yield lo + a, data[a:b]


def parse_size(text):
    """A size in bytes: an integer with an optional K, M, G or T (powers of 1024, as catchat's sizes)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not m:
        return None
    return int(m.group(1)) << (10 * " KMGT".index((m.group(2) or " ").upper()))


def mb(n):
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} bytes"


class Progress:
    """One line on a terminal, rewritten in place at most four times a second; nothing when stderr is not one."""

    def __init__(self, what, total):
        self.what, self.total, self.t0, self.last = what, total, time.monotonic(), 0.0
        self.on = sys.stderr.isatty()

    def __call__(self, done, tokens=None):
        now = time.monotonic()
        if not self.on or now - self.last < 0.25:
            return
        self.last = now
        rate = done / max(now - self.t0, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else 0
        line = f"{self.what}: {done / 1e6:,.1f} of {self.total / 1e6:,.1f} MB"
        if tokens is not None:
            line += f", {tokens:,} tokens written"
        line += f", {rate / 1e6:.1f} MB/s, ETA {int(eta) // 60}m{int(eta) % 60:02d}s"
        sys.stderr.write("\r" + line + "\033[K")
        sys.stderr.flush()

    def done(self):
        if self.on and self.last:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def prefix_files(prefix):
    """The files an earlier run wrote at this prefix: its shards, vocabulary and tokenizer."""
    shards = sorted(glob.glob(glob.escape(prefix) + "_train_*.bin") + glob.glob(glob.escape(prefix) + "_val_*.bin"))
    extra = [f for f in (prefix + ".vocab", prefix + ".tokenizer.json") if os.path.exists(f)]
    return shards, extra


def usage_error(message):
    print(f"prepare: {message}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description="Tokenize a file into .bin token shards and a vocabulary, streaming "
                                 "(memory stays at a few 16 MB pieces whatever the input's size).")
    ap.add_argument("input", help="a text file, a folder whose .txt files are read in name order as one text, or a "
                    "glob pattern in quotes ('data/*.txt': the files it matches, in name order)")
    ap.add_argument("out_prefix", help="where the files go: PREFIX_train_000.bin ..., PREFIX_val_000.bin, PREFIX.vocab "
                    "(e.g. data/mine; its folder is made if missing)")
    ap.add_argument("--tokenizer", help="bytes (default), gpt2, or PATH/tokenizer.json")
    ap.add_argument("--train-tokenizer", metavar="N", help="train a byte-level BPE of N tokens (257 to 65535) on "
                    "the input's training split, write it as OUT_PREFIX.tokenizer.json and tokenize with it")
    ap.add_argument("--tokenizer-sample", metavar="BYTES", help="--train-tokenizer learns from at most this much of "
                    "the training split (default 1G; K, M, G, T are powers of 1024): all of it where smaller, else "
                    "pieces of about 1 MB at evenly spaced places over it")
    ap.add_argument("--val-fraction", type=float, default=0.05, metavar="F", help="tail of the input held out, 0 < F < 1: the last "
                    "F of the input's bytes, known from the files' sizes before reading (for a text tokenizer moved "
                    "on to the next character's first byte)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard file, at least 1")
    ap.add_argument("--replace", action="store_true", help="OUT_PREFIX has shards of an earlier run: replace "
                    "all of its files (shards, .vocab, .tokenizer.json) with this run's")
    ap.add_argument("--allow-binary", action="store_true", help="read an input file that looks like a binary file "
                    "(a NUL byte, or over half its bytes not UTF-8 text) as bytes anyway")
    ap.error = usage_error  # one line, for argparse's own complaints (a non-number) too
    a = ap.parse_args()
    if not 0 < a.val_fraction < 1:  # also refuses nan
        ap.error(f"--val-fraction must lie strictly between 0 and 1 (got {a.val_fraction!r})")
    if not 1 <= a.shard_tokens <= 2**31 - 1:  # the header's count is an int32
        ap.error(f"--shard-tokens must lie between 1 and 2147483647 (got {a.shard_tokens})")
    bpe_size, sample_size = None, 1 << 30
    if a.tokenizer_sample is not None:
        sample_size = parse_size(a.tokenizer_sample)
        if sample_size is None or sample_size < 1:
            ap.error(f"--tokenizer-sample must be a size of at least 1 byte, such as 500M or 2G (got "
                     f"{a.tokenizer_sample!r})")
        if a.train_tokenizer is None:
            ap.error("--tokenizer-sample goes with --train-tokenizer: it is what the BPE learns from")
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
    src = Input(a.input)
    old_shards, old_extra = prefix_files(a.out_prefix)
    if old_shards and not a.replace:
        sys.exit(f"prepare: {a.out_prefix} already has {len(old_shards)} shard(s) ({os.path.basename(old_shards[0])} "
                 f"...): pass --replace to replace all of that prefix's files, or choose another OUT_PREFIX")
    text = bool(bpe_size) or tokenizer != "bytes"  # the text tokenizers: strict UTF-8, no silent U+FFFD
    what = "--train-tokenizer" if bpe_size else f"--tokenizer {tokenizer}"
    cut = int(src.total * (1 - a.val_fraction))  # on bytes; for text at a character's first byte
    if text and 0 < cut < src.total:
        cut = next_char(src.read(cut, min(cut + 4, src.total)), 0) + cut
    for split, empty in (("train", cut == 0), ("val", cut == src.total)):
        if empty:
            sys.exit(f"prepare: {a.input}: too short for --val-fraction {a.val_fraction!r}: the {split} split "
                     f"would have no tokens ({src.total} bytes in all)")

    def decode(offset, data):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            name, at = src.where(offset + e.start)
            sys.exit(f"prepare: {name}: not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {at}), "
                     f"which {what} needs; use --tokenizer bytes for raw bytes")

    trained, encode, vocab = None, None, None
    if bpe_size:
        # the training split only: the validation text stays unseen, by the tokenizer too
        if cut <= sample_size:
            print(f"training a byte-level BPE of {bpe_size} tokens on the training split ({mb(cut)}) ...", flush=True)
            pieces, planned = src.pieces(0, cut, True), cut
        else:
            print(f"training a byte-level BPE of {bpe_size} tokens on {mb(sample_size)} sampled from the training "
                  f"split's {mb(cut)} ...", flush=True)
            pieces, planned = src.sample(cut, sample_size), sample_size
        progress = Progress("reading the BPE's text", planned)

        def texts():
            seen = 0
            for offset, data in pieces:
                seen += len(data)
                progress(seen)
                yield decode(offset, data)
        trained = train_bpe(texts(), bpe_size)
        progress.done()
        encode, vocab = hf_tokenizer(trained)
    checks = {}  # per input file, as it is read

    def check(i, off, data):
        if a.allow_binary or off >= src.files[i][2]:  # a newline added after the file is not the file's
            return
        if i not in checks:
            for c in checks.values():
                c.end()
            checks.clear()
            checks[i] = BinaryCheck(src.files[i][0] if src.joined else a.input, count_invalid=not text)
        checks[i].feed(data)

    splits = [("train", src.pieces(0, cut, text, check)), ("val", src.pieces(cut, src.total, text, check))]
    first = next(splits[0][1])
    if text:
        decode(*first)
    if encode is None:  # after the input's first piece: a file that is not UTF-8 is said before a tokenizer's trouble
        encode, vocab = load_tokenizer(tokenizer)
    vocab_id = fingerprint(vocab)
    if vocab_id is None:
        print("prepare: note: no xxhash (pip install xxhash) nor libxxhash: the shards do not name their tokenizer",
              file=sys.stderr)
    temps, written, said, made = [], set(), [], []

    def staged(final):  # where a file is written before it is renamed to final
        tmp = f"{final}.tmp.{os.getpid()}"
        temps.append((final, tmp))
        written.add(final)
        return tmp

    try:
        # OUT_PREFIX may name a folder not made yet (data/mine/train): made here, after the checks that
        # need no reading, and removed again if the run fails, so a refused input leaves nothing behind
        folder = os.path.dirname(a.out_prefix)
        if folder and os.path.exists(folder) and not os.path.isdir(folder):
            sys.exit(f"prepare: {folder}: not a folder, so OUT_PREFIX {a.out_prefix} cannot be written")
        d = folder
        while d and not os.path.exists(d):
            made.append(d)
            d = os.path.dirname(d)
        if folder:
            os.makedirs(folder, exist_ok=True)
        progress, done, tokens = Progress("tokenizing", src.total), 0, 0
        for k, (split, pieces) in enumerate(splits):
            out = Shards(a.out_prefix, split, a.shard_tokens, staged, said)
            out.marks = (len(vocab), vocab_id)
            for offset, data in (itertools.chain([first], pieces) if k == 0 else pieces):
                done = offset + len(data)
                ids = as_ids(encode(decode(offset, data) if text else data))
                out.write(ids)
                tokens += len(ids)
                progress(done, tokens)
            out.close()
            if out.total == 0:
                sys.exit(f"prepare: {a.input}: too short for --val-fraction {a.val_fraction!r}: the {split} split "
                         f"would have no tokens ({src.total} bytes in all)")
        for c in checks.values():
            c.end()
        progress.done()
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
        made.clear()
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
        for d in made:  # the folders made for it, innermost first
            try:
                os.rmdir(d)
            except OSError:
                pass
    for line in said:
        print(line)
    print(f"{a.out_prefix}.vocab: set [model] vocab_size = {len(vocab)}")


def stop_on(sig, frame):
    """SIGTERM and SIGHUP (a job's end, a closed terminal) end the run as Ctrl-C does: main's cleanup
    removes the temporary files, and the prefix is as it was."""
    global stopped_by
    stopped_by = sig
    raise KeyboardInterrupt


stopped_by = signal.SIGINT

if __name__ == "__main__":
    if hasattr(signal, "SIGXFSZ"):  # past a file-size limit a write fails (one line, the prefix as it was)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name) and signal.getsignal(getattr(signal, name)) != signal.SIG_IGN:
            signal.signal(getattr(signal, name), stop_on)
    try:
        main()
    except KeyboardInterrupt:  # one line, not a traceback; main's cleanup has run
        what = "" if stopped_by == signal.SIGINT else f" by {signal.Signals(stopped_by).name}"
        print(f"prepare: interrupted{what}: OUT_PREFIX is as it was", file=sys.stderr)
        sys.exit(128 + stopped_by)
