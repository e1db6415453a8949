"""A gymnasium.Env over one ``vizdoom.DoomGame``, and the factory the ``doom_*`` names use.

Responsibility: start a headless game for a :class:`DoomScenario` (160x120 RGB24 rendering, no
window, synchronous PLAYER mode), repeat each action ``frameskip`` tics with
``make_action(buttons, tics)``, and return the paper's observations: the frame downsampled to
128x72 with cv2 INTER_AREA as uint8 channels first ``(3, 72, 128)``, plus the HUD
``measurements`` vector for the advanced scenarios. Each step's info carries the raw game
variables (``info["game_variables"]``) for reward shaping. In bot matches it adds the bots on
every reset and respawns the agent when it dies; a finished episode returns the last
observation again. ``make_doom_env`` stacks, from the inside out:
env -> ``EpisodeStatistics`` (the game's own score) -> reward shaping (deathmatch only).

It must not: import vizdoom or cv2 at import time (``import sampleforge.envs`` works without the
``doom`` extra), start the game process before the first ``reset`` (so describing an env's
spaces costs no process), or shape rewards (``reward_shaping.py`` does, above the statistics).

Files: the game process writes its engine settings to a private temporary folder, removed on
``close`` (or at exit). The engine also creates an empty ``./_vizdoom/`` folder in the working
directory, which no setting controls.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from sampleforge.envs.doom.actions import CfgButtonActions, FactorisedActions
from sampleforge.envs.doom.engine_ipc import remove_orphan_engine_ipc
from sampleforge.envs.doom.measurements import (
    MEASUREMENT_NAMES,
    MEASUREMENTS_KEY,
    measurements_space,
    measurements_vector,
)
from sampleforge.envs.doom.reward_shaping import (
    GAME_VARIABLES_KEY,
    SHAPING_VARIABLES,
    DoomRewardShaping,
    DoomRewardShapingWrapper,
)
from sampleforge.envs.doom.scenarios import TICS_PER_SECOND, DoomScenario, doom_scenario
from sampleforge.envs.registry import EnvContext, EpisodeStatistics

INSTALL_HINT = "pip install 'sampleforge[doom]'"
# Paper A.1.2: rendered at 160x120, downsampled to 128x72 (width x height).
OBS_WIDTH, OBS_HEIGHT = 128, 72
RENDER_HEIGHT, RENDER_WIDTH = 120, 160
IMAGE_KEY = "obs"

RenderFrame = np.ndarray


class DoomEnv(gym.Env):
    """One VizDoom scenario; the game process starts on the first ``reset``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": TICS_PER_SECOND}

    def __init__(
        self,
        scenario: DoomScenario,
        *,
        render_mode: str | None = None,
        num_bots: int | None = None,
        episode_timeout_tics: int | None = None,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"Doom renders only 'rgb_array' (headless), got {render_mode!r}")
        self._vzd, self._cv2 = import_doom_dependencies()
        self.scenario = scenario
        self.render_mode = render_mode
        self.num_bots = scenario.num_bots if num_bots is None else num_bots
        if self.num_bots < 0:
            raise ValueError(f"num_bots must be >= 0, got {self.num_bots}")
        self._game = self._configured_game(episode_timeout_tics)
        self._actions = self._choose_actions()
        self.action_space = self._actions.space
        self._variables = self._choose_game_variables()
        self.observation_space = self._observation_space()
        self._release: weakref.finalize | None = None
        self._started = False
        self._score = 0.0
        self._last_obs: Any = None
        self._last_frame: RenderFrame | None = None

    # ------------------------------------------------------------------ gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._game.set_seed(int(seed) % 2**32)  # vizdoom seeds are uint32
        if self._started:
            self._game.new_episode()
        else:
            self._start_game()
        self._add_bots()
        variables = self._read_variables()
        self._score = self._score_of(variables)
        return self._observe(variables), {GAME_VARIABLES_KEY: variables}

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if not self._started:
            raise RuntimeError("step() called before reset() on a Doom env")
        tics = self.scenario.frameskip
        reward = self._game.make_action(self._actions.to_buttons(action, tics), tics)
        finished = self._game.is_episode_finished()
        if not finished and self._game.is_player_dead():
            # Only in a deathmatch can the agent be dead in an unfinished episode: a death is
            # not the end of a match.
            self._game.respawn_player()
        variables = self._read_variables()
        if self.scenario.score_variable is not None:
            score = self._score_of(variables)
            reward, self._score = score - self._score, score
        obs = self._last_obs if finished else self._observe(variables)
        truncated = finished and self._game.is_episode_timeout_reached()
        terminated = finished and not truncated
        return obs, float(reward), terminated, truncated, {GAME_VARIABLES_KEY: variables}

    def render(self) -> RenderFrame | None:
        """The last frame at full rendering resolution, (120, 160, 3) uint8 RGB."""
        if self.render_mode != "rgb_array":
            return None
        return self._last_frame

    def close(self) -> None:
        if self._release is not None:
            self._release()  # a finalizer runs at most once, so close() is idempotent
            self._release = None
        self._started = False

    def get_action_meanings(self) -> list[str]:
        """Names of the discrete actions (basic scenarios only)."""
        if not isinstance(self._actions, CfgButtonActions):
            raise TypeError(f"{self.scenario.name} has a factorised action space, not a list")
        return self._actions.meanings()

    # ------------------------------------------------------------------ setup

    def _configured_game(self, episode_timeout_tics: int | None) -> Any:
        vzd, scenario = self._vzd, self.scenario
        game = vzd.DoomGame()
        game.load_config(f"{vzd.scenarios_path}/{scenario.cfg_file}")
        if scenario.doom_map is not None:
            game.set_doom_map(scenario.doom_map)
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_mode(vzd.Mode.PLAYER)  # synchronous: the env waits for every action
        game.set_screen_resolution(vzd.ScreenResolution.RES_160X120)
        game.set_screen_format(vzd.ScreenFormat.RGB24)
        timeout = episode_timeout_tics or scenario.episode_timeout_tics
        if timeout is not None:
            game.set_episode_timeout(int(timeout))
        if scenario.game_args:
            game.add_game_args(scenario.game_args)
        return game

    def _choose_actions(self) -> CfgButtonActions | FactorisedActions:
        if self.scenario.action_set == "factorised":
            actions: CfgButtonActions | FactorisedActions = FactorisedActions()
            members = self._vzd.Button.__members__
            self._game.set_available_buttons([members[button] for button in actions.buttons])
            return actions
        return CfgButtonActions([button.name for button in self._game.get_available_buttons()])

    def _choose_game_variables(self) -> tuple[str, ...]:
        scenario = self.scenario
        names = [variable.name for variable in self._game.get_available_game_variables()]
        if scenario.measurements:
            names = list(MEASUREMENT_NAMES) + names  # measurements first, in their order
        if scenario.reward_shaping:
            names += SHAPING_VARIABLES
        if scenario.score_variable is not None:
            names.append(scenario.score_variable)
        unique = tuple(dict.fromkeys(names))
        members = self._vzd.GameVariable.__members__
        self._game.set_available_game_variables([members[name] for name in unique])
        return unique

    def _observation_space(self) -> gym.Space:
        image = gym.spaces.Box(0, 255, shape=(3, OBS_HEIGHT, OBS_WIDTH), dtype=np.uint8)
        if not self.scenario.measurements:
            return image
        return gym.spaces.Dict({IMAGE_KEY: image, MEASUREMENTS_KEY: measurements_space()})

    def _start_game(self) -> None:
        # The engine writes its settings file on exit; keep it out of the working directory
        # and apart from other instances writing theirs at the same time.
        config_dir = tempfile.mkdtemp(prefix="sampleforge_vizdoom_")
        self._game.set_doom_config_path(f"{config_dir}/_vizdoom.ini")
        # Runs on close(), or when the env is garbage-collected or Python exits without it.
        self._release = weakref.finalize(self, _stop_game, self._game, config_dir)
        remove_orphan_engine_ipc()  # a colliding leftover name would make init fail
        # Engines that start at the same moment in one working directory (the rollout workers
        # of a run) race to create ./_vizdoom, which the loser can fail with "File exists"; an
        # engine that finds the folder leaves it alone.
        os.makedirs("_vizdoom", exist_ok=True)
        self._game.init()
        self._started = True

    def _add_bots(self) -> None:
        if self.num_bots == 0:
            return
        self._game.send_game_command("removebots")
        for _ in range(self.num_bots):
            self._game.send_game_command("addbot")

    # ------------------------------------------------------------------ per step

    def _read_variables(self) -> dict[str, float]:
        state = self._game.get_state()
        if state is not None:
            self._last_frame = state.screen_buffer
            values = state.game_variables
            if values is not None:
                return dict(zip(self._variables, values.tolist()))
        # After the episode ends there is no state, but the game still answers directly.
        members = self._vzd.GameVariable.__members__
        return {name: self._game.get_game_variable(members[name]) for name in self._variables}

    def _score_of(self, variables: dict[str, float]) -> float:
        name = self.scenario.score_variable
        return 0.0 if name is None else float(variables[name])

    def _observe(self, variables: dict[str, float]) -> Any:
        frame = self._cv2.resize(
            self._last_frame, (OBS_WIDTH, OBS_HEIGHT), interpolation=self._cv2.INTER_AREA
        )
        image = np.ascontiguousarray(frame.transpose(2, 0, 1))
        if self.scenario.measurements:
            hud = measurements_vector([variables[name] for name in MEASUREMENT_NAMES])
            obs: Any = {IMAGE_KEY: image, MEASUREMENTS_KEY: hud}
        else:
            obs = image
        self._last_obs = obs
        return obs


