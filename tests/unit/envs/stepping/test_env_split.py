"""EnvSplit's fault policy: env exceptions and non-finite data never reach the buffers."""

import logging

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.envs.multi_agent import MultiAgentEnv
from sampleforge.envs.registry import EnvContext, EnvSpec
from sampleforge.envs.stepping.env_split import EnvFaultError, EnvSplit, StepTargets
from sampleforge.envs.stepping.faults import RateLimitedWarnings
from sampleforge.testing.fake_clock import FakeClock


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


def _two_seat_split(name: str, factory):
    """One two-seat env (restart policy), reset: its first observations written."""
    from sampleforge.envs.stepping.env_split import MultiAgentEnvSplit

    split = MultiAgentEnvSplit(
        env_spec=EnvSpec(name, factory, multi_agent=True),
        worker_index=0,
        first_env_index=0,
        num_envs=1,
        seed=0,
        error_policy="restart",
    )
    split.reset_all({"obs": np.zeros((2, 1), np.float32)})
    return split


def test_multi_agent_truncated_seat_bootstraps_and_the_env_resets_one_step_later():
    split = _two_seat_split("two_seats", lambda ctx: TwoSeatEnv())
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


# --- a bound on faults in a row, bad rewards, rate-limited warnings, wrong shapes -------------

FAULTS_LOG = "sampleforge.envs.stepping.faults"


class ScheduledEnv(gym.Env):
    """Env 1 follows `schedule` (shared by every rebuild of it): each step takes the next entry,
    "raise" or a reward to return (possibly not a number); env 0 and 2 are well behaved.
    `obs_shape` is the shape it really returns, which may differ from the declared (2,)."""

    observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_index: int, schedule: list, obs_shape=(2,), reset_raises=False):
        self.scheduled = env_index == 1
        self.schedule = schedule
        self.obs_shape = obs_shape if self.scheduled else (2,)
        self.reset_raises = reset_raises and self.scheduled

    def reset(self, *, seed=None, options=None):
        if self.reset_raises and self.schedule and self.schedule[0] == "restarted":
            raise OSError("the simulator's socket is gone")
        return np.zeros(self.obs_shape, np.float32), {}

    def step(self, action):
        reward = self.schedule.pop(0) if self.scheduled and self.schedule else 1.0
        if isinstance(reward, str) and reward == "raise":
            if self.reset_raises:
                self.schedule.insert(0, "restarted")
            raise ValueError("simulator exploded\n(second line of the message)")
        return np.ones(self.obs_shape, np.float32), reward, False, False, {}


def _scheduled_split(schedule: list, bound: int = 100, warnings=None, **env_kwargs) -> EnvSplit:
    spec = EnvSpec("scheduled", lambda ctx: ScheduledEnv(ctx.env_index, schedule, **env_kwargs))
    return EnvSplit(
        env_spec=spec,
        worker_index=3,
        first_env_index=0,
        num_envs=3,
        seed=0,
        error_policy="restart",
        max_consecutive_faults=bound,
        fault_warnings=warnings,
    )


def test_an_env_faulting_bound_times_in_a_row_fails_with_one_line_naming_env_and_fault():
    split = _scheduled_split(["raise"] * 10, bound=5)
    split.reset_all({"obs": np.zeros((3, 2), np.float32)})
    for _ in range(4):  # faults 1-4: restarted, the run goes on
        outcome = split.step(np.zeros((3, 1), np.int64), _targets())
        assert len(outcome.faults) == 1
    with pytest.raises(EnvFaultError) as failure:
        split.step(np.zeros((3, 1), np.int64), _targets())
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith("env 'scheduled' failed 5 times in a row in worker 3 (env 1)")
    assert "ValueError: simulator exploded (second line of the message)" in message
    assert "max_consecutive_env_faults=5" in message
    assert isinstance(failure.value.__cause__, ValueError)


def test_the_count_of_faults_in_a_row_starts_again_after_a_good_step():
    # 4 faults, 1 good step, 4 faults, ...: never 5 in a row.
    split = _scheduled_split((["raise"] * 4 + [1.0]) * 6, bound=5)
    outcomes = _run(split, 30)
    assert sum(len(o.faults) for o, _ in outcomes) == 24


