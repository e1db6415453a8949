"""The value-based TD losses against direct per-sample computations: DQN and Double DQN
(Huber and squared error), Munchausen DQN, C51/Rainbow's projected cross-entropy, and the
quantile regression loss of QR-DQN, IQN and FQF; plus what the replay and the optimiser rely
on (priorities unweighted, gradient only into the online outputs)."""

from __future__ import annotations

import math

import pytest
import torch

from sampleforge.algo.distributional import fraction_loss
from sampleforge.algo.q_learning import (
    TDBatch,
    ValueSettings,
    categorical_td_loss,
    fqf_fraction_loss,
    quantile_td_loss,
    scalar_td_loss,
)

B, A = 12, 4
F64 = torch.float64


def _batch(g: torch.Generator, *, weights: torch.Tensor | None = None) -> TDBatch:
    discounts = torch.full((B,), 0.99**3, dtype=F64)
    discounts[::4] = 0.0  # terminated within the window: no bootstrap
    return TDBatch(
        actions=torch.randint(A, (B,), generator=g),
        returns=torch.randn(B, generator=g, dtype=F64) * 2,
        discounts=discounts,
        weights=torch.ones(B, dtype=F64) if weights is None else weights,
    )


def _argmax(row: list[float]) -> int:
    return max(range(len(row)), key=lambda a: row[a])


def _huber(u: float, kappa: float = 1.0) -> float:
    return 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)


# ---------------------------------------------------------------------------- scalar head


def _scalar_loop(settings, q, next_online, next_target, batch):
    """Per sample: y = R + d Q_target(s', a*), l = Huber or half squared error of Q(s, a) - y."""
    losses, priorities = [], []
    for b in range(B):
        chooser = next_online[b] if settings.double_q else next_target[b]
        best = _argmax(chooser.tolist())
        y = float(batch.returns[b]) + float(batch.discounts[b]) * float(next_target[b, best])
        u = float(q[b, int(batch.actions[b])]) - y
        losses.append(_huber(u) if settings.huber_loss else 0.5 * u * u)
        priorities.append(abs(u))
    weighted = sum(float(w) * x for w, x in zip(batch.weights, losses)) / B
    return weighted, priorities


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("huber_loss", [True, False])
def test_scalar_td_loss_matches_a_loop(double_q, huber_loss):
    g = torch.Generator().manual_seed(0)
    settings = ValueSettings(double_q=double_q, huber_loss=huber_loss)
    q = torch.randn(B, A, generator=g, dtype=F64) * 2  # |TD errors| on both sides of 1
    next_online = torch.randn(B, A, generator=g, dtype=F64)
    next_target = torch.randn(B, A, generator=g, dtype=F64)
    batch = _batch(g, weights=torch.rand(B, generator=g, dtype=F64) + 0.1)
    got = scalar_td_loss(
        settings, q=q, next_online_q=next_online, next_target_q=next_target, batch=batch
    )
    loss, priorities = _scalar_loop(settings, q, next_online, next_target, batch)
    assert float(got.loss) == pytest.approx(loss, abs=1e-12)
    torch.testing.assert_close(got.priorities, torch.tensor(priorities, dtype=F64))
    torch.testing.assert_close(got.q_taken, q.gather(1, batch.actions[:, None]).squeeze(1))


