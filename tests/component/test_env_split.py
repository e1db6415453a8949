"""EnvSplit's fault policy: env exceptions and non-finite data never reach the buffers."""

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.components.env_split import EnvFaultError, EnvSplit, StepTargets
from sampleforge.envs.registry import EnvContext, EnvSpec


class ScriptedFaultEnv(gym.Env):
    """Env 1 misbehaves at its 3rd step in the way named by `fault`; the others never do."""

    observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_index: int, fault: str):
        self.faulty = env_index == 1
        self.fault = fault
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        obs, reward = np.full(2, self.t, np.float32), 1.0
        if self.faulty and self.t == 3:
            if self.fault == "raise":
                raise ValueError("simulator exploded")
            if self.fault == "nan_obs":
                obs[0] = np.nan
            if self.fault == "inf_reward":
                reward = np.inf
        return obs, reward, False, False, {}


def _split(fault: str, policy: str = "restart") -> EnvSplit:
    spec = EnvSpec(f"fault_{fault}", lambda ctx: ScriptedFaultEnv(ctx.env_index, fault))
    return EnvSplit(env_spec=spec, worker_index=3, first_env_index=0, num_envs=3, seed=0,
                    error_policy=policy)


def _targets(n=3) -> StepTargets:
    return StepTargets(rewards=np.full(n, np.nan, np.float32), dones=np.zeros(n, np.float32),
                       valids=np.zeros(n, np.float32),
                       next_obs={"obs": np.zeros((n, 2), np.float32)})


def _run(split: EnvSplit, steps: int):
    split.reset_all({"obs": np.zeros((3, 2), np.float32)})
    outcomes = []
    for _ in range(steps):
        out = _targets()
        outcomes.append((split.step(np.zeros((3, 1), np.int64), out), out))
    return outcomes


@pytest.mark.parametrize("fault,what", [("raise", "ValueError: simulator exploded"),
                                        ("nan_obs", "non-finite observation"),
                                        ("inf_reward", "non-finite reward")])
def test_restart_policy_marks_the_step_invalid_and_restarts_the_env(fault, what):
    outcomes = _run(_split(fault), 4)
    faults = [f for o, _ in outcomes for f in o.faults]
    assert len(faults) == 1
    assert "worker 3" in faults[0] and "env 1" in faults[0] and what in faults[0]
    outcome, out = outcomes[2]
    assert out.valids.tolist() == [1.0, 0.0, 1.0]
    assert out.dones.tolist() == [0.0, 1.0, 0.0]
    assert np.isfinite(out.rewards).all() and np.isfinite(out.next_obs["obs"]).all()
    assert out.next_obs["obs"][1].tolist() == [0.0, 0.0]  # the reset observation
    # The restarted env goes on from a fresh episode; everything after is valid again.
    assert outcomes[3][1].valids.tolist() == [1.0, 1.0, 1.0]
    assert outcomes[3][1].next_obs["obs"][1].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("fault", ["raise", "nan_obs", "inf_reward"])
def test_fail_policy_raises_with_the_original_error(fault):
    with pytest.raises(EnvFaultError, match="worker 3.*env 1") as info:
        _run(_split(fault, policy="fail"), 4)
    if fault == "raise":
        assert isinstance(info.value.__cause__, ValueError)


def test_construction_failure_names_the_env():
    def broken(ctx: EnvContext):
        raise OSError("no such ROM")

    with pytest.raises(EnvFaultError, match="'broken_env' could not be created.*no such ROM"):
        EnvSplit(env_spec=EnvSpec("broken_env", broken), worker_index=0, first_env_index=0,
                 num_envs=2, seed=None, error_policy="restart")
