"""The Python API: one object per training run, trained again and again with the same processes.

    from sampleforge import APPO

    with APPO("CartPole-v1", num_workers=2, seed=1) as model:
        model.train(200_000)                    # processes start on first use
        model.train(100_000)                    # same processes, counters go on
        print(model.evaluate(10).mean_return)   # in this process, current weights
        model.save("cartpole.pt")
    model = APPO.load("cartpole.pt")            # weights only; no process until trained

An outside driver (a population, a search: seed 004's workflow) runs several such objects and
moves weights and hyperparameters between `train` calls:

    member.set_parameters({0: other.experiment_dir})          # its newest valid checkpoint
    member.set_hyperparameters({"learning_rate": 3e-4})       # from the next dataset on
    member.hyperparameters                                     # {"learning_rate": 3e-4, ...}

Responsibility: map the calls of every algorithm's class (`APPO`, `IMPALA`, `A3C`; `DQN`,
`Rainbow`, `QRDQN`, `IQN`, `FQF`, `MDQN`; `PQN`; `DDPG`, `TD3`, `SAC`, `CrossQ`) onto one
`Runner` (whose processes persist, paused, between `train` calls) and onto a local copy of each
policy's weights for `predict` and `evaluate`. Every config field is a keyword (or a
`policy_kwargs` entry), validated exactly as on the command line; weights come from a state
dict, a file or a folder of checkpoints (`parameter_sources.py`); the hyperparameters a learner
can change during a run are checked here (`hyperparameters.py`) before the runner sends them.
`Algorithm` does it all through the runner and the `Policy` protocol, so a class is only its
`algorithm` name: which network, learner and settings it brings is the registries' business
(`config/algorithms.py`, `models/factory.py`, `learners/registry.py`).

Must not: compute anything about learning, or reach into components' processes other than
through the runner and the shared weights.
"""

from __future__ import annotations

import math
import numbers
import re
import time
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Union

import numpy as np
import torch

from sampleforge.api.env_argument import EnvArgument, check_sendable, env_name
from sampleforge.api.hyperparameters import check_hyperparameters, starting_hyperparameters
from sampleforge.api.parameter_sources import read_parameter_source
from sampleforge.comms.main_guard import raise_unless_main_guarded
from sampleforge.components.runner import Runner
from sampleforge.config import Config, ConfigError, config_fields, config_to_dict, make_config
from sampleforge.config.validation import suggest_name
from sampleforge.envs.registry import UnknownEnvError
from sampleforge.evaluation.episodes import DEFAULT_NUM_ENVS, EvaluationResult, run_episodes
from sampleforge.evaluation.local_policy import LocalPolicy, WeightsDoNotFit
from sampleforge.evaluation.policy_files import (
    IMPORTING_SETTINGS,
    MACHINE_LOCAL_SETTINGS,
    load_saved_policy,
    save_model_file,
)
from sampleforge.telemetry import RunSummary
from sampleforge.telemetry.training_callback import TrainingCallback

StateDict = dict[str, torch.Tensor]
ParameterSource = Union[Mapping[str, torch.Tensor], str, Path]
# --algorithm name -> its class (filled as the classes below are declared), for messages that
# name the class to use.
_CLASSES: dict[str, type["Algorithm"]] = {}


