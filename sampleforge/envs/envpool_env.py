"""EnvPool's C++ batched environments under ``envpool:<task id>`` names.

Responsibility: the naming convention (``envpool:Breakout-v5``, ``envpool:CartPole-v1``,
``envpool:Hopper-v4``: any id of ``envpool.list_all_envs()``), the registry resolver that turns
such a name into an ``EnvSpec``, the picklable factory that spec carries (it builds a batch of
``num_envs`` envs for :class:`~sampleforge.envs.stepping.envpool_split.EnvPoolSplit`, or a one-env
``gymnasium.Env`` view for ``make_env``, ``env_info`` and evaluation), and the bookkeeping of
true episode returns both of them share.

Atari tasks get our standard preprocessing (``sampleforge.envs.atari``) in EnvPool's own option
names: 84x84 greyscale, 4 stacked frames, frame skip 4 with max-pooling of the last two frames,
1-30 no-op starts, FIRE after resets for games that have it, episodic life, reward clipping to
the sign, no sticky actions, and 27,000 agent steps (108,000 frames, NoFrameskip-v4's ALE limit)
per game at most. Differences from our Python wrappers that remain: after a lost life EnvPool
continues with 1-30 no-op frames and FIRE, where ``EpisodicLife`` does one no-op agent step;
and episode lengths are counted here as agent steps x frameskip (emulator frames, the unit of
``atari_*`` names, but without the frames spent in no-op starts).

Episode statistics: an episode, for returns and lengths, is a whole game. With episodic life
the agent's episode (``done``) ends at each lost life, but the return reported is the sum of
EnvPool's unclipped ``info["reward"]`` from the game's start to game over or truncation.

Must not: import envpool at import time (``import sampleforge.envs`` has to work without the
``envpool`` extra), register names itself (``sampleforge/envs/__init__.py`` does), or step envs
for training (the split does that, with the fault policy).
"""

from __future__ import annotations

import difflib
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from sampleforge.envs.registry import (
    EnvContext,
    EnvSpec,
    EpisodeStatistics,
    UnknownEnvError,
    env_seed,
)
from sampleforge.spaces import OBS_KEY

ENVPOOL_PREFIX = "envpool:"
INSTALL_HINT = "pip install 'sampleforge[envpool]'"
ATARI_FRAMESKIP = 4
_INT32_SEEDS = 2**31  # EnvPool's seeds are C++ ints

# Our Atari preprocessing (sampleforge.envs.atari) in EnvPool's option names.
ATARI_OPTIONS: dict[str, Any] = {
    "img_height": 84,
    "img_width": 84,
    "gray_scale": True,
    "use_inter_area_resize": True,  # AtariPreprocessing resizes with cv2.INTER_AREA too
    "stack_num": 4,
    "frame_skip": ATARI_FRAMESKIP,
    "noop_max": 30,
    "use_fire_reset": True,
    "episodic_life": True,
    "reward_clip": True,
    "repeat_action_probability": 0.0,  # as our NoFrameskip-v4 ids: no sticky actions
    "max_episode_steps": 27_000,  # agent steps: 108,000 frames
}


class EnvPoolUnavailableError(ImportError):
    """EnvPool cannot be imported here (not installed, or no wheel for this platform)."""


def import_envpool() -> ModuleType:
    """The ``envpool`` module, or an :class:`EnvPoolUnavailableError` saying why not."""
    try:
        import envpool
    except ImportError as error:
        raise EnvPoolUnavailableError(
            f"envpool cannot be imported ({error}) on {platform.system()} "
            f"{platform.machine()} with Python {platform.python_version()}; run: "
            f"{INSTALL_HINT} (EnvPool ships binary wheels only, e.g. for manylinux x86_64)"
        ) from error
    return envpool


def envpool_unavailable_reason() -> str | None:
    """Why EnvPool cannot be used here, or None when it can (for skips and messages)."""
    try:
        import_envpool()
    except EnvPoolUnavailableError as error:
        return str(error)
    return None


def envpool_task(name: str) -> str | None:
    """The EnvPool task id of an ``envpool:<task id>`` name; None for any other name."""
    if not isinstance(name, str) or not name.startswith(ENVPOOL_PREFIX):
        return None
    task = name[len(ENVPOOL_PREFIX) :]
    return task or None


