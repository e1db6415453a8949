"""Unit tests for sampleforge.envs.doom: every scenario headless, spaces, bots, reward shaping,
episode statistics, bad names and process cleanup.

Tests that start a game are skipped when vizdoom is not installed; the pure ones (action tables,
shaping arithmetic, names, install hint) always run.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.envs import (
    EnvContext,
    UnknownEnvError,
    env_info,
    make_env,
    registered_envs,
    resolve_env,
)
from sampleforge.envs.doom import (
    AIM_DEGREES,
    DOOM_SCENARIOS,
    HEAD_SIZES,
    MEASUREMENT_NAMES,
    DoomRewardShaping,
    UnknownDoomScenarioError,
    doom_scenario,
    make_doom_env,
    shaped_reward,
    shaping_terms,
)
from sampleforge.envs.doom.actions import CfgButtonActions, FactorisedActions
from sampleforge.envs.doom.reward_shaping import SHAPING_VARIABLES
from sampleforge.spaces import (
    action_spec,
    actions_to_env,
    observation_specs,
    observation_to_dict,
)

needs_vizdoom = pytest.mark.skipif(
    find_spec("vizdoom") is None or find_spec("cv2") is None,
    reason="needs the doom extra: pip install 'sampleforge[doom]'",
)

ALL_SCENARIOS = sorted(DOOM_SCENARIOS)
DEATHMATCH = "doom_deathmatch_bots"


@pytest.fixture(autouse=True)
def in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine creates ./_vizdoom in its working directory; keep it out of the repository."""
    monkeypatch.chdir(tmp_path)


def vizdoom_children() -> list[int]:
    """Pids of live (not zombie) child processes of this process named ``vizdoom``."""
    pids = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_file.read_text()
        except OSError:
            continue  # the process ended while we looked
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if name == "vizdoom" and int(ppid) == os.getpid() and state != "Z":
            pids.append(int(stat_file.parent.name))
    return pids


def game_variables(step_result: tuple[Any, ...]) -> dict[str, float]:
    return step_result[-1]["game_variables"]


def neutral_action(env: gym.Env) -> Any:
    """No-op: 0 for the discrete sets; every head at rest (aim 0 degrees) for the factorised."""
    if isinstance(env.action_space, gym.spaces.Tuple):
        return (0, 0, 0, 0, 0, 0, AIM_DEGREES.index(0.0))
    return 0


# --------------------------------------------------------------------------- pure: no game


def test_importing_envs_does_not_import_vizdoom() -> None:
    code = (
        "import sys; import sampleforge.envs as e; "
        "assert 'vizdoom' not in sys.modules and 'cv2' not in sys.modules; "
        "assert 'doom_basic' in e.registered_envs()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_vizdoom_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vizdoom", None)  # makes `import vizdoom` fail
    with pytest.raises(ImportError, match=r"pip install 'sampleforge\[doom\]'"):
        make_env("doom_basic")


def test_every_scenario_is_registered_with_its_frameskip() -> None:
    expected = {
        "doom_basic",
        "doom_defend_the_center",
        "doom_defend_the_line",
        "doom_health_gathering",
        "doom_health_gathering_supreme",
        "doom_my_way_home",
        "doom_deadly_corridor",
        DEATHMATCH,
    }
    assert set(DOOM_SCENARIOS) == expected
    assert expected <= set(registered_envs())
    for name in expected:
        assert resolve_env(name).frameskip == (2 if name == DEATHMATCH else 4)


def test_unknown_scenario_lists_every_doom_name() -> None:
    with pytest.raises(UnknownDoomScenarioError) as error:
        doom_scenario("doom_battle")
    for name in DOOM_SCENARIOS:
        assert name in str(error.value)
    assert isinstance(error.value, UnknownEnvError)  # one except clause catches both


def test_misspelled_name_suggests_the_doom_scenario() -> None:
    with pytest.raises(UnknownEnvError, match="doom_basic"):
        make_env("doom_basik")


def test_factorised_action_space_is_table_a4() -> None:
    actions = FactorisedActions()
    assert actions.space == gym.spaces.Tuple(
        [gym.spaces.Discrete(n) for n in (3, 3, 2, 2, 2, 8, 21)]
    )
    assert math.prod(HEAD_SIZES) == 12096  # Table A.4's total
    assert AIM_DEGREES[0] == -12.5 and AIM_DEGREES[-1] == 12.5 and AIM_DEGREES[10] == 0.0
    assert np.allclose(np.diff(AIM_DEGREES), 1.25)