class Algorithm:
    """A training run of one algorithm; see the module docstring.

    Subclasses set `algorithm`, one of `--algorithm`'s names (`config/algorithms.py`).
    """

    algorithm: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "algorithm" in cls.__dict__:
            _CLASSES[cls.algorithm] = cls

    def __init__(
        self,
        env: EnvArgument,
        *,
        encoder: str | None = None,
        num_envs_per_worker: int | None = None,
        num_workers: int | None = None,
        device: str | None = None,
        policy_kwargs: Mapping[str, Any] | None = None,
        **config: Any,
    ) -> None:
        """Validate the settings, lock and prepare the experiment folder; no process starts yet.
        The experiment stays locked (no other run may use it) until `close`.

        env: a Gymnasium id, a registered sampleforge env name, or a function that builds an
            env (`fn()` or `fn(context: EnvContext)`; top-level, so worker processes can
            import it). policy_kwargs and config: any `Config` field, model settings
            (mlp_hidden_sizes, activation, rnn, ...) and training settings (learning_rate,
            gamma, ...) alike, each given in one place only. A setting not given (None for
            the named ones) comes from the env's family or the `Config` default, as on the
            command line. Unless given, `experiment` is a new unique name (nothing is
            resumed) and `stop_at_mean_return` is off (`train(n)` trains n env steps).
        Raises ConfigError listing every bad setting, UnknownEnvError for an unknown env.
        """
        name = env_name(env)
        settings = _merge_settings(
            policy_kwargs,
            config,
            encoder=encoder,
            num_envs_per_worker=num_envs_per_worker,
            num_workers=num_workers,
            device=device,
        )
        settings.setdefault("experiment", _unique_experiment(self.algorithm, name))
        settings.setdefault("stop_at_mean_return", math.inf)
        cfg = make_config(env=name, algorithm=self.algorithm, **settings)
        if not cfg.serial_mode:
            check_sendable(env)
            raise_unless_main_guarded(f"{type(self).__name__}(...)")
        self._runner = Runner(cfg)
        self._started = False
        self._pending: dict[int, StateDict] = {}
        self._policies: dict[int, LocalPolicy] = {}
        self._versions: dict[int, int] = {}
        # {policy_id: {name: value}}: hyperparameters set since construction (the learners
        # start from the config's; those set before the processes start are sent then).
        self._hyperparameters: dict[int, dict[str, float]] = {}
        # Ends the worker processes when this object is closed, collected, or at exit.
        self._finalizer = weakref.finalize(self, self._runner.close)

    # --- properties -----------------------------------------------------------------------------
    @property
    def cfg(self) -> Config:
        """The validated config of this run."""
        return self._runner.cfg

    @property
    def experiment_dir(self) -> Path:
        """The experiment folder (config.json, progress.csv, checkpoints/, summary.json)."""
        return self._runner.exp.path

    @property
    def env_steps(self) -> int:
        """Env steps trained so far (all `train` calls; once the processes run, a resumed
        experiment's steps included)."""
        return self._runner.progress.total_env_steps

    @property
    def hyperparameters(self) -> dict[str, float]:
        """Policy 0's current values of what `set_hyperparameters` may change: the config's,
        overridden by what was set (`hyperparameters_of` for another policy)."""
        return self.hyperparameters_of(0)

    def hyperparameters_of(self, policy_id: int) -> dict[str, float]:
        """A trained policy's current hyperparameters (see `hyperparameters`)."""
        self._check_policy_id(policy_id)
        return {**starting_hyperparameters(self.cfg), **self._hyperparameters.get(policy_id, {})}

    @property
    def runner(self) -> Runner:
        """The underlying runner (advanced use: `runner.host.pids()`, `runner.status()`)."""
        return self._runner

    # --- training -------------------------------------------------------------------------------
    def train(
        self,
        train_for_env_steps: int,
        *,
        callback: TrainingCallback | None = None,
        callback_every_env_steps: int | None = None,
        seconds: float | None = None,
    ) -> RunSummary:
        """Train `train_for_env_steps` more env steps (or `seconds`), then pause the workers.

        callback(status: TrainingStatus) runs after every learner iteration, or every
        `callback_every_env_steps` env steps; returning False stops training early
        (`stopped_because == "callback"`). Returns the summary of this call.
        """
        if (
            isinstance(train_for_env_steps, (bool, float))
            or not isinstance(train_for_env_steps, numbers.Integral)
            or train_for_env_steps < 1
        ):
            raise ValueError(
                f"train_for_env_steps: {train_for_env_steps!r} must be an integer >= 1"
            )
        if seconds is not None and (
            isinstance(seconds, bool)
            or not isinstance(seconds, numbers.Real)
            or not float(seconds) > 0
        ):
            raise ValueError(f"seconds: {seconds!r} must be a number > 0 (or None)")
        runner = self._ensure_started()
        target = self.env_steps + int(train_for_env_steps)
        return runner.train(
            until_env_steps=target,
            seconds=seconds,
            callback=callback,
            callback_every_env_steps=callback_every_env_steps,
        )

    # --- parameters -----------------------------------------------------------------------------
    def get_parameters(self) -> dict[int, StateDict]:
        """{policy_id: state_dict}: copies of the current weights (the learner's newest)."""
        return {
            p: {k: v.detach().clone() for k, v in self._policy(p).model.state_dict().items()}
            for p in range(self.cfg.num_policies)
        }

    def set_parameters(self, parameters: Mapping[int, ParameterSource]) -> None:
        """Replace weights: {policy_id: a state dict, or the path of a checkpoint or model
        file, or of a folder of checkpoints}.

        A folder is an experiment folder, its `checkpoints/` folder or a `checkpoints/p<id>/`
        folder; the newest checkpoint there that verifies is used, as a resume does.

        The learner loads them (and checkpoints them) and republishes them to the inference
        workers before this returns; before the first `train` they are kept and applied when
        the workers start. Only weights change: optimizer state and counters stay.
        """
        self._check_open()
        state_dicts = {p: self._checked_weights(p, source) for p, source in parameters.items()}
        for p, state_dict in state_dicts.items():
            self._policy(p, refresh=False).load_state_dict(state_dict)
        if self._started:
            self._runner.load_weights(state_dicts)
        else:
            self._pending.update(state_dicts)

    def set_hyperparameters(
        self, values: Mapping[str, float], policy_id: int | None = None
    ) -> None:
        """Change training hyperparameters of policy `policy_id` (None: every trained policy)
        from its learner's next dataset on: between `train` calls, from a training callback,
        or before the first `train` (kept and sent when the processes start).

        The names are those this algorithm's learner can change (`hyperparameters` lists
        them: learning_rate, entropy_coeff and adam_beta1 for the actor-critic family; the
        learning rates for the others); a schedule (`lr_schedule`) decays from the new value.
        ValueError, before anything is sent, for an unknown name or a value its setting does
        not allow; refused with `with_pbt`, whose population sets these values itself.
        """
        self._check_open()
        if self.cfg.with_pbt:
            raise ValueError(
                "set_hyperparameters: with_pbt=True: the population sets the hyperparameters; "
                "drive a population from outside with with_pbt=False instead"
            )
        checked = check_hyperparameters(self.cfg, values)
        if policy_id is not None:
            self._check_policy_id(policy_id)
        policies = range(self.cfg.num_policies) if policy_id is None else [policy_id]
        for p in policies:
            self._hyperparameters.setdefault(p, {}).update(checked)
            if self._started:
                self._runner.set_hyperparameters(p, checked)

    # --- acting ---------------------------------------------------------------------------------
    def predict(
        self,
        observation: Any,
        state: np.ndarray | None = None,
        deterministic: bool = False,
        policy_id: int = 0,
    ) -> tuple[Any, np.ndarray | None]:
        """(action, state) for one observation or a batch, with the current weights.

        A batch has one more leading axis than the observation space. `state` is the recurrent
        state returned last time (None to start an episode; always None without a recurrent
        core). Actions are in the form `env.step` takes.
        """
        return self._policy(policy_id).predict(observation, state, deterministic)

    def evaluate(
        self,
        num_episodes: int = 10,
        *,
        deterministic: bool = True,
        seed: int | None = None,
        num_envs: int = DEFAULT_NUM_ENVS,
        policy_id: int = 0,
    ) -> EvaluationResult:
        """Play `num_episodes` whole episodes in this process with a copy of the current
        weights; returns per-episode returns and lengths. Same seed and weights, same result.
        """
        return run_episodes(
            self._policy(policy_id),
            self._runner.env_spec,
            num_episodes,
            seed=seed,
            deterministic=deterministic,
            num_envs=num_envs,
        )

    # --- files ----------------------------------------------------------------------------------
    def save(self, path: Union[str, Path]) -> Path:
        """Write the config and current weights of every policy to one file; returns its path.

        Load it with `<Algorithm>.load(path)` (weights only: no optimizer state; what a model
        file may do when loaded: see `load`).
        """
        return save_model_file(path, self.cfg, self.get_parameters(), self.env_steps)

    @classmethod
    def load(
        cls,
        path: Union[str, Path],
        env: EnvArgument | None = None,
        *,
        checkpoint: str = "latest",
        trust_config: bool = False,
        **config: Any,
    ) -> "Algorithm":
        """A new run with the weights and config saved at `path`: a file written by `save`, or
        an experiment folder (at `checkpoint`: latest, best, best_eval).

        Pass `env` again if it was a function. `config` overrides saved settings (e.g.
        num_workers); the run is a new experiment unless `experiment` is given. From a model
        file, the saver's machine-local settings (`MACHINE_LOCAL_SETTINGS`: train_dir, device,
        worker counts, W&B) are not taken, and a config that names a module to import (a
        `module:EnvId` env, a `module:name` encoder, a custom policy_mapping) is refused with
        PolicyFileError unless `trust_config=True` or those settings are given here.
        """
        replacing = {k: v for k, v in config.items() if k in IMPORTING_SETTINGS and v is not None}
        if env is not None:
            replacing["env"] = env_name(env)
        saved = load_saved_policy(path, checkpoint, trust_config=trust_config, replacing=replacing)
        if saved.cfg.algorithm != cls.algorithm:
            right = _CLASSES.get(saved.cfg.algorithm)
            raise ValueError(
                f"{path} holds a {saved.cfg.algorithm} model; load it with "
                f"{right.__name__ if right else saved.cfg.algorithm.upper()}.load, "
                f"not {cls.__name__}.load"
            )
        settings = config_to_dict(saved.cfg)
        new_run = ("env", "algorithm", "experiment", "restart_behavior", "stop_at_mean_return")
        # A new run, with the API's defaults for these (and, from a model file, this machine's
        # and this user's: the family's or the defaults, unless given here).
        for name in new_run + (MACHINE_LOCAL_SETTINGS if saved.from_model_file else ()):
            settings.pop(name, None)
        settings.update(config)
        try:
            model = cls(env if env is not None else saved.cfg.env, **settings)
        except UnknownEnvError as err:
            raise UnknownEnvError(
                f"{err} (pass env=<the function that builds it> to load {path})"
            ) from None
        model.set_parameters(saved.state_dicts)
        return model

    # --- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every worker process. Safe to call twice; also runs when the object is
        collected or the interpreter exits."""
        self._finalizer()

    def __enter__(self) -> "Algorithm":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(env={self.cfg.env!r}, experiment="
            f"{self.cfg.experiment_name!r}, env_steps={self.env_steps})"
        )

    # --- helpers --------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _ensure_started(self) -> Runner:
        self._check_open()
        if not self._started:
            try:
                self._runner.start()
            except BaseException:
                # The failed start closed the runner and let go of the experiment: so is
                # this object, or it would start again on an experiment no longer its own.
                self._finalizer()
                raise
            self._started = True
            if self._pending:
                self._runner.load_weights(self._pending)
                self._pending = {}
            for p, values in self._hyperparameters.items():
                self._runner.set_hyperparameters(p, values)
        return self._runner

    def _policy(self, policy_id: int, refresh: bool = True) -> LocalPolicy:
        """The local copy of a policy; with `refresh`, holding the newest weights."""
        self._check_policy_id(policy_id)
        if policy_id not in self._policies:
            env = self._runner.env
            self._policies[policy_id] = LocalPolicy.build(
                self.cfg, env.observation_space, env.action_space
            )
            self._versions[policy_id] = -1
        policy = self._policies[policy_id]
        if refresh and (self._started or policy_id not in self._pending):
            weights = self._ensure_started().wiring.weights[policy_id]
            self._versions[policy_id] = weights.pull(policy.model, self._versions[policy_id])
        return policy

    def _checked_weights(self, policy_id: int, source: ParameterSource) -> StateDict:
        self._check_policy_id(policy_id)
        if isinstance(source, (str, Path)):
            source = read_parameter_source(source, policy_id)
        if not isinstance(source, Mapping):
            raise TypeError(
                f"parameters for policy {policy_id}: expected a state dict or the path of a "
                f"checkpoint, model file or checkpoint folder, got {type(source).__name__}"
            )
        state_dict = {k: torch.as_tensor(v).detach().cpu().clone() for k, v in source.items()}
        for name, tensor in state_dict.items():
            # Published before any checkpoint would check them: NaN weights would reach the
            # inference workers and fail the run there.
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise ValueError(
                    f"parameters for policy {policy_id}: {name} holds non-finite values"
                )
        env = self._runner.env
        probe = LocalPolicy.build(self.cfg, env.observation_space, env.action_space)
        try:
            probe.load_state_dict(state_dict)
        except WeightsDoNotFit as err:
            raise ValueError(f"parameters for policy {policy_id} {err}") from None
        return state_dict

    def _check_policy_id(self, policy_id: int) -> None:
        if policy_id not in range(self.cfg.num_policies):
            raise ValueError(
                f"policy id {policy_id!r}: this model has policies 0..{self.cfg.num_policies - 1}"
            )


class ActorCriticAlgorithm(Algorithm):
    """An asynchronous actor-critic run (`actor_critic` family): stochastic policy and value
    head; recurrent cores allowed; PBT and frozen opponents allowed."""


class APPO(ActorCriticAlgorithm):
    """Asynchronous PPO: PPO clipping, advantages from V-trace or GAE (Petrenko et al. 2020)."""

    algorithm = "appo"


class IMPALA(ActorCriticAlgorithm):
    """IMPALA: V-trace actor-critic without a trust region (Espeholt et al. 2018)."""

    algorithm = "impala"


class A3C(ActorCriticAlgorithm):
    """A3C-style advantage actor-critic (GAE), without off-policy correction (Mnih et al. 2016).

    Needs near on-policy data: its recommended settings use one SGD pass per dataset.
    """

    algorithm = "a3c"


class ValueBasedAlgorithm(Algorithm):
    """A Q-learning run (`value_based` and `pqn` families): Discrete actions only; `predict`
    is epsilon-greedy (or noisy) as in training unless `deterministic`, `evaluate` greedy by
    default; no recurrent state, no PBT or frozen opponents (refused as a ConfigError)."""


class DQN(ValueBasedAlgorithm):
    """DQN from a replay, with a target network (Mnih et al. 2015); double Q by default."""

    algorithm = "dqn"


class Rainbow(ValueBasedAlgorithm):
    """Rainbow: C51, double Q, dueling, noisy nets, 3-step returns, prioritized replay
    (Hessel et al. 2018)."""

    algorithm = "rainbow"


class QRDQN(ValueBasedAlgorithm):
    """QR-DQN: quantile regression of the return distribution (Dabney et al. 2018a)."""

    algorithm = "qrdqn"


class IQN(ValueBasedAlgorithm):
    """IQN: implicit quantile network, sampled fractions (Dabney et al. 2018b)."""

    algorithm = "iqn"


class FQF(ValueBasedAlgorithm):
    """FQF: quantiles at learned fractions (Yang et al. 2019)."""

    algorithm = "fqf"


class MDQN(ValueBasedAlgorithm):
    """Munchausen DQN: a scaled log-policy bonus and a soft bootstrap (Vieillard et al. 2020)."""

    algorithm = "mdqn"


class PQN(ValueBasedAlgorithm):
    """PQN: Q(lambda) on fresh rollouts with LayerNorm, no replay and no target network
    (Gallici et al. 2024)."""

    algorithm = "pqn"


class ContinuousControlAlgorithm(Algorithm):
    """An off-policy actor-critic run for continuous control (`continuous_control` family):
    bounded Box actions only; `predict` explores as in training unless `deterministic`,
    `evaluate` plays the actor's mean by default; no recurrent state, no PBT or frozen
    opponents (refused as a ConfigError)."""


class DDPG(ContinuousControlAlgorithm):
    """DDPG: a deterministic actor and one critic, from a replay (Lillicrap et al. 2016)."""

    algorithm = "ddpg"


class TD3(ContinuousControlAlgorithm):
    """TD3: clipped double Q, target policy smoothing, delayed actor updates (Fujimoto et al.
    2018)."""

    algorithm = "td3"


class SAC(ContinuousControlAlgorithm):
    """SAC: a squashed-Gaussian actor, twin critics, a learned entropy temperature (Haarnoja
    et al. 2018)."""

    algorithm = "sac"


class CrossQ(ContinuousControlAlgorithm):
    """CrossQ: SAC without target networks, with batch renormalisation (Bhatt et al. 2024)."""

    algorithm = "crossq"


def _merge_settings(
    policy_kwargs: Mapping[str, Any] | None, config: Mapping[str, Any], **named: Any
) -> dict[str, Any]:
    """Constructor keywords, policy_kwargs and config as one dict; ConfigError on clashes.

    policy_kwargs takes any setting a keyword takes (AsynRL's users pass training settings
    there as well as model ones); a setting given in two places is refused, not resolved.
    """
    problems = []
    given = {k: v for k, v in named.items() if v is not None}  # None: the family's or default
    keywords = {**given, **config}
    fields = [f.name for f in config_fields()]
    for key, value in dict(policy_kwargs or {}).items():
        if key in ("env", "algorithm"):
            problems.append(f"policy_kwargs: {key} is set by the {_SET_BY[key]}, not a setting")
        elif key not in fields:
            problems.append(
                f"policy_kwargs: unknown setting {key!r}{suggest_name(key, fields)} (allowed: "
                "any Config field, as `sampleforge train --help` lists them)"
            )
        elif key in keywords:
            problems.append(
                f"{key}: given both in policy_kwargs ({value!r}) and as the keyword {key}= "
                f"({keywords[key]!r}); give it once"
            )
    for key in ("env", "algorithm"):
        if key in config:
            problems.append(f"{key}: set by the {_SET_BY[key]}, not a keyword")
    if problems:
        raise ConfigError(problems)
    return {**given, **dict(policy_kwargs or {}), **config}


# What sets the settings that are not keywords.
_SET_BY = {"env": "first argument", "algorithm": "class"}


def _unique_experiment(algorithm: str, env: str) -> str:
    """A new experiment folder name: algorithm, env, time and a random suffix."""
    safe_env = re.sub(r"[^A-Za-z0-9_.-]", "_", env)
    return f"{algorithm}_{safe_env}_{time.strftime('%Y%m%d-%H%M%S')}_{uuid.uuid4().hex[:6]}"
