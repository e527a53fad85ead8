# Type stub of the tandem package (python_stub/module.cc).
from typing import Dict, List, Optional, Sequence

import numpy as np
import numpy.typing as npt

Tensors = Dict[str, npt.NDArray[np.generic]]

class TrainStep:
    """A traced, differentiated training step."""
    @property
    def name(self) -> str: ...
    @property
    def num_stages(self) -> int: ...
    @property
    def num_microbatches(self) -> int: ...
    @property
    def microbatches_per_update(self) -> int:
        """Microbatches per weight update: num_microbatches unless pipedream (1) or 2bw (update_every)."""
        ...
    @property
    def version_delays(self) -> List[int]:
        """Per stage, how many updates old the weights its microbatches compute on are (pipedream, 2bw)."""
        ...
    @property
    def state_names(self) -> List[str]: ...
    @property
    def stage_graph(self) -> str:
        """Its stages' DAG, e.g. "0->2 1->2"; "" for a chain."""
        ...
    def to_text(self) -> str: ...
    def initial_state(self) -> Tensors: ...

def load_step(path: str) -> TrainStep:
    """Reads a traced step from its IR text file (`tandem ir dump` writes one)."""

class ExampleJob:
    """A built-in example model (gpt, llama, mlp or two-tower) with its data."""
    def __init__(
        self,
        *,
        model: str = "gpt",
        stages: int = 1,
        microbatches: int = 4,
        layers: Optional[int] = None,
        towers: Sequence[int] = (),
        dim: Optional[int] = None,
        heads: Optional[int] = None,
        seq: Optional[int] = None,
        batch: Optional[int] = None,
        optimizer: str = "adam",
        lr: Optional[float] = None,
        seed: int = 1,
        data: Optional[str] = None,
        updates: str = "flush",
        update_every: int = 0,
    ) -> None:
        """updates: "flush" (synchronous), "pipedream" or "2bw" (schedules/FORMAT.md), for the schedule of that
        name; update_every: 2bw's microbatches per update (0: the stage count)."""
        ...
    @property
    def description(self) -> str: ...
    @property
    def step(self) -> TrainStep: ...
    def train_batch(self, index: int) -> List[Tensors]: ...
    def validation_batch(self, index: int) -> List[Tensors]: ...

class Schedule:
    """A built-in schedule by name (gpipe, 1f1b, interleaved, looped-bfs, zb-h1, zb-v, dualpipev, graph-1f1b,
    graph-gpipe) or a .sched/.csv file; validated. The graph generators run over `stage_graph` (a traced
    step's `stage_graph`), one stage per actor."""
    def __init__(
        self, name_or_file: str, *, actors: int, microbatches: int, virtual_stages: int = 0, stage_graph: str = ""
    ) -> None: ...
    @property
    def stage_graph(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def num_actors(self) -> int: ...
    @property
    def num_stages(self) -> int: ...
    @property
    def num_microbatches(self) -> int: ...

class Session:
    """A compiled step running on one actor process per schedule actor."""
    @staticmethod
    def start(
        step: TrainStep,
        schedule: Schedule,
        *,
        transport: str = "shm",
        dispatch: str = "fused",
        receive_timeout_s: float = 30.0,
    ) -> "Session": ...
    @staticmethod
    def resume(
        step: TrainStep,
        schedule: Schedule,
        checkpoint: str,
        *,
        transport: str = "shm",
        dispatch: str = "fused",
        receive_timeout_s: float = 30.0,
    ) -> "Session": ...
    def step(self, microbatches: List[Tensors]) -> List[float]:
        """Runs the next training step; returns each microbatch's loss."""
    def state(self) -> Tensors: ...
    def save_checkpoint(self, root: str) -> str: ...
    def set_schedule(self, schedule: Schedule) -> None: ...
    @property
    def steps_done(self) -> int: ...
    @property
    def num_actors(self) -> int: ...
    @property
    def static_peak_bytes(self) -> List[int]: ...

def find_actor_binary() -> str: ...