def test_factorised_action_presses_one_button_per_head_and_spreads_aim_over_tics() -> None:
    actions = FactorisedActions()
    at_rest = actions.to_buttons((0, 0, 0, 0, 0, 0, 10), tics=2)
    assert at_rest == [0.0] * len(actions.buttons)
    # backward, right strafe, attack, sprint, use, weapon slot 3, aim +12.5 degrees
    values = actions.to_buttons((2, 2, 1, 1, 1, 3, 20), tics=2)
    pressed = {button for button, value in zip(actions.buttons, values) if value == 1.0}
    assert pressed == {"MOVE_BACKWARD", "MOVE_RIGHT", "ATTACK", "SPEED", "USE", "SELECT_WEAPON3"}
    assert values[actions.buttons.index("TURN_LEFT_RIGHT_DELTA")] == 12.5 / 2
    with pytest.raises(ValueError, match="outside"):
        actions.to_buttons((0, 0, 0, 0, 0, 8, 10), tics=2)


def test_cfg_button_actions_are_noop_plus_one_button_at_a_time() -> None:
    actions = CfgButtonActions(["MOVE_LEFT", "MOVE_RIGHT", "ATTACK"])
    assert actions.space == gym.spaces.Discrete(4)
    assert actions.to_buttons(0, tics=4) == [0.0, 0.0, 0.0]
    assert actions.to_buttons(3, tics=4) == [0.0, 0.0, 1.0]
    assert actions.meanings() == ["NOOP", "MOVE_LEFT", "MOVE_RIGHT", "ATTACK"]
    with pytest.raises(ValueError, match="outside Discrete"):
        actions.to_buttons(-1, tics=4)


# --------------------------------------------------------------------------- pure: shaping


def snapshot(**changes: float) -> dict[str, float]:
    """Game variables of an alive agent holding a pistol, with ``changes`` applied."""
    values = dict.fromkeys(SHAPING_VARIABLES, 0.0)
    values.update(HEALTH=100.0, SELECTED_WEAPON=2.0, WEAPON1=1.0, WEAPON2=1.0, AMMO2=50.0)
    values.update(changes)
    return values


WEIGHTS = DoomRewardShaping(
    frag=1.0,
    death=-0.5,
    damage_dealt=0.01,
    health_pickup=0.02,
    armor_pickup=0.03,
    ammo_pickup=0.1,
    weapon_pickup=0.7,
    weapon_switch=-0.05,
)


def test_shaping_is_zero_when_nothing_changes() -> None:
    assert shaped_reward(snapshot(), snapshot(), WEIGHTS) == 0.0


@pytest.mark.parametrize(
    ("change", "term", "expected"),
    [
        ({"FRAGCOUNT": 2.0}, "frag", 2.0),
        ({"FRAGCOUNT": -1.0}, "frag", -1.0),  # suicide lowers the score
        ({"DAMAGECOUNT": 30.0}, "damage_dealt", 0.3),
        ({"HEALTH": 125.0}, "health_pickup", 0.5),
        ({"ARMOR": 100.0}, "armor_pickup", 3.0),
        ({"AMMO2": 60.0, "AMMO5": 2.0}, "ammo_pickup", 0.2),  # two slots grew
        ({"WEAPON3": 1.0}, "weapon_pickup", 0.7),
        ({"SELECTED_WEAPON": 3.0}, "weapon_switch", -0.05),
    ],
)
def test_each_term_weights_its_game_variable_delta(
    change: dict[str, float], term: str, expected: float
) -> None:
    terms = shaping_terms(snapshot(), snapshot(**change), WEIGHTS)
    assert terms.pop(term) == pytest.approx(expected)
    assert all(value == 0.0 for value in terms.values())  # no other term reacts
    assert shaped_reward(snapshot(), snapshot(**change), WEIGHTS) == pytest.approx(expected)


def test_losses_are_not_rewarded_or_punished_as_pickups() -> None:
    after_firing_and_hit = snapshot(AMMO2=40.0, HEALTH=70.0, ARMOR=0.0)
    assert shaped_reward(snapshot(), after_firing_and_hit, WEIGHTS) == 0.0