@pytest.mark.parametrize(
    "reward,what",
    [
        (None, "returned reward of type NoneType; expected a number"),
        ("1.0", "returned reward of type str; expected a number"),
        (np.array([1.0, 2.0]), "returned reward of shape (2,) (a ndarray); expected a number"),
        ([None], "returned reward of type list (dtype object); expected a number"),
    ],
)
def test_a_reward_that_is_not_a_number_is_a_fault(reward, what):
    outcomes = _run(_scheduled_split([1.0, reward, 1.0]), 3)
    faults = [f for o, _ in outcomes for f in o.faults]
    assert faults == [f"env 'scheduled' failed in worker 3 (env 1): {what}"]
    _, out = outcomes[1]
    assert out.valids.tolist() == [1.0, 0.0, 1.0] and out.rewards.tolist() == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("reward", [np.float32(0.5), np.array(0.5), np.array([0.5]), 1, True])
def test_rewards_that_are_one_number_are_taken(reward):
    outcomes = _run(_scheduled_split([reward]), 1)
    outcome, out = outcomes[0]
    assert outcome.faults == [] and out.rewards[1] == float(np.asarray(reward).reshape(()))


def test_multi_agent_rewards_must_be_one_number_per_seat():

    class BadRewards(TwoSeatEnv):
        def step(self, actions):
            obs, _, terminated, truncated, infos = super().step(actions)
            return obs, [1.0, None], terminated, truncated, infos

    split = _two_seat_split("bad_seat_rewards", lambda ctx: BadRewards())
    out = _targets(2)
    out.next_obs = {"obs": np.zeros((2, 1), np.float32)}
    outcome = split.step(np.zeros((2, 1), np.int64), out)
    assert outcome.faults == [
        "env 'bad_seat_rewards' failed in worker 0 (env 0): returned rewards of type list "
        "(dtype object); expected one number per seat"
    ]


