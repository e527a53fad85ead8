#!/usr/bin/env python3
"""Checks Tandem's example GPT and LLaMA against PyTorch, the outside reference.

    build/venv/bin/python tests/ir/torch_parity.py DIR

DIR holds one folder per case, written by torch_parity_export (see
tests/ir/torch_parity_export.cc): manifest.txt, tokens/labels, Tandem's
initial parameters, loss, gradients and parameters after N Adam steps, as
.npy files. This script builds the same model functionally in PyTorch (the
GPT's weights are [in, out], used as x @ W + b; the LLaMA's carry Hugging
Face's names and nn.Linear's [out, in] layout), loads the exact same weights,
and compares:
  - the loss and every parameter gradient at the state before each of the
    N Adam steps (Tandem's initial parameters, then its parameters after
    steps 1..N-1): the model, checked at N points;
  - every parameter after each of N steps of torch.optim.Adam (same lr,
    betas, eps) fed Tandem's gradient of that step, against Tandem's
    parameters after that step (so after N = 3 steps too): the optimizer.
Feeding Tandem's gradients keeps the Adam comparison well-conditioned:
free-running fp32 Adam with eps=1e-8 amplifies rounding-level gradient
differences of near-zero gradients into O(lr) steps (torch fp32 against
torch fp64 drifts ~3e-3 relative in 3 steps on this model), so a
free-running comparison is printed for the record but not gated.
Each tensor passes when   max|tandem - torch| / max(max|torch|, 1e-30) <= 1e-5
(the largest absolute difference, relative to the largest magnitude of the
PyTorch tensor). It prints one row per tensor and exits 1 naming every tensor
that does not pass. A missing torch is a failure, not a skip.
"""
import json
import math
import os
import struct
import sys

# The benchmarks' PyTorch helpers (tools/bench/torch_common.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench"))
from torch_common import blas_kind, blas_libraries  # noqa: E402

TOLERANCE = 1e-5
TINY = 1e-30

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as error:
    print(f"torch_parity: FAIL: {sys.executable} cannot import torch/numpy ({error}).\n"
          "Run it with the Python environment tools/setup.sh makes (build/venv/bin/python; "
          "tools/python/make_venv.sh build/venv makes it alone).", file=sys.stderr)
    sys.exit(1)


def blas_in_use():
    """The BLAS torch's matmuls use, and the CPU BLAS libraries this process
    loaded (after one matmul)."""
    a = torch.ones(8, 8)
    _ = a @ a
    libraries = blas_libraries()
    return blas_kind(torch, libraries), libraries


def read_safetensors(path):
    """The tensors of a safetensors file, read by hand (Debian ships no
    safetensors module): 8-byte little-endian header length, JSON header,
    then each tensor's little-endian bytes at its data_offsets."""
    dtypes = {"F32": np.float32, "I32": np.int32}
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtypes[entry["dtype"]]).reshape(entry["shape"])
    return tensors


def number_or_text(value):
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def read_manifest(case_dir):
    config, adam, params = {}, {}, []
    with open(os.path.join(case_dir, "manifest.txt")) as manifest:
        for line in manifest:
            kind, *fields = line.split()
            if kind == "param":
                params.append(fields[0])
                continue
            values = dict(field.split("=", 1) for field in fields)
            if kind == "config":
                config = {key: number_or_text(value) for key, value in values.items()}
            elif kind == "adam":
                adam = {key: float(value) for key, value in values.items()}
                adam["steps"] = int(adam["steps"])
    return config, adam, params


def gpt_loss(p, tokens, labels, c):
    """The computation of examples/models/gpt.cc, op for op."""
    batch, seq = tokens.shape
    d, heads, vocab = c["model_dim"], c["num_heads"], c["vocab_size"]
    head_dim = d // heads

    def layer_norm(x, name):
        return F.layer_norm(x, (d,), p[name + ".g"], p[name + ".b"], eps=1e-5)

    def split_heads(x):  # [B, T, D] -> [B, H, T, D/H]
        return x.reshape(batch, seq, heads, head_dim).permute(0, 2, 1, 3)

    causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
    x = F.embedding(tokens, p["wte"]) + p["wpe"]
    for layer in range(c["num_layers"]):
        h = f"h{layer}"
        qkv = layer_norm(x, h + ".ln1") @ p[h + ".attn.qkv.w"] + p[h + ".attn.qkv.b"]
        q = split_heads(qkv[..., 0:d])
        k = split_heads(qkv[..., d:2 * d])
        v = split_heads(qkv[..., 2 * d:3 * d])
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        scores = scores.masked_fill(causal, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        merged = attn.permute(0, 2, 1, 3).reshape(batch, seq, d)
        x = x + (merged @ p[h + ".attn.proj.w"] + p[h + ".attn.proj.b"])
        fc = layer_norm(x, h + ".ln2") @ p[h + ".mlp.fc.w"] + p[h + ".mlp.fc.b"]
        x = x + (F.gelu(fc, approximate="tanh") @ p[h + ".mlp.proj.w"] + p[h + ".mlp.proj.b"])
    x = layer_norm(x, "lnf")
    logits = x @ (p["wte"] if c["tied_head"] else p["head.w"]).t()
    return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))


