"""`tandem export --format hf` against Hugging Face's transformers.

Run by CTest with the tests' Python environment (build/venv, tools/setup.sh)
and TANDEM_BINARY, the `tandem` CLI of the same build. For a llama trained
here on a BPE token file (untied and tied), the directory `tandem export
--format hf` writes is loaded by AutoModelForCausalLM.from_pretrained as it
is, and the mean next-token loss transformers computes over the token
file's first windows equals `tandem eval`'s within 1e-5 relative: same
model (class, parameter count), same weights, same function. No hub, no
network: everything is made here.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

TANDEM = os.environ["TANDEM_BINARY"]
TOLERANCE = 1e-5
SEQ, WINDOWS = 32, 8


def tandem(*args, cwd):
    run = subprocess.run([TANDEM, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise AssertionError(f"tandem {' '.join(args)} exited {run.returncode}:\n{run.stdout}\n{run.stderr}")
    return run.stdout


class HuggingFaceExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.TemporaryDirectory()
        cls.dir = cls.work.name
        tandem("tokenize", "--train", "--input", "/usr/share/common-licenses", "--vocab", "512", "--model",
               "t.model", cwd=cls.dir)
        tandem("tokenize", "--model", "t.model", "--input", "/usr/share/common-licenses", "--output", "t.bin",
               cwd=cls.dir)
        # The token file: uint16 ids, little-endian (a 512-piece vocabulary).
        cls.ids = np.fromfile(os.path.join(cls.dir, "t.bin"), dtype="<u2").astype(np.int64)

    @classmethod
    def tearDownClass(cls):
        cls.work.cleanup()

    def model_options(self, tied):
        options = ["--model", "llama", "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                   "--seq", str(SEQ), "--data", "t.bin", "--tokenizer", "t.model"]
        return options + (["--tied"] if tied else [])

    def hugging_face_loss(self, directory):
        model = AutoModelForCausalLM.from_pretrained(directory)
        model.eval()
        tokens = torch.tensor(np.stack([self.ids[i * SEQ:(i + 1) * SEQ] for i in range(WINDOWS)]))
        labels = torch.tensor(np.stack([self.ids[i * SEQ + 1:(i + 1) * SEQ + 1] for i in range(WINDOWS)]))
        with torch.no_grad():
            logits = model(input_ids=tokens).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), labels.reshape(-1))
        return model, loss.item()

    def check(self, tied):
        name = "tied" if tied else "untied"
        options = self.model_options(tied)
        tandem("train", *options, "--batch", "4", "--actors", "2", "--microbatches", "2", "--steps", "5",
               "--launcher", "threads", "--checkpoint-dir", f"ck-{name}", cwd=self.dir)
        tandem("export", "--checkpoint", f"ck-{name}", "--format", "hf", "--out", f"hf-{name}", *options,
               cwd=self.dir)
        directory = os.path.join(self.dir, f"hf-{name}")
        self.assertEqual(sorted(os.listdir(directory)),
                         ["config.json", "generation_config.json", "model.safetensors"])
        with open(os.path.join(directory, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["architectures"], ["LlamaForCausalLM"])
        self.assertEqual(config["tie_word_embeddings"], tied)
        out = tandem("eval", "--checkpoint", f"ck-{name}", *options, "--batches", str(WINDOWS), cwd=self.dir)
        match = re.fullmatch(r"loss (\S+)\n", out)
        self.assertIsNotNone(match, out)
        tandem_loss = float(match.group(1))
        model, hf_loss = self.hugging_face_loss(directory)
        self.assertEqual(type(model).__name__, "LlamaForCausalLM")
        # 2 layers of d=64 (q, o: 64x64; k, v: 64x32; SwiGLU 64x192 three
        # times; two norms), the final norm, embeddings of 512 x 64, and an
        # untied head of as many.
        per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 192 + 2 * 64
        expected = 2 * per_layer + 64 + 512 * 64 * (1 if tied else 2)
        self.assertEqual(sum(p.numel() for p in model.parameters()), expected)
        relative = abs(tandem_loss - hf_loss) / abs(hf_loss)
        print(f"{name}: tandem eval {tandem_loss:.9g}, transformers {hf_loss:.9g}, relative {relative:.3g}")
        self.assertLessEqual(relative, TOLERANCE)

    def test_an_untied_llama_loads_and_computes_the_same_loss(self):
        self.check(tied=False)

    def test_a_tied_llama_loads_and_computes_the_same_loss(self):
        self.check(tied=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
