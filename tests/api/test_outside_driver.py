"""Seed 004's outside-driver workflow through the Python API (issue 39, section 2): a driver
that runs several objects moves weights between them by folder (`set_parameters` with an
experiment folder, its `checkpoints/` or `checkpoints/p<id>/`), passes any setting in
`policy_kwargs`, and changes hyperparameters between `train` calls (`set_hyperparameters`),
which the learner then uses: with a learning rate of 1e-30 the weights move by at most about
that much (nothing at all, in float32, at any weight not near zero) while env steps go on, and
a larger one moves them again.

CartPole-v1 with a few envs; serial mode (every component in this process) except where the
message must cross to a learner process.
"""

import math

import pytest
import torch

from sampleforge import APPO, DQN, SAC
from sampleforge.checkpoint import CheckpointStore
from sampleforge.config import ConfigError
from sampleforge.models.factory import make_policy_model

pytestmark = pytest.mark.timeout(120)

FAST = dict(report_every_sec=60, tensorboard=False, device="cpu", seed=1)
SMALL = dict(num_envs_per_worker=4, batch_size=256, **FAST)
# A step Adam makes is at most a few times the learning rate: with 1e-30, every weight stays
# within STILL of where it was (a bias that starts at zero moves by about 1e-29).
FROZEN = 1e-30
STILL = 1e-20
# What the weights move at least with learning rate 1e-2, over a dataset or more.
MOVED = 1e-3


def _appo(tmp_path, **overrides) -> APPO:
    return APPO("CartPole-v1", serial_mode=True, train_dir=str(tmp_path), **SMALL, **overrides)


def _weights(model) -> dict[str, torch.Tensor]:
    """Policy 0's trainable parameters (not buffers: an observation or return normaliser keeps
    learning statistics whatever the learning rate)."""
    env = model.runner.env
    probe = make_policy_model(model.cfg, env.observation_space, env.action_space)
    names = {name for name, _ in probe.named_parameters()}
    return {k: v for k, v in model.get_parameters()[0].items() if k in names}


