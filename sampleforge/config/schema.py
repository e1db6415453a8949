"""The one typed, documented place for every training setting.

`Config` is a frozen dataclass; each field carries its help text and group in its metadata,
and both the command-line flags (`sampleforge.config.cli_args`) and the Python API keywords are
derived from it. The hyper-parameters of each algorithm family are declared once, beside its
loss (`algo/actor_critic_settings.py: ActorCriticSettings`, `algo/value_settings.py:
ValueSettings`, `algo/continuous_settings.py: ContinuousSettings`; the replay families share
`algo/replay_settings.py: ReplaySettings`),
and `Config` inherits them, so a loss reads them from the config itself; this module declares
the rest. Validation lives in `validation.py`; nothing here starts processes or builds
environments (the algorithm modules bring torch).

Defaults follow the Sample Factory paper's Table A.5 (PPO clip 0.1, V-trace rho_bar = c_bar = 1,
Adam betas and eps, gradient clip 4, rollout 32, entropy 0.003, critic 0.5), except where small
fast vector tasks such as the default CartPole-v1 need other settings: lr 2e-3, one epoch of
four 512-sample minibatches per dataset, 48 envs per worker, reward scale 0.1 (the measurements
behind them: docs/design_notes.md). Each env family (`config/families.py`) and preset
(`config/presets.py`) brings its own values on top; explicit settings always win.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Literal, Optional

from sampleforge.algo.actor_critic_settings import ActorCriticSettings
from sampleforge.algo.continuous_settings import ContinuousSettings
from sampleforge.algo.settings import setting
from sampleforge.algo.value_settings import ValueSettings
from sampleforge.config.algorithms import AlgorithmName, uses_replay

StopOnName = Literal["training", "evaluation"]

# auto, cpu, cuda or cuda:K (validation checks the form; the model factory, that torch has it).
DeviceName = str
RnnType = Literal["none", "gru", "lstm"]
# Any encoder registered with sampleforge.models.registry, or module:name. The model factory
# checks the name (config cannot import models; see tests/test_layers.py).
EncoderName = str
ActivationName = Literal["elu", "relu", "tanh"]
LrSchedule = Literal["constant", "linear"]
LearnerPrecision = Literal["float32", "bfloat16"]
InitScheme = Literal["ppo", "unit", "unit_uniform"]
RestartBehavior = Literal["resume", "overwrite"]
EnvErrorPolicy = Literal["restart", "fail"]
PbtObjective = Literal["auto", "mean_return", "win_rate"]
PresetName = Literal["mujoco", "atari", "doom", "duel"]


# A config field: its default, the `--help` text and the help group it is listed under (one
# implementation for the algorithms' settings and the rest).
option = setting

# The help groups, in the order `--help`, `--print_config` and config.json list them (each
# algorithm family's group after the learner's, which every family shares).
GROUPS = (
    "experiment",
    "stopping",
    "sampling",
    "population",
    "distributed",
    "learner",
    "actor_critic",
    "replay",
    "value_based",
    "continuous_control",
    "model",
    "reliability",
    "evaluation",
    "logging",
)


def available_cores() -> int:
    """Cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Config(ActorCriticSettings, ValueSettings, ContinuousSettings):
    """Every setting of a training run. Field names are the CLI flags (`--num_workers 4`).

    The algorithms' settings (and `gamma`, which they share) are inherited, never repeated
    here. Fields are keyword-only in spirit: inheritance puts the base classes' fields first,
    so never build a Config positionally.
    """

    # --- experiment -----------------------------------------------------------------------------
    env: str = option(
        "CartPole-v1",
        "Environment: a Gymnasium id, a registered sampleforge "
        "name (e.g. atari_breakout), or module:EnvId (imports module, which "
        "registers EnvId with Gymnasium).",
        "experiment",
    )
    drop_obs_keys: str = option(
        "",
        "Keys of the env's Dict observations to drop, comma separated (e.g. a Text "
        "'mission' the models cannot take). Every env built for the run goes without them.",
        "experiment",
    )
    experiment: Optional[str] = option(
        None, "Experiment name: the folder under train_dir. Default: the env name.", "experiment"
    )
    train_dir: str = option("train_dir", "Root folder of all experiments.", "experiment")
    restart_behavior: RestartBehavior = option(
        "resume",
        "What to do when the experiment folder exists: resume from its latest "
        "checkpoint, or overwrite (delete it and start fresh).",
        "experiment",
    )
    preset: Optional[PresetName] = option(
        None,
        "Settings that make an env family learn well, under any you give yourself: "
        "mujoco (continuous control), atari, doom (VizDoom from pixels), duel (self-play).",
        "experiment",
    )
    seed: Optional[int] = option(
        None,
        "Random seed for torch, numpy and the envs, in [0, 2**32) less the offsets of the "
        "seeds derived per policy and worker. Default: random.",
        "experiment",
    )
    device: DeviceName = option(
        "auto",
        "Device of the learner and inference workers: cpu, cuda, cuda:K, or auto (cuda when "
        "available). With distributed, cuda and auto mean cuda:LOCAL_RANK (one GPU a rank).",
        "experiment",
    )
    algorithm: AlgorithmName = option(
        "appo",
        "appo: PPO clipping, advantages from V-trace or GAE (with_vtrace); impala: V-trace "
        "actor-critic without a trust region; a3c: advantage actor-critic without off-policy "
        "correction; dqn, rainbow, qrdqn, iqn, fqf, mdqn: Q-learning from a replay; pqn: "
        "Q(lambda) on fresh rollouts; ddpg, td3, sac, crossq: continuous control from a replay "
        "(docs/off_policy.md).",
        "experiment",
    )

    # --- when to stop ---------------------------------------------------------------------------
    train_for_env_steps: int = option(
        10_000_000, "Stop after this many env steps (frames: agent steps x frameskip).", "stopping"
    )
    train_for_seconds: Optional[float] = option(
        None, "Stop after this many seconds of training.", "stopping"
    )
    stop_at_mean_return: Optional[float] = option(
        None,
        "Stop once the mean return over the last 100 episodes (with several policies: the "
        "mean of each policy's own last-100 means; with stop_on evaluation, an evaluation's "
        "mean) reaches this. Default: the env's reward threshold; pass inf to disable.",
        "stopping",
    )
    stop_on: StopOnName = option(
        "training",
        "Which mean return stop_at_mean_return judges: the last 100 training episodes, or "
        "each evaluation's (needs eval_every_env_steps). A value-based method deploys its "
        "greedy policy, which its epsilon-greedy training episodes understate.",
        "stopping",
    )

    # --- sampling -------------------------------------------------------------------------------
    serial_mode: bool = option(
        False, "Run every component in this one process (debugging, tests).", "sampling"
    )
    serial_snapshot: bool = option(
        True,
        "In serial mode, snapshot every component at the stop "
        "(serial_state.pt: pickled envs, verified against its "
        "SHA-256 sidecar before loading) so that a resume continues "
        "bit for bit; false: resume from the checkpoint only.",
        "sampling",
    )
    num_workers: int = option(
        2,
        "Rollout worker processes; auto: one per core (paper, appendix B).",
        "sampling",
        auto=available_cores,
    )
    num_envs_per_worker: int = option(
        48, "Environments simulated by each rollout worker.", "sampling"
    )
    worker_num_splits: int = option(
        2, "Groups the worker's envs are split into; 2 gives double-buffered sampling.", "sampling"
    )
    num_inference_workers: int = option(1, "Inference worker processes per policy.", "sampling")
    worker_cpu_affinity: bool = option(
        False,
        "Pin each rollout worker process to one core, round-robin over the cores this run may "
        "use (a replacement keeps its core); the learner and inference workers float (paper, "
        "appendix). Linux only.",
        "sampling",
    )
    rollout: int = option(
        32, "Trajectory length T: env steps per trajectory sent to the learner.", "sampling"
    )
    max_policy_lag: int = option(
        100, "Samples older than this many SGD steps are dropped from training.", "sampling"
    )
    sampling_lead_sgd_steps: Optional[int] = option(
        None,
        "Back-pressure on sampling: rollout workers start trajectories for the learner's "
        "next datasets only once it has at most this many SGD steps to go before it needs "
        "them, and only as many as those datasets lack. Mean policy lag is then about (SGD "
        "steps per dataset + this) / 2 when the learner is the slow part. None: the learner "
        "measures it, so it neither waits for data nor lets data wait, up to a mean lag of "
        "about 10; 0 samples only while the learner waits.",
        "sampling",
    )

    # --- policies, self-play and population-based training ----------------------------------------
    num_policies: int = option(
        1,
        "Policies trained at once (each with its own learner and inference workers).",
        "population",
    )
    policy_mapping: str = option(
        "random",
        "Who plays each agent seat, drawn at every episode start: random (a random "
        "trained policy; opponents may be frozen snapshots), seat (seat i plays policy i mod "
        "num_policies), or package.module:function (see docs/multi_agent.md).",
        "population",
    )
    num_frozen_opponents: int = option(
        0,
        "Frozen snapshots of trained policies kept as opponents (self-play against past "
        "selves); they act but are never trained.",
        "population",
    )
    frozen_opponent_prob: float = option(
        0.2,
        "Probability that an opponent seat is played by a frozen snapshot (random "
        "mapping, with num_frozen_opponents > 0).",
        "population",
    )
    snapshot_every_env_steps: int = option(
        200_000,
        "Env steps between refreshing one frozen snapshot (round robin) with a random "
        "trained policy's current weights.",
        "population",
    )
    with_pbt: bool = option(
        False,
        "Population-based training over the num_policies policies (paper A.3.1).",
        "population",
    )
    pbt_period_env_steps: int = option(
        500_000, "Env steps (all policies together) between PBT rounds.", "population"
    )
    pbt_objective: PbtObjective = option(
        "auto",
        "What PBT ranks policies by: mean_return, win_rate (self-play), or auto "
        "(win_rate when the env reports match outcomes).",
        "population",
    )
    pbt_replace_threshold: float = option(
        0.0,
        "A worst-30% policy copies a best-30% policy only when their objectives differ by "
        "more than this.",
        "population",
    )
    pbt_mutation_probability: float = option(
        0.15, "Chance that PBT mutates each hyperparameter of a bottom-70% policy.", "population"
    )
    pbt_mutation_factor: float = option(
        1.2, "PBT multiplies or divides a mutated hyperparameter by this.", "population"
    )

    # --- learner --------------------------------------------------------------------------------
    learner_torch_threads: int = option(
        1,
        "Torch threads of each learner process; auto: one per core. On a CPU machine whose "
        "learner is the bottleneck (conv models), more threads let it use the cores the other "
        "processes leave idle.",
        "learner",
        auto=available_cores,
    )
    batch_size: int = option(
        512,
        "Minibatch size in samples; a multiple of rollout (minibatches hold whole trajectories).",
        "learner",
    )
    num_batches_per_epoch: int = option(
        4,
        "Minibatches per dataset; the dataset is batch_size x num_batches_per_epoch samples.",
        "learner",
    )
    max_batch_size: Optional[int] = option(
        None,
        "Datasets that grow with the learner's speed (on-policy algorithms): while the run is "
        "lag-bound (the sampling lead at its cap and the learner waiting for data over a fifth "
        "of its time), datasets double, up to minibatches of this many samples; the number of "
        "minibatches stays, so the policy lag in SGD steps does too. For learners faster than "
        "the sampling their lag bound allows (a GPU). None: batch_size throughout.",
        "learner",
    )
    num_epochs: int = option(1, "Passes of SGD over each dataset.", "learner")
    early_num_epochs: Optional[int] = option(
        None,
        "Passes of SGD over each dataset while the policy has trained on fewer than "
        "early_env_steps env steps, num_epochs after; None: num_epochs throughout. Reusing "
        "each sample more while the first scores are learned buys frames where they matter, "
        "and costs learner time only there.",
        "learner",
    )
    early_env_steps: int = option(
        0, "Env steps (frames) for which early_num_epochs applies.", "learner"
    )
    shuffle_samples: bool = option(
        True,
        "Feed-forward APPO with GAE (with_vtrace false): minibatches of single samples "
        "shuffled across the dataset, advantages computed once per dataset (the PPO recipe). "
        "False, V-trace, A3C and recurrent models: minibatches of whole trajectories.",
        "learner",
    )
    learning_rate: float = option(2e-3, "Adam learning rate (paper: 1e-4 for VizDoom).", "learner")
    lr_schedule: LrSchedule = option(
        "constant",
        "Learning-rate schedule: constant, or linear decay to 0 at lr_decay_env_steps.",
        "learner",
    )
    lr_decay_env_steps: int = option(
        0,
        "Env steps over which the linear schedule decays the rate to 0, where it stays (0: "
        "train_for_env_steps). A horizon past the budget keeps a published schedule's rates in "
        "a shorter run.",
        "learner",
    )
    adam_beta1: float = option(0.9, "Adam beta1.", "learner")
    adam_beta2: float = option(0.999, "Adam beta2.", "learner")
    adam_eps: float = option(1e-6, "Adam epsilon.", "learner")
    max_grad_norm: float = option(4.0, "Gradient-norm clipping threshold (0 disables).", "learner")
    learner_precision: LearnerPrecision = option(
        "float32",
        "Precision of the learner's observation encoders: float32, or bfloat16 (mixed "
        "precision: their convolutions and matrix products in bfloat16 under torch.autocast; "
        "weights, optimizer state, cores, heads and losses stay float32). Pays on hardware "
        "that computes bfloat16 (AVX512-BF16 or AMX CPUs, recent GPUs): a conv learner's "
        "step alone took a quarter to a third less time on an AVX512-BF16 CPU. Actor-critic "
        "and value-based families; inference always runs float32.",
        "learner",
    )
    learner_bootstrap_thread: bool = option(
        False,
        "Replay algorithms (dqn, rainbow, qrdqn, iqn, fqf, mdqn, ddpg, td3, sac, crossq): "
        "run the passes of an update that need no gradient (the bootstrap from the target "
        "networks, and the online Q-network's argmax) on a second thread, beside the online "
        "network's forward pass, and take the copy a non-finite step is undone from there "
        "while the backward pass runs; value-based learners also evaluate the next batch's "
        "target pass during the backward pass. The same arithmetic on the same weights. Pays "
        "when the learner is the bottleneck on a CPU with a core to spare; use it with "
        "learner_torch_threads 1.",
        "learner",
    )
    learner_threads_spin: bool = option(
        False,
        "The learner's torch threads wait up to about 30 ms for the next parallel region "
        "before they sleep, instead of sleeping at once. Pays with learner_torch_threads "
        "above 1 on a machine the run has to itself, where the learner bounds it and the "
        "actors leave it a core (small models, whose update is many short parallel regions: "
        "SAC on 2 cores made 110 updates a second with 2 threads and this, 40 without, 88 on "
        "one thread). Beside other busy processes the threads wait on each other at every "
        "region (13 a second beside a test run): use one thread there.",
        "learner",
    )
    learner_threads_adaptive: bool = option(
        False,
        "With learner_torch_threads above 1: time the learner's SGD steps a second (waits "
        "included) on one thread against learner_torch_threads, a few seconds each, one to "
        "four minutes apart, and keep the faster. Bounds what learner_threads_spin loses "
        "beside other busy processes (where two spinning threads are slower than one) to a "
        "trial's length; the count in use is reported as perf/learner_threads. Not with "
        "learner_bootstrap_thread; ignored in serial mode and data-parallel runs.",
        "learner",
    )
    reward_scale: float = option(
        0.1,
        "Rewards are multiplied by this before learning (keeps value targets near unit scale).",
        "learner",
    )
    reward_clip: Optional[float] = option(
        None, "Rewards are clipped to [-x, x] after scaling; None disables.", "learner"
    )
    normalize_obs: bool = option(
        False, "Running normalisation of vector observations (saved with the model).", "learner"
    )
    normalize_pixels: bool = option(
        False,
        "Running per-pixel mean/std normalisation of uint8 "
        "image observations (saved with the model), as Sample "
        "Factory's normalize_input: static backgrounds become 0.",
        "learner",
    )
    normalize_returns: bool = option(
        False,
        "Running normalisation of value targets: the critic "
        "predicts returns in units of their running mean/std "
        "(saved with the model), so the value loss does not depend "
        "on the reward's scale.",
        "learner",
    )

    # --- model ----------------------------------------------------------------------------------
    encoder: EncoderName = option(
        "auto",
        "Observation encoder: mlp, conv_simple (the paper's "
        "3 conv + fc), conv_nature (the DQN Nature network of "
        "CleanRL's and Sample Factory's Atari PPO), resnet "
        "(IMPALA's residual network), auto by observation shape "
        "(conv_simple for images), a name registered with "
        "sampleforge.models.registry.register_encoder, or "
        "module:name (imports module, which registers name; see "
        "docs/custom_model.md).",
        "model",
    )
    mlp_hidden_sizes: tuple[int, ...] = option(
        (64, 64), "Hidden layer sizes of the MLP encoder, comma separated.", "model"
    )
    activation: ActivationName = option("tanh", "Activation of hidden layers.", "model")
    rnn: RnnType = option(
        "none", "Recurrent core: none, gru or lstm (trained by BPTT over the rollout).", "model"
    )
    rnn_size: int = option(128, "Hidden size of the recurrent core.", "model")
    shared_weights: bool = option(True, "Actor and critic share the encoder and core.", "model")
    init_scheme: InitScheme = option(
        "ppo",
        "Initial weights, orthogonal: ppo (gain sqrt 2 for hidden layers, 0.01 for the "
        "policy head, 1 for the value head, as CleanRL), unit (gain 1 for every linear and "
        "conv layer, as Sample Factory; recurrent cores keep their own) or unit_uniform (unit "
        "with ppo's policy head: a uniform first policy).",
        "model",
    )

    # --- distributed (torchrun; docs/distributed.md) --------------------------------------------
    distributed: bool = option(
        False,
        "Data-parallel training: launched by torchrun, every rank runs a whole system (the "
        "settings here apply per rank) and the learners average their gradients at every SGD "
        "step (gloo on CPU, NCCL on CUDA). Rank 0 alone logs, evaluates and checkpoints.",
        "distributed",
    )
    sync_fraction: float = option(
        1.0,
        "DD-PPO's straggler rule (on-policy algorithms): a round of SGD begins once this "
        "fraction of the ranks have a dataset ready; the others take part with weight 0 and "
        "keep their data for a later round. 1: every round waits for every rank.",
        "distributed",
    )
    distributed_timeout_sec: float = option(
        120.0,
        "How long a learner waits for the other ranks at a collective (start, a round, an "
        "all-reduce) before the run fails with an error naming the wait.",
        "distributed",
    )

    # --- reliability ----------------------------------------------------------------------------
    env_error_policy: EnvErrorPolicy = option(
        "restart",
        "When an env raises or returns non-finite data: restart that env and go on "
        "(the failed step is never trained on), or fail the run.",
        "reliability",
    )
    max_consecutive_env_faults: int = option(
        100,
        "With env_error_policy restart: the run fails when one env faults this many steps "
        "in a row (restarting it, or its worker, would only repeat the fault).",
        "reliability",
    )
    env_step_timeout_sec: float = option(
        60.0,
        "A rollout worker whose envs make no progress for this long is killed and replaced.",
        "reliability",
    )
    max_component_restarts: int = option(
        10,
        "Replacements of crashed rollout and inference workers allowed before the run fails.",
        "reliability",
    )
    max_consecutive_skipped_updates: int = option(
        20,
        "The run fails after this many SGD steps in a row with a non-finite loss, "
        "gradient or resulting weights (each one is skipped, leaving the model untouched).",
        "reliability",
    )

    # --- evaluation -----------------------------------------------------------------------------
    eval_every_env_steps: Optional[int] = option(
        None,
        "Evaluate a frozen copy of the policy every this many env steps, in a separate "
        "process, and log eval/ metrics; None disables.",
        "evaluation",
    )
    eval_episodes: int = option(
        10,
        "Episodes per evaluation (also the default of the eval and enjoy commands).",
        "evaluation",
    )
    eval_deterministic: bool = option(
        True, "Evaluate with the most likely action instead of sampling.", "evaluation"
    )
    eval_save_best: bool = option(
        True,
        "Keep the weights with the best evaluation mean return "
        "in <experiment>/eval/p<policy>/best.pt.",
        "evaluation",
    )

    # --- logging and checkpoints ----------------------------------------------------------------
    report_every_sec: float = option(
        5.0, "Seconds between console status lines and metric rows.", "logging"
    )
    save_every_sec: float = option(120.0, "Seconds between periodic checkpoints.", "logging")
    keep_checkpoints: int = option(3, "Periodic checkpoints kept (plus the best).", "logging")
    save_replay: bool = option(
        False,
        "Value-based: put the replay in every checkpoint, so a resume continues with it "
        "(else the replay refills first). Checkpoints grow by the replay's size.",
        "logging",
    )
    tensorboard: bool = option(True, "Write TensorBoard scalars.", "logging")
    with_wandb: bool = option(
        False,
        "Log the same scalars and the config to a Weights & Biases "
        "run named after the experiment (needs the wandb extra: pip "
        "install 'sampleforge[wandb]'); a resumed experiment continues "
        "its run. WANDB_MODE=offline logs without an account.",
        "logging",
    )
    wandb_project: str = option("sampleforge", "W&B project of the run.", "logging")
    wandb_entity: Optional[str] = option(
        None, "W&B team or user the run belongs to (None: your default entity).", "logging"
    )
    wandb_group: Optional[str] = option(
        None, "W&B group of the run (e.g. one name for the seeds of one setting).", "logging"
    )

    def replace(self, **changes: Any) -> "Config":
        """A copy with some fields changed (not validated: call `validate_config`)."""
        return dataclasses.replace(self, **changes)

    @property
    def experiment_name(self) -> str:
        """The experiment folder's name: `experiment`, or the env name when unset (with any
        '/' or ':' of names like `pettingzoo:family/env` made '_')."""
        return self.experiment or self.env.replace("/", "_").replace(":", "_")

    @property
    def obs_keys_to_drop(self) -> tuple[str, ...]:
        """`drop_obs_keys` as a tuple of names (empty entries ignored)."""
        return tuple(k.strip() for k in self.drop_obs_keys.split(",") if k.strip())

    @property
    def envs_per_split(self) -> int:
        return self.num_envs_per_worker // self.worker_num_splits

    @property
    def dataset_size(self) -> int:
        """Samples the learner collects before a round of `num_epochs` SGD passes."""
        return self.batch_size * self.num_batches_per_epoch

    @property
    def max_dataset_size(self) -> int:
        """The largest dataset `max_batch_size` lets datasets grow to (what is allocated)."""
        return (self.max_batch_size or self.batch_size) * self.num_batches_per_epoch

    @property
    def sgd_steps_per_1000_samples(self) -> float:
        """The learning work per sample (a sample is one agent step, frameskip aside): what a
        throughput figure must be quoted with to compare with another system. A replay learner
        makes one step per batch of `batch_size` samples drawn, `samples_per_insert` per sample
        stored; an on-policy one `num_epochs` passes of minibatches over each dataset."""
        if uses_replay(self.algorithm):
            return 1000.0 * self.samples_per_insert / self.batch_size
        return 1000.0 * self.num_epochs * self.num_batches_per_epoch / self.dataset_size


def _group_rank(f: dataclasses.Field) -> int:
    group = f.metadata["group"]
    return GROUPS.index(group) if group in GROUPS else len(GROUPS)


def config_fields() -> list[dataclasses.Field]:
    """The fields of `Config`, group by group in the order of GROUPS, each group's fields in
    the order they are declared (a group not in GROUPS comes last)."""
    return sorted(dataclasses.fields(Config), key=_group_rank)  # sorted() is stable


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """A JSON-ready dict of every setting, in the order of `config_fields`."""
    out = dataclasses.asdict(cfg)
    for name in ("mlp_hidden_sizes", "critic_hidden_sizes"):
        value = getattr(cfg, name)
        out[name] = None if value is None else list(value)
    return {f.name: out[f.name] for f in config_fields()}
