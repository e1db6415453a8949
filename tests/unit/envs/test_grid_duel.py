"""Unit tests for sampleforge.envs.grid_duel: the rules, seat symmetry, the bot and the gym view."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from sampleforge.envs.grid_duel import (
    D_DOWN,
    D_LEFT,
    D_RIGHT,
    D_UP,
    DOWN,
    NOOP,
    OBS_SIZE,
    RIGHT,
    SHOOT,
    UP,
    DuelEnv,
    DuelVsBotEnv,
    ScriptedDuelBot,
    make_duel,
    make_duel_vs_bot,
)
from sampleforge.envs.multi_agent import MultiAgentEnv
from sampleforge.envs.registry import EnvContext


def play(env: DuelEnv, policies, max_turns: int = 1000):
    """Play one match from the current state; returns the last step's outputs."""
    for _ in range(max_turns):
        actions = [policy(env, seat) for seat, policy in enumerate(policies)]
        out = env.step(actions)
        if out[2].all() or out[3].all():
            return out
    raise AssertionError("match did not end")


def random_policy(rng: np.random.Generator):
    return lambda env, seat: int(rng.integers(6))


def mirrored(env: DuelEnv, positions, facings, **kwargs):
    """The state with the seats swapped and the arena turned 180 degrees."""
    turn = env.arena.mirror
    opposite = (D_DOWN, D_UP, D_RIGHT, D_LEFT)
    state = dict(
        positions=[turn(positions[1]), turn(positions[0])],
        facings=[opposite[facings[1]], opposite[facings[0]]],
    )
    for key, value in kwargs.items():
        state[key] = [value[1], value[0]]
    return state


# --- interface contract ---------------------------------------------------------------------------
def test_spaces_and_reset_follow_the_multi_agent_contract() -> None:
    env = DuelEnv()
    assert isinstance(env, MultiAgentEnv)
    assert env.num_agents == 2
    assert env.observation_space.shape == (OBS_SIZE,) and OBS_SIZE < 40
    assert env.action_space == gym.spaces.Discrete(6)
    observations, infos = env.reset(seed=3)
    assert len(observations) == 2 and len(infos) == 2
    assert all(isinstance(info, dict) for info in infos)
    for obs in observations:
        assert obs.dtype == np.float32 and obs.shape == (OBS_SIZE,)
        assert env.observation_space.contains(obs)


def test_steps_return_arrays_and_terminal_infos_carry_win() -> None:
    env = DuelEnv()
    rng = np.random.default_rng(0)
    ends = {"terminated": 0, "truncated": 0}
    for match in range(30):
        env.reset(seed=match)
        while True:
            observations, rewards, terminated, truncated, infos = env.step(
                list(rng.integers(6, size=2))
            )
            assert rewards.shape == (2,) and rewards.dtype == np.float64
            assert terminated.dtype == bool and truncated.dtype == bool
            assert terminated.shape == truncated.shape == (2,)
            assert all(env.observation_space.contains(obs) for obs in observations)
            if terminated.any() or truncated.any():
                break
            assert infos == [{}, {}]
        ends["terminated" if terminated.all() else "truncated"] += 1
        wins = [info["win"] for info in infos]
        assert sum(wins) == pytest.approx(1.0) and set(wins) <= {0.0, 0.5, 1.0}
        # After the end the env reports the finished state until the runtime resets it.
        after = env.step([SHOOT, SHOOT])
        assert (after[1] == 0).all() and after[2].all() and after[3].all()
        assert all(env.observation_space.contains(obs) for obs in after[0])
    assert ends["terminated"] > 0 and ends["truncated"] > 0


def test_bad_action_is_rejected() -> None:
    env = DuelEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step([6, 0])


def test_layout_must_be_point_symmetric() -> None:
    with pytest.raises(ValueError, match="point-symmetric"):
        DuelEnv(layout=("#..", "...", "..."))


