#!/usr/bin/env python3
"""The catchat model in PyTorch, built from nn.GRU layers, for moving weights
in and out of catchat:

    from catchat_torch import load_catchat, save_catchat, batch_loss
    model, config = load_catchat("runs/cpu/checkpoint.safetensors")   # any catchat checkpoint
    loss = batch_loss(model, x, y)                                    # y = -1: not scored
    save_catchat(model, "init.safetensors", config)                   # catchat train --init init.safetensors

It computes docs/model.md exactly (RMSNorm with its identity fallback and cap,
PyTorch GRU gate order, causal sliding-window attention, merge, classifier).
Tensor names map one to one: gru.{l}.weight_ih ↔ grus[l].weight_ih_l0, etc.
The safetensors reader/writer is plain Python.

A checkpoint's two checksums (data_xxh64, header_xxh64: docs/formats.md) are
verified on load as catchat verifies them, and a damaged file is refused
(ChecksumError, "checksum mismatch", naming the file and the damaged part);
a file without them (another tool's, save_catchat's) loads unchecked, as in
catchat. The hash comes from the xxhash module or libxxhash (scripts/xxh64.py);
where neither is installed, load_catchat(..., verify=False) or --no-verify
loads without the check.

From the shell, with the interpreter scripts/install_deps.sh set up (its venv
sees Debian's python3-torch):

   .venv/bin/python scripts/catchat_torch.py CKPT DATA [--batch-size B] [--seq-len T] [--no-verify]

prints the loss on the first batch of the text file DATA (catchat eval's first
batch: B windows of T bytes); B and T default to the checkpoint's
train.batch_size and model.seq_len. A file it cannot load is one line on
stderr and exit 1.
"""
import argparse, json, math, os, struct, sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# xxh64.py sits beside this file, whether it runs as a script or is imported from elsewhere
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xxh64 import XxhashMissing, xxh64_hex  # noqa: E402

DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2), "F64": (torch.float64, 8)}


class RMSNorm(nn.Module):
    def __init__(self, d, eps, floor, inv_max):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps, self.floor, self.inv_max = eps, floor, inv_max

    def forward(self, x):
        ms = x.pow(2).mean(-1, keepdim=True)
        ir = torch.clamp(torch.rsqrt(ms + self.eps), max=self.inv_max)
        ir = torch.where(ms <= self.floor, torch.ones_like(ir), ir)  # identity fallback
        return x * ir * self.weight


class CatchatModel(nn.Module):
    def __init__(self, m):
        super().__init__()
        V, D, L, self.H, self.W = m["vocab_size"], m["d_model"], m["n_layers"], m["n_heads"], m["ctx_window"]
        norm = lambda: RMSNorm(D, m["rms_eps"], m["rms_floor"], m["inv_rms_max"])
        self.embed = nn.Embedding(V, D)
        self.norms = nn.ModuleList(norm() for _ in range(L))
        self.grus = nn.ModuleList(nn.GRU(D, D, batch_first=True) for _ in range(L))
        self.ctx_norm, self.final_norm = norm(), norm()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.out = nn.Linear(D, D, bias=False)
        self.lm_head = nn.Linear(D, V, bias=False)

    def forward(self, x):
        B, T = x.shape
        u = self.embed(x)
        for norm, gru in zip(self.norms, self.grus):
            h, _ = gru(norm(u))
            u = u + h
        q, k, v = (t.view(B, T, self.H, -1).transpose(1, 2) for t in self.qkv(self.ctx_norm(u)).chunk(3, dim=-1))
        i = torch.arange(T, device=x.device)
        allowed = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - self.W)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        c = self.out((p @ v).transpose(1, 2).reshape(B, T, -1))
        return self.lm_head(self.final_norm(u + c))

    # catchat name -> (module attribute path) mapping
    def catchat_names(self):
        names = {"embed.weight": self.embed.weight, "ctx.norm.weight": self.ctx_norm.weight,
                 "ctx.qkv.weight": self.qkv.weight, "ctx.out.weight": self.out.weight,
                 "final_norm.weight": self.final_norm.weight, "lm_head.weight": self.lm_head.weight}
        for l, (n, g) in enumerate(zip(self.norms, self.grus)):
            names.update({f"gru.{l}.norm.weight": n.weight, f"gru.{l}.weight_ih": g.weight_ih_l0,
                          f"gru.{l}.weight_hh": g.weight_hh_l0, f"gru.{l}.bias_ih": g.bias_ih_l0,
                          f"gru.{l}.bias_hh": g.bias_hh_l0})
        return names


