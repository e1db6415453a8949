"""The composed actor-critic loss for "appo", "impala" and "a3c"."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from sampleforge.algo.actor_critic_loss import (
    ALGORITHMS,
    ActorCriticSettings,
    LossOutput,
    Rollout,
    actor_critic_loss,
    advantages_and_targets,
    check_settings,
    loss_from_advantages,
    uses_vtrace,
)
from sampleforge.algo.gae import gae_advantages, n_step_returns
from sampleforge.algo.losses import (
    policy_gradient_loss,
    ppo_clipped_policy_loss,
    value_loss,
)
from sampleforge.algo.vtrace import vtrace_targets
from sampleforge.models.normalizer import RunningMeanStd

T, B = 6, 4

Settings = ActorCriticSettings
# name: (algorithm, settings)
SETTINGS = {
    "appo": ("appo", Settings()),
    "appo_gae": ("appo", Settings(with_vtrace=False)),
    "appo_value_clip": ("appo", Settings(value_clip=0.2, normalize_advantages=False)),
    "impala": ("impala", Settings(with_vtrace=False)),
    "a3c": ("a3c", Settings(gae_lambda=1.0)),
    "a3c_value_clip": ("a3c", Settings(value_clip=0.5)),
}


def make_batch(seed: int = 0, log_ratio_scale: float = 0.3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    behaviour_log_probs = -torch.rand(T, B, generator=g) * 2.0
    behaviour_values = torch.randn(T + 1, B, generator=g)
    return {
        "log_probs": behaviour_log_probs + log_ratio_scale * torch.randn(T, B, generator=g),
        "entropy": torch.rand(T, B, generator=g) + 0.5,
        "values": behaviour_values + 0.2 * torch.randn(T + 1, B, generator=g),
        "behaviour_log_probs": behaviour_log_probs,
        "behaviour_values": behaviour_values,
        "rewards": torch.randn(T, B, generator=g),
        "dones": (torch.rand(T, B, generator=g) < 0.2).float(),
    }


def run(
    algorithm: str, settings: ActorCriticSettings, batch: dict, valids=None
) -> tuple[LossOutput, dict]:
    """Loss plus the gradients w.r.t. the network outputs."""
    inputs = {k: v.clone() for k, v in batch.items()}
    for key in ("log_probs", "entropy", "values"):
        inputs[key].requires_grad_(True)
    out = actor_critic_loss(algorithm, settings, Rollout(valids=valids, **inputs))
    out.total.backward()
    grads = {key: inputs[key].grad for key in ("log_probs", "entropy", "values")}
    return out, grads


@pytest.mark.parametrize("name", list(SETTINGS))
def test_finite_scalars_and_metrics(name: str) -> None:
    out, grads = run(*SETTINGS[name], make_batch(1))
    for tensor in (out.total, out.policy_loss, out.value_loss, out.entropy):
        assert tensor.dim() == 0 and torch.isfinite(tensor)
    assert out.entropy > 0
    assert out.total.requires_grad
    for grad in grads.values():
        assert grad is not None and torch.isfinite(grad).all()
    assert set(out.metrics) >= {
        "approx_kl",
        "clip_fraction",
        "mean_advantage",
        "mean_rho",
        "explained_variance",
    }
    for key, value in out.metrics.items():
        assert isinstance(value, float) and math.isfinite(value), key
    assert out.metrics["approx_kl"] >= 0.0
    assert 0.0 <= out.metrics["clip_fraction"] <= 1.0


@pytest.mark.parametrize("name", list(SETTINGS))
def test_total_composition(name: str) -> None:
    algorithm, settings = SETTINGS[name]
    out, _ = run(algorithm, settings, make_batch(2))
    expected = (
        out.policy_loss
        + settings.value_loss_coeff * out.value_loss
        - settings.entropy_coeff * out.entropy
    )
    torch.testing.assert_close(out.total, expected)


def test_invalid_algorithm_raises_with_name() -> None:
    with pytest.raises(ValueError, match="ppo2") as info:
        actor_critic_loss("ppo2", Settings(), Rollout(**make_batch()))
    for allowed in ALGORITHMS:
        assert allowed in str(info.value)


def _loss_entry_points(algorithm: str, settings: ActorCriticSettings) -> list:
    """Each public function of the loss, called on `settings`, as a thunk."""
    batch = make_batch()
    rows = {k: batch[k][:-1] if k in ("values", "behaviour_values") else batch[k] for k in batch}
    return [
        lambda: actor_critic_loss(algorithm, settings, Rollout(**batch)),
        lambda: loss_from_advantages(
            algorithm=algorithm,
            settings=settings,
            log_probs=rows["log_probs"],
            entropy=rows["entropy"],
            values=rows["values"],
            behaviour_log_probs=rows["behaviour_log_probs"],
            behaviour_values=rows["behaviour_values"],
            advantages=rows["rewards"],
            targets=rows["rewards"],
        ),
        lambda: advantages_and_targets(
            algorithm=algorithm,
            settings=settings,
            behaviour_values=batch["behaviour_values"],
            rewards=batch["rewards"],
            dones=batch["dones"],
        ),
    ]


@pytest.mark.parametrize(
    "field, value",
    [
        ("gamma", 1.5),
        ("gae_lambda", -0.1),
        ("ppo_clip_ratio", 0.0),
        ("vtrace_c_bar", -1.0),
        ("vtrace_rho_bar", 0.0),
        ("value_clip", 0.0),
        ("ppo_dual_clip", 1.0),
        ("exploration_loss", "kl"),
        ("advantage_scale", "dataset"),
    ],
)
def test_invalid_settings_raise(field: str, value: object) -> None:
    # Settings are plain data (a config holding bad values reports them as a ConfigError);
    # every entry point of the loss refuses them.
    settings = Settings(**{field: value})
    for call in _loss_entry_points("appo", settings):
        with pytest.raises(ValueError, match=field):
            call()


def test_the_checks_pass_the_defaults_and_every_algorithm() -> None:
    for algorithm in ALGORITHMS:
        check_settings(Settings(), algorithm)


def test_uses_vtrace_depends_on_the_algorithm() -> None:
    assert uses_vtrace(Settings(), "appo") and uses_vtrace(Settings(), "impala")
    assert not uses_vtrace(Settings(with_vtrace=False), "appo")
    assert uses_vtrace(Settings(with_vtrace=False), "impala")
    assert not uses_vtrace(Settings(), "a3c")


def test_settings_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SETTINGS["appo"][1].gamma = 0.5  # type: ignore[misc]


@pytest.mark.parametrize("name", list(SETTINGS))
def test_masked_entries_do_not_affect_the_loss(name: str) -> None:
    algorithm, settings = SETTINGS[name]
    batch = make_batch(3)
    valids = torch.ones(T, B)
    valids[2, 0] = 0.0
    valids[4:, 1] = 0.0  # trailing padding
    valids[0, 3] = 0.0
    valids[3:5, 2] = 0.0
    invalid = valids == 0

    def wild(key: str, fill: float, where: torch.Tensor = invalid) -> torch.Tensor:
        return torch.where(where, torch.full_like(batch[key], fill), batch[key])

    changed = dict(batch)
    changed["log_probs"] = wild("log_probs", 1e4)
    changed["behaviour_log_probs"] = wild("behaviour_log_probs", -1e4)
    changed["entropy"] = wild("entropy", 1e6)
    changed["rewards"] = wild("rewards", math.inf)
    changed["dones"] = torch.where(invalid, 1.0 - batch["dones"], batch["dones"])
    # V(x_t) of a masked step still bootstraps the valid step before it (x_t is a genuine
    # observation), so values may only change where no valid step precedes.
    not_bootstrap = invalid & torch.cat([torch.ones(1, B, dtype=torch.bool), invalid[:-1]])
    no_bootstrap_rows = torch.cat([not_bootstrap, torch.zeros(1, B, dtype=torch.bool)])
    changed["values"] = wild("values", -1e6, no_bootstrap_rows)
    changed["behaviour_values"] = wild("behaviour_values", 1e6, no_bootstrap_rows)
    assert no_bootstrap_rows.sum() == 3

    base, base_grads = run(algorithm, settings, batch, valids)
    out, grads = run(algorithm, settings, changed, valids)
    for attr in ("total", "policy_loss", "value_loss", "entropy"):
        torch.testing.assert_close(getattr(out, attr), getattr(base, attr))
    for key in ("approx_kl", "clip_fraction", "mean_rho", "mean_advantage"):
        assert out.metrics[key] == pytest.approx(base.metrics[key], rel=1e-5, abs=1e-6)
    for key in ("log_probs", "entropy"):
        torch.testing.assert_close(grads[key], base_grads[key])
        assert (grads[key][invalid] == 0).all()
    torch.testing.assert_close(grads["values"], base_grads["values"])


def test_masking_changes_the_loss() -> None:
    batch = make_batch(4)
    valids = torch.ones(T, B)
    valids[:3] = 0.0
    case = SETTINGS["appo"]
    assert not torch.allclose(run(*case, batch)[0].total, run(*case, batch, valids)[0].total)


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("log_ratio", [50.0, -50.0])
def test_extreme_log_ratios_finite(name: str, log_ratio: float) -> None:
    batch = make_batch(5)
    batch["log_probs"] = batch["behaviour_log_probs"] + log_ratio
    out, grads = run(*SETTINGS[name], batch)
    assert torch.isfinite(out.total)
    for grad in grads.values():
        assert torch.isfinite(grad).all()


def _current_values(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return batch["values"][:-1], batch["values"][-1]


def _vtrace(batch: dict[str, torch.Tensor], settings: ActorCriticSettings):
    """The current values and V-trace targets that `settings` should give on `batch`."""
    values, bootstrap = _current_values(batch)
    return values, vtrace_targets(
        behaviour_log_probs=batch["behaviour_log_probs"],
        target_log_probs=batch["log_probs"],
        rewards=batch["rewards"],
        values=values,
        bootstrap_value=bootstrap,
        dones=batch["dones"],
        gamma=settings.gamma,
        rho_bar=settings.vtrace_rho_bar,
        c_bar=settings.vtrace_c_bar,
    )


@pytest.mark.parametrize("with_vtrace", [True, False])
def test_impala_uses_vtrace_and_plain_policy_gradient(with_vtrace: bool) -> None:
    batch = make_batch(6, log_ratio_scale=1.0)
    settings = Settings(
        with_vtrace=with_vtrace,
        normalize_advantages=False,
        vtrace_rho_bar=1.2,
        vtrace_c_bar=0.8,
    )
    values, vtrace = _vtrace(batch, settings)
    out, _ = run("impala", settings, batch)
    torch.testing.assert_close(
        out.policy_loss,
        policy_gradient_loss(log_probs=batch["log_probs"], advantages=vtrace.pg_advantages),
    )
    torch.testing.assert_close(out.value_loss, value_loss(values=values, targets=vtrace.vs))


def test_appo_with_vtrace_uses_vtrace_and_clipping() -> None:
    batch = make_batch(7, log_ratio_scale=1.0)
    settings = Settings(normalize_advantages=False, ppo_clip_ratio=0.2)
    values, vtrace = _vtrace(batch, settings)
    out, _ = run("appo", settings, batch)
    expected_policy = ppo_clipped_policy_loss(
        log_probs=batch["log_probs"],
        behaviour_log_probs=batch["behaviour_log_probs"],
        advantages=vtrace.pg_advantages,
        clip_ratio=0.2,
    )
    torch.testing.assert_close(out.policy_loss, expected_policy)
    torch.testing.assert_close(out.value_loss, value_loss(values=values, targets=vtrace.vs))
    assert out.metrics["clip_fraction"] > 0.0


def test_appo_dual_clip_reaches_the_surrogate_and_only_lowers_the_loss() -> None:
    batch = make_batch(7, log_ratio_scale=3.0)  # ratios up to e^3 on some negative advantages
    plain, _ = run("appo", Settings(normalize_advantages=False), batch)
    settings = Settings(normalize_advantages=False, ppo_dual_clip=1.5)
    out, _ = run("appo", settings, batch)
    values, vtrace = _vtrace(batch, settings)
    expected_policy = ppo_clipped_policy_loss(
        log_probs=batch["log_probs"],
        behaviour_log_probs=batch["behaviour_log_probs"],
        advantages=vtrace.pg_advantages,
        clip_ratio=settings.ppo_clip_ratio,
        dual_clip=1.5,
    )
    torch.testing.assert_close(out.policy_loss, expected_policy)
    assert out.policy_loss < plain.policy_loss


def test_appo_without_vtrace_uses_gae_on_behaviour_values() -> None:
    batch = make_batch(8)
    settings = Settings(with_vtrace=False, normalize_advantages=False)
    advantages, returns = gae_advantages(
        rewards=batch["rewards"],
        values=batch["behaviour_values"][:-1],
        bootstrap_value=batch["behaviour_values"][-1],
        dones=batch["dones"],
        gamma=settings.gamma,
        lambda_=settings.gae_lambda,
    )
    out, _ = run("appo", settings, batch)
    expected_policy = ppo_clipped_policy_loss(
        log_probs=batch["log_probs"],
        behaviour_log_probs=batch["behaviour_log_probs"],
        advantages=advantages,
        clip_ratio=settings.ppo_clip_ratio,
    )
    torch.testing.assert_close(out.policy_loss, expected_policy)
    torch.testing.assert_close(
        out.value_loss, value_loss(values=batch["values"][:-1], targets=returns)
    )


def test_a3c_uses_n_step_returns_from_current_values_without_importance_weights() -> None:
    batch = make_batch(9, log_ratio_scale=1.0)
    settings = Settings(gae_lambda=1.0, normalize_advantages=False)
    values, bootstrap = _current_values(batch)
    returns = n_step_returns(
        rewards=batch["rewards"],
        bootstrap_value=bootstrap,
        dones=batch["dones"],
        gamma=settings.gamma,
    )
    out, _ = run("a3c", settings, batch)
    torch.testing.assert_close(out.value_loss, value_loss(values=values, targets=returns))
    torch.testing.assert_close(
        out.policy_loss,
        policy_gradient_loss(log_probs=batch["log_probs"], advantages=returns - values),
    )
    # behaviour quantities play no part (no importance correction, no value clipping)
    other = dict(
        batch,
        behaviour_log_probs=batch["behaviour_log_probs"] - 3.0,
        behaviour_values=batch["behaviour_values"] + 5.0,
    )
    torch.testing.assert_close(run("a3c", settings, other)[0].total, out.total)


def test_on_policy_metrics() -> None:
    batch = make_batch(10)
    batch["log_probs"] = batch["behaviour_log_probs"].clone()
    out, _ = run(*SETTINGS["appo"], batch)
    assert out.metrics["approx_kl"] == pytest.approx(0.0, abs=1e-7)
    assert out.metrics["clip_fraction"] == 0.0
    assert out.metrics["mean_rho"] == pytest.approx(1.0)


def test_bootstrap_row_gets_no_gradient() -> None:
    _, grads = run(*SETTINGS["appo"], make_batch(11))
    assert (grads["values"][-1] == 0).all()
    assert (grads["values"][:-1] != 0).any()


def test_shape_errors() -> None:
    batch = make_batch()
    with pytest.raises(ValueError, match="values"):
        actor_critic_loss(*SETTINGS["appo"], Rollout(**dict(batch, values=batch["values"][:-1])))
    with pytest.raises(ValueError, match="valids"):
        actor_critic_loss(*SETTINGS["a3c"], Rollout(valids=torch.ones(T + 1, B), **batch))


# --- advantage scale ------------------------------------------------------------------------
def _returns_stats(std: float) -> RunningMeanStd:
    stats = RunningMeanStd(())
    stats.var.fill_(std**2)
    return stats


def _policy_grad(
    settings: ActorCriticSettings, advantages: torch.Tensor, std: float
) -> torch.Tensor:
    """Gradient of the appo loss w.r.t. the log-probs, on-policy, for the given advantages."""
    batch = make_batch()
    log_probs = batch["behaviour_log_probs"].clone().requires_grad_(True)
    out = loss_from_advantages(
        algorithm="appo",
        settings=settings,
        log_probs=log_probs,
        entropy=batch["entropy"],
        values=batch["values"][:-1],
        behaviour_log_probs=batch["behaviour_log_probs"],
        behaviour_values=batch["behaviour_values"][:-1],
        advantages=advantages,
        targets=batch["behaviour_values"][:-1],
        value_normalizer=_returns_stats(std),
    )
    out.policy_loss.backward()
    return log_probs.grad


RETURN_STD = Settings(with_vtrace=False, advantage_scale="return_std")
MINIBATCH = Settings(with_vtrace=False)
UNSCALED = Settings(with_vtrace=False, normalize_advantages=False)


def test_return_std_divides_the_advantages_by_the_running_std_of_the_returns() -> None:
    advantages = torch.randn(T, B, generator=torch.Generator().manual_seed(3))
    scaled = _policy_grad(RETURN_STD, advantages, std=50.0)
    assert torch.allclose(scaled, _policy_grad(UNSCALED, advantages / 50.0, std=50.0))
    assert not torch.allclose(scaled, _policy_grad(MINIBATCH, advantages, std=50.0))


def test_return_std_keeps_a_minibatch_of_value_noise_quiet() -> None:
    # Nothing happened: the advantages are 0.1% value noise of returns with std 1. The
    # minibatch's own std scales that noise to unit size; the running std leaves it small,
    # while a minibatch with one real event (a death) still moves the policy.
    noise = 1e-3 * torch.randn(T, B, generator=torch.Generator().manual_seed(4))
    death = noise.clone()
    death[2, 1] = -2.0
    quiet = _policy_grad(RETURN_STD, noise, std=1.0).norm()
    assert quiet < 0.01 * _policy_grad(MINIBATCH, noise, std=1.0).norm()
    assert _policy_grad(RETURN_STD, death, std=1.0).norm() > 100 * quiet


def test_return_std_needs_a_value_normaliser_and_the_scale_is_checked() -> None:
    batch = make_batch()
    with pytest.raises(ValueError, match="return_std"):
        loss_from_advantages(
            algorithm="appo",
            settings=RETURN_STD,
            log_probs=batch["log_probs"],
            entropy=batch["entropy"],
            values=batch["values"][:-1],
            behaviour_log_probs=batch["behaviour_log_probs"],
            behaviour_values=batch["behaviour_values"][:-1],
            advantages=batch["rewards"],
            targets=batch["rewards"],
        )
    with pytest.raises(ValueError, match="advantage_scale.*'dataset'"):
        check_settings(Settings(advantage_scale="dataset"), "appo")  # type: ignore[arg-type]


SYMMETRIC_KL = Settings(exploration_loss="symmetric_kl", entropy_coeff=0.01)


def test_symmetric_kl_replaces_the_entropy_bonus_in_the_total() -> None:
    batch = make_batch(3)
    uniform_kl = (torch.rand(T, B, generator=torch.Generator().manual_seed(3)) * 2).requires_grad_()
    out = actor_critic_loss("appo", SYMMETRIC_KL, Rollout(uniform_kl=uniform_kl, **batch))
    expected = out.policy_loss + 0.5 * out.value_loss + 0.01 * uniform_kl.mean()
    torch.testing.assert_close(out.total, expected)
    assert out.metrics["uniform_kl"] == pytest.approx(float(uniform_kl.detach().mean()))
    out.total.backward()
    assert uniform_kl.grad is not None
    torch.testing.assert_close(uniform_kl.grad, torch.full((T, B), 0.01 / (T * B)))


def test_symmetric_kl_masks_invalid_steps_and_needs_the_kl() -> None:
    batch = make_batch(4)
    valids = torch.ones(T, B)
    valids[:, 0] = 0.0
    kl = torch.rand(T, B)
    base = actor_critic_loss("appo", SYMMETRIC_KL, Rollout(uniform_kl=kl, valids=valids, **batch))
    kl_changed = kl.clone()
    kl_changed[:, 0] = 100.0
    masked = actor_critic_loss(
        "appo", SYMMETRIC_KL, Rollout(uniform_kl=kl_changed, valids=valids, **batch)
    )
    torch.testing.assert_close(masked.total, base.total)
    with pytest.raises(ValueError, match="symmetric_kl"):
        actor_critic_loss("appo", SYMMETRIC_KL, Rollout(**batch))
    with pytest.raises(ValueError, match="uniform_kl must be"):
        actor_critic_loss("appo", SYMMETRIC_KL, Rollout(uniform_kl=torch.rand(T, B + 1), **batch))
    with pytest.raises(ValueError, match="exploration_loss.*'kl'"):
        check_settings(Settings(exploration_loss="kl"), "appo")  # type: ignore[arg-type]
