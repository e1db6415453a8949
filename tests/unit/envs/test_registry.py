"""Unit tests for sampleforge.envs.registry: naming, building, seeding, episode statistics."""

from __future__ import annotations

import pickle
import subprocess
import sys
from importlib.util import find_spec
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from sampleforge.envs import (
    EnvContext,
    EnvInfo,
    EpisodeStatistics,
    UnknownEnvError,
    env_info,
    env_seed,
    make_env,
    register_env,
    registered_envs,
    registry,
    resolve_env,
)
from sampleforge.spaces import UnsupportedSpaceError


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test must not leak into the next one."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_INFO_CACHE", {})


class ScriptedEnv(gym.Env):
    """Gives rewards from a fixed list, then terminates; remembers its build context."""

    observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, rewards: list[float], context: EnvContext | None = None) -> None:
        self.rewards = rewards
        self.context = context
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = self.rewards[self._t]
        self._t += 1
        terminated = self._t == len(self.rewards)
        return np.zeros(2, dtype=np.float32), reward, terminated, False, {}


def scripted_factory(context: EnvContext) -> gym.Env:
    return ScriptedEnv([1.0, 2.0, 3.5], context)


def test_gymnasium_id_resolves_with_its_reward_threshold() -> None:
    spec = resolve_env("CartPole-v1")
    assert spec.reward_threshold == 475.0
    assert spec.frameskip == 1
    info = env_info("CartPole-v1")
    assert isinstance(info, EnvInfo)
    assert info.action_space == gym.spaces.Discrete(2)
    assert info.observation_space.shape == (4,)
    assert info.reward_threshold == 475.0


def test_custom_env_is_built_with_its_context() -> None:
    register_env("scripted", scripted_factory, frameskip=2, reward_threshold=6.0)
    context = EnvContext(worker_index=2, env_index=3, seed=7)
    env = make_env("scripted", context)
    assert env.unwrapped.context == context
    assert isinstance(env, EpisodeStatistics)
    assert "scripted" in registered_envs()
    spec = resolve_env("scripted")
    assert (spec.frameskip, spec.reward_threshold) == (2, 6.0)


def test_registered_name_shadows_gymnasium_id() -> None:
    register_env("CartPole-v1", scripted_factory)
    assert isinstance(make_env("CartPole-v1").unwrapped, ScriptedEnv)


def test_duplicate_registration_is_an_error_unless_overwrite() -> None:
    register_env("dup", scripted_factory)
    with pytest.raises(ValueError, match="'dup' is already registered"):
        register_env("dup", scripted_factory)
    register_env("dup", scripted_factory, description="second", overwrite=True)
    assert resolve_env("dup").description == "second"


def test_overwrite_invalidates_cached_env_info() -> None:
    register_env("swap", scripted_factory)
    assert env_info("swap").action_space == gym.spaces.Discrete(2)
    register_env("swap", lambda context: gym.make("MountainCarContinuous-v0"), overwrite=True)
    assert isinstance(env_info("swap").action_space, gym.spaces.Box)


def test_env_info_builds_one_env_per_name() -> None:
    calls: list[EnvContext] = []

    def counting_factory(context: EnvContext) -> gym.Env:
        calls.append(context)
        return scripted_factory(context)

    register_env("counted", counting_factory)
    assert env_info("counted") is env_info("counted")
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("bad", "good"), [("CartPol-v1", "CartPole-v1"), ("atari_breakot", "atari_breakout")]
)
def test_misspelled_name_suggests_the_right_one(bad: str, good: str) -> None:
    with pytest.raises(UnknownEnvError) as caught:
        resolve_env(bad)
    message = str(caught.value)
    assert "\n" not in message
    assert repr(bad) in message
    assert repr(good) in message
    assert isinstance(caught.value, ValueError)


def test_hopeless_name_still_gives_a_one_line_hint() -> None:
    with pytest.raises(UnknownEnvError, match="registered_envs"):
        make_env("zzzzqqqq-nothing")


def test_episode_statistics_appear_exactly_at_episode_end() -> None:
    register_env("scripted", scripted_factory)
    env = make_env("scripted")
    for _ in range(2):  # the second episode must start counting from zero again
        env.reset(seed=0)
        infos = [env.step(0)[4] for _ in range(3)]
        assert ["episode" in info for info in infos] == [False, False, True]
        episode = infos[-1]["episode"]
        assert episode == {"r": 6.5, "l": 3}
        assert type(episode["r"]) is float and type(episode["l"]) is int


