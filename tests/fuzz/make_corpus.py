#!/usr/bin/env python3
"""Write the fuzzers' seed corpus (valid and broken inputs) under corpus/."""
import json, os, struct

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def put(h, name, data):
    d = os.path.join(here, "corpus", h)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


for cfg in ("tiny", "cpu", "default"):
    put("ini", cfg + ".ini", open(os.path.join(root, "configs", cfg + ".ini"), "rb").read())
for name, text in {"inf": "[model]\nd_model = 1e999\n", "nan": "[train]\nlr = nan\n", "negzero": "[train]\nbatch_size = -0\n",
                   "empty": "[train]\nlr =\n", "heads": "[model]\nd_model = 64\nn_heads = 5\n", "unknown": "[train]\nbogus = 1\n",
                   "section": "[nosuch]\nx = 1\n", "dynamic": "[precision]\nloss_scale = dynamic\n",
                   "long": "[data]\ntrain = " + "a" * 300 + "\n", "noeq": "just words\n"}.items():
    put("ini", name + ".ini", text)


def st(tensors, meta=None, hlen=None):
    header, blobs, off = {}, [], 0
    if meta:
        header["__metadata__"] = meta
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    return struct.pack("<Q", hlen if hlen is not None else len(h)) + h + b"".join(blobs)


good = {"a": ("F32", [2, 3], struct.pack("<6f", *range(6))), "b": ("F16", [4], struct.pack("<4e", 1, 2, 3, 4)),
        "c": ("BF16", [2], b"\x80\x3f\x00\x40")}
cfgjson = json.dumps({"model": {"d_model": 64, "n_heads": 4}, "train": {"lr": 0.001}})
put("safetensors", "valid.safetensors", st(good, {"config": cfgjson, "step": "3"}))
put("safetensors", "len_past_end.safetensors", st(good, hlen=1 << 40))
put("safetensors", "not_object.safetensors", struct.pack("<Q", 7) + b"[1,2,3]")
bad = dict(good)
bad["b"] = ("F16", [5], struct.pack("<4e", 1, 2, 3, 4))
put("safetensors", "size_mismatch.safetensors", st(bad))
h = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()
put("safetensors", "overlap.safetensors", struct.pack("<Q", len(h)) + h + bytes(12))
put("safetensors", "meta_not_string.safetensors", st(good, {"step": 3}))
put("safetensors", "bad_config.safetensors", st(good, {"config": "{\"model\": {\"d_model\": \"x\"}}"}))

toks = list(range(40))
hdr = lambda version, count: struct.pack("<2i", version, count) + bytes(4 * 253)  # after the magic
put("shard", "valid", hdr(1, 40) + struct.pack("<40H", *toks))
put("shard", "count_mismatch", hdr(1, 50) + struct.pack("<40H", *toks))
put("shard", "version", hdr(7, 40) + struct.pack("<40H", *toks))
put("shard", "truncated", hdr(1, 40)[:100])
put("shard", "big_ids", hdr(1, 4) + struct.pack("<4H", 65535, 50256, 50257, 1))

put("text", "english.txt", "The quick brown fox jumps over the lazy dog.\n" * 4)
put("text", "high_bytes.txt", bytes(range(256)))
put("text", "short.txt", "ab")

# a byte-level BPE (GPT-2's byte-to-character table) over the bytes and "he", " t", "the" (fuzz_bpe.c's vocabulary)
printable = [*range(0x21, 0x7f), *range(0xa1, 0xad), *range(0xae, 0x100)]
chars, extra = {}, 256
for b in range(256):
    chars[b] = chr(b) if b in printable else chr(extra)
    extra += b not in printable
word = lambda bs: "".join(chars[b] for b in bs)
bpe_vocab = {word([b]): b for b in range(256)}
bpe_vocab.update({word(b"he"): 256, word(b" t"): 257, word(b"the"): 258})
tokenizer = {"normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
             "added_tokens": [{"id": 256, "content": "he", "special": False}],
             "model": {"type": "BPE", "ignore_merges": False, "vocab": bpe_vocab,
                       "merges": [[word(b"h"), word(b"e")], [word(b" "), word(b"t")], [word(b"t"), word(b"he")]]}}
put("bpe", "tokenizer.json", json.dumps(tokenizer, ensure_ascii=False))
put("bpe", "old_merges.json", json.dumps({**tokenizer, "model": {**tokenizer["model"], "merges": [
    word(b"h") + " " + word(b"e"), word(b" ") + " " + word(b"t")]}}, ensure_ascii=False))
put("bpe", "not_bpe.json", json.dumps({**tokenizer, "model": {"type": "WordPiece"}}))

put("cli", "sets", "lr=1e-3\ntrain.lr=3\nseed=18446744073709551615\nloss_scale=dynamic\n")
put("cli", "hostile", "1e999\nnan\n-0\n=\nlr\n.=\nmodel.=4\n99999999999999999999999\n")
