"""Every message that crosses a queue between components, in one place.

Hot-path messages (one per split per env step) are NamedTuples: typed, yet pickled as compactly
as plain tuples. They carry indices into shared buffers, never data. Control and report
messages are frozen dataclasses. Names of events are past tense; commands are imperative.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


# --- hot path ---------------------------------------------------------------------------------
class InferenceRequested(NamedTuple):
    """Rollout worker -> a policy's inference workers: observations of a slot's step are ready.

    `generation` identifies the incarnation of the worker; requests of a replaced worker are
    dropped (see `SamplerLedger`).
    """

    worker: int
    split: int
    slot: int
    step: int
    generation: int


class ActionsReady(NamedTuple):
    """Inference worker -> rollout worker: `policy_id`'s actions for (split, step) are in the
    slot (a split whose rows are played by several policies waits for each of them)."""

    split: int
    step: int
    policy_id: int = 0


class TrajectoryReady(NamedTuple):
    """Rollout worker -> a policy's learner: a slot holds a complete rollout; `rows` are the
    rows in which the policy acted (None: every row of the slot). Exactly one of the learners
    told about a slot `returns_slot` to the free list once all have copied it. `split`: which
    of the worker's env splits stepped it (with `worker`, the slot's rows are the same envs
    from one rollout to the next: a replay's streams)."""

    policy_id: int
    slot: int
    rows: tuple[int, ...] | None
    worker: int
    returns_slot: bool = True
    split: int = 0


class HandOverCheck(NamedTuple):
    """Supervisor -> a policy's learner: the rollout worker that handed `slot` over (its
    `hand_over`-th hand-over) died before this learner copied it. Any `TrajectoryReady` it sent
    is ahead of this in the inbox; if none came, it was lost between the ledger's hand-over
    and the send, and the learner lets the slot go without staging it (returning it if
    `returns_slot`)."""

    policy_id: int
    slot: int
    hand_over: int
    returns_slot: bool


# --- commands from the runner -----------------------------------------------------------------
@dataclass(frozen=True)
class Pause:
    """Stop starting new env steps (in-flight ones complete); workers stay alive."""


@dataclass(frozen=True)
class Resume:
    """Continue after Pause."""


@dataclass(frozen=True)
class ResendRequests:
    """Rollout workers: an inference worker died; ask again for the actions still awaited."""


@dataclass(frozen=True)
class Stop:
    """Finish: release resources and exit the component loop."""


@dataclass(frozen=True)
class SaveCheckpoint:
    """Learner: write a checkpoint now (`final` marks the one written at shutdown).

    `mean_return` is the runner's current mean over recent episodes, used to keep the best.
    """

    final: bool = False
    mean_return: float | None = None


@dataclass(frozen=True)
class LoadWeights:
    """Learner: replace the model's weights with publication `version` of its incoming-weights
    buffer (Python API). The weights themselves travel through shared memory, never a queue."""

    version: int


@dataclass(frozen=True)
class CopyPolicy:
    """Learner (PBT): take the weights `source_policy` last published, and start afresh."""

    source_policy: int


@dataclass(frozen=True)
class SetHyperparameters:
    """Learner (PBT): use these values from now on (learning_rate, entropy_coeff, adam_beta1)."""

    values: dict


@dataclass(frozen=True)
class PublishSnapshot:
    """Learner: copy the current weights into frozen opponent `frozen_policy`'s shared weights."""

    frozen_policy: int


@dataclass(frozen=True)
class SetRewardShaping:
    """Rollout workers (PBT): seats played by `policy_id` are rewarded with these coefficients."""

    policy_id: int
    coefficients: dict


# --- reports to the runner --------------------------------------------------------------------
@dataclass(frozen=True)
class ComponentStarted:
    component: str
    pid: int


@dataclass(frozen=True)
class ComponentFailed:
    """A component raised: the runner decides what happens next; it is never only logged."""

    component: str
    error: str
    traceback: str


@dataclass(frozen=True)
class ComponentStopped:
    component: str


@dataclass(frozen=True)
class EpisodesFinished:
    """Returns and lengths (in agent steps) of episodes a policy played that ended since the
    last report; `wins` (1 win, 0.5 draw, 0 loss) for those whose env reports an outcome."""

    policy_id: int
    returns: list[float]
    lengths: list[int]
    wins: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Paused:
    """A rollout worker has handled Pause: the statistics of everything it stepped before are
    on the report queue ahead of this."""

    worker: int


@dataclass(frozen=True)
class SamplerReport:
    """Env frames collected by a rollout worker since its last report, and where time went."""

    worker: int
    env_frames: int
    timings: dict[str, float] = field(default_factory=dict)
    env_faults: list[str] = field(default_factory=list)  # one line each, with worker and env id


@dataclass(frozen=True)
class TrainingReport:
    """A learner's state after a training iteration (one dataset, num_epochs passes)."""

    policy_id: int
    env_steps: int
    policy_version: int
    stats: dict[str, float]
    lag_min: float
    lag_mean: float
    lag_max: float


@dataclass(frozen=True)
class StagedSteps:
    """A learner's env steps while it has too little data to train (a replay before
    `learning_starts`): the run's step count, and with it `train(n)`, go on meanwhile."""

    policy_id: int
    env_steps: int


@dataclass(frozen=True)
class PeersFinished:
    """Data-parallel runs: another rank's learner stopped training (its runner ended the run,
    or a peer left), so this rank's run ends too (`distributed/rounds.py`)."""

    policy_id: int


@dataclass(frozen=True)
class LearnerReady:
    """A learner's counters when it starts: restored from `resumed_from`, or zero."""

    policy_id: int
    env_steps: int
    policy_version: int
    resumed_from: str | None
    note: str | None = None  # what the resume could not restore, for the log


@dataclass(frozen=True)
class CheckpointSaved:
    policy_id: int
    path: str
    env_steps: int
    final: bool


@dataclass(frozen=True)
class CheckpointFailed:
    """A checkpoint the learner could not write (a full disk, a lost mount): nothing of it is
    on disk, and the ones before are intact."""

    policy_id: int
    error: str
    final: bool


@dataclass(frozen=True)
class InferenceReport:
    """Batches served and where time went since the last report."""

    component: str
    batches: int
    samples: int
    timings: dict[str, float] = field(default_factory=dict)