def test_double_q_takes_the_online_argmax_and_plain_dqn_the_target_max():
    # Online prefers action 0, the target action 1: the two bootstraps differ by 4 * d.
    q = torch.zeros(1, 2, dtype=F64)
    next_online = torch.tensor([[1.0, 0.0]], dtype=F64)
    next_target = torch.tensor([[1.0, 5.0]], dtype=F64)
    batch = TDBatch(
        actions=torch.zeros(1, dtype=torch.long),
        returns=torch.tensor([0.5], dtype=F64),
        discounts=torch.tensor([0.9], dtype=F64),
        weights=torch.ones(1, dtype=F64),
    )

    def td_error(double_q: bool, discounts: torch.Tensor | None = None) -> float:
        b = (
            batch
            if discounts is None
            else TDBatch(batch.actions, batch.returns, discounts, batch.weights)
        )
        out = scalar_td_loss(
            ValueSettings(double_q=double_q),
            q=q,
            next_online_q=next_online,
            next_target_q=next_target,
            batch=b,
        )
        return float(out.priorities[0])

    assert td_error(True) == pytest.approx(0.5 + 0.9 * 1.0)
    assert td_error(False) == pytest.approx(0.5 + 0.9 * 5.0)
    # After a termination (discount 0) only the return is left, whichever action bootstraps.
    zero = torch.zeros(1, dtype=F64)
    assert td_error(True, zero) == td_error(False, zero) == pytest.approx(0.5)


@pytest.mark.parametrize("loss_fn", ["scalar", "categorical", "quantile"])
def test_importance_weights_scale_the_loss_but_not_the_priorities(loss_fn):
    g = torch.Generator().manual_seed(1)
    batch = _batch(g)
    weights = torch.rand(B, generator=g, dtype=F64) + 0.1
    weighted = TDBatch(batch.actions, batch.returns, batch.discounts, weights)
    inputs = _inputs(loss_fn, g)
    plain = _run(loss_fn, ValueSettings(), inputs, batch)
    scaled = _run(loss_fn, ValueSettings(), inputs, weighted)
    torch.testing.assert_close(scaled.priorities, plain.priorities)
    # The per-sample loss: the priority itself for the distributional heads (cross-entropy,
    # quantile loss), the Huber loss of the TD error |u| for the scalar head.
    u = plain.priorities
    per_sample = torch.where(u <= 1, 0.5 * u**2, u - 0.5) if loss_fn == "scalar" else u
    assert float(plain.loss) == pytest.approx(float(per_sample.mean()))
    assert float(scaled.loss) == pytest.approx(float((weights * per_sample).mean()))
    assert (plain.priorities >= 0).all()


# ---------------------------------------------------------------------------- Munchausen


def test_munchausen_td_loss_matches_the_formula_and_ignores_double_q():
    g = torch.Generator().manual_seed(2)
    tau, alpha, l0 = 0.5, 0.9, -1.0
    q = torch.randn(B, A, generator=g, dtype=F64)
    target_now = torch.randn(B, A, generator=g, dtype=F64)
    next_online = torch.randn(B, A, generator=g, dtype=F64)
    next_target = torch.randn(B, A, generator=g, dtype=F64)
    batch = _batch(g)
    outs = []
    for double_q in (True, False):
        settings = ValueSettings(
            munchausen=True,
            munchausen_tau=tau,
            munchausen_alpha=alpha,
            munchausen_clip=l0,
            double_q=double_q,
            huber_loss=False,
        )
        outs.append(
            scalar_td_loss(
                settings,
                q=q,
                next_online_q=next_online,
                next_target_q=next_target,
                target_q_now=target_now,
                batch=batch,
            )
        )
    expected = []
    for b in range(B):
        a = int(batch.actions[b])
        z = [math.exp(v / tau) for v in target_now[b].tolist()]
        bonus = min(max(tau * math.log(z[a] / sum(z)), l0), 0.0)
        zn = [math.exp(v / tau) for v in next_target[b].tolist()]
        pn = [v / sum(zn) for v in zn]
        soft = sum(p * (qn - tau * math.log(p)) for p, qn in zip(pn, next_target[b].tolist()))
        y = float(batch.returns[b]) + alpha * bonus + float(batch.discounts[b]) * soft
        expected.append(abs(float(q[b, a]) - y))
    torch.testing.assert_close(outs[0].priorities, torch.tensor(expected, dtype=F64))
    torch.testing.assert_close(outs[1].priorities, outs[0].priorities)
    assert float(outs[0].loss) == pytest.approx(sum(0.5 * u * u for u in expected) / B)