def llama_loss(p, tokens, labels, c):
    """The computation of examples/models/llama.cc, written as Hugging Face's
    LlamaForCausalLM computes it (RMSNorm in f32, rotate_half rotary,
    repeat_kv for grouped-query attention, SwiGLU, no biases)."""
    batch, seq = tokens.shape
    d, heads, kv_heads, vocab = c["model_dim"], c["num_heads"], c["num_kv_heads"], c["vocab_size"]
    head_dim = d // heads

    def rms_norm(x, name):
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + c["norm_eps"]) * p[name + ".weight"]

    def linear(x, name):
        return x @ p[name + ".weight"].t()

    inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(torch.arange(seq).float(), inv_freq)
    angles = torch.cat((freqs, freqs), dim=-1)
    cos, sin = angles.cos(), angles.sin()

    def rotate_half(x):
        return torch.cat((-x[..., head_dim // 2:], x[..., :head_dim // 2]), dim=-1)

    def rope(x):
        return x * cos + rotate_half(x) * sin

    def heads_of(x, count):  # [B, T, count * hd] -> [B, count, T, hd]
        return x.reshape(batch, seq, count, head_dim).transpose(1, 2)

    causal = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
    x = F.embedding(tokens, p["model.embed_tokens.weight"])
    for layer in range(c["num_layers"]):
        pre = f"model.layers.{layer}."
        h = rms_norm(x, pre + "input_layernorm")
        q = rope(heads_of(linear(h, pre + "self_attn.q_proj"), heads))
        k = rope(heads_of(linear(h, pre + "self_attn.k_proj"), kv_heads))
        v = heads_of(linear(h, pre + "self_attn.v_proj"), kv_heads)
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
        attn = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1) @ v
        x = x + linear(attn.transpose(1, 2).reshape(batch, seq, d), pre + "self_attn.o_proj")
        h = rms_norm(x, pre + "post_attention_layernorm")
        x = x + linear(F.silu(linear(h, pre + "mlp.gate_proj")) * linear(h, pre + "mlp.up_proj"), pre + "mlp.down_proj")
    x = rms_norm(x, "model.norm")
    logits = x @ (p["model.embed_tokens.weight"] if c["tied_head"] else p["lm_head.weight"]).t()
    return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))


MODELS = {"gpt": gpt_loss, "llama": llama_loss}


class Checker:
    """Compares tensors, prints a row each and remembers the failures."""

    def __init__(self):
        self.failures = []
        self.worst = {}
        self.notes = []
        print(f"{'case':10} {'kind':8} {'tensor':44} {'max|diff|':>11} {'max|torch|':>11} {'relative':>10}")

    def check(self, case, kind, name, tandem, reference):
        tandem = np.asarray(tandem, dtype=np.float64)
        reference = np.asarray(reference, dtype=np.float64)
        if tandem.shape != reference.shape:
            self.failures.append(f"{case}/{kind}/{name}: shape {tandem.shape} vs torch {reference.shape}")
            print(f"{case:10} {kind:8} {name:44} shape mismatch {tandem.shape} vs {reference.shape}  FAIL")
            return
        diff = float(np.max(np.abs(tandem - reference))) if tandem.size else 0.0
        scale = float(np.max(np.abs(reference))) if reference.size else 0.0
        relative = diff / max(scale, TINY)
        ok = relative <= TOLERANCE and np.all(np.isfinite(tandem))
        print(f"{case:10} {kind:8} {name:44} {diff:11.3e} {scale:11.3e} {relative:10.3e}"
              f"{'' if ok else '  FAIL'}")
        if not ok:
            self.failures.append(f"{case}/{kind}/{name}: relative {relative:.3e} > {TOLERANCE:g}")
        previous = self.worst.get(kind, (-1.0, ""))
        if relative > previous[0]:
            self.worst[kind] = (relative, f"{case}/{name}")


