"""Q-networks (models/q_network.py, q_heads.py, layer_norm.py): every head's shapes on vector
and Atari-like observations, the dueling identity, C51's distribution, IQN's cosine embedding
against its formula, FQF's proposal, PQN's LayerNorm placement, one-line refusals, and a small
fit of fixed targets by each head with its own loss."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from sampleforge.algo.distributional import (
    categorical_projection,
    fraction_loss,
    quantile_huber_loss,
)
from sampleforge.models.layer_norm import ChannelLayerNorm, add_layer_norm
from sampleforge.models.noisy import NoisyLinear
from sampleforge.models.q_heads import (
    CategoricalQHead,
    CategoricalQOutput,
    FQFOutput,
    FractionProposalHead,
    HeadSettings,
    ImplicitQuantileHead,
    QuantileQOutput,
    ScalarQHead,
    ScalarQOutput,
)
from sampleforge.models.q_network import Q_HEADS, QNetwork, make_q_network

CARTPOLE = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACTIONS = gym.spaces.Discrete(3)
SMALL = {
    "mlp_hidden_sizes": (16, 16),
    "num_atoms": 11,
    "num_quantiles": 8,
    "num_cosines": 16,
    "num_quantile_samples": 6,
    "num_fractions": 5,
}
B = 5


def random_obs(space: gym.Space, batch: int = B) -> dict[str, torch.Tensor]:
    if space.dtype == np.uint8:
        return {"obs": torch.randint(0, 256, (batch, *space.shape), dtype=torch.uint8)}
    return {"obs": torch.randn(batch, *space.shape)}


def network(head: str, space: gym.Space = CARTPOLE, seed: int = 0, **kwargs) -> QNetwork:
    torch.manual_seed(seed)
    encoder = "conv_nature" if space is ATARI else "auto"
    return make_q_network(space, ACTIONS, head=head, encoder=encoder, **{**SMALL, **kwargs})


def expected_quantiles(head: str) -> int:
    return {"categorical": 11, "quantile": 8, "implicit_quantile": 6, "fqf": 5}.get(head, 0)


# ---------------------------------------------------------------------------- shapes


ALL_OPTIONS = {"dueling": True, "noisy": True, "layer_norm": True}
# Every head plain and with every option on vector observations; on Atari frames (a Nature
# network each, the slow part) with every option only.
SHAPE_CASES = [
    pytest.param(head, space, options, id=f"{head}-{name}")
    for head in Q_HEADS
    for space, options, name in [
        (CARTPOLE, {}, "vector"),
        (CARTPOLE, ALL_OPTIONS, "vector-all-options"),
        (ATARI, ALL_OPTIONS, "atari-all-options"),
    ]
]


@pytest.mark.parametrize(("head", "space", "options"), SHAPE_CASES)
def test_every_head_gives_its_shapes(head, space, options):
    net = network(head, space, **options)
    out = net(random_obs(space))
    n = expected_quantiles(head)
    assert out.q.shape == (B, 3)
    assert net.q_values(random_obs(space)).shape == (B, 3)
    assert net.greedy_actions(random_obs(space)).dtype == torch.int64
    if head == "scalar":
        assert type(out) is ScalarQOutput
    elif head == "categorical":
        assert isinstance(out, CategoricalQOutput) and out.logits.shape == (B, 3, n)
    else:
        assert isinstance(out, QuantileQOutput)
        assert out.quantiles.shape == (B, 3, n) and out.fractions.shape == (B, n)
    if head == "fqf":
        assert isinstance(out, FQFOutput) and out.proposal.tau.shape == (B, n + 1)
    assert torch.isfinite(out.q).all()


@pytest.mark.parametrize("head", ["implicit_quantile", "fqf"])
def test_implicit_quantiles_are_evaluated_at_given_fractions(head):
    net = network(head)
    fractions = torch.rand(B, 9)
    out = net(random_obs(CARTPOLE), fractions=fractions)
    assert out.quantiles.shape == (B, 3, 9) and out.fractions is fractions


def test_fractions_are_refused_by_heads_without_them():
    with pytest.raises(ValueError, match="fractions apply to implicit_quantile and fqf heads"):
        network("quantile")(random_obs(CARTPOLE), fractions=torch.rand(B, 4))


def test_iqn_q_is_sampled_in_training_and_deterministic_in_eval():
    net, obs = network("implicit_quantile"), random_obs(CARTPOLE)
    assert not torch.equal(net.q_values(obs), net.q_values(obs))
    net.eval()
    assert torch.equal(net.q_values(obs), net.q_values(obs))
    midpoints = (2 * torch.arange(6) + 1) / 12
    assert torch.allclose(net(obs).fractions, midpoints.expand(B, -1))


# ---------------------------------------------------------------------------- dueling


def test_dueling_removes_the_mean_advantage():
    """Wang et al. 2016, eq. 9: Q = V + A - mean_a A, so Q - V has zero mean over actions."""
    torch.manual_seed(0)
    head = ScalarQHead(8, 4, HeadSettings(dueling=True))
    features = torch.randn(6, 8)
    value = head.streams.value(features)  # [B, 1]
    centred = head(features).q - value
    assert torch.allclose(centred.mean(dim=1), torch.zeros(6), atol=1e-6)
    assert centred.abs().max() > 1e-3  # the advantages themselves are not zero


def test_dueling_categorical_head_centres_the_logits_per_atom():
    """Rainbow's dueling on C51: logits = V + A - mean_a A for every atom."""
    torch.manual_seed(0)
    head = CategoricalQHead(8, 4, num_atoms=7, settings=HeadSettings(dueling=True))
    features = torch.randn(6, 8)
    value = head.streams.value(features).unsqueeze(1)  # [B, 1, N]
    centred = head(features).logits - value
    assert torch.allclose(centred.mean(dim=1), torch.zeros(6, 7), atol=1e-6)