def test_observation_features_describe_the_state() -> None:
    env = DuelEnv()
    c = env.cell
    # Seat 0 at (0, 0) aims right at seat 1 at (0, 2), which faces up (the world's edge).
    obs = env.set_state(
        positions=[c(0, 0), c(0, 2)], facings=[D_RIGHT, D_UP], health=[3, 2], cooldowns=[0, 1]
    )
    mine, theirs = obs
    np.testing.assert_allclose(mine[0:6], [-1.0, -1.0, 0.0, 2 / 6, 1.0, 2 / 3])
    assert mine[6:10].tolist() == [0, 0, 0, 1] and mine[10:14].tolist() == [1, 0, 0, 0]
    assert mine[14:19].tolist() == [0.0, 0.5, 1.0, 0.0, 1.0]
    assert mine[19:23].tolist() == [1, 0, 1, 0]  # edge above and to the left
    assert mine[23] == 1.0
    # Seat 1, in its turned frame, stands at (6, 4) facing down, the opponent two cells right.
    np.testing.assert_allclose(theirs[0:6], [1.0, 8 / 6 - 1, 0.0, 2 / 6, 2 / 3, 1.0])
    assert theirs[6:10].tolist() == [0, 1, 0, 0] and theirs[10:14].tolist() == [0, 0, 1, 0]
    assert theirs[14:19].tolist() == [0.5, 0.0, 0.0, 1.0, 1.0]
    assert theirs[19:23].tolist() == [0, 1, 0, 0]  # the world's top edge is its bottom


# --- symmetry -----------------------------------------------------------------------------------
def test_swapping_seats_mirrors_observations() -> None:
    env, twin = DuelEnv(), DuelEnv()
    rng = np.random.default_rng(1)
    for _ in range(50):
        positions = [int(p) for p in rng.choice(env.arena.free, size=2, replace=False)]
        facings = [int(f) for f in rng.integers(4, size=2)]
        health, cooldowns = list(rng.integers(1, 4, size=2)), list(rng.integers(0, 3, size=2))
        obs = env.set_state(
            positions=positions, facings=facings, health=health, cooldowns=cooldowns
        )
        twin_obs = twin.set_state(
            **mirrored(env, positions, facings, health=health, cooldowns=cooldowns)
        )
        np.testing.assert_array_equal(obs[0], twin_obs[1])
        np.testing.assert_array_equal(obs[1], twin_obs[0])


def test_swapping_seats_mirrors_whole_matches() -> None:
    # The same actions from swapped seats must play out the same game, turned around.
    env, twin = DuelEnv(), DuelEnv()
    rng = np.random.default_rng(2)
    for match in range(20):
        observations, _ = env.reset(seed=match)
        twin_observations = twin.set_state(**mirrored(env, env.positions, env.facings))
        while True:
            actions = [int(a) for a in rng.integers(6, size=2)]
            observations, rewards, terminated, truncated, infos = env.step(actions)
            twin_observations, twin_rewards, *_, twin_infos = twin.step(actions[::-1])
            np.testing.assert_array_equal(observations[0], twin_observations[1])
            np.testing.assert_array_equal(observations[1], twin_observations[0])
            np.testing.assert_array_equal(rewards, twin_rewards[::-1])
            assert infos == twin_infos[::-1]
            if terminated.any() or truncated.any():
                break


# --- rules --------------------------------------------------------------------------------------
def test_walls_edges_and_the_other_agent_block_moves_but_turn() -> None:
    env = DuelEnv()
    c = env.cell
    # The wall at (1, 1) is below (0, 1); the edge is above it.
    env.set_state(positions=[c(0, 1), c(6, 6)], facings=[D_UP, D_UP])
    env.step([DOWN, NOOP])
    assert env.positions[0] == c(0, 1) and env.facings[0] == D_DOWN
    env.step([UP, NOOP])
    assert env.positions[0] == c(0, 1) and env.facings[0] == D_UP
    env.step([RIGHT, NOOP])
    assert env.positions[0] == c(0, 2) and env.facings[0] == D_RIGHT
    # The other agent blocks; so does the cell it moves into.
    env.set_state(positions=[c(0, 2), c(0, 3)], facings=[D_UP, D_UP])
    env.step([RIGHT, NOOP])
    assert env.positions == [c(0, 2), c(0, 3)]


def test_simultaneous_moves_into_one_cell_both_fail() -> None:
    env = DuelEnv()
    c = env.cell
    env.set_state(positions=[c(0, 2), c(0, 4)], facings=[D_UP, D_UP])
    # Seat 1 acts in the turned frame: its LEFT is the world's right, its RIGHT the world's left.
    env.step([RIGHT, RIGHT])
    assert env.positions == [c(0, 2), c(0, 4)]
    assert env.facings == [D_RIGHT, D_LEFT]


def test_seat_one_actions_are_turned() -> None:
    env = DuelEnv()
    c = env.cell
    env.set_state(positions=[c(0, 0), c(4, 3)], facings=[D_UP, D_UP])
    env.step([NOOP, UP])  # up in seat 1's frame is down in the world
    assert env.positions[1] == c(5, 3) and env.facings[1] == D_DOWN


