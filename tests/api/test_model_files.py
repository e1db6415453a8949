"""What a model file written by `save()` may do when `load()` reads it (issue 40.10).

A model file travels: it is trusted with the model's weights and settings only. The settings of
the machine and user that saved it (train_dir, device, worker counts, W&B) are not taken, and a
config that names a module to import (env, encoder or policy mapping) imports nothing unless the
caller trusts the file. The module the tests name writes a file when it is imported, so that an
import is seen, not inferred. Every load here is in serial mode or starts no process.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sampleforge import APPO
from sampleforge.config import Config, make_config
from sampleforge.envs import env_info
from sampleforge.evaluation import LocalPolicy, save_model_file
from sampleforge.evaluation.policy_files import (
    IMPORTING_SETTINGS,
    MACHINE_LOCAL_SETTINGS,
    PolicyFileError,
)

pytestmark = pytest.mark.timeout(60)

# Imported, it records that it was, and registers what the file's settings name.
RECORDING_MODULE = """\
import pathlib

import gymnasium as gym

from sampleforge.models.registry import encoder_factory, register_encoder

pathlib.Path({marker!r}).write_text("imported")
gym.register("Recorded{suffix}-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv",
             max_episode_steps=500)
register_encoder("recorded_{suffix}", encoder_factory("mlp"))


def mapping(env_index, seat, num_policies, num_frozen, rng):
    return 0
"""


class RecordingModule:
    """A module on sys.path, not yet imported, that writes `marker` when it is."""

    def __init__(self, root: Path) -> None:
        self.suffix = uuid.uuid4().hex[:8]
        self.name = f"records_import_{self.suffix}"
        self.marker = root / f"{self.name}.imported"
        (root / f"{self.name}.py").write_text(
            RECORDING_MODULE.format(marker=str(self.marker), suffix=self.suffix)
        )

    def setting(self, name: str) -> str:
        """The value of setting `name` that names this module."""
        return {
            "env": f"{self.name}:Recorded{self.suffix}-v0",
            "encoder": f"{self.name}:recorded_{self.suffix}",
            "policy_mapping": f"{self.name}:mapping",
        }[name]

    @property
    def imported(self) -> bool:
        return self.marker.exists() or self.name in sys.modules


@pytest.fixture
def recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingModule]:
    root = tmp_path / "modules"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    module = RecordingModule(root)
    yield module
    sys.modules.pop(module.name, None)


def write_model_file(path: Path, **file_settings: object) -> Path:
    """A model file of an untrained CartPole policy whose config says `file_settings` (written
    into the file as they are, as another machine's or another person's file could)."""
    cfg: Config = make_config(env="CartPole-v1", mlp_hidden_sizes=(16, 16), seed=3)
    info = env_info("CartPole-v1")
    weights = LocalPolicy.build(cfg, info.observation_space, info.action_space).model.state_dict()
    save_model_file(path, cfg, {0: weights}, env_steps=100)
    payload = torch.load(path, weights_only=True)
    payload["config"].update(file_settings)
    torch.save(payload, path)
    return path


@pytest.mark.parametrize("setting", IMPORTING_SETTINGS)
def test_a_module_named_in_the_file_is_imported_only_when_the_caller_trusts_the_file(
    setting: str, recording: RecordingModule, tmp_path: Path
) -> None:
    path = write_model_file(tmp_path / "model.pt", **{setting: recording.setting(setting)})
    train_dir = str(tmp_path / "mine")
    with pytest.raises(PolicyFileError) as refused:
        APPO.load(path, train_dir=train_dir, serial_mode=True)
    message = str(refused.value)
    assert "\n" not in message and "trust_config=True" in message, message
    assert f"{setting}={recording.setting(setting)!r}" in message
    assert not recording.imported
    model = APPO.load(path, train_dir=train_dir, serial_mode=True, trust_config=True)
    try:
        assert recording.imported
        assert getattr(model.cfg, setting) == recording.setting(setting)
    finally:
        model.close()


@pytest.mark.parametrize("setting", IMPORTING_SETTINGS)
def test_the_caller_giving_the_named_setting_themselves_is_enough(
    setting: str, recording: RecordingModule, tmp_path: Path
) -> None:
    # What the refusal says to do: the caller's own value is trusted, the file's is not read.
    path = write_model_file(tmp_path / "model.pt", **{setting: recording.setting(setting)})
    mine = {setting: recording.setting(setting)}
    model = APPO.load(path, train_dir=str(tmp_path / "mine"), serial_mode=True, **mine)
    try:
        assert recording.imported  # the caller asked for it
        assert getattr(model.cfg, setting) == recording.setting(setting)
    finally:
        model.close()


def test_settings_the_caller_gives_replace_the_files_and_import_nothing_it_names(
    recording: RecordingModule, tmp_path: Path
) -> None:
    path = write_model_file(
        tmp_path / "model.pt",
        env=recording.setting("env"),
        policy_mapping=recording.setting("policy_mapping"),
    )
    model = APPO.load(
        path, "CartPole-v1", policy_mapping="seat", train_dir=str(tmp_path), serial_mode=True
    )
    try:
        assert model.cfg.env == "CartPole-v1" and model.cfg.policy_mapping == "seat"
        assert model.predict(torch.zeros(4).numpy())[0] in (0, 1)  # the file's weights fit
    finally:
        model.close()
    assert not recording.imported


def test_the_savers_machine_and_accounts_are_not_taken_from_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = tmp_path / "their_machine" / "train_dir"
    path = write_model_file(
        tmp_path / "model.pt",
        train_dir=str(theirs),
        device="cuda",
        num_workers=64,
        num_inference_workers=4,
        learner_torch_threads=32,
        with_wandb=True,
        wandb_project="their-project",
        wandb_entity="them",
        wandb_group="their-group",
        entropy_coeff=0.123,  # a setting of the model's training: taken
    )
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    model = APPO.load(path, serial_mode=True)
    try:
        defaults = make_config(env="CartPole-v1")  # this machine's: the family's or defaults
        for name in MACHINE_LOCAL_SETTINGS:
            if name not in ("experiment", "restart_behavior"):  # a new run's, as always
                assert getattr(model.cfg, name) == getattr(defaults, name), name
        assert model.cfg.entropy_coeff == 0.123
        assert model.experiment_dir.parent.resolve() == (here / defaults.train_dir).resolve()
    finally:
        model.close()
    assert not (tmp_path / "their_machine").exists()
