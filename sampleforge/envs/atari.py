"""Atari 2600 games through ale-py, preprocessed the standard DeepMind way.

Responsibility: build ``<Game>NoFrameskip-v4`` environments wrapped, from the inside out, as
episode statistics (true game return) -> no-op reset (up to 30) + max-and-skip 4 + 84x84
grayscale (Gymnasium's ``AtariPreprocessing``) -> episodic life -> fire reset (games with a
FIRE action) -> reward clipping to sign -> frame stack 4, giving uint8 observations of shape
(4, 84, 84), channels first; and register the ``atari_*`` names at import.

It must not: import ale_py or cv2 at import time (``import sampleforge.envs`` has to work
without the ``atari`` extra), or add behaviour beyond the standard preprocessing.

Sticky actions: ``NoFrameskip-v4`` ids are defined with ``repeat_action_probability=0``
(deterministic emulator, randomness only from the no-op starts), and we pass it explicitly
so the protocol cannot drift with ale-py's defaults. Use a ``-v5`` id via ``make_env`` for
sticky actions (0.25) instead.
"""

from __future__ import annotations

from functools import partial
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from sampleforge.envs.registry import EnvContext, EpisodeStatistics, register_env

ATARI_FRAMESKIP = 4
INSTALL_HINT = "pip install 'sampleforge[atari]'"

# sampleforge name -> Gymnasium id. Users can add games the same way:
# register_env("atari_alien", partial(make_atari_env, "AlienNoFrameskip-v4"), frameskip=4)
ATARI_GAMES: dict[str, str] = {
    "atari_breakout": "BreakoutNoFrameskip-v4",
    "atari_pong": "PongNoFrameskip-v4",
    "atari_spaceinvaders": "SpaceInvadersNoFrameskip-v4",
    "atari_qbert": "QbertNoFrameskip-v4",
    "atari_seaquest": "SeaquestNoFrameskip-v4",
    "atari_beamrider": "BeamRiderNoFrameskip-v4",
    "atari_enduro": "EnduroNoFrameskip-v4",
    "atari_mspacman": "MsPacmanNoFrameskip-v4",
    "atari_montezuma": "MontezumaRevengeNoFrameskip-v4",
}


class EpisodicLife(gym.Wrapper):
    """Ends the agent's episode when a life is lost, but resets the game only at game over.

    On a life loss ``step`` returns ``terminated=True``; the following ``reset`` continues
    the same game with one no-op step instead of restarting it. Gymnasium's
    ``terminal_on_life_loss`` differs: its next reset restarts the whole game, so the
    agent would never see the later lives.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self._current_lives()
        # At zero lives ALE itself reports game over; only earlier losses are ours to signal.
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        # An explicit seed or options asks for a fresh game, whatever the lives left.
        if self._game_over or seed is not None or options is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # action 0 is NOOP
            if terminated or truncated:
                # The game ended during that no-op (rare); a real episode must follow.
                obs, info = self.env.reset()
        self._game_over = False
        self._lives = self._current_lives()
        return obs, info

    def _current_lives(self) -> int:
        # AtariEnv's own attribute; gymnasium types `unwrapped` as a plain Env.
        return int(self.env.unwrapped.ale.lives())  # type: ignore[attr-defined]


class FireReset(gym.Wrapper):
    """Presses FIRE after every reset, for games that stand still until FIRE is pressed."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        # AtariEnv's own method; gymnasium types `unwrapped` as a plain Env.
        self._fire = env.unwrapped.get_action_meanings().index("FIRE")  # type: ignore[attr-defined]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, info = self.env.step(self._fire)
        if terminated or truncated:
            # FIRE itself ended the episode: start over once, without pressing again, so a
            # pathological game cannot loop here forever.
            obs, info = self.env.reset()
        return obs, info


def make_atari_env(
    game_id: str,
    context: EnvContext,
    *,
    noop_max: int = 30,
    frame_stack: int = 4,
    screen_size: int = 84,
    episodic_life: bool = True,
    clip_rewards: bool = True,
) -> gym.Env:
    """Build the Gymnasium Atari id ``game_id`` (a NoFrameskip one) with DeepMind wrappers.

    ``episodic_life=False`` and ``clip_rewards=False`` give the evaluation protocol.
    """
    ale_py = _import_atari_dependencies()
    gym.register_envs(ale_py)
    # Grayscale from the emulator: the preprocessing reads the screen itself, so producing
    # RGB frames it never uses would only cost time.
    env = gym.make(
        game_id,
        obs_type="grayscale",
        frameskip=1,
        repeat_action_probability=0.0,
        render_mode=context.render_mode,
    )
    env = EpisodeStatistics(env)  # innermost: the true game's unclipped return and length
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=ATARI_FRAMESKIP,
        screen_size=screen_size,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,  # keep uint8: 4x smaller to ship between processes
    )
    if episodic_life:
        env = EpisodicLife(env)
    # AtariEnv's own method; gymnasium types `unwrapped` as a plain Env.
    if "FIRE" in env.unwrapped.get_action_meanings():  # type: ignore[attr-defined]
        env = FireReset(env)
    if clip_rewards:
        env = gym.wrappers.TransformReward(env, _reward_sign)
    return gym.wrappers.FrameStackObservation(env, frame_stack)


def _reward_sign(reward: SupportsFloat) -> float:
    return float(np.sign(float(reward)))


def _import_atari_dependencies() -> Any:
    try:
        import ale_py
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError as error:
        raise ImportError(
            f"Atari environments need ale-py and opencv ({error}); run: {INSTALL_HINT}"
        ) from error
    return ale_py


def _register_atari_games() -> None:
    # partial of a module-level function keeps factories picklable for worker processes.
    for name, game_id in ATARI_GAMES.items():
        register_env(
            name,
            partial(make_atari_env, game_id),
            frameskip=ATARI_FRAMESKIP,
            description=f"{game_id} with DeepMind preprocessing (4x84x84 uint8 frames)",
        )


_register_atari_games()
