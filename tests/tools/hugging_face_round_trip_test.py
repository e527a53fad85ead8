"""The Hugging Face round trip, both ways, against transformers itself.

Run by CTest with the tests' Python environment (build/venv, tools/setup.sh)
and TANDEM_BINARY, the `tandem` CLI of the same build. No hub, no network:
every model and tokenizer is made here.

- Export: a gpt and a llama (grouped KV heads), tied and untied, trained
  here on a BPE token file, written by `tandem export --format hf`, load in
  AutoModelForCausalLM and AutoTokenizer as they are; their logits and mean
  loss equal `tandem eval`'s within 1e-5 relative; the tokenizer gives the
  ids `tandem tokenize` gives on every licence text; greedy `generate`
  gives the tokens `tandem generate` gives (from the checkpoint and from
  the directory); above --max-shard-size the weights are shards with an
  index.
- Import: models transformers made from a config with random weights and
  saved with save_pretrained load with `--import DIR` alone (the shapes
  from config.json): logits, loss and every parameter's gradient of the
  loss equal transformers' within 1e-5 relative, and `tandem train
  --import DIR` trains from them. What Tandem's models cannot represent is
  refused naming the field.
"""
import glob
import json
import os
import re
import subprocess
import tempfile
import unittest

import numpy as np
import sentencepiece
import torch
import torch.nn.functional as F
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig, \
    LlamaForCausalLM

TANDEM = os.environ["TANDEM_BINARY"]
TOLERANCE = 1e-5
SEQ, WINDOWS, VOCAB = 32, 8, 512
LICENCES = "/usr/share/common-licenses"