def make_doom_env(
    name: str,
    context: EnvContext,
    *,
    reward_shaping: DoomRewardShaping | None = None,
    num_bots: int | None = None,
    episode_timeout_tics: int | None = None,
) -> gym.Env:
    """Build the scenario ``name`` with episode statistics (and shaping, for deathmatch).

    ``reward_shaping`` overrides the default weights; ``num_bots`` and ``episode_timeout_tics``
    override the scenario's (e.g. short matches in tests).
    """
    scenario = doom_scenario(name)
    if reward_shaping is not None and not scenario.reward_shaping:
        raise ValueError(f"{name} has no reward shaping; only the deathmatch scenario does")
    env: gym.Env = DoomEnv(
        scenario,
        render_mode=context.render_mode,
        num_bots=num_bots,
        episode_timeout_tics=episode_timeout_tics,
    )
    env = EpisodeStatistics(env)  # innermost: the game's own score, unshaped
    if scenario.reward_shaping:
        env = DoomRewardShapingWrapper(env, reward_shaping or DoomRewardShaping())
    return env


def _stop_game(game: Any, config_dir: str) -> None:
    # The game saves its settings file while closing, so the folder goes after it.
    game.close()
    shutil.rmtree(config_dir, ignore_errors=True)


def import_doom_dependencies() -> tuple[Any, Any]:
    """The ``vizdoom`` and ``cv2`` modules, or an ImportError saying what to install."""
    try:
        import cv2
        import vizdoom
    except ImportError as error:
        raise ImportError(
            f"Doom environments need vizdoom and opencv ({error}); run: {INSTALL_HINT}"
        ) from error
    return vizdoom, cv2