# --- episode statistics ---------------------------------------------------------------------------
@dataclass(frozen=True)
class FinishedEpisode:
    """One finished game of env ``env_id``: its true return and length in frames."""

    env_id: int
    episode_return: float
    length: int


class EpisodeTracker:
    """True returns and lengths of a batch of EnvPool envs, counted step by step.

    ``raw_reward_key`` names an info entry holding the unclipped reward (Atari: ``"reward"``);
    ``game_over_key`` one telling a real game over from a lost life (Atari: ``"terminated"``).
    Without them the step reward is the true one and every done ends an episode.
    """

    def __init__(
        self,
        num_envs: int,
        *,
        frameskip: int = 1,
        raw_reward_key: str | None = None,
        game_over_key: str | None = None,
    ):
        self.frameskip = frameskip
        self.raw_reward_key = raw_reward_key
        self.game_over_key = game_over_key
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.steps = np.zeros(num_envs, dtype=np.int64)

    def update(
        self,
        env_ids: np.ndarray,
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        info: Mapping[str, Any],
    ) -> list[FinishedEpisode]:
        """Count one step of envs ``env_ids``; returns the episodes it finished (and forgets
        them)."""
        raw = np.asarray(info[self.raw_reward_key] if self.raw_reward_key else rewards)
        # A non-finite reward is a fault the split handles; it must not poison the return.
        self.returns[env_ids] += np.where(np.isfinite(raw), raw, 0.0)  # cheaper than nan_to_num
        self.steps[env_ids] += 1
        done = np.logical_or(terminated, truncated)
        if self.game_over_key is not None:
            game_over = np.asarray(info[self.game_over_key]).astype(bool)
            ended = done & (game_over | np.asarray(truncated, dtype=bool))
        else:
            ended = done
        finished = []
        for i in np.asarray(env_ids)[ended].tolist():
            finished.append(
                FinishedEpisode(int(i), float(self.returns[i]), int(self.steps[i]) * self.frameskip)
            )
        self.clear(np.asarray(env_ids)[ended])
        return finished

    def clear(self, env_ids: np.ndarray | Sequence[int] | slice) -> None:
        """Forget the running episodes of ``env_ids`` (they restart from scratch)."""
        self.returns[env_ids] = 0.0
        self.steps[env_ids] = 0


