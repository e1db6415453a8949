"""Which learner family trains an algorithm, and how its parts are built.

Responsible for: mapping `--algorithm` (through its family, `config/algorithms.py`) to the
three parts the learner worker runs (`learners/protocols.py`): a learner that trains, a stager
for arrived trajectories and a sampling gate. This is the one place that knows which classes
make up a family; the learner worker, the runner and the wiring only ask it.

Adding an algorithm: its loss in `algo/`, its settings beside it, a family module here (or an
existing family's), its name and family in `config/algorithms.py`, and an entry below.

Must not: touch processes or queues (the learner worker does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, cast

import gymnasium as gym
import torch

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.buffers.replay import ReplayBuffer
from sampleforge.buffers.replay_layout import estimate_replay_bytes, least_replay_capacity
from sampleforge.buffers.replay_sampler import BackgroundSampler
from sampleforge.buffers.slot_pool import SlotPool
from sampleforge.buffers.trajectory_buffer import SharedTrajectoryBuffer, TrajectoryLayout
from sampleforge.config import Config, ConfigError
from sampleforge.config.algorithms import algorithm_family
from sampleforge.config.ranges import learner_seed
from sampleforge.learners import actor_critic, continuous_learner, pqn_learner, value_learner
from sampleforge.learners.actor_critic import ActorCriticLearner, actor_critic_staging_bytes
from sampleforge.learners.batcher import Batcher
from sampleforge.learners.continuous_learner import ContinuousLearner
from sampleforge.learners.dataset_sizer import DatasetSizer
from sampleforge.learners.pqn_learner import PQN_LAG_TARGET_DATASETS, PQNLearner
from sampleforge.learners.probe_data import fill_replay, random_dataset
from sampleforge.learners.protocols import GatesSampling, StagesData, Trains
from sampleforge.learners.replay_gate import ReplayRatioGate
from sampleforge.learners.replay_stager import ReplayStager
from sampleforge.learners.sampling_gate import SamplingGate
from sampleforge.learners.value_learner import ValueLearner
from sampleforge.models.factory import make_policy_model, make_q_policy
from sampleforge.spaces import action_spec, observation_specs


@dataclass(frozen=True)
class LearnerParts:
    """What one policy's learner worker runs."""

    learner: Trains
    stager: StagesData
    gate: GatesSampling
    # Datasets that grow with the learner's speed (`max_batch_size`); None: a fixed size.
    sizer: DatasetSizer | None = None


@dataclass(frozen=True)
class LearnerSite:
    """Where a learner runs: what the wiring hands its worker."""

    observation_space: gym.Space
    action_space: gym.Space
    device: torch.device
    frameskip: int
    policy_id: int
    buffer: SharedTrajectoryBuffer
    slots: SlotPool


def _fresh_trajectory_parts(
    cfg: Config, site: LearnerSite, learner: Trains, lag_target_datasets: float = 0.0
) -> LearnerParts:
    """`learner` with a batcher of datasets of whole fresh trajectories and sampling gated by
    the policy lag (the on-policy families: actor-critic, PQN); `lag_target_datasets`: see
    SamplingGate."""
    stager = Batcher(
        site.buffer,
        site.slots,
        cfg.dataset_size // cfg.rollout,
        site.device,
        policy_id=site.policy_id,
        largest_dataset_trajectories=cfg.max_dataset_size // cfg.rollout,
    )
    lead = cfg.sampling_lead_sgd_steps
    if lead is None and cfg.serial_mode:
        # Serial components take turns, so there is no overlap to measure, and a lead
        # measured on the clock would make a seeded run differ from itself.
        lead = 0
    gate = SamplingGate(
        site.slots.ledger,
        site.policy_id,
        stager.dataset_trajectories,
        site.buffer.layout.rows_per_slot,
        learner.sgd_steps_per_dataset,
        lead,
        lag_target_datasets=lag_target_datasets,
    )
    sizer = None
    if cfg.max_batch_size is not None:
        sizer = DatasetSizer(
            stager.dataset_trajectories, stager.largest_dataset_trajectories, (stager, gate)
        )
    return LearnerParts(learner=learner, stager=stager, gate=gate, sizer=sizer)


def _make_actor_critic(cfg: Config, site: LearnerSite) -> LearnerParts:
    """On-policy: datasets of whole trajectories, sampling gated by the policy lag."""
    learner = ActorCriticLearner(
        cfg,
        site.observation_space,
        site.action_space,
        site.device,
        site.frameskip,
        policy_id=site.policy_id,
    )
    return _fresh_trajectory_parts(cfg, site, learner)


