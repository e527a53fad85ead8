"""What the PyTorch sides of `tandem bench` share: pinning the thread count
before torch loads, and naming the BLAS the process really uses. PyPI's
torch (the environment tools/setup.sh makes) carries MKL inside
libtorch_cpu, which its build configuration names; a torch built against
the generic BLAS interface (Debian's) uses whatever library the system's
alternative points to: OpenBLAS, or the ~12x slower reference BLAS."""
import json
import math
import os
import sys


def import_torch(threads):
    """torch on `threads` threads, seeded with 0; None (after printing the
    error as the scripts' JSON line) when it cannot be imported. OpenBLAS
    reads its thread count when it loads, and torch.set_num_threads does not
    reach it in a generic-BLAS build: both are pinned before the import."""
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        import torch
    except ImportError as error:
        print(json.dumps({"error": f"{sys.executable} cannot import torch: {error}"}))
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return torch


def blas_libraries():
    """Real paths of the CPU BLAS libraries mapped into this process (not
    cuBLAS, which PyPI's torch maps whether or not a GPU computes)."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            name = os.path.basename(path)
            if "blas" in name and "cublas" not in name:
                found.add(os.path.realpath(path))
    return sorted(found)


def blas_kind(torch, libraries):
    """The BLAS torch's matmuls use: the one its build names (BLAS_INFO=mkl
    for PyPI's, linked in), else the library it loaded (a generic-BLAS
    build's; numpy's own OpenBLAS may be mapped too, so this is a guess)."""
    for setting in torch.__config__.show().replace(",", " ").split():
        if setting.startswith("BLAS_INFO=") and setting[len("BLAS_INFO="):] not in ("", "generic", "open"):
            return setting[len("BLAS_INFO="):]
    if any("openblas" in path for path in libraries):
        return "openblas"
    if any("blis" in path for path in libraries):
        return "blis"
    if any("mkl" in path for path in libraries):
        return "mkl"
    if any("blas" in path for path in libraries):
        return "reference"  # netlib's libblas: the slow fallback
    return "unknown"


def causal_attention(torch, q, k, v, causal, sdpa):
    """Causal attention over [batch, heads, seq, head_dim] q, k, v: fused
    (F.scaled_dot_product_attention) with `sdpa`, else the explicit softmax
    of examples/models/gpt.cc, with `causal` the mask above the diagonal."""
    import torch.nn.functional as F
    if sdpa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    scores = ((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))).masked_fill(causal, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
