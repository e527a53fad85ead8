#!/usr/bin/env python3
"""PyTorch side of `tandem bench block`: one GPT decoder block, fwd+bwd (eager).

    build/venv/bin/python tools/bench/torch_block.py --dim 256 --seq 128 --batch 8 \
        --heads 4 --threads 1 --repeats 10 [--device cuda [--tf32 | --bf16] [--sdpa]]

Builds the pre-norm block of examples/models/gpt.cc (x + attn(ln1(x)), then
x + mlp(ln2(x)); causal multi-head attention; tanh-GELU MLP of width 4*dim)
with explicit [in, out] weights, and times loss.backward() of
loss = mean(block(x) * probe), x requiring grad like a block inside a
network. Warms up once and reports the median of --repeats in one JSON line
on stdout, with the BLAS the process actually uses (torch_common.blas_kind:
MKL inside PyPI's torch; a generic-BLAS build's loaded library).
With --device cuda the block runs on the GPU (TF32 off, as Tandem's f32
path), each timed run ends with torch.cuda.synchronize(), and --bf16 runs
the matmuls under autocast to bfloat16 (f32 accumulation), like Tandem's
cuda+bf16 device; --tf32 allows TF32 matmuls, like cuda+tf32. --sdpa uses
the fused F.scaled_dot_product_attention (FlashAttention or cuDNN where
torch picks them) instead of the explicit softmax, which materialises the
T x T scores.
"""
import argparse
import contextlib
import json
import statistics
import sys
import time

from torch_common import blas_kind, blas_libraries, causal_attention, import_torch


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 matmuls (autocast); cuda only")
    parser.add_argument("--tf32", action="store_true", help="TF32 matmuls; cuda only")
    parser.add_argument("--sdpa", action="store_true", help="fused attention (torch 2.0 or later)")
    return parser.parse_args()


def main():
    args = parse_args()
    torch = import_torch(args.threads)
    if torch is None:
        return 1
    import torch.nn.functional as F
    device = torch.device(args.device)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print(json.dumps({"error": "torch sees no CUDA device"}))
            return 1
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    elif args.bf16 or args.tf32:
        print(json.dumps({"error": "--bf16 and --tf32 need --device cuda"}))
        return 2
    if args.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        print(json.dumps({"error": f"torch {torch.__version__} has no scaled_dot_product_attention (2.0 or later)"}))
        return 2
    b, t, d, h = args.batch, args.seq, args.dim, args.heads
    if d % h:
        print(json.dumps({"error": f"--dim {d} is not divisible by --heads {h}"}))
        return 2
    hd = d // h

    def param(*shape, std=0.02):
        return (torch.randn(*shape) * std).to(device).requires_grad_()

    def ones(n):
        return torch.ones(n, device=device, requires_grad=True)

    def zeros(n):
        return torch.zeros(n, device=device, requires_grad=True)

    p = {
        "ln1.g": ones(d), "ln1.b": zeros(d),
        "qkv.w": param(d, 3 * d), "qkv.b": zeros(3 * d),
        "proj.w": param(d, d), "proj.b": zeros(d),
        "ln2.g": ones(d), "ln2.b": zeros(d),
        "fc.w": param(d, 4 * d), "fc.b": zeros(4 * d),
        "mlp.w": param(4 * d, d), "mlp.b": zeros(d),
    }
    x = torch.randn(b, t, d).to(device).requires_grad_()
    probe = torch.randn(b, t, d).to(device)
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=device), diagonal=1)

    def split_heads(y):
        return y.reshape(b, t, h, hd).permute(0, 2, 1, 3)

    def block(x):
        qkv = F.layer_norm(x, (d,), p["ln1.g"], p["ln1.b"], eps=1e-5) @ p["qkv.w"] + p["qkv.b"]
        q, k, v = (split_heads(qkv[..., i * d:(i + 1) * d]) for i in range(3))
        attended = causal_attention(torch, q, k, v, causal, args.sdpa)
        heads = attended.permute(0, 2, 1, 3).reshape(b, t, d)
        x = x + (heads @ p["proj.w"] + p["proj.b"])
        fc = F.layer_norm(x, (d,), p["ln2.g"], p["ln2.b"], eps=1e-5) @ p["fc.w"] + p["fc.b"]
        return x + (F.gelu(fc, approximate="tanh") @ p["mlp.w"] + p["mlp.b"])

    def step():
        for tensor in [x, *p.values()]:
            tensor.grad = None
        # (torch.autocast("cuda") asserts in CPU-only builds even when disabled.)
        precision = torch.autocast("cuda", dtype=torch.bfloat16) if args.bf16 else contextlib.nullcontext()
        with precision:
            loss = (block(x) * probe).mean()
        loss.backward()
        if args.device == "cuda":
            torch.cuda.synchronize()

    step()  # warm-up
    times_ms = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        times_ms.append((time.perf_counter() - start) * 1e3)
    libraries = blas_libraries()
    build_blas = ""
    for field in torch.__config__.show().replace("\n", ",").split(","):
        if "BLAS_INFO" in field:
            build_blas = field.strip().split("=", 1)[-1]
    print(json.dumps({
        "torch_ms": statistics.median(times_ms),
        "min_ms": min(times_ms),
        "times_ms": times_ms,
        "threads": args.threads,
        "device": args.device + ("+bf16" if args.bf16 else "+tf32" if args.tf32 else ""),
        "sdpa": args.sdpa,
        "torch_version": torch.__version__,
        "blas": blas_kind(torch, libraries),
        "blas_libraries": libraries,
        "blas_build_info": build_blas,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