def _largest_change(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _learning_rates(model, steps: int) -> list[float]:
    """Train `steps` env steps; the learning rate the learner reported after each dataset."""
    seen: list[float] = []
    model.train(steps, callback=lambda s: seen.append(s.learner_stats["learner/lr"]))
    return seen


# --- set_parameters from a folder ------------------------------------------------------------
def test_set_parameters_takes_the_newest_valid_checkpoint_of_a_folder(tmp_path):
    with _appo(tmp_path / "source") as source, _appo(tmp_path / "target") as target:
        source.train(1_000)
        source.train(1_000)  # each call ends with a checkpoint: two now
        folder = source.experiment_dir / "checkpoints" / "p0"
        older, newest = CheckpointStore(folder).list()[-2:]
        saved = {p: CheckpointStore(folder).load(p)["model"] for p in (older, newest)}
        assert not _equal(saved[older], saved[newest])

        for given in (source.experiment_dir, source.experiment_dir / "checkpoints", str(folder)):
            target.set_parameters({0: given})
            assert _equal(target.get_parameters()[0], saved[newest]), given

        # As a resume does: a corrupt newest checkpoint is skipped, with a warning.
        newest.write_bytes(newest.read_bytes()[:-10] + b"0123456789")
        with pytest.warns(RuntimeWarning, match=f"skipping unusable checkpoint.*{newest.name}"):
            target.set_parameters({0: source.experiment_dir})
        assert _equal(target.get_parameters()[0], saved[older])


def test_a_folder_without_checkpoints_is_refused_in_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with _appo(tmp_path / "runs") as model:
        # An experiment folder that has its config.json but has not trained yet.
        for folder in (empty, model.experiment_dir):
            with pytest.raises(ValueError, match="holds no checkpoint of policy 0") as err:
                model.set_parameters({0: folder})
            assert str(folder) in str(err.value) and "\n" not in str(err.value)
        assert not model.runner.started  # refused before anything started


# --- policy_kwargs ---------------------------------------------------------------------------
def test_policy_kwargs_takes_any_setting(tmp_path):
    kwargs = {"mlp_hidden_sizes": (32,), "learning_rate": 5e-4, "gamma": 0.95, "encoder": "mlp"}
    with APPO(
        "CartPole-v1", policy_kwargs=kwargs, num_workers=1, train_dir=str(tmp_path), **FAST
    ) as model:
        for name, value in kwargs.items():
            assert getattr(model.cfg, name) == value, name


@pytest.mark.parametrize(
    "policy_kwargs, keywords, message",
    [
        ({"lerning_rate": 1e-3}, {}, "policy_kwargs: unknown setting 'lerning_rate' "
         "(did you mean 'learning_rate'?) (allowed: any Config field"),
        ({"gamma": 0.9}, {"gamma": 0.95}, "gamma: given both in policy_kwargs (0.9) and as the "
         "keyword gamma= (0.95)"),
        ({"num_workers": 2}, {"num_workers": 3}, "num_workers: given both in policy_kwargs (2) "
         "and as the keyword num_workers= (3)"),
        ({"env": "Pendulum-v1"}, {}, "policy_kwargs: env is set by the first argument"),
    ],
)  # fmt: skip
def test_policy_kwargs_refuses_an_unknown_or_repeated_setting(
    tmp_path, policy_kwargs, keywords, message
):
    with pytest.raises(ConfigError) as err:
        APPO("CartPole-v1", policy_kwargs=policy_kwargs, train_dir=str(tmp_path), **keywords)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert not any(tmp_path.iterdir())  # refused before the experiment folder was made


# --- set_hyperparameters ---------------------------------------------------------------------
def test_set_hyperparameters_checks_names_and_values_before_sending(tmp_path):
    with _appo(tmp_path, num_policies=2) as model:
        bad = [
            ({"clip_coeff": 0.1}, "'clip_coeff' cannot be changed during a appo run "
             "(allowed: learning_rate, entropy_coeff, adam_beta1)"),
            ({"learning_rate": 0.0}, "learning_rate: 0 must be in (0, 1]"),
            ({"adam_beta1": 1.0}, "adam_beta1: 1 must be in [0, 1)"),
            ({"entropy_coeff": math.nan}, "entropy_coeff: nan is not allowed"),
            ({"learning_rate": True}, "learning_rate: expected a number, got True"),
            ({}, "expected a non-empty {name: value} mapping"),
        ]  # fmt: skip
        for values, message in bad:
            with pytest.raises(ValueError) as err:
                model.set_hyperparameters(values)
            assert message in str(err.value) and "\n" not in str(err.value), values
        with pytest.raises(ValueError, match="policy id 2"):
            model.set_hyperparameters({"learning_rate": 1e-4}, policy_id=2)
        assert model.hyperparameters == {
            "learning_rate": model.cfg.learning_rate,
            "entropy_coeff": model.cfg.entropy_coeff,
            "adam_beta1": model.cfg.adam_beta1,
        }  # nothing refused was kept

        model.set_hyperparameters({"entropy_coeff": 0.05}, policy_id=1)
        model.set_hyperparameters({"learning_rate": 2e-4})  # every policy
        assert model.hyperparameters_of(1) == {
            "learning_rate": 2e-4,
            "entropy_coeff": 0.05,
            "adam_beta1": model.cfg.adam_beta1,
        }
        assert model.hyperparameters["entropy_coeff"] == model.cfg.entropy_coeff
        assert not model.runner.started  # kept until the processes start

    with DQN("CartPole-v1", serial_mode=True, train_dir=str(tmp_path), **FAST) as dqn:
        assert dqn.hyperparameters == {"learning_rate": dqn.cfg.learning_rate}
        with pytest.raises(ValueError, match=r"'entropy_coeff' .* \(allowed: learning_rate\)"):
            dqn.set_hyperparameters({"entropy_coeff": 0.01})
    with _appo(tmp_path, num_policies=2, with_pbt=True) as population:
        with pytest.raises(ValueError, match="with_pbt=True: the population sets"):
            population.set_hyperparameters({"learning_rate": 1e-4})


def test_the_learner_uses_a_learning_rate_set_between_calls(tmp_path):
    # lr_schedule linear: the schedule must decay from the new value, not the config's.
    with _appo(tmp_path, lr_schedule="linear") as model:
        model.train(1_000)
        before = _weights(model)

        model.set_hyperparameters({"learning_rate": FROZEN})
        steps = model.env_steps
        rates = _learning_rates(model, 2_000)  # two datasets at least
        assert model.env_steps >= steps + 2_000
        assert rates and all(0 < r <= FROZEN for r in rates), rates
        frozen = _weights(model)
        assert _largest_change(frozen, before) < STILL

        model.set_hyperparameters({"learning_rate": 1e-2})
        rates = _learning_rates(model, 1_000)
        assert all(5e-3 < r <= 1e-2 for r in rates), rates
        assert _largest_change(_weights(model), frozen) > MOVED
        assert model.hyperparameters["learning_rate"] == 1e-2


def test_values_set_before_the_first_train_reach_a_learner_process(tmp_path):
    # Processes, not serial mode: the values cross the learner's queue; the first ones are
    # kept until the processes start.
    with APPO(
        "CartPole-v1", num_workers=1, train_dir=str(tmp_path), **SMALL
    ) as model:  # fmt: skip
        model.set_hyperparameters({"learning_rate": FROZEN})
        assert not model.runner.started
        initial = _weights(model)  # starts the processes
        model.train(1_000)  # a dataset or more
        assert _largest_change(_weights(model), initial) < STILL

        model.set_hyperparameters({"learning_rate": 1e-2})
        model.train(1_000)  # a dataset or more
        assert _largest_change(_weights(model), initial) > MOVED


def test_a_value_based_learner_uses_a_learning_rate_set_between_calls(tmp_path):
    light = dict(learning_starts=200, samples_per_insert=2.0, num_envs_per_worker=4, **FAST)
    with DQN("CartPole-v1", serial_mode=True, train_dir=str(tmp_path), **light) as model:
        model.train(1_000)
        before = _weights(model)
        model.set_hyperparameters({"learning_rate": FROZEN})
        rates = _learning_rates(model, 1_000)
        assert rates and all(0 < r <= FROZEN for r in rates), rates
        frozen = _weights(model)
        assert _largest_change(frozen, before) < STILL

        model.set_hyperparameters({"learning_rate": 1e-2})
        model.train(1_000)
        assert _largest_change(_weights(model), frozen) > MOVED


def test_a_continuous_learner_uses_its_learning_rates_set_between_calls(tmp_path):
    # SAC: learning_rate drives the critics and the entropy temperature, actor_learning_rate
    # the actor (the weights `get_parameters` returns).
    light = dict(
        learning_starts=200,
        random_action_steps=200,
        samples_per_insert=4.0,
        batch_size=32,
        mlp_hidden_sizes=[32, 32],
        critic_hidden_sizes=[32, 32],
        num_envs_per_worker=2,
        **FAST,
    )
    with SAC("Pendulum-v1", serial_mode=True, train_dir=str(tmp_path), **light) as model:
        model.train(300)
        cfg = model.cfg
        assert model.hyperparameters == {
            "learning_rate": cfg.learning_rate,
            "actor_learning_rate": cfg.actor_learning_rate,
        }

        model.set_hyperparameters({"learning_rate": FROZEN, "actor_learning_rate": FROZEN})
        before = _weights(model)
        alphas: list[float] = []
        model.train(300, callback=lambda s: alphas.append(s.learner_stats["learner/alpha"]))
        assert _largest_change(_weights(model), before) < STILL
        assert len(alphas) >= 2 and max(alphas) - min(alphas) < STILL, alphas

        model.set_hyperparameters({"actor_learning_rate": 1e-2})  # the actor alone
        alphas.clear()
        model.train(300, callback=lambda s: alphas.append(s.learner_stats["learner/alpha"]))
        assert _largest_change(_weights(model), before) > MOVED
        assert max(alphas) - min(alphas) < STILL, alphas