# --- building pools -------------------------------------------------------------------------------
def default_num_threads(num_envs: int) -> int:
    """Threads for a pool of ``num_envs`` envs: one per env, at most one per usable core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(num_envs, cores))


def batch_seeds(contexts: Sequence[EnvContext]) -> list[int]:
    """One EnvPool seed per env: ``env_seed`` of its context, or fresh entropy when unseeded."""
    if contexts and contexts[0].seed is None:
        state = np.random.SeedSequence().generate_state(len(contexts), dtype=np.uint32)
        return [int(s) % _INT32_SEEDS for s in state]
    seeds = []
    for ctx in contexts:
        seed = env_seed(ctx)
        if seed is None:
            raise ValueError("contexts of one EnvPool batch must all be seeded or all unseeded")
        seeds.append(seed % _INT32_SEEDS)
    return seeds


def make_envpool_batch(
    task_id: str, num_envs: int, seed: int | Sequence[int], **options: Any
) -> Any:
    """A synchronous EnvPool (gymnasium API) of ``num_envs`` envs of ``task_id``.

    ``seed`` is one int (env i gets seed + i) or one seed per env. ``options`` are EnvPool's
    (e.g. ``episodic_life=True``, ``num_threads=2``); ``num_threads`` defaults to
    :func:`default_num_threads`.
    """
    envpool = import_envpool()
    options.setdefault("num_threads", default_num_threads(num_envs))
    if not isinstance(seed, int):
        seed = [int(s) for s in seed]
    # batch_size == num_envs: synchronous mode, every step returns every env it was given.
    return envpool.make(
        task_id, env_type="gymnasium", num_envs=num_envs, batch_size=num_envs, seed=seed, **options
    )


@dataclass(frozen=True)
class EnvPoolFactory:
    """How to build EnvPool envs of one task; the ``factory`` of an EnvPool ``EnvSpec``.

    Called with a context (as every spec factory is) it returns a one-env ``gymnasium.Env`` view
    (for ``make_env``, ``env_info``, evaluation); :meth:`make_batch` builds the batch a rollout
    worker's ``EnvPoolSplit`` steps. A frozen dataclass of plain values, so specs pickle to
    worker processes. Register variants with your own options like any env::

        register_env("breakout_eval", EnvPoolFactory.create(
            "Breakout-v5", {**ATARI_OPTIONS, "episodic_life": False, "reward_clip": False},
            atari=True), frameskip=4)
    """

    task_id: str
    options: tuple[tuple[str, Any], ...] = ()
    atari: bool = False

    @classmethod
    def create(
        cls, task_id: str, options: Mapping[str, Any] | None = None, atari: bool = False
    ) -> EnvPoolFactory:
        """A factory for ``task_id`` with EnvPool ``options``; ``atari`` reads the true reward
        and game over from EnvPool's Atari info."""
        return cls(task_id, tuple(sorted((options or {}).items())), atari)

    @property
    def frameskip(self) -> int:
        """Emulator frames per agent step (Atari's frame skip; 1 for every other family)."""
        return int(dict(self.options).get("frame_skip", ATARI_FRAMESKIP)) if self.atari else 1

    def make_batch(self, num_envs: int, seeds: int | Sequence[int], **overrides: Any) -> Any:
        """A synchronous EnvPool of ``num_envs`` envs with this factory's options."""
        return make_envpool_batch(
            self.task_id, num_envs, seeds, **{**dict(self.options), **overrides}
        )

    def episode_tracker(self, num_envs: int) -> EpisodeTracker:
        """Counts true returns and lengths of a batch built by this factory."""
        if self.atari:
            return EpisodeTracker(
                num_envs,
                frameskip=self.frameskip,
                raw_reward_key="reward",
                game_over_key="terminated",
            )
        return EpisodeTracker(num_envs)

    def __call__(self, context: EnvContext) -> gym.Env:
        return EnvPoolEpisodeStatistics(EnvPoolEnv(self, context))


def is_envpool_spec(spec: EnvSpec) -> bool:
    """Whether ``spec`` builds EnvPool envs (and so wants an ``EnvPoolSplit``)."""
    return isinstance(spec.factory, EnvPoolFactory)


def envpool_spec(name: str) -> EnvSpec | None:
    """The spec of an ``envpool:<task id>`` name (a registry resolver); None for other names.

    Raises :class:`EnvPoolUnavailableError` when envpool cannot be imported and
    ``UnknownEnvError`` (with suggestions) for a task EnvPool does not have.
    """
    task = envpool_task(name)
    if task is None:
        return None
    envpool = import_envpool()
    tasks = list(envpool.list_all_envs())
    if task not in tasks:
        raise UnknownEnvError(_unknown_task_message(task, tasks))
    import_path, defaults = _registered_entry(envpool, task)
    atari = import_path == "envpool.atari"
    factory = EnvPoolFactory.create(task, ATARI_OPTIONS if atari else {}, atari=atari)
    threshold = defaults.get("reward_threshold")
    return EnvSpec(
        name=name,
        factory=factory,
        frameskip=factory.frameskip,
        reward_threshold=None if threshold is None else float(threshold),
        description=f"EnvPool task {task}" + (" with DeepMind preprocessing" if atari else ""),
    )


def _registered_entry(envpool: ModuleType, task: str) -> tuple[str, dict[str, Any]]:
    """(module of the task's family, its default options) from EnvPool's registry."""
    entry = envpool.registration.registry.specs[task]
    return str(entry[0]), dict(entry[2]) if len(entry) > 2 else {}


def _unknown_task_message(task: str, tasks: list[str]) -> str:
    by_lower = {t.lower(): t for t in tasks}
    close = difflib.get_close_matches(task.lower(), list(by_lower), n=3, cutoff=0.6)
    message = f"EnvPool has no task {task!r}"
    if close:
        return (
            message
            + "; did you mean "
            + ", ".join(repr(ENVPOOL_PREFIX + by_lower[c]) for c in close)
            + "?"
        )
    return message + "; see envpool.list_all_envs()"