def _make_pqn(cfg: Config, site: LearnerSite) -> LearnerParts:
    """PQN: Q(lambda) on datasets of fresh trajectories, as the actor-critic's (no replay)."""
    model = make_q_policy(cfg, site.observation_space, site.action_space)
    learner = PQNLearner(cfg, model, site.device, site.frameskip, site.policy_id)
    return _fresh_trajectory_parts(cfg, site, learner, PQN_LAG_TARGET_DATASETS)


# Updates one `train` call makes at most before the learner worker looks at its inbox again.
_BATCHES_PER_TAKE = 4


# A replay family's learner class, called with its config, model (the family's policy), stager,
# device, frameskip and policy id.
ReplayLearnerFactory = Callable[..., Trains]


def _replay_parts(
    cfg: Config, site: LearnerSite, make_learner: ReplayLearnerFactory
) -> LearnerParts:
    """Off-policy: a replay of every transition the sampler made, sampled on a thread at the
    replay ratio, which also bounds sampling; `make_learner` trains on its batches."""
    layout = site.buffer.layout
    rows = layout.rows_per_slot
    total_splits = cfg.num_workers * cfg.worker_num_splits
    replay = ReplayBuffer(
        capacity=cfg.replay_size,
        num_streams=total_splits * rows,
        obs_specs=layout.obs_specs,
        action_spec=layout.action_spec,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        prioritized=cfg.prioritized_replay,
        alpha=cfg.priority_alpha,
        beta=cfg.priority_beta,
        stacked_keys=layout.frame_stacked_keys,
    )
    transitions_per_slot = cfg.rollout * rows
    ratio = cfg.samples_per_insert
    # Room for every split's slot in flight at once, twice over, and a few batches: sampling
    # and learning then overlap, while the ratio holds over any longer stretch.
    error_buffer = max(2.0 * ratio * transitions_per_slot * total_splits, 4.0 * cfg.batch_size)
    limiter = SampleToInsertRatio(ratio, cfg.learning_starts, error_buffer)
    seed = learner_seed(cfg.seed, site.policy_id) if cfg.seed is not None else None
    # Serial mode draws in the learner's turn: what is drawn never depends on a thread's timing.
    sampler = BackgroundSampler(
        replay, limiter, batch_size=cfg.batch_size, seed=seed, threaded=not cfg.serial_mode
    )
    stager = ReplayStager(
        site.buffer,
        site.slots,
        sampler,
        policy_id=site.policy_id,
        splits_per_worker=cfg.worker_num_splits,
        reward_scale=cfg.reward_scale,
        reward_clip=cfg.reward_clip,
        batches_per_take=_BATCHES_PER_TAKE,
    )
    model = make_policy_model(cfg, site.observation_space, site.action_space)
    learner = make_learner(cfg, model, stager, site.device, site.frameskip, site.policy_id)
    gate = ReplayRatioGate(site.slots.ledger, site.policy_id, limiter, transitions_per_slot)
    return LearnerParts(learner=learner, stager=stager, gate=gate)


# replay family name -> the learner that trains on its batches (in runs and in probes)
REPLAY_LEARNERS: dict[str, ReplayLearnerFactory] = {
    "value_based": ValueLearner,
    "continuous_control": ContinuousLearner,
}


def _make_value_based(cfg: Config, site: LearnerSite) -> LearnerParts:
    return _replay_parts(cfg, site, REPLAY_LEARNERS["value_based"])


def _make_continuous_control(cfg: Config, site: LearnerSite) -> LearnerParts:
    return _replay_parts(cfg, site, REPLAY_LEARNERS["continuous_control"])


# family name (config/algorithms.py) -> how its parts are built
FAMILIES: dict[str, Callable[[Config, LearnerSite], LearnerParts]] = {
    "actor_critic": _make_actor_critic,
    "value_based": _make_value_based,
    "pqn": _make_pqn,
    "continuous_control": _make_continuous_control,
}


def make_learner_parts(cfg: Config, site: LearnerSite) -> LearnerParts:
    """The learner, stager and gate of `cfg.algorithm`'s family, for the policy at `site`."""
    return FAMILIES[algorithm_family(cfg.algorithm)](cfg, site)