def test_respawn_counts_the_death_but_not_the_refilled_inventory() -> None:
    before = snapshot(HEALTH=20.0, SELECTED_WEAPON=5.0, WEAPON5=1.0, AMMO5=0.0)
    respawned = snapshot(DEATHCOUNT=1.0)  # full health, pistol again, rocket launcher gone
    terms = shaping_terms(before, respawned, WEIGHTS)
    assert terms["death"] == -0.5
    assert shaped_reward(before, respawned, WEIGHTS) == pytest.approx(-0.5)
    # A step that starts dead (respawn delayed) does not count the refill either.
    assert shaped_reward(snapshot(HEALTH=0.0), snapshot(), WEIGHTS) == 0.0


def test_shaping_weights_are_named_fields() -> None:
    assert set(DoomRewardShaping().as_dict()) == set(shaping_terms(snapshot(), snapshot(), WEIGHTS))


def test_shaping_is_only_for_the_deathmatch() -> None:
    with pytest.raises(ValueError, match="no reward shaping"):
        make_doom_env("doom_basic", EnvContext(), reward_shaping=DoomRewardShaping())


# --------------------------------------------------------------------------- with the game


@needs_vizdoom
@pytest.mark.parametrize("name", ALL_SCENARIOS)
def test_scenario_resets_and_steps_headless_within_its_spaces(name: str) -> None:
    env = make_env(name, EnvContext(seed=3))
    try:
        obs, info = env.reset(seed=3)
        image_space = env.observation_space
        if DOOM_SCENARIOS[name].measurements:
            assert isinstance(image_space, gym.spaces.Dict)
            assert set(obs) == {"obs", "measurements"}
            assert obs["measurements"].shape == (len(MEASUREMENT_NAMES),)
            assert obs["measurements"].dtype == np.float32
            image_space, image = image_space["obs"], obs["obs"]
        else:
            image = obs
        assert image_space.shape == (3, 72, 128) and image_space.dtype == np.uint8
        assert image.shape == (3, 72, 128) and image.dtype == np.uint8
        assert image.max() > 0  # a rendered frame, not an empty buffer
        assert env.observation_space.contains(obs)
        for _ in range(40):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            assert env.observation_space.contains(obs)
            assert isinstance(reward, float) and math.isfinite(reward)
            if terminated or truncated:
                obs, info = env.reset()
    finally:
        env.close()


@needs_vizdoom
def test_deathmatch_runs_with_bots_and_the_table_a4_actions() -> None:
    env = make_env(DEATHMATCH, EnvContext(seed=1))
    try:
        assert env.action_space == FactorisedActions().space
        env.reset(seed=1)
        for _ in range(30):
            result = env.step(env.action_space.sample())
        players = game_variables(result)["PLAYER_COUNT"]
        assert players == DOOM_SCENARIOS[DEATHMATCH].num_bots + 1 > 1
        assert env.unwrapped.num_bots == 7
    finally:
        env.close()


@needs_vizdoom
def test_deathmatch_spaces_map_to_tensors_and_back() -> None:
    info = env_info(DEATHMATCH)  # also checks the spaces are supported
    specs = observation_specs(info.observation_space)
    assert specs["obs"].shape == (3, 72, 128) and specs["obs"].numpy_dtype == np.uint8
    assert specs["measurements"].shape == (len(MEASUREMENT_NAMES),)
    assert action_spec(info.action_space).shape == (7,)
    env = make_env(DEATHMATCH)
    try:
        env.reset(seed=0)
        policy_actions = np.array([[1, 2, 1, 1, 0, 2, 0]], dtype=np.int64)
        (action,) = actions_to_env(policy_actions, env.action_space)
        obs = env.step(action)[0]
        as_tensors = observation_to_dict(obs, env.observation_space)
        assert as_tensors["measurements"].dtype == np.float32
    finally:
        env.close()