class BrokenTwoSeatEnv(TwoSeatEnv):
    """TwoSeatEnv whose step at t == 2 breaks its contract in one way (`how`); every other step
    is TwoSeatEnv's. Both seats end there, so the env's own reset is part of that step."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how

    def step(self, actions):
        obs, rewards, terminated, truncated, infos = super().step(actions)
        if self.t != 2:
            return obs, rewards, terminated, truncated, infos
        terminated = np.array([True, True])
        if self.how == "reset raises":
            self.reset = self._broken_reset
        elif self.how == "no infos":
            infos = None
        elif self.how == "an info per env":
            infos = {"win": 1.0}
        elif self.how == "a list as info":
            infos = [{}, []]
        elif self.how == "one observation":
            obs = obs[:1]
        elif self.how == "three flags":
            terminated = np.array([True, True, False])
        return obs, rewards, terminated, truncated, infos

    def _broken_reset(self, seed=None):
        raise RuntimeError("the simulator went away")


@pytest.mark.parametrize(
    "how, what",
    [
        ("reset raises", "RuntimeError: the simulator went away"),
        ("no infos", "returned infos of type NoneType; expected one per seat"),
        ("an info per env", "returned infos of type dict; expected one per seat"),
        ("a list as info", "returned an info of type list for seat 1; expected one dict per seat"),
        ("one observation", "returned 1 observations for 2 seats; expected one per seat"),
        (
            "three flags",
            "returned terminated of shape (3,) for 2 seats; expected one flag per seat",
        ),
    ],
)
def test_a_multi_agent_env_breaking_its_contract_at_an_episode_end_is_a_fault(how, what):
    # Once these went past the fault policy as a traceback that ended the worker.
    split = _two_seat_split("broken_seats", lambda ctx: BrokenTwoSeatEnv(how))
    seen = []
    for _ in range(3):
        out = _targets(2)
        out.next_obs = {"obs": np.full((2, 1), -1.0, np.float32)}
        outcome = split.step(np.zeros((2, 1), np.int64), out)
        seen.append((outcome, out))
    (outcome, out) = seen[1]
    assert outcome.faults == [f"env 'broken_seats' failed in worker 0 (env 0): {what}"]
    # Both seats' episodes ended before the reset that failed; nothing is counted of a step
    # whose results were broken.
    assert outcome.episode_returns == ([2.0, 2.0] if how == "reset raises" else [])
    assert outcome.ended_envs == [0]
    assert out.valids.tolist() == [0.0, 0.0] and out.dones.tolist() == [1.0, 1.0]
    assert out.next_obs["obs"][:, 0].tolist() == [0.0, 0.0]  # the rebuilt env's first obs
    outcome, out = seen[2]  # the rebuilt env plays on from its first step
    assert outcome.faults == [] and out.next_obs["obs"][:, 0].tolist() == [11.0, 21.0]


def test_fault_warnings_are_rate_limited_with_a_count_of_those_left_out(caplog):
    clock = FakeClock()
    warnings = RateLimitedWarnings(burst=3, interval_sec=30.0, clock=clock)
    split = _scheduled_split(["raise"] * 1000, bound=1000, warnings=warnings)
    caplog.set_level(logging.WARNING, logger=FAULTS_LOG)
    _run(split, 50)  # 50 faults within one second of the fake clock

    def records() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == FAULTS_LOG]

    assert len(records()) == 3  # the burst
    assert all("env 'scheduled' failed in worker 3 (env 1)" in line for line in records())
    clock.now += 31
    for _ in range(5):
        split.step(np.zeros((3, 1), np.int64), _targets())
    assert len(records()) == 4  # one more after the interval, counting those left out
    assert records()[-1].endswith("[47 more like it in the last 31 s not logged]")


def test_fault_warnings_of_a_worker_share_one_limit():
    clock = FakeClock()
    warnings = RateLimitedWarnings(logging.getLogger("unused"), burst=2, clock=clock)
    splits = [_scheduled_split(["raise"] * 10, warnings=warnings) for _ in range(2)]
    for split in splits:
        _run(split, 5)
    assert warnings.logged == 2 and warnings.suppressed == 8


def test_an_env_whose_reset_fails_while_restarting_fails_in_one_line():
    split = _scheduled_split(["raise"], reset_raises=True)
    with pytest.raises(EnvFaultError) as failure:
        _run(split, 2)
    assert str(failure.value) == (
        "env 'scheduled' could not be restarted in worker 3 (env 1): its reset raised "
        "OSError: the simulator's socket is gone"
    )


def test_an_observation_of_the_wrong_shape_at_the_first_reset_names_env_and_shapes():
    split = _scheduled_split([], obs_shape=(3,))
    with pytest.raises(EnvFaultError) as failure:
        split.reset_all({"obs": np.zeros((3, 2), np.float32)})
    assert str(failure.value) == (
        "env 'scheduled' returned an observation of shape (3,), but its observation space "
        "declares (2,) (at its first reset, worker 3, env 1)"
    )


def test_an_observation_of_the_wrong_shape_in_a_step_names_env_and_shapes():
    class ShapeShifter(ScheduledEnv):
        def step(self, action):
            obs, *rest = super().step(action)
            return (np.ones((2, 2), np.float32) if self.scheduled else obs), *rest

    spec = EnvSpec("shifter", lambda ctx: ShapeShifter(ctx.env_index, []))
    split = EnvSplit(
        env_spec=spec, worker_index=0, first_env_index=0, num_envs=3, seed=0, error_policy="fail"
    )
    with pytest.raises(EnvFaultError) as failure:
        _run(split, 1)
    assert str(failure.value) == (
        "env 'shifter' returned an observation of shape (2, 2), but its observation space "
        "declares (2,) (in a step, worker 0, env 1)"
    )


def test_an_env_that_raised_is_rebuilt_not_only_reset():
    # An exception can leave a simulator broken inside; docs/reliability.md promises a new env.
    split = _split("raise")
    healthy, faulty = split.envs[0], split.envs[1]
    _run(split, 4)
    assert split.envs[0] is healthy and split.envs[1] is not faulty


class LastRewardNanEnv(gym.Env):
    """Episodes of 2 steps; the first episode's last reward is NaN (or inf)."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, bad: float):
        self.bad, self.t, self.episodes = bad, 0, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t == 2
        reward = self.bad if end and self.episodes == 0 else 1.0
        self.episodes += end
        return np.full(1, self.t, np.float32), reward, end, False, {}


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_an_episode_whose_last_reward_is_not_finite_is_a_fault_and_not_a_return(bad):
    # Its return would make the mean of the next 100 episodes NaN or inf.
    spec = EnvSpec("last_reward_bad", lambda ctx: LastRewardNanEnv(bad))
    split = EnvSplit(
        env_spec=spec, worker_index=0, first_env_index=0, num_envs=1, seed=0, error_policy="restart"
    )
    split.reset_all({"obs": np.zeros((1, 1), np.float32)})
    returns, faults = [], []
    for _ in range(6):
        out = _targets(1)
        out.next_obs = {"obs": np.zeros((1, 1), np.float32)}
        outcome = split.step(np.zeros((1, 1), np.int64), out)
        returns += outcome.episode_returns
        faults += outcome.faults
        assert np.isfinite(out.rewards).all()
    assert len(faults) == 1 and "reward" in faults[0]
    assert returns and all(r == 2.0 for r in returns)  # the later episodes, counted as ever