# family name -> the hyperparameters its learner's `set_hyperparameters` changes (each learner
# module declares its own), e.g. from the Python API between `train` calls
HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
    "actor_critic": actor_critic.HYPERPARAMETERS,
    "value_based": value_learner.HYPERPARAMETERS,
    "pqn": pqn_learner.HYPERPARAMETERS,
    "continuous_control": continuous_learner.HYPERPARAMETERS,
}


def learner_hyperparameters(algorithm: str) -> tuple[str, ...]:
    """The names (`Config` fields) whose values `algorithm`'s learner can change during a run."""
    return HYPERPARAMETERS[algorithm_family(algorithm)]


# --- training probes: a family's learner alone, for timing its updates (`sampleforge bench`) ---


@dataclass(frozen=True)
class TrainingProbe:
    """A learner of one family on random data: `train_once` does the learning work of
    `samples_per_call` agent steps of sampling, in `sgd_steps_per_call` SGD steps. `close`
    ends whatever the probe started (a replay's sampler thread)."""

    train_once: Callable[[], None]
    samples_per_call: float
    sgd_steps_per_call: int
    close: Callable[[], None]


def _nothing() -> None:
    pass


def _dataset_probe(
    cfg: Config, learner: Trains, observation_space: gym.Space, action_space: gym.Space
) -> TrainingProbe:
    """The on-policy families: one call trains on one dataset (all its epochs)."""
    rnn_state_size = int(getattr(learner.model, "rnn_state_size", 0))
    data = random_dataset(cfg, observation_space, action_space, rnn_state_size, learner.device)

    def train_once() -> None:
        learner.train(data, _nothing)

    return TrainingProbe(
        train_once=train_once,
        samples_per_call=float(cfg.dataset_size),
        sgd_steps_per_call=learner.sgd_steps_per_dataset,
        close=_nothing,
    )