# ---------------------------------------------------------------------------- C51


def test_categorical_probabilities_sum_to_one_and_q_is_their_mean_on_the_support():
    torch.manual_seed(0)
    head = CategoricalQHead(8, 4, num_atoms=5, v_min=-2.0, v_max=6.0)
    head.streams.advantage[-1].weight.data.mul_(20)  # far from uniform
    out = head(torch.randn(6, 8))
    probs = out.log_probs().exp()
    assert torch.allclose(probs.sum(dim=-1), torch.ones(6, 4))
    assert torch.equal(head.support, torch.tensor([-2.0, 0.0, 2.0, 4.0, 6.0]))
    direct = sum(probs[..., j] * head.support[j] for j in range(5))
    assert torch.allclose(out.q, direct, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_atoms": 1}, "num_atoms must be at least 2; got 1"),
        ({"v_min": 1.0, "v_max": 1.0}, "v_min must be below v_max; got v_min=1.0, v_max=1.0"),
    ],
)
def test_bad_support_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CategoricalQHead(8, 4, **kwargs)


# ---------------------------------------------------------------------------- IQN and FQF


def test_cosine_embedding_matches_its_formula():
    """IQN eq. 4: phi_j(tau) = ReLU(sum_{i=0}^{n-1} cos(pi i tau) w_ij + b_j)."""
    torch.manual_seed(0)
    head = ImplicitQuantileHead(6, 3, num_cosines=5)
    tau = torch.rand(2, 4)
    weight, bias = head.embedding.weight, head.embedding.bias  # [F, n], [F]
    expected = torch.zeros(2, 4, 6)
    for b in range(2):
        for k in range(4):
            for j in range(6):
                total = float(bias[j].detach())
                for i in range(5):
                    total += math.cos(math.pi * i * float(tau[b, k])) * float(weight[j, i].detach())
                expected[b, k, j] = max(total, 0.0)
    assert torch.allclose(head.cosine_embedding(tau), expected, atol=1e-5)