# --- one env as a gymnasium.Env -------------------------------------------------------------------
class EnvPoolEnv(gym.Env):
    """One EnvPool env (a pool of one) seen as a ``gymnasium.Env``.

    For ``env_info``, evaluation and anything else that wants a single env; training steps whole
    batches through ``EnvPoolSplit`` instead. ``reset()`` after an episode ended lets EnvPool
    reset the env its own way (one step whose action it ignores), so with episodic life a lost
    life continues the game; ``reset(seed=...)`` with a new seed or ``options`` starts a fresh
    game, as a new pool (EnvPool fixes seeds at creation). On the step that ends a game, info
    has ``"episode": {"r": true return, "l": frames}``.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, factory: EnvPoolFactory, context: EnvContext | None = None):
        context = context if context is not None else EnvContext()
        self.factory = factory
        self.render_mode = context.render_mode
        self._seed = batch_seeds([context])[0]
        self._pool = self._make_pool()
        self.observation_space = self._pool.observation_space
        self.action_space = self._pool.action_space
        # EnvPool's greyscale Atari stacks its last `stack_num` frames along the first axis
        # (in colour each frame would be 3 planes of it).
        grey = dict(factory.options).get("gray_scale", True)
        shape = self.observation_space.shape or ()
        stacked = factory.atari and grey and len(shape) == 3 and shape[0] > 1
        self.frame_stacked_keys = (OBS_KEY,) if stacked else ()
        self._tracker = factory.episode_tracker(1)
        self._env_id = np.zeros(1, dtype=np.int32)
        assert self.action_space.shape is not None  # EnvPool's action spaces are Box or Discrete
        self._noop = np.zeros((1, *self.action_space.shape), dtype=self.action_space.dtype)
        self._episode_over = False  # the last step ended an episode: EnvPool resets next step

    def _make_pool(self) -> Any:
        extra = {"render_mode": self.render_mode} if self.render_mode else {}
        return self.factory.make_batch(1, [self._seed], num_threads=1, **extra)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None and int(seed) % _INT32_SEEDS != self._seed:
            self._pool.close()
            self._seed = int(seed) % _INT32_SEEDS
            self._pool = self._make_pool()
        elif self._episode_over and seed is None and options is None:
            # EnvPool's own auto-reset: with episodic life this keeps the game going.
            obs, _, _, _, info = self._pool.step(self._noop, self._env_id)
            self._episode_over = False
            return _first(obs), _scalars(info)
        obs, info = self._pool.reset()
        self._tracker.clear(slice(None))
        self._episode_over = False
        return _first(obs), _scalars(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        batch = np.asarray(action, dtype=self.action_space.dtype)[None]
        obs, reward, terminated, truncated, info = self._pool.step(batch, self._env_id)
        self._episode_over = bool(terminated[0] or truncated[0])
        finished = self._tracker.update(self._env_id, reward, terminated, truncated, info)
        out_info = _scalars(info)
        if finished:
            out_info["episode"] = {"r": finished[0].episode_return, "l": finished[0].length}
        return _first(obs), float(reward[0]), bool(terminated[0]), bool(truncated[0]), out_info

    def render(self) -> Any:
        frames = self._pool.render()
        return None if frames is None else frames[0]

    def close(self) -> None:
        self._pool.close()


class EnvPoolEpisodeStatistics(EpisodeStatistics):
    """Marks an :class:`EnvPoolEnv` as recording its own episode statistics.

    ``make_env`` wraps any env without a ``RecordEpisodeStatistics`` in one, which would count
    clipped rewards and every lost life as an episode. This subclass passes everything through
    unchanged: the view already reports true returns, per game.
    """

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        return self.env.step(action)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=seed, options=options)


def _first(obs: Any) -> Any:
    """Env 0's observation of a batch (a dict of batches for Dict spaces)."""
    if isinstance(obs, dict):
        return {key: _first(value) for key, value in obs.items()}
    return obs[0]


def _scalars(info: Mapping[str, Any]) -> dict[str, Any]:
    """Env 0's entries of a batched info, as Python scalars where they are scalars."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, Mapping):
            continue  # EnvPool's per-player bookkeeping ("players"): nothing for one env
        first = np.asarray(value)[0]
        out[key] = first.item() if first.ndim == 0 else first
    return out