def _actor_critic_probe(
    cfg: Config, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> TrainingProbe:
    learner = ActorCriticLearner(cfg, observation_space, action_space, device)
    return _dataset_probe(cfg, learner, observation_space, action_space)


def _pqn_probe(
    cfg: Config, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> TrainingProbe:
    model = make_q_policy(cfg, observation_space, action_space)
    return _dataset_probe(cfg, PQNLearner(cfg, model, device), observation_space, action_space)


# Streams and transitions of a value-based probe's replay: enough to sample from without
# repeats dominating, small enough to fill in a moment (sampling cost grows with log size).
_PROBE_STREAMS = 4
_PROBE_REPLAY_SIZE = 2048


def _replay_probe(
    cfg: Config,
    observation_space: gym.Space,
    action_space: gym.Space,
    device: torch.device,
    make_learner: ReplayLearnerFactory,
    frame_stacked_keys: Sequence[str],
) -> TrainingProbe:
    """One call: the updates the learner worker makes from one take of sampled batches, each
    batch drawn by the replay's sampler thread as in training. Each update stands for
    batch_size / samples_per_insert inserted transitions (the ratio the limiter holds)."""
    slots = max(cfg.n_step + 4, min(cfg.replay_size, _PROBE_REPLAY_SIZE) // _PROBE_STREAMS)
    replay = ReplayBuffer(
        capacity=slots * _PROBE_STREAMS,
        num_streams=_PROBE_STREAMS,
        obs_specs=observation_specs(observation_space),
        action_spec=action_spec(action_space),
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        prioritized=cfg.prioritized_replay,
        alpha=cfg.priority_alpha,
        beta=cfg.priority_beta,
        stacked_keys=frame_stacked_keys,
    )
    # Sampling never waits for inserts here: the probe times updates, not the ratio.
    limiter = SampleToInsertRatio(cfg.samples_per_insert, 1, error_buffer=1e15)
    sampler = BackgroundSampler(replay, limiter, batch_size=cfg.batch_size, seed=0)
    try:
        fill_replay(sampler, action_space, cfg.rollout)
        # The stager is asked only for its sampler, replay, limiter and lags here: nothing
        # arrives through slots, so it gets no trajectory buffer or slot pool.
        stager = ReplayStager(
            cast(SharedTrajectoryBuffer, None),
            cast(SlotPool, None),
            sampler,
            policy_id=0,
            splits_per_worker=1,
            reward_scale=cfg.reward_scale,
            reward_clip=cfg.reward_clip,
            batches_per_take=_BATCHES_PER_TAKE,
        )
        model = make_policy_model(cfg, observation_space, action_space)
        learner = make_learner(cfg, model, stager, device, 1, 0)
    except BaseException:
        sampler.close()
        raise

    def train_once() -> None:
        batches = [sampler.get(timeout=60.0) for _ in range(_BATCHES_PER_TAKE)]
        learner.train(batches, _nothing)

    return TrainingProbe(
        train_once=train_once,
        samples_per_call=_BATCHES_PER_TAKE * cfg.batch_size / cfg.samples_per_insert,
        sgd_steps_per_call=_BATCHES_PER_TAKE,
        close=sampler.close,
    )


# fresh-trajectory family name -> how a stand-alone probe of its learner is built (the replay
# families' probes train REPLAY_LEARNERS)
PROBES: dict[str, Callable[[Config, gym.Space, gym.Space, torch.device], TrainingProbe]] = {
    "actor_critic": _actor_critic_probe,
    "pqn": _pqn_probe,
}


def make_training_probe(
    cfg: Config,
    observation_space: gym.Space,
    action_space: gym.Space,
    device: torch.device,
    frame_stacked_keys: Sequence[str] = (),
) -> TrainingProbe:
    """A learner of `cfg.algorithm`'s family on random data of these spaces, on `device`, for
    timing its updates; close it after use. `frame_stacked_keys`: the env's (`EnvInfo`), for
    a replay that stores frames as training's does."""
    family = algorithm_family(cfg.algorithm)
    if family in REPLAY_LEARNERS:
        learner = REPLAY_LEARNERS[family]
        return _replay_probe(
            cfg, observation_space, action_space, device, learner, frame_stacked_keys
        )
    return PROBES[family](cfg, observation_space, action_space, device)


@dataclass(frozen=True)
class StagingEstimate:
    """What one learner's staging of data takes, and the settings that size it (for the
    memory check's one-line refusal, `components/memory_estimate.py`)."""

    nbytes: int
    sized_by: str
    to_lower: str


def _actor_critic_staging(cfg: Config, layout: TrajectoryLayout | None) -> StagingEstimate:
    return StagingEstimate(
        nbytes=0 if layout is None else actor_critic_staging_bytes(cfg, layout),
        sized_by=f"datasets of {'max_' if cfg.max_batch_size else ''}batch_size "
        f"{cfg.max_batch_size or cfg.batch_size} x num_batches_per_epoch "
        f"{cfg.num_batches_per_epoch}",
        to_lower=f"{'max_' if cfg.max_batch_size else ''}batch_size or num_batches_per_epoch",
    )


def _check_replay_holds_its_streams(cfg: Config, num_streams: int) -> None:
    """Each env's stream of transitions has its own share of the replay (`ReplayLayout`)."""
    least = least_replay_capacity(num_streams, cfg.n_step)
    if cfg.replay_size < least:
        raise ConfigError(
            [
                f"replay_size {cfg.replay_size} is too small for {num_streams} streams (one per env "
                f"and agent): each needs n_step + 2 = {cfg.n_step + 2} "
                f"transitions of it, so at least {least}"
            ]
        )


def _replay_staging(cfg: Config, layout: TrajectoryLayout | None) -> StagingEstimate:
    nbytes = 0
    if layout is not None:
        num_streams = cfg.num_workers * cfg.worker_num_splits * layout.rows_per_slot
        _check_replay_holds_its_streams(cfg, num_streams)
        nbytes = estimate_replay_bytes(
            capacity=cfg.replay_size,
            num_streams=num_streams,
            obs_specs=layout.obs_specs,
            action_spec=layout.action_spec,
            n_step=cfg.n_step,
            stacked_keys=layout.frame_stacked_keys,
        )
    return StagingEstimate(
        nbytes=nbytes,
        sized_by=f"replays of replay_size {cfg.replay_size:,}",
        to_lower="replay_size",
    )


# family name -> what its learner stages data in
STAGING: dict[str, Callable[[Config, TrajectoryLayout | None], StagingEstimate]] = {
    "actor_critic": _actor_critic_staging,
    "value_based": _replay_staging,
    "pqn": _actor_critic_staging,
    "continuous_control": _replay_staging,
}


def staging_estimate(cfg: Config, layout: TrajectoryLayout | None) -> StagingEstimate:
    """The bytes one learner of `cfg.algorithm` stages data in, for a run whose trajectory
    buffer has `layout` (None: only the description)."""
    return STAGING[algorithm_family(cfg.algorithm)](cfg, layout)