class ChecksumError(ValueError):
    """A stored checksum does not match the file: it is damaged."""


def _no_duplicates(pairs):
    # catchat's reader refuses a header with a key twice (JSON_REJECT_DUPLICATES)
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
    return dict(pairs)


def header_digest(header):
    """header_xxh64 of a parsed header, as src/safetensors.c's cc_st_header_digest:
    NUL-terminated fields, metadata then tensors, each sorted bytewise (strcmp)."""
    meta = header.get("__metadata__", {})
    fields = []
    for k in sorted(meta, key=lambda k: k.encode()):
        if k not in ("data_xxh64", "header_xxh64"):
            fields += ["m", k, meta[k]]
    for n in sorted((n for n in header if n != "__metadata__"), key=lambda n: n.encode()):
        e = header[n]
        # shape "a,b" ("" for a scalar), offsets "begin,end", in decimal
        fields += ["t", n, e["dtype"], ",".join(str(d) for d in e["shape"]), "%d,%d" % tuple(e["data_offsets"])]
    return xxh64_hex(b"".join(f.encode() + b"\0" for f in fields))


def verify_checksums(path, header, data):
    """Check each checksum the file stores, in catchat's order (the header's
    first); one it does not store is not checked, as in catchat."""
    meta = header.get("__metadata__", {})
    try:
        if "header_xxh64" in meta:
            have = header_digest(header)
            if meta["header_xxh64"] != have:
                raise ChecksumError(f"{path}: checksum mismatch: the header (metadata such as the step or the config, "
                                    f"or the tensor table) is damaged (stored xxh64 {meta['header_xxh64'][:16]}, "
                                    f"computed {have}); use an earlier checkpoint")
        _check_length(path, header, data)
        if "data_xxh64" in meta:
            have = xxh64_hex(data)
            if meta["data_xxh64"] != have:
                raise ChecksumError(f"{path}: checksum mismatch: the tensor data is damaged (stored xxh64 "
                                    f"{meta['data_xxh64'][:16]}, computed {have}); use an earlier checkpoint")
    except XxhashMissing as e:
        raise XxhashMissing(f"{path}: cannot verify its checksums: {e}; or pass --no-verify "
                            "(verify=False) to load it unchecked") from None


def _check_length(path, header, data):
    # tensor data past the end of a table the header vouches for: the file was cut short
    need = max((e["data_offsets"][1] for n, e in header.items() if n != "__metadata__"), default=0)
    if need > len(data):
        raise ValueError(f"{path} is truncated: its tensor data needs {need} bytes, it holds {len(data)}; the file "
                         "was cut short (a copy or a write that did not finish): use an earlier checkpoint")