def tandem(*args, cwd, expect=0):
    run = subprocess.run([TANDEM, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    if run.returncode != expect:
        raise AssertionError(f"tandem {' '.join(args)} exited {run.returncode}, not {expect}:\n"
                             f"{run.stdout}\n{run.stderr}")
    return run


def relative(actual, expected):
    """max |actual - expected| / max |expected|: one number per tensor."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    return np.abs(actual - expected).max() / max(np.abs(expected).max(), 1e-30)


class RoundTrip(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.work = tempfile.TemporaryDirectory()
        cls.dir = cls.work.name
        tandem("tokenize", "--train", "--input", LICENCES, "--vocab", str(VOCAB), "--model", "t.model", cwd=cls.dir)
        tandem("tokenize", "--model", "t.model", "--input", LICENCES, "--output", "t.bin", cwd=cls.dir)
        # The token file: uint16 ids, little-endian (a 512-piece vocabulary).
        cls.ids = np.fromfile(os.path.join(cls.dir, "t.bin"), dtype="<u2").astype(np.int64)
        cls.tokens = torch.tensor(np.stack([cls.ids[i * SEQ:(i + 1) * SEQ] for i in range(WINDOWS)]))
        cls.labels = torch.tensor(np.stack([cls.ids[i * SEQ + 1:(i + 1) * SEQ + 1] for i in range(WINDOWS)]))

    @classmethod
    def tearDownClass(cls):
        cls.work.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def tandem_eval(self, *source, gradients=False):
        """`tandem eval`'s loss, logits and (asked) gradients over the windows."""
        extra = ["--gradients", "g.safetensors"] if gradients else []
        run = tandem("eval", *source, "--batches", str(WINDOWS), "--logits", "l.safetensors", *extra, cwd=self.dir)
        match = re.fullmatch(r"loss (\S+)\n", run.stdout)
        self.assertIsNotNone(match, run.stdout)
        logits = load_file(self.path("l.safetensors"))["logits"]
        return float(match.group(1)), logits, load_file(self.path("g.safetensors")) if gradients else None

    def hugging_face(self, directory, gradients=False):
        """transformers' loss, logits and (asked) gradients over the windows."""
        model = AutoModelForCausalLM.from_pretrained(directory)
        model.eval()
        logits = model(input_ids=self.tokens).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.labels.reshape(-1))
        grads = None
        if gradients:
            loss.backward()
            grads = {name: p.grad.numpy() for name, p in model.named_parameters()}
        return model, loss.item(), logits.detach().numpy(), grads

    def check_same_function(self, name, directory, *source, gradients=False):
        tandem_loss, tandem_logits, tandem_grads = self.tandem_eval(*source, gradients=gradients)
        model, hf_loss, hf_logits, hf_grads = self.hugging_face(directory, gradients=gradients)
        loss_error = abs(tandem_loss - hf_loss) / abs(hf_loss)
        logits_error = relative(tandem_logits, hf_logits)
        print(f"{name}: loss tandem {tandem_loss:.9g} transformers {hf_loss:.9g} (relative {loss_error:.2g}); "
              f"logits relative {logits_error:.2g}")
        self.assertLessEqual(loss_error, TOLERANCE)
        self.assertLessEqual(logits_error, TOLERANCE)
        if gradients:
            # Every parameter transformers trains has Tandem's gradient
            # (a tied head is one parameter in both).
            self.assertEqual(sorted(tandem_grads), sorted(hf_grads))
            worst = max((relative(tandem_grads[n], hf_grads[n]), n) for n in hf_grads)
            print(f"{name}: {len(hf_grads)} gradients, worst relative {worst[0]:.2g} ({worst[1]})")
            self.assertLessEqual(worst[0], TOLERANCE)
        return model

    # -- export ------------------------------------------------------------

    def export(self, model, tied, shard=None):
        name = f"{model}-{'tied' if tied else 'untied'}"
        options = ["--model", model, "--layers", "2", "--dim", "64", "--heads", "4", "--seq", str(SEQ),
                   "--data", "t.bin", "--tokenizer", "t.model"]
        options += ["--kv-heads", "2"] if model == "llama" else []
        options += ["--tied"] if tied else []
        if not os.path.isdir(self.path(f"ck-{name}")):
            tandem("train", *options, "--batch", "4", "--actors", "2", "--microbatches", "2", "--steps", "40",
                   "--launcher", "threads", "--checkpoint-dir", f"ck-{name}", cwd=self.dir)
        shards = ["--max-shard-size", str(shard)] if shard else []
        tandem("export", "--checkpoint", f"ck-{name}", "--format", "hf", "--out", f"hf-{name}", *shards, *options,
               cwd=self.dir)
        return name, options, self.path(f"hf-{name}")

    def check_export(self, model, tied, shard=None):
        name, options, directory = self.export(model, tied, shard)
        files = sorted(os.listdir(directory))
        weights = [f for f in files if f.endswith(".safetensors")]
        if shard:
            self.assertIn("model.safetensors.index.json", files)
            self.assertGreater(len(weights), 1)
            self.assertTrue(all(re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f) for f in weights), files)
        else:
            self.assertEqual(weights, ["model.safetensors"])
        for f in ["config.json", "generation_config.json", "tokenizer.model", "tokenizer_config.json"]:
            self.assertIn(f, files)
        with open(os.path.join(directory, "config.json")) as f:
            config = json.load(f)
        architecture = "GPT2LMHeadModel" if model == "gpt" else "LlamaForCausalLM"
        self.assertEqual(config["architectures"], [architecture])
        self.assertEqual(config["tie_word_embeddings"], tied)
        hf = self.check_same_function(name, directory, "--checkpoint", f"ck-{name}", *options)
        self.assertEqual(type(hf).__name__, architecture)
        if model == "llama":
            # 2 layers of d=64 (q, o: 64x64; k, v: 64x32; SwiGLU 64x192
            # three times; two norms), the final norm, embeddings of 512 x
            # 64, and an untied head of as many.
            per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 192 + 2 * 64
            expected = 2 * per_layer + 64 + VOCAB * 64 * (1 if tied else 2)
        else:
            # 2 blocks of d=64 (c_attn 64x192 + 192, c_proj 64x64 + 64, MLP
            # 64x256 + 256 and 256x64 + 64, two norms of 2 x 64), ln_f,
            # wte 512 x 64, wpe 32 x 64, and an untied head.
            per_layer = 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64 + 4 * 64
            expected = 2 * per_layer + 2 * 64 + VOCAB * 64 * (1 if tied else 2) + SEQ * 64
        self.assertEqual(sum(p.numel() for p in hf.parameters()), expected)
        self.check_generation(name, hf, directory, ["--checkpoint", f"ck-{name}", *options],
                              ["--import", directory, "--data", "t.bin"])
        return directory

    def check_generation(self, name, model, tokenizer_directory, *sources):
        """Greedy generation by transformers and by `tandem generate` from
        each of `sources` (argument lists) gives the same text: with the KV
        cache in one process and through 2 actors, and without it."""
        prompt, count = "The licence ", 12
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_directory)
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        out = model.generate(ids, max_new_tokens=count, min_new_tokens=count, do_sample=False,
                             pad_token_id=0, eos_token_id=None)
        self.assertEqual(out.shape[1], ids.shape[1] + count)
        # Decoded by SentencePiece itself, as `tandem generate` decodes:
        # byte pieces that are no valid UTF-8 decode the library's way.
        expected = sentencepiece.SentencePieceProcessor(model_file=self.path("t.model")).decode(out[0].tolist())
        print(f"{name}: greedy {expected!r}")
        for source in sources:
            for way in ([], ["--actors", "2", "--launcher", "threads"], ["--no-kv-cache"]):
                generated = tandem("generate", *source, "--prompt", prompt, "--tokens", str(count), *way,
                                   cwd=self.dir).stdout
                self.assertEqual(generated, expected + "\n", [*source, *way])

    def test_an_untied_gpt_exports_as_gpt2(self):
        self.check_export("gpt", tied=False)

    def test_a_tied_gpt_exports_as_gpt2_in_shards(self):
        self.check_export("gpt", tied=True, shard=40_000)

    def test_an_untied_llama_with_grouped_kv_heads_exports(self):
        self.check_export("llama", tied=False)

    def test_a_tied_llama_exports(self):
        self.check_export("llama", tied=True)

    def test_the_tokenizer_gives_the_ids_tandem_tokenize_gives(self):
        _, _, directory = self.export("llama", tied=True)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        files = sorted(glob.glob(os.path.join(LICENCES, "*")))
        self.assertGreater(len(files), 10)
        for path in files:
            tandem("tokenize", "--model", "t.model", "--input", path, "--output", "one.bin", cwd=self.dir)
            expected = np.fromfile(self.path("one.bin"), dtype="<u2").tolist()
            with open(path, encoding="utf-8") as f:
                ids = tokenizer(f.read())["input_ids"]
            self.assertEqual(ids, expected, path)

    def test_a_character_level_model_exports_without_a_tokenizer(self):
        options = ["--model", "gpt", "--layers", "2", "--dim", "32", "--heads", "2", "--seq", "16"]
        tandem("train", *options, "--steps", "1", "--actors", "2", "--launcher", "threads", "--checkpoint-dir",
               "ck-char", cwd=self.dir)
        tandem("export", "--checkpoint", "ck-char", "--format", "hf", "--out", "hf-char", *options, cwd=self.dir)
        files = os.listdir(self.path("hf-char"))
        self.assertNotIn("tokenizer.model", files)
        self.assertEqual(type(AutoModelForCausalLM.from_pretrained(self.path("hf-char"))).__name__,
                         "GPT2LMHeadModel")

    # -- import ------------------------------------------------------------

    def saved(self, name, model):
        directory = self.path(name)
        model.save_pretrained(directory)
        return directory

    def test_a_saved_gpt2_imports_with_its_config_alone(self):
        config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=48, n_layer=2, n_head=4,
                            tie_word_embeddings=False)
        directory = self.saved("saved-gpt2", GPT2LMHeadModel(config))
        source = ["--import", directory, "--data", "t.bin", "--tokenizer", "t.model"]
        model = self.check_same_function("saved gpt2", directory, *source, gradients=True)
        self.check_generation("saved gpt2", model, self.export("llama", tied=True)[2], source)
        run = tandem("train", "--import", directory, "--data", "t.bin", "--tokenizer", "t.model", "--steps", "2",
                     "--batch", "2", "--actors", "2", "--microbatches", "2", "--launcher", "threads", cwd=self.dir)
        self.assertIn("importing the parameters of", run.stdout)

    def test_a_saved_llama_with_grouped_kv_heads_imports_with_its_config_alone(self):
        config = LlamaConfig(vocab_size=VOCAB, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                             num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
                             rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                             tie_word_embeddings=True)
        directory = self.saved("saved-llama", LlamaForCausalLM(config))
        source = ["--import", directory, "--seq", str(SEQ), "--data", "t.bin", "--tokenizer", "t.model"]
        model = self.check_same_function("saved llama", directory, *source, gradients=True)
        self.check_generation("saved llama", model, self.export("llama", tied=True)[2], source)
        tandem("train", "--import", directory, "--seq", str(SEQ), "--data", "t.bin", "--tokenizer", "t.model",
               "--steps", "2", "--batch", "2", "--actors", "2", "--microbatches", "2", "--launcher", "threads",
               cwd=self.dir)

    def test_what_tandem_cannot_represent_is_refused_naming_the_field(self):
        base = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2).to_dict()
        directory = self.saved("refused", LlamaForCausalLM(LlamaConfig(**base)))
        cases = {"attention_bias": {"attention_bias": True},
                 "rope_type": {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}},
                 "hidden_act": {"hidden_act": "gelu"},
                 "model_type": {"model_type": "mistral"}}
        for field, change in cases.items():
            config = dict(base, **change)
            with open(os.path.join(directory, "config.json"), "w") as f:
                json.dump(config, f)
            run = tandem("eval", "--import", directory, "--data", "t.bin", "--tokenizer", "t.model", "--seq", "16",
                         "--batches", "1", cwd=self.dir, expect=2)
            self.assertIn(field, run.stderr)
        # A flag the config contradicts.
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(base, f)
        run = tandem("eval", "--import", directory, "--dim", "64", "--data", "t.bin", "--tokenizer", "t.model",
                     "--seq", "16", "--batches", "1", cwd=self.dir, expect=2)
        self.assertIn("--dim 64 differs", run.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
