"""The encoder registry: a user's own nn.Module trains by name, through the config, the runner's
worker processes and the Python API, without editing sampleforge.

Encoders are registered inside the tests, never when this module is imported: a spawned worker
process imports this module (to unpickle the factory by reference) but runs no test, so it
only knows a name when the registration travels with the config.
"""

from __future__ import annotations

import math
import multiprocessing
import pickle
import textwrap
import uuid

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from sampleforge import APPO
from sampleforge.checkpoint import CheckpointStore
from sampleforge.components.runner import Runner
from sampleforge.config import Config, ConfigError, make_config
from sampleforge.models import registry
from sampleforge.models.encoders import make_encoder
from sampleforge.models.factory import make_actor_critic
from sampleforge.models.registry import (
    EncoderSettings,
    UnknownEncoderError,
    register_encoder,
    registered_encoders,
)
from sampleforge.spaces import TensorSpec

CARTPOLE_OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
CARTPOLE_ACT = gym.spaces.Discrete(2)
VECTOR = {"obs": TensorSpec((4,), torch.float32)}
BUILTIN = ("auto", "conv_nature", "conv_simple", "mlp", "resnet")
QUICK = dict(
    env="CartPole-v1",
    device="cpu",
    report_every_sec=60,
    tensorboard=False,
    stop_at_mean_return=math.inf,
)


class TinyEncoder(nn.Module):
    """A user's encoder: the class is its own factory, TinyEncoder(obs_specs, settings).

    One linear layer with a name no built-in encoder uses, and a zero bias, so a checkpoint
    shows both that this module is in the model and that training changed it.
    """

    def __init__(self, obs_specs, settings: EncoderSettings) -> None:
        super().__init__()
        ((self.key, spec),) = obs_specs.items()
        self.settings = settings
        self.tiny_custom_layer = nn.Linear(math.prod(spec.shape), 16)
        nn.init.zeros_(self.tiny_custom_layer.bias)
        self.out_size = 16

    def forward(self, obs):
        return torch.tanh(self.tiny_custom_layer(obs[self.key].flatten(1).float()))


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def clean_registry():
    """Registrations a test makes are undone after it."""
    saved = dict(registry._ENCODERS)
    yield
    registry._ENCODERS.clear()
    registry._ENCODERS.update(saved)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """write(source) -> the name of a new importable module (also in spawned children, which
    get this process's sys.path) that nothing has imported yet."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        name = _unique("user_encoders")
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write


REGISTERING_MODULE = """
    from sampleforge.models.registry import register_encoder
    from {test_module} import TinyEncoder

    register_encoder("from_module", TinyEncoder)
