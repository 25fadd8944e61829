#!/usr/bin/env python3
"""Checkpoints travel both ways: a plain JSON reader (and Python's `safetensors`
where installed) loads a catchat checkpoint with docs/model.md's names and shapes,
and catchat loads a file written by another tool (F16/BF16, other order, extra
tensors, no metadata).   tests/interop.py path/to/catchat"""
import atexit, json, os, random, shutil, struct, subprocess, sys, tempfile

BIN = os.path.realpath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "F64": 8}


def read_safetensors(path):
    """The 30-line reader of docs/formats.md: header length, JSON header, raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + hlen])
    meta = header.pop("__metadata__", {})
    data = blob[8 + hlen:]
    tensors = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        n = 1
        for s in e["shape"]:
            n *= s
        assert end - b == n * SIZES[e["dtype"]], name
        raw = data[b:end]
        if e["dtype"] == "F32":
            vals = list(struct.unpack(f"<{n}f", raw))
        else:
            vals = None
        tensors[name] = (e["dtype"], e["shape"], vals)
    return tensors, meta


def write_safetensors(path, tensors):
    """Another tool's writer: F16 and BF16, reversed order, an extra tensor."""
    header, chunks, off = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def check_checksums(path):
    """The two checksums as docs/formats.md spells them, recomputed outside
    catchat (xxh64 from the libxxhash catchat links); False where that
    library cannot be loaded."""
    import ctypes, ctypes.util
    try:
        xx = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    except OSError:
        return False
    xx.XXH64.restype, xx.XXH64.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    h = json.loads(blob[8:8 + hlen])
    meta, data = h["__metadata__"], blob[8 + hlen:]
    s = b"".join(b"m\0%s\0%s\0" % (k.encode(), meta[k].encode())
                 for k in sorted(meta) if k not in ("data_xxh64", "header_xxh64"))
    s += b"".join(b"t\0%s\0%s\0%s\0%d,%d\0" % (n.encode(), e["dtype"].encode(),
                  ",".join(map(str, e["shape"])).encode(), *e["data_offsets"])
                  for n, e in sorted(h.items()) if n != "__metadata__")
    assert meta.get("header_xxh64") == "%016x" % xx.XXH64(s, len(s), 0), "header_xxh64 is not the documented digest"
    assert meta.get("data_xxh64") == "%016x" % xx.XXH64(data, len(data), 0), "data_xxh64 is not the data's digest"
    return True


def expected_shapes(cfg):
    V, D, L = cfg["model"]["vocab_size"], cfg["model"]["d_model"], cfg["model"]["n_layers"]
    shapes = {"embed.weight": [V, D], "ctx.norm.weight": [D], "ctx.qkv.weight": [3 * D, D],
              "ctx.out.weight": [D, D], "final_norm.weight": [D], "lm_head.weight": [V, D]}
    for l in range(L):
        shapes.update({f"gru.{l}.norm.weight": [D], f"gru.{l}.weight_ih": [3 * D, D],
                       f"gru.{l}.weight_hh": [3 * D, D], f"gru.{l}.bias_ih": [3 * D],
                       f"gru.{l}.bias_hh": [3 * D]})
    return shapes


def evaluate(ckpt, tmp, extra):
    out = subprocess.run([BIN, "eval", "--ckpt", ckpt, "--json", "--data", f"{tmp}/val.txt"] + extra,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["loss"]


def main():
    tmp = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, tmp, True)
    random.seed(5)
    words = "the cat sat on a mat and the dog ran far it was good we see".split()
    for name, n in (("train.txt", 30000), ("val.txt", 4000)):
        with open(f"{tmp}/{name}", "w") as f:
            f.write("".join(random.choice(words) + random.choice("  .\n") for _ in range(n // 4)))
    sets = ["--set", f"train={tmp}/train.txt", "--set", f"val={tmp}/val.txt", "--set", f"out_dir={tmp}/run"]
    subprocess.run([BIN, "train", "--config", f"{ROOT}/configs/tiny.ini", "--quiet", "--set",
                    "max_steps=6", "--sample-tokens", "0"] + sets, check=True)
    ckpt = f"{tmp}/run/checkpoint.safetensors"
    tensors, meta = read_safetensors(ckpt)
    cfg = json.loads(meta["config"])
    shapes = expected_shapes(cfg)
    for name, shape in shapes.items():
        assert name in tensors, f"missing {name}"
        assert tensors[name][0] == "F32" and tensors[name][1] == shape, (name, tensors[name][:2])
        assert f"opt.m.{name}" in tensors and f"opt.v.{name}" in tensors, name
    assert meta["step"] == "6", meta["step"]
    checked = ["plain JSON reader"]
    if not check_checksums(ckpt):
        print("note: libxxhash not loadable from Python; the checksums were not recomputed")
    try:
        from safetensors.numpy import load_file
        lib = load_file(ckpt)
        for name in shapes:
            assert list(lib[name].shape) == shapes[name]
            assert list(lib[name].ravel()[:8]) == tensors[name][2][:8], name
        checked.append("safetensors.numpy")
    except ImportError:
        print("note: Python safetensors not installed; checked with the plain reader only")

    # the other direction: a file catchat did not write
    foreign = {}
    for i, name in enumerate(reversed(list(shapes))):
        vals = tensors[name][2]
        if i % 2:
            raw = b"".join(struct.pack("<f", v)[2:] for v in vals)  # BF16: top half (truncation)
            foreign[name] = ("BF16", shapes[name], raw)
        else:
            foreign[name] = ("F16", shapes[name], struct.pack(f"<{len(vals)}e", *vals))
    foreign["some.other.tensor"] = ("I32", [2], struct.pack("<2i", 1, 2))
    write_safetensors(f"{tmp}/foreign.safetensors", foreign)
    cfg_args = ["--config", f"{ROOT}/configs/tiny.ini"]
    ref = evaluate(ckpt, tmp, [])
    got = evaluate(f"{tmp}/foreign.safetensors", tmp, cfg_args)
    assert abs(got - ref) < 2e-2 * ref, (got, ref)
    print(f"interop: loaded by {' and '.join(checked)}; foreign F16/BF16 file evaluates to "
          f"{got:.5f} vs {ref:.5f}")
    print("2 passed, 0 failed")


if __name__ == "__main__":
    main()