def test_munchausen_without_target_q_now_and_on_other_heads_is_refused():
    g = torch.Generator().manual_seed(3)
    batch = _batch(g)
    settings = ValueSettings(munchausen=True)
    q = torch.randn(B, A, generator=g, dtype=F64)
    with pytest.raises(ValueError, match="target_q_now"):
        scalar_td_loss(settings, q=q, next_online_q=q, next_target_q=q, batch=batch)
    for head in ("categorical", "quantile"):
        with pytest.raises(ValueError, match=f"scalar Q head only; got the {head}"):
            _run(head, settings, _inputs(head, g), batch)


# ---------------------------------------------------------------------------- categorical head


def _project_loop(probs, ret, disc, support):
    """Bellemare et al. 2017, Algorithm 1, for one sample."""
    n, v_min, v_max = len(support), support[0], support[-1]
    dz = (v_max - v_min) / (n - 1)
    m = [0.0] * n
    for j, p in enumerate(probs):
        bj = (min(max(ret + disc * support[j], v_min), v_max) - v_min) / dz
        lo, hi = math.floor(bj), math.ceil(bj)
        if lo == hi:
            m[lo] += p
        else:
            m[lo] += p * (hi - bj)
            m[hi] += p * (bj - lo)
    return m


@pytest.mark.parametrize("double_q", [True, False])
def test_categorical_td_loss_is_the_cross_entropy_to_the_projected_target(double_q):
    g = torch.Generator().manual_seed(4)
    inputs = _inputs("categorical", g)
    batch = _batch(g, weights=torch.rand(B, generator=g, dtype=F64) + 0.1)
    got = _run("categorical", ValueSettings(double_q=double_q), inputs, batch)
    support = inputs["support"].tolist()
    ces, q_taken = [], []
    for b in range(B):
        next_probs = torch.softmax(inputs["next_target_logits"][b], dim=-1).tolist()
        if double_q:
            best = _argmax(inputs["next_online_q"][b].tolist())
        else:
            best = _argmax([sum(p * z for p, z in zip(row, support)) for row in next_probs])
        m = _project_loop(
            next_probs[best], float(batch.returns[b]), float(batch.discounts[b]), support
        )
        logits = inputs["logits"][b, int(batch.actions[b])].tolist()
        log_norm = math.log(sum(math.exp(x) for x in logits))
        ces.append(-sum(mj * (x - log_norm) for mj, x in zip(m, logits)))
        q_taken.append(sum(math.exp(x - log_norm) * z for x, z in zip(logits, support)))
    torch.testing.assert_close(got.priorities, torch.tensor(ces, dtype=F64))
    torch.testing.assert_close(got.q_taken, torch.tensor(q_taken, dtype=F64))
    expected = sum(float(w) * ce for w, ce in zip(batch.weights, ces)) / B
    assert float(got.loss) == pytest.approx(expected, abs=1e-12)


# ---------------------------------------------------------------------------- quantile heads


@pytest.mark.parametrize("double_q", [True, False])
@pytest.mark.parametrize("kappa", [1.0, 0.0])
def test_quantile_td_loss_matches_the_quantile_huber_formula(double_q, kappa):
    g = torch.Generator().manual_seed(5)
    inputs = _inputs("quantile", g)
    batch = _batch(g, weights=torch.rand(B, generator=g, dtype=F64) + 0.1)
    got = _run("quantile", ValueSettings(double_q=double_q), inputs, batch, kappa=kappa)
    theta, fractions = inputs["quantiles"], inputs["fractions"]
    next_theta = inputs["next_target_quantiles"]
    n, m = theta.shape[2], next_theta.shape[2]
    losses = []
    for b in range(B):
        if double_q:
            best = _argmax(inputs["next_online_q"][b].tolist())
        else:
            best = _argmax(next_theta[b].mean(dim=1).tolist())
        r, d = float(batch.returns[b]), float(batch.discounts[b])
        targets = [r + d * float(next_theta[b, best, j]) for j in range(m)]
        total = 0.0
        for i in range(n):
            q_i, tau_i = float(theta[b, int(batch.actions[b]), i]), float(fractions[b, i])
            for t_j in targets:
                u = t_j - q_i
                rho = _huber(u, kappa) / kappa if kappa > 0 else abs(u)
                total += abs(tau_i - (1.0 if u < 0 else 0.0)) * rho / m
        losses.append(total)
    torch.testing.assert_close(got.priorities, torch.tensor(losses, dtype=F64))
    expected = sum(float(w) * x for w, x in zip(batch.weights, losses)) / B
    assert float(got.loss) == pytest.approx(expected, abs=1e-12)
    torch.testing.assert_close(got.q_taken, theta[torch.arange(B), batch.actions].mean(dim=1))