@needs_vizdoom
def test_deathmatch_statistics_report_the_unshaped_score() -> None:
    # A 3-second match and a heavy weapon-switch penalty: random weapon selection switches
    # weapons, so the shaped return differs from the score unless the wrapper order is right.
    weights = DoomRewardShaping(weapon_switch=-1.0)
    env = make_doom_env(
        DEATHMATCH, EnvContext(), reward_shaping=weights, episode_timeout_tics=3 * 35
    )
    env.action_space.seed(0)
    try:
        _, info = env.reset(seed=0)
        first, previous = info["game_variables"], info["game_variables"]
        shaped_return, expected_shaped, steps = 0.0, 0.0, 0
        while steps < 1000:
            result = env.step(env.action_space.sample())
            steps += 1
            shaped_return += float(result[1])
            expected_shaped += shaped_reward(previous, game_variables(result), weights)
            previous = game_variables(result)
            if result[2] or result[3]:
                break
        episode = result[-1]["episode"]
        assert result[3] and not result[2]  # the match's time limit is a truncation
        assert episode["l"] == steps
        assert episode["r"] == previous["FRAGCOUNT"] - first["FRAGCOUNT"]
        assert shaped_return == pytest.approx(expected_shaped)
        assert shaped_return <= -1.0  # the penalty fired, so the two returns really differ
        assert shaped_return != episode["r"]
    finally:
        env.close()


@needs_vizdoom
def test_basic_noop_episode_times_out_after_300_tics_at_frameskip_4() -> None:
    env = make_env("doom_basic")
    try:
        env.reset(seed=0)
        terminated = truncated = False
        steps = 0
        while not (terminated or truncated) and steps < 200:
            _, reward, terminated, truncated, info = env.step(0)
            steps += 1
            assert reward == -4.0  # living reward -1 per tic, 4 tics per step
        assert truncated and not terminated
        assert info["episode"] == {"r": -4.0 * steps, "l": steps}
        assert steps == 300 // 4
    finally:
        env.close()


@needs_vizdoom
@pytest.mark.parametrize("name", ["doom_health_gathering", "doom_health_gathering_supreme"])
def test_gathering_scenarios_observe_the_health_the_acid_takes(name: str) -> None:
    """The .cfg hides the HUD from the screen; the measurements give the agent its health."""
    env = make_env(name)
    health = MEASUREMENT_NAMES.index("HEALTH")
    try:
        obs, _ = env.reset(seed=0)
        first = float(obs["measurements"][health])
        for _ in range(30):
            obs, *_ = env.step(0)  # no-op: stand on the acid
        assert 0.0 < float(obs["measurements"][health]) < first <= 1.0
    finally:
        env.close()
    assert DOOM_SCENARIOS["doom_defend_the_center"].measurements  # it hides its ammunition
    assert not DOOM_SCENARIOS["doom_basic"].measurements


@needs_vizdoom
def test_defend_the_center_observes_the_rounds_it_has_left() -> None:
    env = make_env("doom_defend_the_center")
    ammo = MEASUREMENT_NAMES.index("AMMO2")
    try:
        obs, _ = env.reset(seed=0)
        first = float(obs["measurements"][ammo])
        for _ in range(8):
            obs, *_ = env.step(3)  # ATTACK
        assert 0.0 < float(obs["measurements"][ammo]) < first
    finally:
        env.close()


@needs_vizdoom
def test_same_seed_gives_the_same_frames() -> None:
    def frames(seed: int) -> list[float]:
        env = make_env("doom_defend_the_center")
        try:
            env.reset(seed=seed)
            return [float(env.step(step % 4)[0]["obs"].sum()) for step in range(20)]
        finally:
            env.close()

    assert frames(5) == frames(5)


@needs_vizdoom
def test_rgb_array_render_is_the_full_resolution_frame() -> None:
    env = make_env("doom_basic", EnvContext(render_mode="rgb_array"))
    try:
        env.reset(seed=0)
        env.step(0)
        frame = env.render()
        assert frame.shape == (120, 160, 3) and frame.dtype == np.uint8
    finally:
        env.close()


@needs_vizdoom
def test_close_ends_the_game_process() -> None:
    before = set(vizdoom_children())
    env = make_env(DEATHMATCH)
    assert set(vizdoom_children()) == before  # describing an env starts no game
    env.reset(seed=0)
    started = set(vizdoom_children()) - before
    assert len(started) == 1  # the check below would be vacuous without a process
    env.close()
    env.close()  # idempotent
    deadline = time.monotonic() + 5.0
    while started & set(vizdoom_children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not started & set(vizdoom_children())