def read_safetensors(path, verify=True):
    """Float tensors (as float32) by name, and the metadata; verify: check the stored checksums."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8]) if len(blob) >= 8 else (0,)
    if not 2 <= n <= len(blob) - 8 or blob[8:9] != b"{":
        raise ValueError(f"{path}: not a safetensors file (no JSON header after the length)")
    try:
        header = json.loads(blob[8:8 + n], object_pairs_hook=_no_duplicates)
    except ValueError as e:
        raise ValueError(f"{path}: header is not valid JSON ({e})") from None
    # the fields the checksum covers, of the types catchat's reader requires of them
    meta = header.get("__metadata__", {}) if isinstance(header, dict) else None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: header or its __metadata__ is not a JSON object")
    for k, v in meta.items():
        if not isinstance(v, str):
            raise ValueError(f"{path}: __metadata__ value '{k}' is not a string")
    ints = lambda v: isinstance(v, list) and all(type(i) is int for i in v)
    for name, e in header.items():
        if name != "__metadata__" and not (isinstance(e, dict) and isinstance(e.get("dtype"), str) and
                                           ints(e.get("shape")) and ints(e.get("data_offsets")) and
                                           len(e["data_offsets"]) == 2):
            raise ValueError(f"{path}: tensor '{name}': header entry is not {{dtype, shape, data_offsets}}")
    data = blob[8 + n:]
    if verify:
        verify_checksums(path, header, data)
    else:
        _check_length(path, header, data)
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        if e["dtype"] not in DTYPES:
            continue
        dt, _ = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:end]), dtype=dt).reshape(e["shape"]).float()
    return out, meta


def write_safetensors(path, tensors, meta):
    header, chunks, off = {"__metadata__": meta}, [], 0
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def load_catchat(path, config=None, verify=True):
    """Model (float32) and the config dict {section: {key: value}} from a checkpoint.
    verify: refuse a file whose stored checksums do not match (ChecksumError)."""
    tensors, meta = read_safetensors(path, verify)
    if config is None and "config" not in meta:
        raise KeyError(f"{path}: no stored config (__metadata__ 'config'): pass config=")
    cfg = config or json.loads(meta["config"])
    model = CatchatModel(cfg["model"])
    with torch.no_grad():
        for name, p in model.catchat_names().items():
            if name not in tensors:
                raise KeyError(f"{path}: missing tensor {name}")
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise ValueError(f"{path}: tensor {name} has shape {list(tensors[name].shape)}, need {list(p.shape)}")
            p.copy_(tensors[name])
    return model, cfg


def save_catchat(model, path, config):
    write_safetensors(path, model.catchat_names(), {"format": "catchat-v1", "config": json.dumps(config)})


def batch_loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-1)


def first_batch(data_path, B, T):
    """catchat eval's first batch of a text file: windows k·T .. k·T+T, k = 0..B-1."""
    raw = open(data_path, "rb").read()
    toks = torch.tensor(list(raw[:B * T + 1]), dtype=torch.long)
    x = torch.stack([toks[k * T:k * T + T] for k in range(B)])
    y = torch.stack([toks[k * T + 1:k * T + T + 1] for k in range(B)])
    return x, y


def main():
    ap = argparse.ArgumentParser(description="Loss of a catchat checkpoint on the first batch of a text file, "
                                             "computed by the PyTorch model.")
    ap.add_argument("ckpt", help="catchat checkpoint (safetensors)")
    ap.add_argument("data", help="text file, read as bytes (vocab 256)")
    ap.add_argument("--batch-size", type=int, default=None, help="B (default: the checkpoint's train.batch_size)")
    ap.add_argument("--seq-len", type=int, default=None, help="T (default: the checkpoint's model.seq_len)")
    ap.add_argument("--no-verify", action="store_true",
                    help="load without checking the checksums (where neither xxhash nor libxxhash is installed)")
    a = ap.parse_args()
    for opt, v in (("--batch-size", a.batch_size), ("--seq-len", a.seq_len)):
        if v is not None and v < 1:
            ap.error(f"{opt} must be at least 1 (got {v})")
    try:
        model, cfg = load_catchat(a.ckpt, verify=not a.no_verify)
    except (OSError, ValueError, KeyError, XxhashMissing) as e:
        # one line, no traceback: KeyError's str() would quote the message
        sys.exit(f"catchat_torch: {e.args[0] if isinstance(e, KeyError) else e}")
    B = a.batch_size or cfg["train"]["batch_size"]
    T = a.seq_len or cfg["model"]["seq_len"]
    with open(a.data, "rb") as f:
        n = len(f.read(B * T + 1))
    if n < B * T + 1:
        ap.error(f"{a.data}: {n} bytes, fewer than the {B * T + 1} that --batch-size {B} --seq-len {T} need")
    x, y = first_batch(a.data, B, T)
    with torch.no_grad():
        print(f"loss {batch_loss(model, x, y).item():.6f} on the first batch (B={B}, T={T}) of {a.data}")


if __name__ == "__main__":
    main()
