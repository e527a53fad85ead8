#!/usr/bin/env python3
"""PyTorch side of `tandem bench step`: one training step of the example GPT.

    build/venv/bin/python tools/bench/torch_gpt_step.py --dim 256 --heads 8 --seq 64 \
        --batch 4 --layers 4 --microbatches 4 --vocab 86 --threads 2 --repeats 5

The model of examples/models/gpt.cc, op for op: token and position
embeddings, pre-norm blocks (x + attn(ln1(x)), then x + mlp(ln2(x)); causal
multi-head attention; tanh-GELU MLP of width 4*dim), a final layer norm and
an untied LM head, cross-entropy. One step is what Tandem's reference step
is: forward and backward of each microbatch with the gradients summed over
them, then one Adam update. With --device cuda it runs on the GPU (--tf32:
TF32 matmuls; --sdpa: fused attention). Warms up once and reports the median of
--repeats in one JSON line on stdout, with the BLAS library the process
actually loaded.
"""
import argparse
import json
import statistics
import sys
import time

from torch_common import blas_kind, blas_libraries, causal_attention, import_torch


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("dim", 256), ("heads", 8), ("seq", 64), ("batch", 4), ("layers", 4),
                          ("microbatches", 4), ("vocab", 86), ("threads", 1), ("repeats", 5)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--tf32", action="store_true", help="cuda: TF32 matmuls")
    parser.add_argument("--sdpa", action="store_true",
                        help="fused attention (F.scaled_dot_product_attention) instead of the explicit softmax")
    return parser.parse_args()


def main():
    args = parse_args()
    torch = import_torch(args.threads)
    if torch is None:
        return 1
    import torch.nn.functional as F
    d, h, t, b, v = args.dim, args.heads, args.seq, args.batch, args.vocab
    if d % h:
        print(json.dumps({"error": f"--dim {d} is not divisible by --heads {h}"}))
        return 2
    hd = d // h
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "torch sees no CUDA device"}))
        return 1
    if args.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        print(json.dumps({"error": f"torch {torch.__version__} has no scaled_dot_product_attention (2.0 or later)"}))
        return 1
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32

    def param(*shape, std=0.02):
        return (torch.randn(*shape) * std).to(dev).requires_grad_()

    params = {"wte": param(v, d), "wpe": param(t, d), "lnf.g": torch.ones(d, device=dev, requires_grad=True),
              "lnf.b": torch.zeros(d, device=dev, requires_grad=True), "head.w": param(v, d)}
    for layer in range(args.layers):
        for name, shape in [("ln1.g", (d,)), ("ln1.b", (d,)), ("qkv.w", (d, 3 * d)), ("qkv.b", (3 * d,)),
                            ("proj.w", (d, d)), ("proj.b", (d,)), ("ln2.g", (d,)), ("ln2.b", (d,)),
                            ("fc.w", (d, 4 * d)), ("fc.b", (4 * d,)), ("mlp.w", (4 * d, d)), ("mlp.b", (d,))]:
            if name.endswith(".g"):
                tensor = torch.ones(*shape, device=dev, requires_grad=True)
            elif name.endswith(".b"):
                tensor = torch.zeros(*shape, device=dev, requires_grad=True)
            else:
                tensor = param(*shape)
            params[f"h{layer}.{name}"] = tensor
    causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=dev), diagonal=1)

    def split_heads(y):
        return y.reshape(b, t, h, hd).permute(0, 2, 1, 3)

    def loss_of(tokens, labels):
        p = params
        x = F.embedding(tokens, p["wte"]) + p["wpe"]
        for layer in range(args.layers):
            q_ = f"h{layer}."
            qkv = F.layer_norm(x, (d,), p[q_ + "ln1.g"], p[q_ + "ln1.b"], eps=1e-5) @ p[q_ + "qkv.w"] + p[q_ + "qkv.b"]
            q, k, w = (split_heads(qkv[..., i * d:(i + 1) * d]) for i in range(3))
            attended = causal_attention(torch, q, k, w, causal, args.sdpa)
            heads = attended.permute(0, 2, 1, 3).reshape(b, t, d)
            x = x + (heads @ p[q_ + "proj.w"] + p[q_ + "proj.b"])
            fc = F.layer_norm(x, (d,), p[q_ + "ln2.g"], p[q_ + "ln2.b"], eps=1e-5) @ p[q_ + "fc.w"] + p[q_ + "fc.b"]
            x = x + (F.gelu(fc, approximate="tanh") @ p[q_ + "mlp.w"] + p[q_ + "mlp.b"])
        x = F.layer_norm(x, (d,), p["lnf.g"], p["lnf.b"], eps=1e-5)
        return F.cross_entropy((x @ p["head.w"].t()).reshape(b * t, v), labels.reshape(b * t))

    optimizer = torch.optim.Adam(params.values(), lr=args.lr)
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, v, (b, t), generator=generator).to(dev),
                torch.randint(0, v, (b, t), generator=generator).to(dev)) for _ in range(args.microbatches)]

    def synchronize():
        if args.device == "cuda":
            torch.cuda.synchronize()

    def step():
        optimizer.zero_grad(set_to_none=True)
        for tokens, labels in batches:
            loss_of(tokens, labels).backward()  # gradients add up over the microbatches
        optimizer.step()

    step()  # warm-up
    synchronize()
    times_ms = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        synchronize()
        times_ms.append((time.perf_counter() - start) * 1e3)
    libraries = blas_libraries()
    print(json.dumps({
        "torch_ms": statistics.median(times_ms),
        "min_ms": min(times_ms),
        "times_ms": times_ms,
        "threads": args.threads,
        "device": args.device,
        "tf32": args.tf32,
        "sdpa": args.sdpa,
        "torch_version": torch.__version__,
        "blas": blas_kind(torch, libraries),
        "blas_libraries": libraries,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