def test_episode_statistics_report_truncation_too() -> None:
    register_env("capped", lambda context: gym.wrappers.TimeLimit(ScriptedEnv([1.0] * 10), 4))
    env = make_env("capped")
    env.reset()
    steps = [env.step(0) for _ in range(4)]
    assert steps[-1][3] is True
    assert steps[-1][4]["episode"] == {"r": 4.0, "l": 4}
    assert all("episode" not in step[4] for step in steps[:-1])


def test_factory_statistics_are_not_doubled() -> None:
    register_env("prewrapped", lambda context: EpisodeStatistics(ScriptedEnv([1.0])))
    env = make_env("prewrapped")
    assert not isinstance(env.env, EpisodeStatistics)
    env.reset()
    assert env.step(0)[4]["episode"] == {"r": 1.0, "l": 1}


def test_env_seed_is_distinct_per_worker_and_env_and_reproducible() -> None:
    assert env_seed(EnvContext()) is None
    seeds = {
        env_seed(EnvContext(worker_index=w, env_index=e, seed=42))
        for w in range(8)
        for e in range(8)
    }
    assert len(seeds) == 64
    assert env_seed(EnvContext(1, 2, seed=42)) == env_seed(EnvContext(1, 2, seed=42))
    assert env_seed(EnvContext(1, 2, seed=42)) != env_seed(EnvContext(1, 2, seed=43))


def test_make_env_seeds_the_action_space_from_the_context() -> None:
    context = EnvContext(worker_index=1, env_index=0, seed=5)
    a = make_env("CartPole-v1", context)
    b = make_env("CartPole-v1", context)
    assert [a.action_space.sample() for _ in range(20)] == [
        b.action_space.sample() for _ in range(20)
    ]


def test_invalid_registrations_and_contexts_are_rejected() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        register_env("", scripted_factory)
    with pytest.raises(TypeError, match="callable"):
        register_env("x", "not a factory")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frameskip"):
        register_env("x", scripted_factory, frameskip=0)
    with pytest.raises(ValueError, match="worker_index"):
        EnvContext(worker_index=-1)


def test_factory_must_return_a_gymnasium_env() -> None:
    register_env("broken", lambda context: object())  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="expected a gymnasium.Env"):
        make_env("broken")


def test_env_info_rejects_unsupported_spaces() -> None:
    class TextEnv(ScriptedEnv):
        observation_space = gym.spaces.Text(5)

    register_env("text", lambda context: TextEnv([1.0]))
    with pytest.raises(UnsupportedSpaceError, match="env 'text'.*Text.*supported: Box"):
        env_info("text")