def test_implicit_quantiles_are_the_stream_of_features_times_the_embedding():
    torch.manual_seed(0)
    head = ImplicitQuantileHead(6, 3, num_cosines=5)
    features, tau = torch.randn(2, 6), torch.rand(2, 4)
    out = head(features, tau)
    for k in range(4):
        mixed = features * head.cosine_embedding(tau[:, k : k + 1])[:, 0]
        assert torch.allclose(out.quantiles[:, :, k], head.streams(mixed)[..., 0], atol=1e-6)


def test_fraction_proposal_is_increasing_from_zero_to_one():
    torch.manual_seed(0)
    proposal_head = FractionProposalHead(8, 6)
    proposal_head.logits.weight.data.normal_()  # a skewed proposal, not the initial one
    proposal = proposal_head(torch.randn(4, 8))
    tau = proposal.tau
    assert tau.shape == (4, 7) and proposal.tau_hat.shape == (4, 6)
    assert torch.all(tau[:, 0] == 0) and torch.all(tau[:, -1] == 1)
    assert torch.all(tau[:, 1:] > tau[:, :-1])
    assert torch.allclose(proposal.tau_hat, (tau[:, 1:] + tau[:, :-1]) / 2)
    assert torch.all(proposal.entropy > 0) and torch.all(proposal.entropy < math.log(6))


def test_fqf_proposal_reads_detached_features_and_starts_near_even_fractions():
    net = network("fqf")
    out = net(random_obs(CARTPOLE))
    assert isinstance(out, FQFOutput)
    even = torch.linspace(0, 1, 6).expand(B, -1)
    assert torch.allclose(out.proposal.tau, even, atol=0.02)
    out.proposal.entropy.sum().backward()
    assert all(p.grad is None for p in net.encoder.parameters())
    assert net.fraction_head is not None and net.fraction_head.logits.weight.grad is not None


def test_fqf_q_weights_quantiles_by_fraction_widths():
    net = network("fqf")
    out = net(random_obs(CARTPOLE))
    assert isinstance(out, FQFOutput)
    widths = out.proposal.tau[:, 1:] - out.proposal.tau[:, :-1]
    assert torch.allclose(out.q, (out.quantiles * widths[:, None, :]).sum(-1), atol=1e-6)


# ---------------------------------------------------------------------------- noisy


def test_noisy_heads_explore_in_training_and_are_deterministic_in_eval():
    net, obs = network("scalar", noisy=True, dueling=True), random_obs(CARTPOLE)
    noisy_layers = [m for m in net.modules() if isinstance(m, NoisyLinear)]
    assert len(noisy_layers) == 2  # the value and advantage output layers
    assert not any(isinstance(m, NoisyLinear) for m in net.encoder.modules())
    before = net.q_values(obs)
    net.reset_noise()
    assert not torch.allclose(before, net.q_values(obs))
    net.eval()
    first = net.q_values(obs)
    net.reset_noise()
    assert torch.equal(first, net.q_values(obs))


# ---------------------------------------------------------------------------- LayerNorm


def test_layer_norm_sits_before_every_hidden_activation_of_the_mlp_and_not_at_the_output():
    net = network("scalar", layer_norm=True, head_hidden_sizes=(8,))
    mlp = net.encoder.encoder.net
    assert [type(m) for m in mlp] == [nn.Linear, nn.LayerNorm, nn.ReLU] * 2
    head = net.head.streams.advantage
    assert [type(m) for m in head] == [nn.Linear, nn.LayerNorm, nn.ReLU, nn.Linear]
    plain = network("scalar")
    assert not any(isinstance(m, nn.LayerNorm) for m in plain.modules())


def test_layer_norm_normalises_what_enters_each_activation():
    net = network("scalar", layer_norm=True)
    entering = []
    for module in net.encoder.modules():
        if isinstance(module, nn.ReLU):
            module.register_forward_hook(lambda _m, inputs, _o: entering.append(inputs[0]))
    net(random_obs(CARTPOLE))
    assert len(entering) == 2
    for x in entering:
        assert torch.allclose(x.mean(dim=1), torch.zeros(B), atol=1e-5)
        assert torch.allclose(x.var(dim=1, unbiased=False), torch.ones(B), atol=1e-3)