def test_fqf_target_values_choose_the_bootstrap_action_without_double_q():
    # The target's quantiles at s': action 0 has the higher mean, action 1 the higher
    # width-weighted value FQF passes as next_target_q.
    next_theta = torch.tensor([[[0.0, 4.0], [1.0, 2.0]]], dtype=F64)
    batch = TDBatch(
        actions=torch.zeros(1, dtype=torch.long),
        returns=torch.zeros(1, dtype=F64),
        discounts=torch.ones(1, dtype=F64),
        weights=torch.ones(1, dtype=F64),
    )
    common = dict(
        quantiles=torch.zeros(1, 2, 2, dtype=F64),
        fractions=torch.tensor([[0.25, 0.75]], dtype=F64),
        next_online_q=torch.zeros(1, 2, dtype=F64),
        next_target_quantiles=next_theta,
        batch=batch,
    )
    settings = ValueSettings(double_q=False)
    by_mean = quantile_td_loss(settings, **common)
    weighted = torch.tensor([[0.4, 1.9]], dtype=F64)
    by_weights = quantile_td_loss(settings, next_target_q=weighted, **common)
    expect_0 = quantile_td_loss(
        settings, **{**common, "next_target_quantiles": next_theta[:, [0, 0]]}
    )
    expect_1 = quantile_td_loss(
        settings, **{**common, "next_target_quantiles": next_theta[:, [1, 1]]}
    )
    torch.testing.assert_close(by_mean.priorities, expect_0.priorities)
    torch.testing.assert_close(by_weights.priorities, expect_1.priorities)
    assert not torch.allclose(expect_0.priorities, expect_1.priorities)


def test_fqf_fraction_loss_uses_the_taken_actions_quantiles():
    g = torch.Generator().manual_seed(6)
    n = 5
    tau = torch.sort(torch.rand(B, n + 1, generator=g, dtype=F64), dim=1).values
    tau = tau.requires_grad_()
    at_tau = torch.randn(B, A, n - 1, generator=g, dtype=F64)
    at_hat = torch.randn(B, A, n, generator=g, dtype=F64)
    actions = torch.randint(A, (B,), generator=g)
    got = fqf_fraction_loss(
        tau=tau, quantiles_at_tau=at_tau, quantiles_at_tau_hat=at_hat, actions=actions
    )
    rows = torch.arange(B)
    expected = fraction_loss(
        tau=tau, quantiles_at_tau=at_tau[rows, actions], quantiles_at_tau_hat=at_hat[rows, actions]
    )
    torch.testing.assert_close(got, expected)
    other = fraction_loss(
        tau=tau,
        quantiles_at_tau=at_tau[rows, (actions + 1) % A],
        quantiles_at_tau_hat=at_hat[rows, (actions + 1) % A],
    )
    assert not torch.allclose(got, other)


# ---------------------------------------------------------------------------- gradients, shapes


