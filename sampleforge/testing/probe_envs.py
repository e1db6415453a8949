"""Probe environments: tiny tasks that each test one ability of the learning code, in seconds.

| probe | what it checks |
| --- | --- |
| `ConstantRewardProbe(ending="time_limit")` | time-limit truncation is bootstrapped: the observation never changes and every step pays `reward`, so the only consistent value is reward / (1 - gamma) at every step |
| `ConstantRewardProbe(ending="terminal")` | a true termination is never bootstrapped: the value falls towards the end, and its average over the episode's steps is known in closed form (`constant_reward_values`) |
| `ObservationRewardProbe` | the critic reads the observation: one-step episodes showing [+1] or [-1] and paying it, so V([+1]) = +1 and V([-1]) = -1 |
| `DelayedRewardProbe` | discounting and the time axis: two-step episodes showing [s, 0] then [0, s] (s = +1 or -1) and paying s at the second step, so V([s, 0]) = gamma s and V([0, s]) = s |
| `ActionRewardProbe` | the sign of the policy gradient: a constant observation, action 0 pays +1 and action 1 pays -1, so pi(0) -> 1 and V -> +1 (V = 2 pi(0) - 1 on the way) |
| `ObservationActionRewardProbe` | the policy reads the observation: action 1 pays +1 on [+1], action 0 pays +1 on [-1] (the other pays -1), so the right action's probability -> 1 and V -> +1 for both |
| `TargetActionProbe` | a continuous actor reads the observation and reaches the action it asks for inside bounds other than [-1, 1]: one-step episodes showing [+1] or [-1] and paying -(a - target)^2, targets 3 and 1 in Box([0], [4]) |
| `register_scaled_cartpole(name, scale)` | learning does not depend on the reward's scale: CartPole-v1 paying `scale` per step (return normalisation) |

The observation does not tell the time, so an agent that treats the time limit as a termination
can only learn an average of the discounted sums left over the episode's steps.

The four probes after `ConstantRewardProbe` follow the probe set of Andy Jones' "Debugging RL,
Without the Agonizing Pain": each adds one ability to the last, so the first that fails points
at the broken part. They list their observations (`OBSERVATIONS`) and the exact optimal values
of them (`true_values(gamma)`); the two whose reward depends on the action also give the optimal
action for each observation (`BEST_ACTIONS`).

Worker processes receive the resolved `EnvSpec` pickled, so the factory is a `functools.partial`
of a top-level function; `register_probe_env(name, probe, **kwargs)` does that for any of the
probe classes.

Must not: import the runner or any component; depend on anything but numpy and gymnasium.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np

from sampleforge.envs.registry import EnvContext, register_env

if TYPE_CHECKING:
    from torch import nn

Ending = Literal["time_limit", "terminal"]

__all__ = [
    "ActionRewardProbe",
    "ConstantRewardProbe",
    "DelayedRewardProbe",
    "ObservationActionRewardProbe",
    "ObservationRewardProbe",
    "TargetActionProbe",
    "constant_reward_values",
    "register_probe_env",
    "register_scaled_cartpole",
]


class ConstantRewardProbe(gym.Env):
    """Reward `reward` at every step, a constant observation, `episode_length` steps per episode,
    ended by a time limit (`truncated`) or a termination (`terminated`)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(
        self, episode_length: int = 20, ending: Ending = "time_limit", reward: float = 1.0
    ):
        if ending not in ("time_limit", "terminal"):
            raise ValueError(f"ending {ending!r} is not one of time_limit, terminal")
        self.episode_length = episode_length
        self.ending = ending
        self.reward = float(reward)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return np.ones(1, np.float32), {}

    def step(self, action: Any):
        self._t += 1
        end = self._t >= self.episode_length
        terminated = end and self.ending == "terminal"
        truncated = end and self.ending == "time_limit"
        return np.ones(1, np.float32), self.reward, terminated, truncated, {}


def constant_reward_values(
    episode_length: int, gamma: float, reward: float = 1.0, ending: Ending = "time_limit"
) -> np.ndarray:
    """The true value of each step t = 0 .. episode_length - 1 of `ConstantRewardProbe`.

    With a time limit the task goes on forever as far as the agent can know:
    V = reward / (1 - gamma). With termination, V(t) = reward (1 - gamma^(L - t)) / (1 - gamma).
    """
    steps_left = episode_length - np.arange(episode_length)
    if ending == "time_limit":
        return np.full(episode_length, reward / (1.0 - gamma))
    return reward * (1.0 - gamma**steps_left) / (1.0 - gamma)