class MissionEnv(ScriptedEnv):
    """A Dict observation with a Text part, as MiniGrid's ``mission``."""

    observation_space = gym.spaces.Dict(
        {"mission": gym.spaces.Text(40), "position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
    )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._observation(), {}

    def step(self, action):
        _, reward, terminated, truncated, info = super().step(action)
        return self._observation(), reward, terminated, truncated, info

    def _observation(self) -> dict[str, Any]:
        return {"mission": "go to the green key", "position": np.zeros(2, np.float32)}


def make_mission_env(context: EnvContext) -> gym.Env:
    return MissionEnv([1.0] * 5, context)


def test_a_text_key_of_a_dict_observation_fails_in_one_line_naming_it() -> None:
    register_env("mission", make_mission_env)
    with pytest.raises(UnsupportedSpaceError) as caught:
        env_info("mission")
    assert str(caught.value) == (
        "env 'mission': observation key 'mission' is a Text space, which the models cannot take "
        "(supported: Box, Discrete, MultiDiscrete, MultiBinary, or a Dict of them); drop it "
        "with --drop_obs_keys mission or encode it with a gymnasium ObservationWrapper "
        "(see docs/custom_env.md)"
    )


# The two recipes of docs/custom_env.md ("Observations the models cannot take").
MISSION_CHARS = 32


def encode_mission(obs: dict) -> dict:
    codes = np.zeros(MISSION_CHARS, np.float32)
    text = obs["mission"].encode("ascii", "replace")[:MISSION_CHARS]
    codes[: len(text)] = np.frombuffer(text, np.uint8) / 127.0
    return {**obs, "mission": codes}


def make_mission_encoded(context: EnvContext) -> gym.Env:
    env = make_mission_env(context)
    space = dict(env.observation_space.spaces)
    space["mission"] = gym.spaces.Box(0.0, 1.0, (MISSION_CHARS,), np.float32)
    return gym.wrappers.TransformObservation(env, encode_mission, gym.spaces.Dict(space))


def make_mission_filtered(context: EnvContext) -> gym.Env:
    return gym.wrappers.FilterObservation(make_mission_env(context), filter_keys=["position"])


def test_the_documented_wrappers_drop_or_encode_the_text_key() -> None:
    from sampleforge.spaces import observation_to_dict

    register_env("mission_filtered", make_mission_filtered)
    assert list(env_info("mission_filtered").observation_space.spaces) == ["position"]

    register_env("mission_encoded", make_mission_encoded)
    space = env_info("mission_encoded").observation_space
    assert space["mission"] == gym.spaces.Box(0.0, 1.0, (MISSION_CHARS,), np.float32)
    env = make_env("mission_encoded")
    obs, _ = env.reset(seed=0)
    assert space.contains(obs)
    mission = observation_to_dict(obs, space)["mission"]
    assert bytes(np.rint(mission[:19] * 127).astype(np.uint8)) == b"go to the green key"
    assert not mission[19:].any()


THIRD_PARTY_MODULE = "sampleforge.testing.third_party_env"
THIRD_PARTY_ID = "ThirdPartyProbe-v0"
THIRD_PARTY_NAME = f"{THIRD_PARTY_MODULE}:{THIRD_PARTY_ID}"


@pytest.fixture
def unimported_third_party_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the third-party module had never been imported (an earlier test may have)."""
    monkeypatch.delitem(sys.modules, THIRD_PARTY_MODULE, raising=False)
    monkeypatch.delitem(gym.registry, THIRD_PARTY_ID, raising=False)
    assert THIRD_PARTY_ID not in gym.registry


def test_module_colon_id_imports_the_module_that_registers_the_id(
    unimported_third_party_env: None,
) -> None:
    with pytest.raises(UnknownEnvError):
        resolve_env(THIRD_PARTY_ID)  # not registered until its module is imported
    spec = resolve_env(THIRD_PARTY_NAME)
    assert THIRD_PARTY_MODULE in sys.modules and THIRD_PARTY_ID in gym.registry
    assert spec.name == THIRD_PARTY_NAME
    assert (spec.frameskip, spec.reward_threshold) == (1, 15.0)  # from gymnasium's spec
    env = make_env(THIRD_PARTY_NAME, EnvContext(seed=3))
    assert type(env.unwrapped).__name__ == "ProbeEnv"
    assert isinstance(env, EpisodeStatistics)
    env.reset(seed=3)
    steps = [env.step(env.action_space.sample()) for _ in range(16)]
    assert steps[-1][3] is True and steps[-1][4]["episode"]["l"] == 16  # its TimeLimit
    info = env_info(THIRD_PARTY_NAME)
    assert info.observation_space.shape == (4,) and info.action_space == gym.spaces.Discrete(2)


def test_module_colon_id_spec_builds_the_env_in_a_process_that_never_imported_the_module(
    unimported_third_party_env: None,
) -> None:
    # Rollout workers are spawned processes: they get the pickled spec and nothing else.
    child = (
        "import pickle, sys\n"
        "from sampleforge.envs.registry import EnvContext\n"
        "spec = pickle.loads(sys.stdin.buffer.read())\n"
        f"assert {THIRD_PARTY_MODULE!r} not in sys.modules\n"
        "env = spec.factory(EnvContext())\n"
        "print(type(env.unwrapped).__name__, env.spec.id)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child],
        input=pickle.dumps(resolve_env(THIRD_PARTY_NAME)),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split() == ["ProbeEnv", THIRD_PARTY_ID]


def test_module_that_cannot_be_imported_names_the_module_and_the_error() -> None:
    with pytest.raises(UnknownEnvError) as caught:
        resolve_env("no_such_package_zz.envs:Thing-v0")
    assert str(caught.value) == (
        "environment 'no_such_package_zz.envs:Thing-v0': cannot import module "
        "'no_such_package_zz.envs' (ModuleNotFoundError: No module named 'no_such_package_zz')"
    )


def test_module_that_raises_on_import_gives_one_line(tmp_path, monkeypatch) -> None:
    # The module's error message spans two lines; the error must still be one.
    (tmp_path / "broken_env_pkg_zz.py").write_text("raise RuntimeError('no\\ndisplay')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UnknownEnvError) as caught:
        make_env("broken_env_pkg_zz:Thing-v0")
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith("cannot import module 'broken_env_pkg_zz' (RuntimeError: no display)")


def test_module_that_does_not_register_the_id_suggests_close_ids(
    unimported_third_party_env: None,
) -> None:
    with pytest.raises(UnknownEnvError) as caught:
        resolve_env(f"{THIRD_PARTY_MODULE}:ThirdPartyProb-v0")
    message = str(caught.value)
    assert "\n" not in message
    assert message == (
        f"unknown environment 'ThirdPartyProb-v0' (importing {THIRD_PARTY_MODULE!r} did not "
        f"register it); did you mean {THIRD_PARTY_ID!r}?"
    )


def test_resolvers_keep_their_colon_prefixes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_env("pettingzoo:butterfly/knights_archers_zombies_v11").multi_agent
    # A resolver claims its names before any module is imported ("fakefamily" does not exist).
    claimed = registry.EnvSpec(name="fakefamily:Thing-v0", factory=scripted_factory)
    monkeypatch.setattr(
        registry, "_RESOLVERS", [lambda name: claimed if name.startswith("fakefamily:") else None]
    )
    assert resolve_env("fakefamily:Thing-v0") is claimed
    with pytest.raises(UnknownEnvError, match="cannot import module 'otherfamily'"):
        resolve_env("otherfamily:Thing-v0")


@pytest.mark.timeout(120)
def test_a_module_colon_id_env_trains_end_to_end(
    tmp_path, unimported_third_party_env: None
) -> None:
    from sampleforge.components.runner import Runner
    from sampleforge.config import make_config

    cfg = make_config(
        env=THIRD_PARTY_NAME,
        train_dir=str(tmp_path),
        serial_mode=True,
        device="cpu",
        train_for_env_steps=2_000,
        num_workers=1,
        num_envs_per_worker=4,
        rollout=8,
        batch_size=64,
        stop_at_mean_return=float("inf"),
        report_every_sec=60,
    )
    with Runner(cfg) as runner:
        summary = runner.train()
    assert summary.env_steps >= 2_000
    assert summary.mean_return_last_100 is not None and np.isfinite(summary.mean_return_last_100)
    assert (tmp_path / f"{THIRD_PARTY_MODULE}_{THIRD_PARTY_ID}").is_dir()


@pytest.mark.parametrize(
    "name",
    [
        "CartPole-v1",
        pytest.param(
            "atari_breakout",
            marks=pytest.mark.skipif(find_spec("ale_py") is None, reason="needs ale-py"),
        ),
    ],
)
def test_specs_pickle_for_worker_processes(name: str) -> None:
    spec = pickle.loads(pickle.dumps(resolve_env(name)))
    assert (spec.name, spec.frameskip) == (name, resolve_env(name).frameskip)
    spec.factory(EnvContext()).close()


def test_episode_statistics_keeps_no_history_of_past_episodes():
    import gymnasium as gym

    from sampleforge.envs.registry import EpisodeStatistics

    env = EpisodeStatistics(gym.make("CartPole-v1"))
    env.reset(seed=0)
    for _ in range(5):  # five episodes
        done, info = False, {}
        while not done:
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            done = terminated or truncated
        assert set(info["episode"]) == {"r", "l"} and info["episode"]["l"] > 0
        env.reset()
    assert len(env.return_queue) == len(env.length_queue) == 1  # gymnasium keeps 100 by default


class _Screen(gym.Env):
    """An RGB screen of random pixels, channels first."""

    observation_space = gym.spaces.Box(0, 255, (3, 8, 8), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


class _DeclaresItsStack(_Screen):
    def __init__(self) -> None:
        self.frame_stacked_keys = ("obs",)


def _grey(env: gym.Env) -> gym.Env:
    space = gym.spaces.Box(0, 255, (8, 8), np.uint8)
    return gym.wrappers.TransformObservation(env, lambda obs: obs[0], space)


@pytest.mark.parametrize(
    "factory, stacked",
    [
        (lambda _: _Screen(), ()),  # channels are not frames
        (lambda _: gym.wrappers.FrameStackObservation(_grey(_Screen()), 4), ("obs",)),
        # A wrapper above the stack that changes the observation hides it.
        (
            lambda _: gym.wrappers.TransformObservation(
                gym.wrappers.FrameStackObservation(_grey(_Screen()), 4),
                lambda obs: obs[:, 1:].copy(),
                gym.spaces.Box(0, 255, (4, 7, 8), np.uint8),
            ),
            (),
        ),
        (lambda _: _DeclaresItsStack(), ("obs",)),
    ],
    ids=["rgb", "frame_stack", "changed_above_the_stack", "declared"],
)
def test_env_info_finds_the_observations_that_are_frame_stacks(factory, stacked) -> None:
    register_env("screen", factory)
    assert env_info("screen").frame_stacked_keys == stacked
