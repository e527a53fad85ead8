"""The peers of `tandem bench peers`: the same model, weights and batch as
Tandem's, trained one step at a time by PyTorch 2 (eager, torch.compile,
torch.distributed.pipelining on gloo) or by JAX (jit), on the CPU.

Run by `tandem bench peers` with the Python environment build/venv. The
model is a Hugging Face directory Tandem wrote (`examples/hugging_face.h`,
its initial parameters), read here by name into each framework's own
definition of GPT-2 or LLaMA (the math of examples/models/*.cc, which
tests/tools/hugging_face_round_trip_test.py checks against transformers);
the batch is a safetensors file of "tokens" and "labels" [M, B, T]. Each run
prints one JSON line: the median step time, the first step's loss (mean over
its microbatches), the parameter count, the peak resident memory per
process, and the framework's version.
"""
import argparse
import json
import math
import os
import resource
import socket
import sys
import tempfile
import time


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def read_model(directory):
    from safetensors.numpy import load_file
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    weights = load_file(os.path.join(directory, "model.safetensors"))
    return config, weights


def layer_split(layers, stages):
    """The blocks of each stage: as even as possible, earlier stages one more."""
    base, extra = divmod(layers, stages)
    bounds, start = [], 0
    for s in range(stages):
        end = start + base + (1 if s < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


# -- PyTorch ---------------------------------------------------------------

def torch_model(config, weights, first, last, blocks):
    """A stage of the model as a torch module: the embedding on the first,
    blocks [blocks[0], blocks[1]), the final norm and head on the last."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    gpt = config["model_type"] == "gpt2"
    tied = config.get("tie_word_embeddings", gpt)

    def param(name):
        return nn.Parameter(torch.from_numpy(weights[name].copy()))

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = nn.ParameterDict()
            names = []
            if first:
                names += ["transformer.wte.weight", "transformer.wpe.weight"] if gpt else ["model.embed_tokens.weight"]
            for layer in range(*blocks):
                prefix = f"transformer.h.{layer}." if gpt else f"model.layers.{layer}."
                names += [n for n in weights if n.startswith(prefix)]
            if last:
                names += ["transformer.ln_f.weight", "transformer.ln_f.bias"] if gpt else ["model.norm.weight"]
                head = ("transformer.wte.weight" if gpt else "model.embed_tokens.weight") if tied else "lm_head.weight"
                self.copied = 0
                if head not in names:
                    # A tied head on another stage than the embedding: its
                    # own copy (not synchronised: timing is what is asked).
                    names.append(head)
                    self.copied = weights[head].size if tied else 0
                self.head = head
            for name in names:
                self.p[name.replace(".", "/")] = param(name)

        def w(self, name):
            return self.p[name.replace(".", "/")]

        def forward(self, x):
            if first:
                if gpt:
                    x = F.embedding(x, self.w("transformer.wte.weight")) + self.w("transformer.wpe.weight")[:x.shape[1]]
                else:
                    x = F.embedding(x, self.w("model.embed_tokens.weight"))
            for layer in range(*blocks):
                x = self.gpt_block(x, layer) if gpt else self.llama_block(x, layer)
            if last:
                if gpt:
                    x = F.layer_norm(x, (x.shape[-1],), self.w("transformer.ln_f.weight"),
                                     self.w("transformer.ln_f.bias"), 1e-5)
                else:
                    x = self.rms(x, "model.norm.weight")
                x = x @ self.w(self.head).t()
            return x

        def gpt_block(self, x, layer):
            p = f"transformer.h.{layer}."
            b, t, d = x.shape
            heads = config["n_head"]
            h = F.layer_norm(x, (d,), self.w(p + "ln_1.weight"), self.w(p + "ln_1.bias"), 1e-5)
            qkv = h @ self.w(p + "attn.c_attn.weight") + self.w(p + "attn.c_attn.bias")
            q, k, v = (y.reshape(b, t, heads, d // heads).transpose(1, 2) for y in qkv.split(d, dim=-1))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + a @ self.w(p + "attn.c_proj.weight") + self.w(p + "attn.c_proj.bias")
            h = F.layer_norm(x, (d,), self.w(p + "ln_2.weight"), self.w(p + "ln_2.bias"), 1e-5)
            h = F.gelu(h @ self.w(p + "mlp.c_fc.weight") + self.w(p + "mlp.c_fc.bias"), approximate="tanh")
            return x + h @ self.w(p + "mlp.c_proj.weight") + self.w(p + "mlp.c_proj.bias")

        def rms(self, x, name):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config["rms_norm_eps"]) * self.w(name)

        def llama_block(self, x, layer):
            p = f"model.layers.{layer}."
            b, t, d = x.shape
            heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
            hd = d // heads
            theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", 10000.0))
            inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
            angles = torch.outer(torch.arange(t).float(), inv)
            angles = torch.cat((angles, angles), dim=-1)
            cos, sin = angles.cos(), angles.sin()

            def rope(y):
                return y * cos + torch.cat((-y[..., hd // 2:], y[..., :hd // 2]), dim=-1) * sin

            h = self.rms(x, p + "input_layernorm.weight")
            q = rope((h @ self.w(p + "self_attn.q_proj.weight").t()).reshape(b, t, heads, hd).transpose(1, 2))
            k = rope((h @ self.w(p + "self_attn.k_proj.weight").t()).reshape(b, t, kv, hd).transpose(1, 2))
            v = (h @ self.w(p + "self_attn.v_proj.weight").t()).reshape(b, t, kv, hd).transpose(1, 2)
            k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + a @ self.w(p + "self_attn.o_proj.weight").t()
            h = self.rms(x, p + "post_attention_layernorm.weight")
            g = F.silu(h @ self.w(p + "mlp.gate_proj.weight").t()) * (h @ self.w(p + "mlp.up_proj.weight").t())
            return x + g @ self.w(p + "mlp.down_proj.weight").t()

    return Stage()


def layers_of(config):
    return config["n_layer"] if config["model_type"] == "gpt2" else config["num_hidden_layers"]


def torch_single(args, config, weights, batch, compiled):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    model = torch_model(config, weights, True, True, (0, layers_of(config)))
    parameters = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(model) if compiled else model
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    tokens, labels = (torch.from_numpy(batch[k].astype("int64")) for k in ("tokens", "labels"))
    microbatches = tokens.shape[0]

    def step():
        optimizer.zero_grad(set_to_none=True)
        losses = []
        for m in range(microbatches):
            logits = step_model(tokens[m])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[m].reshape(-1))
            (loss / microbatches).backward()
            losses.append(loss.item())
        optimizer.step()
        return sum(losses) / len(losses)

    start = time.perf_counter()
    first_loss = step()  # the warm-up (and torch.compile's compilation)
    warmup = time.perf_counter() - start
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"step_ms": 1000 * sorted(times)[len(times) // 2], "first_loss": first_loss, "parameters": parameters,
            "peak_rss_mb": peak_rss_mb(), "warmup_s": warmup, "version": f"torch {torch.__version__}"}


SCHEDULES = {"gpipe": ("ScheduleGPipe", 1), "1f1b": ("Schedule1F1B", 1),
             "interleaved-1f1b": ("ScheduleInterleaved1F1B", 2),
             "interleaved-zero-bubble": ("ScheduleInterleavedZeroBubble", 2),
             "zbv-zero-bubble": ("ScheduleZBVZeroBubble", 2)}


def pipelining_rank(rank, args, port, out_dir):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed import pipelining
    torch.set_num_threads(max(1, args.threads // args.actors))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.actors)
    config, weights = read_model(args.model)
    from safetensors.numpy import load_file
    batch = load_file(args.batch)
    name, per_rank = SCHEDULES[args.schedule]
    stages_total = args.actors * per_rank
    bounds = layer_split(layers_of(config), stages_total)
    if per_rank == 1 and args.stage_layers:
        # One stage per process: the split Tandem's pipeline uses.
        counts = [int(n) for n in args.stage_layers.split(",")]
        if len(counts) != stages_total or sum(counts) != layers_of(config):
            raise ValueError(f"--stage-layers {args.stage_layers} does not split {layers_of(config)} layers "
                             f"over {stages_total} stages")
        starts = [sum(counts[:s]) for s in range(stages_total)]
        bounds = [(start, start + n) for start, n in zip(starts, counts)]
    if per_rank == 1:
        mine = [rank]
    elif args.schedule == "zbv-zero-bubble":
        mine = [rank, stages_total - 1 - rank]  # the V: down, then back up
    else:
        mine = [rank, rank + args.actors]
    stages, modules = [], []
    for s in mine:
        module = torch_model(config, weights, s == 0, s == stages_total - 1, bounds[s])
        modules.append(module)
        stages.append(pipelining.PipelineStage(module, s, stages_total, torch.device("cpu")))
    m, b, t = batch["tokens"].shape
    tokens = torch.from_numpy(batch["tokens"].astype("int64")).reshape(m * b, t)
    labels = torch.from_numpy(batch["labels"].astype("int64")).reshape(m * b, t)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    schedule_class = getattr(pipelining, name)
    schedule = schedule_class(stages if per_rank > 1 else stages[0], n_microbatches=m, loss_fn=loss_fn)
    parameters = [p for module in modules for p in module.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=args.lr)

    def step():
        optimizer.zero_grad(set_to_none=True)
        losses = []
        inputs = (tokens,) if 0 in mine else ()
        kwargs = {"target": labels, "losses": losses} if stages_total - 1 in mine else {}
        schedule.step(*inputs, **kwargs)
        optimizer.step()
        return float(np.mean([l.item() for l in losses])) if losses else None

    first_loss = step()
    times = []
    for _ in range(args.steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        dist.barrier()
        times.append(time.perf_counter() - start)
    result = {"rank": rank, "step_ms": 1000 * sorted(times)[len(times) // 2], "first_loss": first_loss,
              "parameters": sum(p.numel() for p in parameters) - sum(getattr(m, "copied", 0) for m in modules),
              "peak_rss_mb": peak_rss_mb()}
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


def torch_pipelining(args, config):
    import torch
    import torch.multiprocessing as mp
    if layers_of(config) < args.actors * SCHEDULES[args.schedule][1]:
        raise ValueError(f"{layers_of(config)} layers cannot fill {args.actors * SCHEDULES[args.schedule][1]} stages")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(pipelining_rank, args=(args, port, out_dir), nprocs=args.actors, join=True)
        ranks = []
        for rank in range(args.actors):
            with open(os.path.join(out_dir, f"{rank}.json")) as f:
                ranks.append(json.load(f))
    first_loss = next(r["first_loss"] for r in ranks if r["first_loss"] is not None)
    return {"step_ms": max(r["step_ms"] for r in ranks), "first_loss": first_loss,
            "parameters": sum(r["parameters"] for r in ranks), "peak_rss_mb": max(r["peak_rss_mb"] for r in ranks),
            "version": f"torch {torch.__version__}"}


# -- JAX -------------------------------------------------------------------

def jax_single(args, config, weights, batch):
    if args.threads == 1:
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    import jax
    import jax.numpy as jnp
    gpt = config["model_type"] == "gpt2"
    tied = config.get("tie_word_embeddings", gpt)
    params = {k: jnp.asarray(v) for k, v in weights.items() if not (tied and k == "lm_head.weight")}
    layers = layers_of(config)

    def layer_norm(x, g, b):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * g + b

    def rms(x, g):
        return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + config["rms_norm_eps"]) * g

    def attention(q, k, v):
        t, hd = q.shape[2], q.shape[3]
        scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(hd)
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
        return jax.nn.softmax(scores, axis=-1) @ v

    def logits_of(p, tokens):
        b, t = tokens.shape
        if gpt:
            d, heads = config["n_embd"], config["n_head"]
            x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][:t]
            for layer in range(layers):
                w = lambda n: p[f"transformer.h.{layer}.{n}"]
                h = layer_norm(x, w("ln_1.weight"), w("ln_1.bias"))
                qkv = h @ w("attn.c_attn.weight") + w("attn.c_attn.bias")
                q, k, v = (y.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3) for y in jnp.split(qkv, 3, -1))
                a = attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, t, d)
                x = x + a @ w("attn.c_proj.weight") + w("attn.c_proj.bias")
                h = layer_norm(x, w("ln_2.weight"), w("ln_2.bias"))
                h = jax.nn.gelu(h @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"), approximate=True)
                x = x + h @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
            x = layer_norm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"])
            head = p["transformer.wte.weight"] if tied else p["lm_head.weight"]
        else:
            d, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
            hd = d // heads
            theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", 10000.0))
            inv = 1.0 / (theta ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd))
            angles = jnp.outer(jnp.arange(t, dtype=jnp.float32), inv)
            angles = jnp.concatenate((angles, angles), -1)
            cos, sin = jnp.cos(angles), jnp.sin(angles)
            rope = lambda y: y * cos + jnp.concatenate((-y[..., hd // 2:], y[..., :hd // 2]), -1) * sin
            x = p["model.embed_tokens.weight"][tokens]
            for layer in range(layers):
                w = lambda n: p[f"model.layers.{layer}.{n}"]
                h = rms(x, w("input_layernorm.weight"))
                q = rope((h @ w("self_attn.q_proj.weight").T).reshape(b, t, heads, hd).transpose(0, 2, 1, 3))
                k = rope((h @ w("self_attn.k_proj.weight").T).reshape(b, t, kv, hd).transpose(0, 2, 1, 3))
                v = (h @ w("self_attn.v_proj.weight").T).reshape(b, t, kv, hd).transpose(0, 2, 1, 3)
                k, v = jnp.repeat(k, heads // kv, axis=1), jnp.repeat(v, heads // kv, axis=1)
                a = attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, t, d)
                x = x + a @ w("self_attn.o_proj.weight").T
                h = rms(x, w("post_attention_layernorm.weight"))
                x = x + (jax.nn.silu(h @ w("mlp.gate_proj.weight").T) * (h @ w("mlp.up_proj.weight").T)) @ \
                    w("mlp.down_proj.weight").T
            x = rms(x, p["model.norm.weight"])
            head = p["model.embed_tokens.weight"] if tied else p["lm_head.weight"]
        return x @ head.T

    def loss_of(p, tokens, labels):
        logits = logits_of(p, tokens)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, labels[..., None], axis=-1).mean()

    tokens, labels = jnp.asarray(batch["tokens"]), jnp.asarray(batch["labels"])
    microbatches = tokens.shape[0]
    lr, b1, b2, eps = args.lr, 0.9, 0.999, 1e-8

    @jax.jit
    def step(p, m, v, count):
        total, grads = 0.0, jax.tree_util.tree_map(jnp.zeros_like, p)
        for i in range(microbatches):
            loss, g = jax.value_and_grad(loss_of)(p, tokens[i], labels[i])
            total += loss
            grads = jax.tree_util.tree_map(lambda a, c: a + c / microbatches, grads, g)
        count = count + 1
        m = jax.tree_util.tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        p = jax.tree_util.tree_map(
            lambda p_, m_, v_: p_ - lr * (m_ / (1 - b1 ** count)) / (jnp.sqrt(v_ / (1 - b2 ** count)) + eps), p, m, v)
        return p, m, v, count, total / microbatches

    m = jax.tree_util.tree_map(jnp.zeros_like, params)
    v = jax.tree_util.tree_map(jnp.zeros_like, params)
    count = jnp.zeros((), jnp.float32)
    start = time.perf_counter()
    params, m, v, count, first_loss = step(params, m, v, count)
    first_loss = float(first_loss)
    warmup = time.perf_counter() - start
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        params, m, v, count, loss = step(params, m, v, count)
        loss.block_until_ready()
        times.append(time.perf_counter() - start)
    parameters = sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
    return {"step_ms": 1000 * sorted(times)[len(times) // 2], "first_loss": first_loss, "parameters": parameters,
            "peak_rss_mb": peak_rss_mb(), "warmup_s": warmup, "version": f"jax {jax.__version__}"}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer", required=True, choices=["eager", "compile", "pipelining", "jax"])
    parser.add_argument("--schedule", default="1f1b", choices=sorted(SCHEDULES))
    parser.add_argument("--model", required=True, help="the Hugging Face directory of the initial parameters")
    parser.add_argument("--batch", required=True, help="safetensors of tokens and labels [M, B, T]")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--stage-layers", default="",
                        help="layers per stage, e.g. 9,3, for schedules of one stage per process "
                             "(default: as even as possible)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()
    try:
        from safetensors.numpy import load_file
        config, weights = read_model(args.model)
        batch = load_file(args.batch)
        if args.peer == "jax":
            result = jax_single(args, config, weights, batch)
        elif args.peer == "pipelining":
            del weights
            result = torch_pipelining(args, config)
        else:
            result = torch_single(args, config, weights, batch, compiled=args.peer == "compile")
    except Exception as error:  # reported in the table, not a crash of the benchmark
        result = {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
