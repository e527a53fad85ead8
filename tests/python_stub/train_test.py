"""The Python stub trains like the C++ controller, bit for bit.

Run by CTest with the tests' Python environment (build/venv: Debian's Python in
a virtual environment, tools/setup.sh) and PYTHONPATH=<build>/python;
TANDEM_BINARY is the `tandem` CLI of the same build.
"""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np

import tandem

MODEL = dict(model="mlp", stages=2, microbatches=4)
STEPS = 3


def bits(value: float) -> bytes:
    return struct.pack("<f", value)


class TrainTest(unittest.TestCase):
    def test_losses_equal_the_cpp_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "losses.json")
            subprocess.run(
                [os.environ["TANDEM_BINARY"], "train", "--model", "mlp", "--actors", "2",
                 "--microbatches", "4", "--steps", str(STEPS), "--eval-batches", "0", "--losses", path],
                check=True, capture_output=True, timeout=120)
            with open(path) as f:
                expected = [step["losses"] for step in json.load(f)["steps"]]

        job = tandem.ExampleJob(**MODEL)
        schedule = tandem.Schedule("1f1b", actors=2, microbatches=4)
        session = tandem.Session.start(job.step, schedule)
        got = [session.step(job.train_batch(i)) for i in range(STEPS)]
        self.assertEqual(session.steps_done, STEPS)
        self.assertEqual(len(got), len(expected))
        for step, (ours, theirs) in enumerate(zip(got, expected), start=1):
            self.assertEqual([bits(x) for x in ours], [bits(x) for x in theirs], f"step {step}")

        state = session.state()
        self.assertEqual(sorted(state), sorted(job.step.state_names))
        self.assertEqual(state["out.w"].dtype, np.float32)
        self.assertTrue(all(np.isfinite(t).all() for t in state.values()))

    def test_data_parallel_replicas_equal_the_cpp_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "losses.json")
            subprocess.run(
                [os.environ["TANDEM_BINARY"], "train", "--model", "mlp", "--actors", "2", "--data-parallel", "2",
                 "--microbatches", "4", "--steps", str(STEPS), "--eval-batches", "0", "--losses", path],
                check=True, capture_output=True, timeout=120)
            with open(path) as f:
                expected = [step["losses"] for step in json.load(f)["steps"]]

        job = tandem.ExampleJob(**MODEL, data_parallel=2)
        self.assertEqual(job.step.num_replicas, 2)
        schedule = tandem.Schedule("1f1b", actors=2, microbatches=4)
        session = tandem.Session.start(job.step, schedule)
        self.assertEqual(session.num_actors, 4)
        got = [session.step(job.train_batch(i)) for i in range(STEPS)]
        self.assertEqual(len(got[0]), 8)
        for step, (ours, theirs) in enumerate(zip(got, expected), start=1):
            self.assertEqual([bits(x) for x in ours], [bits(x) for x in theirs], f"step {step}")

    def test_asynchronous_pipelines_equal_the_cpp_runs(self):
        for updates, every in (("pipedream", 0), ("2bw", 2)):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "losses.json")
                subprocess.run(
                    [os.environ["TANDEM_BINARY"], "train", "--model", "mlp", "--actors", "2", "--schedule", updates,
                     "--microbatches", "4", "--steps", str(STEPS), "--eval-batches", "0", "--losses", path],
                    check=True, capture_output=True, timeout=120)
                with open(path) as f:
                    expected = [step["losses"] for step in json.load(f)["steps"]]
            job = tandem.ExampleJob(**MODEL, updates=updates)
            self.assertEqual(job.step.microbatches_per_update, 1 if updates == "pipedream" else every)
            self.assertEqual(job.step.version_delays, [1, 0] if updates == "pipedream" else [1, 1])
            session = tandem.Session.start(job.step, tandem.Schedule(updates, actors=2, microbatches=4))
            got = [session.step(job.train_batch(i)) for i in range(STEPS)]
            for step, (ours, theirs) in enumerate(zip(got, expected), start=1):
                self.assertEqual([bits(x) for x in ours], [bits(x) for x in theirs], f"{updates} step {step}")
            self.assertIn("stash1.fc0.w", session.state())  # stage 0 computes one update late

    def test_an_asynchronous_schedule_needs_a_step_traced_for_it(self):
        job = tandem.ExampleJob(**MODEL)
        self.assertEqual(job.step.version_delays, [0, 0])
        with self.assertRaisesRegex(ValueError, r"schedule '2bw' needs a step traced for it .*ExampleJob\(updates='2bw'\)"):
            tandem.Session.start(job.step, tandem.Schedule("2bw", actors=2, microbatches=4))
        with self.assertRaisesRegex(ValueError, "which must divide microbatches 4: set update_every"):
            tandem.ExampleJob(**MODEL, updates="2bw", update_every=3)
        with self.assertRaisesRegex(ValueError, "updates is 'flush', 'pipedream' or '2bw', not 'async'"):
            tandem.ExampleJob(**MODEL, updates="async")
        with self.assertRaisesRegex(ValueError, "update_every applies to updates='2bw'"):
            tandem.ExampleJob(**MODEL, update_every=2)

    def test_numpy_microbatches_and_checkpoints(self):
        job = tandem.ExampleJob(**MODEL)
        schedule = tandem.Schedule("gpipe", actors=2, microbatches=4)
        batch = job.train_batch(0)
        self.assertEqual(batch[0]["x"].dtype, np.float32)
        # Float64 data from the user is narrowed to the model's f32.
        wide = [{name: (a.astype(np.float64) if a.dtype == np.float32 else a) for name, a in m.items()} for m in batch]
        with tempfile.TemporaryDirectory() as tmp:
            first = tandem.Session.start(job.step, schedule)
            loss = first.step(wide)
            saved = first.save_checkpoint(tmp)
            self.assertTrue(saved.endswith("step-00000001"))
            expected = first.step(job.train_batch(1))
            resumed = tandem.Session.resume(job.step, schedule, tmp, max_restarts=1)
            self.assertEqual(resumed.steps_done, 1)
            self.assertEqual([bits(x) for x in resumed.step(job.train_batch(1))], [bits(x) for x in expected])
            # A checkpoint written behind the steps: in place once finished.
            resumed.begin_checkpoint(tmp)
            resumed.step(job.train_batch(2))
            self.assertTrue(resumed.finish_checkpoint().endswith("step-00000002"))
            self.assertEqual(resumed.finish_checkpoint(), "")
            self.assertEqual(resumed.restarts, [])
        self.assertEqual(len(loss), 4)
        with self.assertRaisesRegex(ValueError, "max_restarts is a count"):
            tandem.Session.start(job.step, schedule, max_restarts=-1)

    def test_a_branched_model_runs_its_stage_graph_bit_identical_to_the_chain(self):
        job = tandem.ExampleJob(model="two-tower", towers=[2, 1], layers=1, dim=16, stages=3, microbatches=4)
        self.assertEqual(job.step.stage_graph, "0->2 1->2")
        graph = tandem.Schedule("graph-1f1b", actors=3, microbatches=4, stage_graph=job.step.stage_graph)
        self.assertEqual(graph.stage_graph, "0->2 1->2")
        chain = tandem.Schedule("1f1b", actors=3, microbatches=4)
        self.assertEqual(chain.stage_graph, "")
        losses = []
        for schedule in (graph, chain):
            session = tandem.Session.start(job.step, schedule, transport="shm")
            losses.append([bits(x) for x in session.step(job.train_batch(0))])
        self.assertEqual(losses[0], losses[1])
        with self.assertRaisesRegex(ValueError, "is not a stage edge"):
            tandem.Schedule("graph-1f1b", actors=3, microbatches=4, stage_graph="0=>2")

    def test_errors_are_python_exceptions_with_the_status(self):
        with self.assertRaisesRegex(ValueError, "INVALID_ARGUMENT: unknown model 'rnn'"):
            tandem.ExampleJob(model="rnn")
        with self.assertRaisesRegex(FileNotFoundError, "NOT_FOUND: .*no-such.sched"):
            tandem.Schedule("no-such.sched", actors=2, microbatches=4)
        job = tandem.ExampleJob(**MODEL)
        session = tandem.Session.start(job.step, tandem.Schedule("1f1b", actors=2, microbatches=4))
        with self.assertRaisesRegex(ValueError, "compiled for 4 microbatches, got 1"):
            session.step(job.train_batch(0)[:1])
        with self.assertRaisesRegex(FileNotFoundError, "no checkpoint at"):
            tandem.Session.resume(job.step, tandem.Schedule("1f1b", actors=2, microbatches=4), "/nonexistent")

    def test_traced_ir_file_round_trips(self):
        job = tandem.ExampleJob(**MODEL)
        with tempfile.NamedTemporaryFile("w", suffix=".ir") as f:
            f.write(job.step.to_text())
            f.flush()
            step = tandem.load_step(f.name)
        self.assertEqual(step.state_names, job.step.state_names)
        self.assertEqual(step.num_stages, 2)


if __name__ == "__main__":
    unittest.main()
