"""EnvSplit's fault policy: env exceptions and non-finite data never reach the buffers."""

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.envs.multi_agent import MultiAgentEnv
from sampleforge.envs.registry import EnvContext, EnvSpec
from sampleforge.envs.stepping.env_split import EnvFaultError, EnvSplit, StepTargets


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
    return EnvSplit(
        env_spec=spec, worker_index=3, first_env_index=0, num_envs=3, seed=0, error_policy=policy
    )


def _targets(n=3) -> StepTargets:
    return StepTargets(
        rewards=np.full(n, np.nan, np.float32),
        dones=np.zeros(n, np.float32),
        valids=np.zeros(n, np.float32),
        next_obs={"obs": np.zeros((n, 2), np.float32)},
    )


def _run(split: EnvSplit, steps: int):
    split.reset_all({"obs": np.zeros((3, 2), np.float32)})
    outcomes = []
    for _ in range(steps):
        out = _targets()
        outcomes.append((split.step(np.zeros((3, 1), np.int64), out), out))
    return outcomes


@pytest.mark.parametrize(
    "fault,what",
    [
        ("raise", "ValueError: simulator exploded"),
        ("nan_obs", "non-finite observation"),
        ("inf_reward", "non-finite reward"),
    ],
)
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
        EnvSplit(
            env_spec=EnvSpec("broken_env", broken),
            worker_index=0,
            first_env_index=0,
            num_envs=2,
            seed=None,
            error_policy="restart",
        )


# --- episode ends: truncation is bootstrapped, termination is not ------------------------------


class CountingEnv(gym.Env):
    """Observation = steps taken in the episode; ends after `length` steps by `ending`."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int, ending: str):
        self.length, self.ending, self.t, self.resets = length, ending, 0, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        self.resets += 1
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        return (
            np.full(1, self.t, np.float32),
            1.0,
            end and self.ending == "terminal",
            end and self.ending == "time_limit",
            {},
        )


def _counting_split(ending: str, length: int = 3) -> EnvSplit:
    spec = EnvSpec(f"counting_{ending}", lambda ctx: CountingEnv(length, ending))
    return EnvSplit(
        env_spec=spec, worker_index=0, first_env_index=0, num_envs=1, seed=0, error_policy="restart"
    )


def _steps(split, n: int, rows: int = 1) -> list[tuple[float, float, float, float]]:
    """(reward, done, valid, next observation) of row 0 for n steps."""
    split.reset_all({"obs": np.zeros((rows, 1), np.float32)})
    rows_seen = []
    for _ in range(n):
        out = _targets(rows)
        out.next_obs = {"obs": np.zeros((rows, 1), np.float32)}
        split.step(np.zeros((rows, 1), np.int64), out)
        rows_seen.append(
            (
                float(out.rewards[0]),
                float(out.dones[0]),
                float(out.valids[0]),
                float(out.next_obs["obs"][0, 0]),
            )
        )
    return rows_seen


def test_truncation_writes_the_final_observation_and_resets_on_the_next_step():
    split = _counting_split("time_limit")
    steps = _steps(split, 8)
    # Steps 1, 2, 3 (truncated: no done flag, the final observation 3 is written); then the
    # reset step (ignored action, reward 0, done, invalid) writes the first observation 0.
    assert steps[:4] == [
        (1.0, 0.0, 1.0, 1.0),
        (1.0, 0.0, 1.0, 2.0),
        (1.0, 0.0, 1.0, 3.0),
        (0.0, 1.0, 0.0, 0.0),
    ]
    assert steps[4:8] == steps[:4]  # and again
    assert split.envs[0].unwrapped.resets == 3  # the first reset and one per truncated episode


def test_termination_resets_in_the_same_step_and_cuts_bootstrapping():
    split = _counting_split("terminal")
    steps = _steps(split, 6)
    assert steps[:3] == [(1.0, 0.0, 1.0, 1.0), (1.0, 0.0, 1.0, 2.0), (1.0, 1.0, 1.0, 0.0)]
    assert steps[3:6] == steps[:3]  # no wasted step


def test_truncated_episode_statistics_are_reported_once_with_the_true_length():
    spec = EnvSpec(
        "counting_stats",
        lambda ctx: __import__(
            "sampleforge.envs.registry", fromlist=["EpisodeStatistics"]
        ).EpisodeStatistics(CountingEnv(3, "time_limit")),
    )
    split = EnvSplit(
        env_spec=spec, worker_index=0, first_env_index=0, num_envs=1, seed=0, error_policy="restart"
    )
    split.reset_all({"obs": np.zeros((1, 1), np.float32)})
    episodes, ended = [], []
    for _ in range(8):
        out = _targets(1)
        out.next_obs = {"obs": np.zeros((1, 1), np.float32)}
        outcome = split.step(np.zeros((1, 1), np.int64), out)
        episodes += list(zip(outcome.episode_returns, outcome.episode_lengths))
        ended.append(bool(outcome.ended_envs))
    assert episodes == [(3.0, 3), (3.0, 3)]
    assert ended == [False, False, False, True] * 2  # policies are drawn at the reset step


class TwoSeatEnv(MultiAgentEnv):
    """Two seats; seat 0 terminates at step 2, seat 1 is cut off by the time limit at step 3."""

    num_agents = 2
    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    reward_shaping_defaults: dict = {}

    def __init__(self):
        self.t = 0

    def reset(self, seed=None):
        self.t = 0
        return [np.zeros(1, np.float32)] * 2, [{}, {}]

    def step(self, actions):
        self.t += 1
        obs = [np.full(1, 10 + self.t, np.float32), np.full(1, 20 + self.t, np.float32)]
        terminated = np.array([self.t >= 2, False])
        truncated = np.array([False, self.t >= 3])
        return obs, np.ones(2, np.float32), terminated, truncated, [{}, {}]


def test_multi_agent_truncated_seat_bootstraps_and_the_env_resets_one_step_later():
    from sampleforge.envs.stepping.env_split import MultiAgentEnvSplit

    split = MultiAgentEnvSplit(
        env_spec=EnvSpec("two_seats", lambda ctx: TwoSeatEnv(), multi_agent=True),
        worker_index=0,
        first_env_index=0,
        num_envs=1,
        seed=0,
        error_policy="restart",
    )
    split.reset_all({"obs": np.zeros((2, 1), np.float32)})
    seen = []
    for _ in range(5):
        out = _targets(2)
        out.next_obs = {"obs": np.zeros((2, 1), np.float32)}
        outcome = split.step(np.zeros((2, 1), np.int64), out)
        seen.append(
            (
                out.dones.tolist(),
                out.valids.tolist(),
                out.next_obs["obs"][:, 0].tolist(),
                bool(outcome.ended_envs),
            )
        )
    assert seen[0] == ([0.0, 0.0], [1.0, 1.0], [11.0, 21.0], False)
    assert seen[1] == ([1.0, 0.0], [1.0, 1.0], [12.0, 22.0], False)  # seat 0 terminated
    # Seat 1 truncated: no done flag, its final observation 23 is written (seat 0 is finished).
    assert seen[2] == ([1.0, 0.0], [0.0, 1.0], [13.0, 23.0], False)
    # The reset step: nothing to learn from, first observations written.
    assert seen[3] == ([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], True)
    assert seen[4] == ([0.0, 0.0], [1.0, 1.0], [11.0, 21.0], False)