class _KnownValueProbe(gym.Env):
    """Base of the probes below: a Discrete(2) action, float32 observations, and (where used) a
    sign s = +1 or -1 drawn at each reset from the env's seeded generator (`np_random`).

    Subclasses list every observation an episode can show before it ends in `OBSERVATIONS`
    (rows) and give the value of each under the optimal policy in `true_values(gamma)`. The
    observation written after the final step (`terminated`) is `TERMINAL_OBS`: a learner never
    bootstraps from it, so its value is left untrained.
    """

    action_space = gym.spaces.Discrete(2)
    OBSERVATIONS: np.ndarray

    def __init__(self) -> None:
        self._sign = 1.0

    def _draw_sign(self) -> float:
        self._sign = 1.0 if self.np_random.integers(2) else -1.0
        return self._sign

    @classmethod
    def true_values(cls, gamma: float) -> np.ndarray:
        """V*(o) for each row o of OBSERVATIONS, with discount `gamma`."""
        raise NotImplementedError


class ObservationRewardProbe(_KnownValueProbe):
    """The critic must read the observation: reward = observation, one step per episode.

    Each episode shows o = [+1] or [-1] (equally likely), pays o whatever the action, and
    terminates. For every policy and every gamma: V([+1]) = +1, V([-1]) = -1.

    A critic that does not get the observation, or pairs a step's value target with another
    step's observation, can only learn the mean over both, 0.
    """

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    OBSERVATIONS = np.array([[1.0], [-1.0]], np.float32)
    TERMINAL_OBS = np.zeros(1, np.float32)

    @classmethod
    def true_values(cls, gamma: float) -> np.ndarray:
        return np.array([1.0, -1.0])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.array([self._draw_sign()], np.float32), {}

    def step(self, action: Any):
        return self.TERMINAL_OBS.copy(), self._sign, True, False, {}


class DelayedRewardProbe(_KnownValueProbe):
    """Discounting and the time axis: a reward one step after the observation that decides it.

    Each episode draws a sign s = +1 or -1 (equally likely) and shows it in the first slot of
    the observation, then in the second: it shows [s, 0], pays 0 and shows [0, s], then pays s
    and terminates, whatever the actions. For every policy:

        V([s, 0]) = gamma * s,    V([0, s]) = s.

    V([0, s]) = s checks the terminal step as `ObservationRewardProbe` does; V([s, 0]) = gamma s
    checks that the first step bootstraps from the second step's value, discounted by gamma
    once: a wrong discount gives another multiple of s, and a bootstrap from any other step's
    value (which is independent of s) gives 0. A bootstrap through the termination does not show
    here (the next episode's first value averages 0); `ConstantRewardProbe(ending="terminal")`
    and `ActionRewardProbe` (V -> 1 / (1 - gamma)) show it.
    """

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    OBSERVATIONS = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], np.float32)
    TERMINAL_OBS = np.zeros(2, np.float32)

    def __init__(self) -> None:
        super().__init__()
        self._t = 0

    @classmethod
    def true_values(cls, gamma: float) -> np.ndarray:
        return np.array([gamma, -gamma, 1.0, -1.0])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        return np.array([self._draw_sign(), 0.0], np.float32), {}

    def step(self, action: Any):
        self._t += 1
        if self._t == 1:
            return np.array([0.0, self._sign], np.float32), 0.0, False, False, {}
        return self.TERMINAL_OBS.copy(), self._sign, True, False, {}


class ActionRewardProbe(_KnownValueProbe):
    """The policy gradient's sign: action 0 pays +1, action 1 pays -1, one step per episode.

    The observation is always [1]. The optimal policy takes action 0: pi(0) = 1, V*([1]) = +1.
    A policy taking action 0 with probability p has V([1]) = 2p - 1, so the learned value must
    agree with the learned policy as well.

    An advantage or policy-gradient term of the wrong sign makes the policy prefer action 1
    (p -> 0, V -> -1); no policy gradient at all leaves p near its initial 1/2 and V near 0.
    """

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    OBSERVATIONS = np.ones((1, 1), np.float32)
    TERMINAL_OBS = np.ones(1, np.float32)
    BEST_ACTIONS = np.array([0])

    @classmethod
    def true_values(cls, gamma: float) -> np.ndarray:
        return np.array([1.0])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.ones(1, np.float32), {}

    def step(self, action: Any):
        return self.TERMINAL_OBS.copy(), 1.0 if int(action) == 0 else -1.0, True, False, {}