def check_case(case_dir, checker):
    case = os.path.basename(os.path.normpath(case_dir))
    config, adam, names = read_manifest(case_dir)
    steps = adam["steps"]
    model_loss = MODELS[config["model"]]

    def load(name):
        return np.load(os.path.join(case_dir, name + ".npy"))

    def as_params(prefix):
        return {n: torch.tensor(load(prefix + n), dtype=torch.float32, requires_grad=True) for n in names}

    tokens = torch.from_numpy(load("tokens").astype(np.int64))
    labels = torch.from_numpy(load("labels").astype(np.int64))

    # 0. The exported file: every parameter, bit for bit, under the model's
    #    names, and PyTorch's loss from it is Tandem's.
    exported = read_safetensors(os.path.join(case_dir, "init.safetensors"))
    if sorted(exported) != sorted(names):
        checker.failures.append(f"{case}: init.safetensors holds {sorted(exported)}, not the parameters {sorted(names)}")
    for n in names:
        if n in exported and not np.array_equal(exported[n], load("init." + n)):
            checker.failures.append(f"{case}: init.safetensors '{n}' differs from Tandem's initial parameter")
    if sorted(exported) == sorted(names):
        from_file = {n: torch.tensor(exported[n], dtype=torch.float32) for n in names}
        checker.check(case, "export", "loss", load("s1.loss"), model_loss(from_file, tokens, labels, config).detach().numpy())

    # 1. The model: PyTorch's loss and gradients at the state before each
    #    step (Tandem's initial parameters, then Tandem's after steps 1, 2).
    for k in range(1, steps + 1):
        params = as_params("init." if k == 1 else f"s{k - 1}.param.")
        loss = model_loss(params, tokens, labels, config)
        loss.backward()
        checker.check(case, f"loss@{k}", "loss", load(f"s{k}.loss"), loss.detach().numpy())
        for n in names:
            grad = params[n].grad if params[n].grad is not None else torch.zeros_like(params[n])
            checker.check(case, f"grad@{k}", n, load(f"s{k}.grad." + n), grad.numpy())

    # 2. The optimizer: torch.optim.Adam, fed Tandem's gradient at each step,
    #    against Tandem's parameters after that step (and so after 3 steps).
    params = as_params("init.")
    ordered = [params[n] for n in names]
    optimizer = torch.optim.Adam(ordered, lr=adam["lr"], betas=(adam["beta1"], adam["beta2"]), eps=adam["eps"])
    for k in range(1, steps + 1):
        for n in names:
            params[n].grad = torch.tensor(load(f"s{k}.grad." + n), dtype=torch.float32)
        optimizer.step()
        for n in names:
            checker.check(case, f"adam@{k}", n, load(f"s{k}.param." + n), params[n].detach().numpy())

    # 3. Informational, not gated: PyTorch training on its own for 3 steps.
    #    Adam's first steps move each weight by about lr * g / (|g| + eps),
    #    which for |g| near eps turns a rounding-level gradient difference
    #    into an O(lr) step, so two correct fp32 implementations (even torch
    #    fp32 vs torch fp64) drift apart by ~1e-3 relative here.
    params = as_params("init.")
    optimizer = torch.optim.Adam([params[n] for n in names], lr=adam["lr"], betas=(adam["beta1"], adam["beta2"]),
                                 eps=adam["eps"])
    for _ in range(steps):
        optimizer.zero_grad()
        model_loss(params, tokens, labels, config).backward()
        optimizer.step()
    drift = max((float(np.max(np.abs(load(f"s{steps}.param." + n) - params[n].detach().numpy())))
                 / max(float(np.max(np.abs(params[n].detach().numpy()))), TINY), n) for n in names)
    checker.notes.append(f"{case}: free-running torch vs Tandem after {steps} Adam steps (not gated): "
                         f"worst relative {drift[0]:.3e} ({drift[1]})")


def main():
    if len(sys.argv) != 2:
        print("usage: torch_parity.py DIR", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    print(f"torch {torch.__version__} from {os.path.dirname(torch.__file__)}")
    kind, libraries = blas_in_use()
    print(f"torch BLAS: {kind}; CPU BLAS libraries loaded: {', '.join(libraries) or 'none'}")
    root = sys.argv[1]
    cases = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "manifest.txt")))
    if not cases:
        print(f"torch_parity: FAIL: no case folders (with manifest.txt) under {root}", file=sys.stderr)
        return 1
    checker = Checker()
    for case in cases:
        check_case(os.path.join(root, case), checker)
    print(f"tolerance: max|tandem - torch| / max|torch| <= {TOLERANCE:g} per tensor")
    for kind, (relative, where) in checker.worst.items():
        print(f"worst {kind:8}: {relative:.3e} ({where})")
    for note in checker.notes:
        print(note)
    if checker.failures:
        print("torch_parity: FAIL:\n  " + "\n  ".join(checker.failures), file=sys.stderr)
        return 1
    print(f"torch_parity: PASS ({', '.join(cases)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