@pytest.mark.parametrize("loss_fn", ["scalar", "munchausen", "categorical", "quantile"])
def test_gradient_flows_only_into_the_online_outputs(loss_fn):
    g = torch.Generator().manual_seed(7)
    head = "scalar" if loss_fn == "munchausen" else loss_fn
    inputs = _inputs(head, g)
    settings = ValueSettings(munchausen=loss_fn == "munchausen")
    if loss_fn == "munchausen":
        inputs["target_q_now"] = torch.randn(B, A, generator=g, dtype=F64)
    for tensor in inputs.values():
        if tensor.is_floating_point():
            tensor.requires_grad_()
    batch = _batch(g)
    for tensor in (batch.returns, batch.discounts, batch.weights):
        tensor.requires_grad_()
    out = _run(head, settings, inputs, batch)
    assert not out.priorities.requires_grad and not out.q_taken.requires_grad
    out.loss.backward()
    online = {"scalar": "q", "categorical": "logits", "quantile": "quantiles"}[head]
    for name, tensor in inputs.items():
        if name == online:
            assert tensor.grad is not None and tensor.grad.abs().sum() > 0, name
        else:
            assert tensor.grad is None, name
    for tensor in (batch.returns, batch.discounts, batch.weights):
        assert tensor.grad is None


@pytest.mark.parametrize("field", ["actions", "returns", "discounts", "weights"])
def test_a_batch_field_that_is_not_one_dimensional_is_refused(field):
    g = torch.Generator().manual_seed(8)
    batch = _batch(g)
    columns = {
        name: getattr(batch, name) for name in ("actions", "returns", "discounts", "weights")
    }
    columns[field] = columns[field][:, None]  # [B, 1] would broadcast to a [B, B] loss
    q = torch.randn(B, A, generator=g, dtype=F64)
    with pytest.raises(
        ValueError, match=rf"TDBatch.{field} must have shape \({B},\); got \({B}, 1\)"
    ):
        scalar_td_loss(
            ValueSettings(), q=q, next_online_q=q, next_target_q=q, batch=TDBatch(**columns)
        )


def test_float_actions_are_refused():
    g = torch.Generator().manual_seed(9)
    batch = _batch(g)
    q = torch.randn(B, A, generator=g, dtype=F64)
    bad = TDBatch(batch.actions.double(), batch.returns, batch.discounts, batch.weights)
    with pytest.raises(ValueError, match="TDBatch.actions must be int64; got torch.float64"):
        scalar_td_loss(ValueSettings(), q=q, next_online_q=q, next_target_q=q, batch=bad)


# ---------------------------------------------------------------------------- helpers


def _inputs(head: str, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Random head outputs for ``head``: online at s (scaled so errors straddle kappa = 1),
    online Q at s' (for the double argmax), and the target network's at s'."""
    next_online_q = torch.randn(B, A, generator=g, dtype=F64)
    if head == "scalar":
        return {
            "q": torch.randn(B, A, generator=g, dtype=F64) * 2,
            "next_online_q": next_online_q,
            "next_target_q": torch.randn(B, A, generator=g, dtype=F64),
        }
    if head == "categorical":
        n = 11
        return {
            "logits": torch.randn(B, A, n, generator=g, dtype=F64),
            "next_online_q": next_online_q,
            "next_target_logits": torch.randn(B, A, n, generator=g, dtype=F64) * 2,
            "support": torch.linspace(-3, 3, n, dtype=F64),
        }
    n, m = 6, 7  # IQN: N online fractions, N' target samples
    return {
        "quantiles": torch.randn(B, A, n, generator=g, dtype=F64) * 2,
        "fractions": torch.rand(B, n, generator=g, dtype=F64),
        "next_online_q": next_online_q,
        "next_target_quantiles": torch.randn(B, A, m, generator=g, dtype=F64),
    }


def _run(head: str, settings: ValueSettings, inputs: dict, batch: TDBatch, **kwargs):
    loss = {
        "scalar": scalar_td_loss,
        "categorical": categorical_td_loss,
        "quantile": quantile_td_loss,
    }[head]
    return loss(settings, batch=batch, **inputs, **kwargs)
