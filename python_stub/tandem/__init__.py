"""Tandem: pipeline-parallel training on actor processes.

A thin layer over Tandem's C++ controller API (<tandem/tandem.h>)::

    import tandem
    job = tandem.ExampleJob(model="mlp", stages=2, microbatches=4)
    schedule = tandem.Schedule("1f1b", actors=2, microbatches=4)
    session = tandem.Session.start(job.step, schedule)
    for i in range(10):
        losses = session.step(job.train_batch(i))

Errors from the C++ side arrive as ValueError (bad arguments, a checkpoint
that does not fit), FileNotFoundError, or RuntimeError, with the status code
first: "INVALID_ARGUMENT: ...".
"""
from ._tandem import ExampleJob, Schedule, Session, TrainStep, find_actor_binary, load_step

__all__ = ["ExampleJob", "Schedule", "Session", "TrainStep", "find_actor_binary", "load_step"]