def test_layer_norm_in_the_nature_network_covers_each_conv_and_the_dense_layer():
    net = network("scalar", ATARI, layer_norm=True)
    assert sum(isinstance(m, ChannelLayerNorm) for m in net.modules()) == 3
    assert sum(type(m) is nn.LayerNorm for m in net.modules()) == 3 + 1  # 3 inside channel LNs


def test_channel_layer_norm_normalises_the_channels_of_each_position():
    x = torch.randn(2, 6, 3, 4) * 5 + 2
    y = ChannelLayerNorm(6)(x)
    assert torch.allclose(y.mean(dim=1), torch.zeros(2, 3, 4), atol=1e-5)
    assert torch.allclose(y.var(dim=1, unbiased=False), torch.ones(2, 3, 4), atol=1e-3)


def test_layer_norm_refuses_encoders_it_cannot_cover():
    with pytest.raises(ValueError, match="not available for the resnet encoder"):
        make_q_network(ATARI, ACTIONS, encoder="resnet", layer_norm=True)
    with pytest.raises(ValueError, match="found no Linear or Conv2d layer"):
        add_layer_norm(nn.Linear(3, 3))


# ---------------------------------------------------------------------------- pixels, refusals


def test_normalize_pixels_keeps_running_statistics_of_uint8_observations():
    net = network("scalar", ATARI, normalize_pixels=True)
    assert net.normalized_keys == ["obs"]
    obs = random_obs(ATARI, 3)
    net.update_normalizer(obs)
    normalised = net.normalize_observations(obs)["obs"]
    assert normalised.dtype == torch.float32
    assert torch.allclose(normalised.mean(dim=0), torch.zeros(4, 84, 84), atol=1e-3)
    assert torch.isfinite(net.q_values(obs)).all()
    assert network("scalar", ATARI).normalized_keys == []


@pytest.mark.parametrize(
    "space",
    [gym.spaces.Box(-1.0, 1.0, (2,), np.float32), gym.spaces.MultiDiscrete([2, 3])],
    ids=["box", "multidiscrete"],
)
def test_non_discrete_action_spaces_are_refused_in_one_line(space):
    with pytest.raises(ValueError) as e:
        make_q_network(CARTPOLE, space)
    message = str(e.value)
    assert message.startswith("value-based heads need a Discrete action space; got ")
    assert message.endswith(str(space)) and "\n" not in message


def test_box_with_array_bounds_is_named_on_one_line():
    high = np.array([[1, 1], [2, 2]], dtype=np.float32)
    space = gym.spaces.Box(np.zeros((2, 2), np.float32), high, dtype=np.float32)
    with pytest.raises(ValueError, match="got Box") as e:
        make_q_network(CARTPOLE, space)
    assert "\n" not in str(e.value)


def test_unknown_head_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError) as e:
        make_q_network(CARTPOLE, ACTIONS, head="c52")
    assert str(e.value) == (
        "unknown Q head 'c52'; allowed: scalar, categorical, quantile, implicit_quantile, fqf"
    )


# ---------------------------------------------------------------------------- fitting targets

FIT_BATCH, FIT_STEPS = 32, 300