@pytest.mark.parametrize(
    ("shooter", "facing", "target", "hit"),
    [
        ((0, 0), D_RIGHT, (0, 3), True),  # clear row, distance 3
        ((0, 0), D_RIGHT, (0, 4), True),  # distance 4 = range
        ((0, 0), D_RIGHT, (0, 5), False),  # out of range
        ((0, 0), D_LEFT, (0, 3), False),  # facing away
        ((0, 0), D_DOWN, (0, 3), False),  # facing across the line
        ((0, 0), D_RIGHT, (1, 3), False),  # not in the line
        ((3, 1), D_RIGHT, (3, 3), False),  # wall at (3, 2) in between
        ((0, 1), D_DOWN, (2, 1), False),  # wall at (1, 1) in between
        ((2, 3), D_DOWN, (4, 3), True),  # the gap between the centre walls
    ],
)
def test_shots_hit_only_in_the_line_of_fire(shooter, facing, target, hit) -> None:
    env = DuelEnv()
    env.set_state(positions=[env.cell(*shooter), env.cell(*target)], facings=[facing, D_UP])
    _, rewards, *_ = env.step([SHOOT, NOOP])
    assert env.health == [3, 2 if hit else 3]
    assert rewards[0] == pytest.approx(0.1 if hit else 0.0)
    assert rewards[1] == pytest.approx(-0.1 if hit else 0.0)


def test_cooldown_spaces_out_shots() -> None:
    env = DuelEnv(cooldown=2)
    env.set_state(positions=[env.cell(0, 0), env.cell(0, 2)], facings=[D_RIGHT, D_UP])
    taken = []
    for _ in range(6):
        obs, *_ = env.step([SHOOT, NOOP])
        taken.append(3 - env.health[1])
        assert 0.0 <= obs[0][14] <= 1.0
    # A shot every third turn: turns 1 and 4.
    assert taken == [1, 1, 1, 2, 2, 2]


def test_kill_ends_the_match_with_win_and_loss() -> None:
    env = DuelEnv()
    env.set_state(
        positions=[env.cell(0, 0), env.cell(0, 2)], facings=[D_RIGHT, D_UP], health=[3, 1]
    )
    _, rewards, terminated, truncated, infos = env.step([SHOOT, NOOP])
    assert terminated.all() and not truncated.any()
    assert rewards.tolist() == pytest.approx([1.1, -1.1])
    assert [infos[0]["win"], infos[1]["win"]] == [1.0, 0.0]


def test_mutual_kill_is_a_draw() -> None:
    env = DuelEnv()
    env.set_state(
        positions=[env.cell(0, 0), env.cell(0, 2)], facings=[D_RIGHT, D_LEFT], health=[1, 1]
    )
    _, rewards, terminated, _, infos = env.step([SHOOT, SHOOT])
    assert terminated.all()
    assert rewards.tolist() == pytest.approx([0.0, 0.0])  # +0.1 hit, -0.1 hurt, 0 draw
    assert [infos[0]["win"], infos[1]["win"]] == [0.5, 0.5]


def test_time_limit_truncates_as_a_draw() -> None:
    env = DuelEnv(max_steps=5)
    env.set_state(positions=[env.cell(0, 0), env.cell(6, 6)], facings=[D_UP, D_UP])
    for _ in range(4):
        _, rewards, terminated, truncated, infos = env.step([NOOP, NOOP])
        assert not truncated.any() and infos == [{}, {}]
    _, rewards, terminated, truncated, infos = env.step([NOOP, NOOP])
    assert truncated.all() and not terminated.any()
    assert rewards.tolist() == [0.0, 0.0]
    assert [infos[0]["win"], infos[1]["win"]] == [0.5, 0.5]


def test_reward_shaping_is_per_seat() -> None:
    env = DuelEnv()
    env.set_reward_shaping(0, {"hit": 0.5})
    env.set_reward_shaping(1, {"hurt": -0.25})
    assert env.reward_shaping(0) == {"hit": 0.5, "hurt": -0.1}
    env.set_state(positions=[env.cell(0, 0), env.cell(0, 2)], facings=[D_RIGHT, D_LEFT])
    _, rewards, *_ = env.step([SHOOT, SHOOT])  # both hit each other
    assert rewards.tolist() == pytest.approx([0.5 - 0.1, 0.1 - 0.25])
    with pytest.raises(KeyError):
        env.set_reward_shaping(0, {"kill": 1.0})


def test_same_seed_same_match_different_seeds_differ() -> None:
    def trajectory(seed: int) -> list[np.ndarray]:
        env = DuelEnv()
        observations, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        out = [np.concatenate(observations)]
        for _ in range(20):
            observations, *_ = env.step(list(rng.integers(6, size=2)))
            out.append(np.concatenate(observations))
        return out

    first, again = trajectory(7), trajectory(7)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    starts = {tuple(trajectory(seed)[0]) for seed in range(10)}
    assert len(starts) > 5