class ObservationActionRewardProbe(_KnownValueProbe):
    """The policy must read the observation: the right action depends on it, one step per
    episode.

    Each episode shows o = [+1] or [-1] (equally likely); action 1 pays +1 on [+1] and -1 on
    [-1], action 0 the opposite (the action "matches" the sign: 1 for +, 0 for -). The optimal
    policy takes action 1 on [+1] and action 0 on [-1], and V*([+1]) = V*([-1]) = +1. A policy
    taking the right action with probability p_o has V(o) = 2 p_o - 1.

    A policy that ignores the observation cannot beat p = 1/2 on both (a mean return of 0); a
    sign error in the policy gradient makes it take the wrong action on both (V -> -1).
    """

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    OBSERVATIONS = np.array([[1.0], [-1.0]], np.float32)
    TERMINAL_OBS = np.zeros(1, np.float32)
    BEST_ACTIONS = np.array([1, 0])

    @classmethod
    def true_values(cls, gamma: float) -> np.ndarray:
        return np.array([1.0, 1.0])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.array([self._draw_sign()], np.float32), {}

    def step(self, action: Any):
        right = int(action) == (1 if self._sign > 0 else 0)
        return self.TERMINAL_OBS.copy(), 1.0 if right else -1.0, True, False, {}


class TargetActionProbe(gym.Env):
    """A continuous actor must read the observation and reach the action it asks for, inside
    bounds that are not [-1, 1]: one step per episode.

    Each episode shows o = [+1] or [-1] (equally likely) and pays -(a - target(o))^2 for the
    action a in Box([0], [4]), where target([+1]) = 3 and target([-1]) = 1; then it terminates.
    The optimal deterministic actions are `TARGET_ACTIONS`, worth 0.

    An actor that ignores the observation settles between the targets (2); one whose actions are
    not rescaled to the bounds cannot leave [-1, 1] and gets neither; a policy gradient of the
    wrong sign drives the actions to the bounds.
    """

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(0.0, 4.0, (1,), np.float32)
    OBSERVATIONS = np.array([[1.0], [-1.0]], np.float32)
    TARGET_ACTIONS = np.array([[3.0], [1.0]], np.float32)
    TERMINAL_OBS = np.zeros(1, np.float32)

    def __init__(self) -> None:
        self._sign = 1.0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._sign = 1.0 if self.np_random.integers(2) else -1.0
        return np.array([self._sign], np.float32), {}

    def step(self, action: Any):
        target = 2.0 + self._sign
        reward = -float((float(np.asarray(action).reshape(-1)[0]) - target) ** 2)
        return self.TERMINAL_OBS.copy(), reward, True, False, {}


def make_probe(
    context: EnvContext, probe: type[gym.Env] = ConstantRewardProbe, **kwargs: Any
) -> gym.Env:
    return probe(**kwargs)


def register_probe_env(name: str, probe: type[gym.Env] = ConstantRewardProbe, **kwargs: Any) -> str:
    """Register `probe(**kwargs)` (a probe class of this module, `ConstantRewardProbe` by
    default) under `name`; returns the name."""
    register_env(
        name,
        functools.partial(make_probe, probe=probe, **kwargs),
        description=f"{probe.__name__}({kwargs})",
        overwrite=True,
    )
    return name


def make_scaled_cartpole(context: EnvContext, scale: float) -> gym.Env:
    """CartPole-v1 whose every reward is multiplied by `scale` (solved at 475 x scale)."""
    return gym.wrappers.TransformReward(gym.make("CartPole-v1"), lambda r: float(r) * scale)


def register_scaled_cartpole(name: str, scale: float) -> str:
    """Register CartPole-v1 with rewards multiplied by `scale` under `name`; returns the name."""
    register_env(
        name,
        functools.partial(make_scaled_cartpole, scale=scale),
        description=f"CartPole-v1, rewards x {scale}",
        overwrite=True,
    )
    return name


# What every probe test trains with: serial (exactly repeatable), small datasets, a fast
# learning rate, rewards as they are.
PROBE_TRAINING = dict(
    serial_mode=True,
    seed=1,
    device="cpu",
    reward_scale=1.0,
    stop_at_mean_return=float("inf"),
    num_workers=1,
    num_envs_per_worker=16,
    batch_size=256,
    num_batches_per_epoch=2,
    learning_rate=3e-3,
    report_every_sec=60,
)


def train_on_probe(
    env: str, probe: gym.Env, train_dir: str, env_steps: int, **overrides: Any
) -> nn.Module:
    """Train on the registered probe `env` (whose spaces are `probe`'s) with PROBE_TRAINING and
    `overrides`; returns the saved policy's network."""
    from sampleforge.components.runner import Runner  # the probes themselves need no runner
    from sampleforge.config import make_config
    from sampleforge.evaluation.policy_files import load_saved_policy
    from sampleforge.models.factory import make_policy_model

    cfg = make_config(
        env=env,
        train_dir=train_dir,
        train_for_env_steps=env_steps,
        **{**PROBE_TRAINING, **overrides},
    )
    with Runner(cfg) as runner:
        runner.train()
    saved = load_saved_policy(f"{train_dir}/{env}")
    model = make_policy_model(saved.cfg, probe.observation_space, probe.action_space)
    model.load_state_dict(saved.state_dicts[0])
    return model