"""


def _registering_module(user_module) -> str:
    return user_module(REGISTERING_MODULE.format(test_module=TinyEncoder.__module__))


# --- registering and resolving ----------------------------------------------------------------


def test_builtin_encoders_are_registered_and_cannot_be_replaced(clean_registry):
    assert set(BUILTIN) <= set(registered_encoders())
    with pytest.raises(ValueError, match="'mlp' is built in"):
        register_encoder("mlp", TinyEncoder)
    with pytest.raises(ValueError, match="without ':'"):
        register_encoder("a:b", TinyEncoder)
    assert isinstance(make_encoder(VECTOR, "mlp").encoder, nn.Module)


def test_a_registered_encoder_is_the_model_s_encoder(clean_registry):
    name = _unique("tiny")
    register_encoder(name, TinyEncoder, description="a test encoder")
    assert name in registered_encoders()
    register_encoder(name, TinyEncoder)  # the same factory again: a no-op
    with pytest.raises(ValueError, match="already registered"):
        register_encoder(name, lambda specs, settings: TinyEncoder(specs, settings))

    cfg = make_config(
        encoder=name, mlp_hidden_sizes=(7, 5), activation="relu", shared_weights=False
    )
    model = make_actor_critic(cfg, CARTPOLE_OBS, CARTPOLE_ACT)
    assert isinstance(model.actor_encoder, TinyEncoder)
    assert isinstance(model.critic_encoder, TinyEncoder)
    # The factory gets the specs and the config's encoder settings.
    assert model.actor_encoder.key == "obs"
    assert model.actor_encoder.settings == EncoderSettings((7, 5), "relu")
    out = model.act({"obs": torch.randn(3, 4)}, torch.zeros(3, 0))
    assert out.actions.shape == (3, 1)
    assert "actor_encoder.tiny_custom_layer.weight" in model.state_dict()


def test_a_factory_must_return_a_module_with_out_size(clean_registry):
    name = _unique("bad")
    register_encoder(name, lambda specs, settings: nn.Linear(4, 4))
    with pytest.raises(
        TypeError, match=f"encoder '{name}' returned Linear without an int out_size"
    ):
        make_encoder(VECTOR, name)


def test_unknown_names_are_one_line_errors_that_list_the_allowed_ones(tmp_path):
    with pytest.raises(UnknownEncoderError) as err:
        make_encoder(VECTOR, "resnt")
    message = str(err.value)
    assert "\n" not in message and "'resnt'" in message
    assert "did you mean 'resnet'" in message
    assert "allowed: auto, conv_nature, conv_simple, mlp, resnet, or module:name" in message

    # The config takes any string; the name is checked where the model is built: by the
    # runner and the API before anything is written or started.
    cfg = make_config(encoder="nope", train_dir=str(tmp_path), **QUICK)
    for build in (
        lambda: Runner(cfg),
        lambda: APPO("CartPole-v1", encoder="nope", train_dir=str(tmp_path)),
    ):
        with pytest.raises(ConfigError) as err:
            build()
        assert str(err.value).count("\n") == 0
        assert str(err.value).startswith(
            "invalid config: encoder: 'nope' is not a registered "
            "encoder; allowed: auto, conv_nature"
        )
    assert not any(tmp_path.iterdir())


def test_module_name_imports_the_module_first(clean_registry, user_module):
    module = _registering_module(user_module)
    assert "from_module" not in registered_encoders()
    encoder = make_encoder(VECTOR, f"{module}:from_module")
    assert isinstance(encoder, TinyEncoder)
    assert "from_module" in registered_encoders()

    silent = user_module("X = 1\n")
    with pytest.raises(
        UnknownEncoderError,
        match=f"'{silent}:from_modul': importing '{silent}' did not register "
        "'from_modul' \\(did you mean 'from_module'\\?\\); allowed:",
    ):
        make_encoder(VECTOR, f"{silent}:from_modul")
    broken = user_module("raise RuntimeError('no\\nway')\n")
    with pytest.raises(UnknownEncoderError) as err:
        make_encoder(VECTOR, f"{broken}:x")
    assert str(err.value) == (
        f"invalid config: encoder: '{broken}:x': cannot import module "
        f"'{broken}' (RuntimeError: no way)"
    )


# --- worker processes -------------------------------------------------------------------------


def _encoders_built_from(cfg: Config, other: str) -> tuple[str, str]:
    """Runs in a spawned process: the encoder classes of `cfg` and of encoder `other`."""
    model = make_actor_critic(cfg, CARTPOLE_OBS, CARTPOLE_ACT)
    return type(model.actor_encoder).__name__, type(make_encoder(VECTOR, other)).__name__


def test_registrations_reach_spawned_processes(clean_registry, user_module):
    name = _unique("tiny")
    register_encoder(name, TinyEncoder)
    cfg = make_config(encoder=name)
    # Unpickling the config registers the name where it was unknown.
    data = pickle.dumps(cfg)
    del registry._ENCODERS[name]
    restored = pickle.loads(data)
    assert restored == cfg and registry._ENCODERS[name].factory is TinyEncoder
    # A fresh interpreter: the plain name travels with the config, module:name is imported.
    module = _registering_module(user_module)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        built = pool.apply(_encoders_built_from, (cfg, f"{module}:from_module"))
    assert built == ("TinyEncoder", "TinyEncoder")


def test_a_factory_workers_cannot_receive_is_refused_before_anything_starts(
    clean_registry, tmp_path
):
    name = _unique("local")
    register_encoder(name, lambda specs, settings: TinyEncoder(specs, settings))
    cfg = make_config(encoder=name, train_dir=str(tmp_path / "a"), **QUICK)
    with pytest.raises(
        ConfigError,
        match=f"encoder: '{name}' cannot be sent to worker "
        "processes: its factory .*<lambda> does not pickle",
    ):
        Runner(cfg)
    pickle.loads(pickle.dumps(cfg))  # the config itself still pickles, without the factory
    serial = make_config(encoder=name, serial_mode=True, train_dir=str(tmp_path / "b"), **QUICK)
    Runner(serial).close()  # in one process it is fine


# --- training ---------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_registered_encoder_trains_in_worker_processes(clean_registry, tmp_path):
    name = _unique("tiny")
    register_encoder(name, TinyEncoder)
    cfg = make_config(
        encoder=name,
        train_dir=str(tmp_path),
        num_workers=1,
        num_envs_per_worker=8,
        train_for_env_steps=3_000,
        **QUICK,
    )
    with Runner(cfg) as runner:
        summary = runner.train()
        versions = runner.progress.policy_version[0]
        experiment = runner.exp
    assert summary.env_steps >= 3_000 and versions > 2
    loaded = CheckpointStore(experiment.checkpoint_dir(0)).load_latest()
    assert loaded is not None
    weights = loaded[0]["model"]
    assert {
        "actor_encoder.tiny_custom_layer.weight",
        "actor_encoder.tiny_custom_layer.bias",
    } <= set(weights)
    assert not any(key.startswith("actor_encoder.encoder.") for key in weights)  # not the MLP
    assert weights["actor_encoder.tiny_custom_layer.bias"].abs().sum() > 0  # trained from 0


@pytest.mark.timeout(60)
def test_a_registered_encoder_trains_through_the_python_api(clean_registry, tmp_path):
    name = _unique("tiny")
    register_encoder(name, TinyEncoder)
    with APPO(
        "CartPole-v1",
        encoder=name,
        serial_mode=True,
        num_envs_per_worker=8,
        train_dir=str(tmp_path),
        device="cpu",
        report_every_sec=60,
        tensorboard=False,
    ) as model:
        model.train(2_000)
        weights = model.get_parameters()[0]
        assert model.cfg.encoder == name
    assert weights["actor_encoder.tiny_custom_layer.bias"].abs().sum() > 0