def test_observations_stay_in_bounds_over_random_play() -> None:
    env = DuelEnv()
    rng = np.random.default_rng(4)
    observations, _ = env.reset(seed=4)
    for _ in range(2000):
        observations, _, terminated, truncated, _ = env.step(list(rng.integers(6, size=2)))
        stacked = np.stack(observations)
        assert np.isfinite(stacked).all() and (np.abs(stacked) <= 1.0).all()
        if terminated.any() or truncated.any():
            env.reset()


# --- the bot and the single-agent view ----------------------------------------------------------
def test_bot_is_deterministic_given_its_generator() -> None:
    def actions(seed: int) -> list[int]:
        env, bot = DuelEnv(), ScriptedDuelBot(rng=np.random.default_rng(seed))
        env.reset(seed=0)
        out = []
        for _ in range(30):
            out.append(bot.act(env, 0))
            env.step([out[-1], NOOP])
        return out

    assert actions(5) == actions(5)
    assert actions(5) != actions(6)


def test_perfect_bot_lines_up_turns_and_shoots() -> None:
    env, bot = DuelEnv(), ScriptedDuelBot(skill=1.0)
    env.set_state(positions=[env.cell(0, 0), env.cell(0, 2)], facings=[D_DOWN, D_UP])
    assert bot.act(env, 0) == RIGHT  # lined up: turn towards the opponent
    env.step([RIGHT, NOOP])
    assert bot.act(env, 0) == SHOOT
    # Seat 1 must turn to the world's left, which is RIGHT in its own (turned) frame.
    env.set_state(positions=[env.cell(0, 0), env.cell(0, 2)], facings=[D_UP, D_DOWN])
    assert bot.act(env, 1) == RIGHT
    # Not lined up: take a step on a shortest path towards a firing position.
    env.set_state(positions=[env.cell(0, 0), env.cell(6, 6)], facings=[D_UP, D_UP])
    before = env.arena.approach[env.positions[1]][env.positions[0]]
    env.step([bot.act(env, 0), NOOP])
    assert env.arena.approach[env.positions[1]][env.positions[0]] == before - 1


def test_random_policy_rarely_beats_the_bot() -> None:
    env = DuelVsBotEnv()
    wins = 0
    for match in range(200):
        env.reset(seed=1000 + match)
        env.action_space.seed(match)
        while True:
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            if terminated or truncated:
                break
        wins += info["win"] == 1.0
    assert wins < 0.2 * 200


def test_bot_against_itself_wins_about_half() -> None:
    env = DuelEnv()
    bots = [ScriptedDuelBot(rng=np.random.default_rng(s)) for s in (10, 11)]
    score = 0.0
    # 400 matches: the standard error of the score is ~0.02, so the band is over 4 of them.
    for match in range(400):
        env.reset(seed=match)
        _, _, _, _, infos = play(env, [bot.act for bot in bots])
        score += infos[0]["win"]
    assert 0.4 <= score / 400 <= 0.6


@pytest.mark.filterwarnings("ignore:.*alternative render modes")
def test_duel_vs_bot_passes_the_gymnasium_checker() -> None:
    env = DuelVsBotEnv()
    check_env(env, skip_render_check=False)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info == {}


def test_duel_vs_bot_reports_win_on_the_last_step_only() -> None:
    env = DuelVsBotEnv()
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    while True:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(6)))
        assert isinstance(reward, float)
        if terminated or truncated:
            break
        assert "win" not in info
    assert info["win"] in (0.0, 0.5, 1.0)


def test_duel_vs_bot_seed_fixes_game_and_bot() -> None:
    def returns(seed: int) -> list[float]:
        env = DuelVsBotEnv()
        env.reset(seed=seed)
        out = []
        for _ in range(40):
            obs, reward, terminated, truncated, _ = env.step(SHOOT)
            out.append((float(obs.sum()), reward))
            if terminated or truncated:
                env.reset()
        return out

    assert returns(3) == returns(3)
    assert returns(3) != returns(4)


def test_factories_are_picklable_and_build_the_envs() -> None:
    for factory in (make_duel, make_duel_vs_bot):
        assert pickle.loads(pickle.dumps(factory)) is factory
    assert isinstance(make_duel(EnvContext(seed=1)), DuelEnv)
    env = make_duel_vs_bot(EnvContext(render_mode="ansi"))
    assert isinstance(env, gym.Env)
    env.reset(seed=0)
    assert "A" in env.render() and "B" in env.render()