@pytest.fixture
def one_thread():
    """Tiny networks step fastest on one thread (1-3 ms); two threads on a loaded 2-core CI
    machine made each step ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def fit(net: QNetwork, loss_fn, steps: int = FIT_STEPS) -> dict[str, torch.Tensor]:
    """``steps`` Adam steps of ``loss_fn(net, obs)`` on fixed random observations, drawing new
    noise before each (as a learner of noisy nets does); returns the observations, with the
    network in eval mode (mean weights, deterministic fractions)."""
    torch.manual_seed(1)
    obs = random_obs(gym.spaces.Box(-1, 1, (6,), np.float32), FIT_BATCH)
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(steps):
        net.reset_noise()
        loss = loss_fn(net, obs)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    net.eval()
    return obs


def fit_network(head: str, **kwargs) -> QNetwork:
    torch.manual_seed(0)
    space = gym.spaces.Box(-1, 1, (6,), np.float32)
    return make_q_network(space, ACTIONS, head=head, mlp_hidden_sizes=(64, 64), **kwargs)


TARGET_Q = torch.Generator().manual_seed(5)
TARGETS = torch.rand(FIT_BATCH, 3, generator=TARGET_Q) * 4 - 2  # [B, A] in [-2, 2]
# Samples of each (state, action)'s return: the target mean plus spread-out noise.
SAMPLES = TARGETS.reshape(-1, 1) + torch.linspace(-1, 1, 9)  # [B * A, 9], mean = TARGETS


@pytest.mark.parametrize("options", [{}, ALL_OPTIONS], ids=["plain", "all-options"])
def test_scalar_head_fits_fixed_q_targets(options, one_thread):
    net = fit_network("scalar", **options)

    def loss(net, obs):
        return (net(obs).q - TARGETS).pow(2).mean()

    obs = fit(net, loss)
    assert (net.q_values(obs) - TARGETS).abs().mean() < 0.05


def test_categorical_head_fits_projected_targets_by_cross_entropy(one_thread):
    net = fit_network("categorical", num_atoms=21, v_min=-3.0, v_max=3.0, dueling=True)
    support = torch.linspace(-3, 3, 21)
    # A point mass at each target, projected onto the support (C51's Algorithm 1 with d = 0).
    target_probs = categorical_projection(
        next_probs=torch.full((FIT_BATCH * 3, 21), 1 / 21),
        returns=TARGETS.reshape(-1),
        discounts=torch.zeros(FIT_BATCH * 3),
        support=support,
    ).reshape(FIT_BATCH, 3, 21)

    def loss(net, obs):
        return -(target_probs * net(obs).log_probs()).sum(-1).mean()

    obs = fit(net, loss)
    assert (net.q_values(obs) - TARGETS).abs().mean() < 0.05


def quantile_loss(out: QuantileQOutput) -> torch.Tensor:
    quantiles = out.quantiles.reshape(FIT_BATCH * 3, -1)
    fractions = out.fractions.repeat_interleave(3, dim=0)
    return quantile_huber_loss(quantiles=quantiles, targets=SAMPLES, fractions=fractions).mean()


@pytest.mark.parametrize("head", ["quantile", "implicit_quantile"])
def test_quantile_heads_fit_target_samples_by_the_quantile_huber_loss(head, one_thread):
    net = fit_network(head, num_quantiles=16, num_quantile_samples=16)
    obs = fit(net, lambda net, obs: quantile_loss(net(obs)))
    assert (net.q_values(obs) - TARGETS).abs().mean() < 0.1


def test_fqf_fits_target_samples_with_the_quantile_and_fraction_losses(one_thread):
    net = fit_network("fqf", num_fractions=8)

    def loss(net, obs):
        features = net.encode(obs)
        out = net.head_output(features)
        assert isinstance(out, FQFOutput)
        inner = net.head_output(features, fractions=out.proposal.tau[:, 1:-1].detach())
        # The quantile at fraction tau of each state's return, for every action: one row
        # per (state, action), as the flattened quantile loss uses them.
        fraction = fraction_loss(
            tau=out.proposal.tau.repeat_interleave(3, dim=0),
            quantiles_at_tau=inner.quantiles.reshape(FIT_BATCH * 3, -1),
            quantiles_at_tau_hat=out.quantiles.reshape(FIT_BATCH * 3, -1),
        )
        return quantile_loss(out) + fraction

    obs = fit(net, loss, steps=2 * FIT_STEPS)  # the proposal moves the fractions for a while
    assert (net.q_values(obs) - TARGETS).abs().mean() < 0.05
