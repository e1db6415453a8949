"""The Q-network of the value-based algorithms: encoder + one action-value head.

Responsible for: assembling a Q-network from gymnasium spaces and plain keyword arguments
(``make_q_network``), with the same encoders as the actor-critic (``make_encoder``, by name,
from the observation specs), optional LayerNorm in the encoder's hidden layers (PQN), optional
per-pixel normalisation of uint8 observations (``normalize_pixels``, as the actor-critic),
and the entry points ``forward`` (the head's output, for losses) and ``q_values`` /
``greedy_actions`` (for acting).

    head name           head                                  algorithms
    scalar              ScalarQHead                           DQN, Double DQN, Munchausen, PQN
    categorical         CategoricalQHead                      C51, Rainbow
    quantile            QuantileQHead                         QR-DQN
    implicit_quantile   ImplicitQuantileHead                  IQN
    fqf                 ImplicitQuantileHead + fractions      FQF

Must not: compute losses or targets, explore (epsilon-greedy lives with the acting code),
redraw noise on its own (callers call ``reset_noise``), read config objects, or move data to
the host in the forward paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import gymnasium as gym
import torch
from torch import Tensor, nn

from sampleforge import spaces
from sampleforge.models.actor_critic import PIXEL_STATISTICS_SAMPLES
from sampleforge.models.encoders import encode, make_encoder
from sampleforge.models.layer_norm import add_layer_norm
from sampleforge.models.noisy import NoisyLinear
from sampleforge.models.normalizer import RunningMeanStd
from sampleforge.models.q_heads import (
    IQN_NUM_COSINES,
    CategoricalQHead,
    CategoricalQOutput,
    FQFOutput,
    FractionProposalHead,
    HeadSettings,
    ImplicitQuantileHead,
    QuantileQHead,
    QuantileQOutput,
    ScalarQHead,
    ScalarQOutput,
    fraction_weighted_q,
    midpoint_fractions,
    sample_fractions,
)

Q_HEADS = ("scalar", "categorical", "quantile", "implicit_quantile", "fqf")
# IQN's K: fractions sampled to estimate Q for acting (Dabney et al. 2018b, section 4).
IQN_ACTING_SAMPLES = 32

ObsDict = Mapping[str, Tensor]
QOutput = ScalarQOutput | CategoricalQOutput | QuantileQOutput


class QNetwork(nn.Module):
    """An encoder and one action-value head (see the module docstring).

    ``encoder``: forward(obs dict) -> features [B, encoder.out_size]; ``head``: one of the heads
    of ``q_heads.py``; ``fraction_head``: FQF's proposal, only with an ImplicitQuantileHead.
    ``obs_specs`` (key -> TensorSpec) says which keys are uint8 pixels for ``normalize_pixels``.
    ``num_quantile_samples``: K, the fractions an implicit quantile head evaluates when none are
    given (uniform samples in training mode; evenly spaced midpoints in eval mode, so greedy
    evaluation and export are deterministic).
    """

    def __init__(
        self,
        encoder: nn.Module,
        head: nn.Module,
        *,
        obs_specs: Mapping[str, spaces.TensorSpec],
        fraction_head: FractionProposalHead | None = None,
        normalize_pixels: bool = False,
        num_quantile_samples: int = IQN_ACTING_SAMPLES,
    ) -> None:
        super().__init__()
        if fraction_head is not None and not isinstance(head, ImplicitQuantileHead):
            raise ValueError(
                f"a fraction proposal needs an ImplicitQuantileHead; got {type(head).__name__}"
            )
        if num_quantile_samples < 1:
            raise ValueError(f"num_quantile_samples must be at least 1; got {num_quantile_samples}")
        self.encoder = encoder
        self.head = head
        self.fraction_head = fraction_head
        self.obs_specs = dict(obs_specs)
        self.num_actions = int(cast(int, head.num_actions))
        self.num_quantile_samples = int(num_quantile_samples)
        self.normalize_pixels = bool(normalize_pixels)
        # A ModuleList (not ModuleDict) so observation keys containing "." remain legal.
        self.normalized_keys: list[str] = []
        self.obs_normalizers = nn.ModuleList()
        if self.normalize_pixels:
            for key, spec in self.obs_specs.items():
                if spec.dtype == torch.uint8:
                    self.normalized_keys.append(key)
                    self.obs_normalizers.append(RunningMeanStd(spec.shape))
        # Found once: noise is redrawn at every update and inference batch, and a walk over the
        # modules to find none would cost each of them (a plain tuple: not registered twice).
        # The learner's copy may run its encoder in bfloat16 (`learner_precision`); not state.
        self.encoder_compute_dtype: torch.dtype | None = None
        self._noisy_layers = tuple(m for m in self.modules() if isinstance(m, NoisyLinear))

    # ------------------------------------------------------------------ normalisation

    def normalize_observations(self, obs: ObsDict) -> dict[str, Tensor]:
        """A new obs dict with the uint8 keys normalised by their running statistics
        (``normalize_pixels``); the others passed through. Identity without it."""
        out = dict(obs)
        for key, rms in zip(self.normalized_keys, self.obs_normalizers):
            out[key] = cast(RunningMeanStd, rms).normalize(obs[key])
        return out

    @torch.no_grad()
    def update_normalizer(self, obs: ObsDict) -> None:
        """Merge observations {key: [N, *shape]} into the pixel statistics, at most
        PIXEL_STATISTICS_SAMPLES evenly spaced rows per call (as the actor-critic)."""
        for key, rms in zip(self.normalized_keys, self.obs_normalizers):
            x = obs[key]
            if x.shape[0] > PIXEL_STATISTICS_SAMPLES:
                x = x[:: -(-x.shape[0] // PIXEL_STATISTICS_SAMPLES)]
            cast(RunningMeanStd, rms).update(x)

    # ------------------------------------------------------------------ entry points

    def encode(self, obs: ObsDict) -> Tensor:
        """obs {key: [B, *shape]} -> features [B, F] (normalised first where configured)."""
        return encode(self.encoder, self.normalize_observations(obs), self.encoder_compute_dtype)

    def head_output(self, features: Tensor, fractions: Tensor | None = None) -> QOutput:
        """The head's output for features [B, F].

        ``fractions`` [B, K] (implicit_quantile and fqf heads only): evaluate the quantiles
        there (IQN's N and N' sampled fractions of the loss; FQF's fraction loss at the inner
        tau). Without them an implicit head uses ``num_quantile_samples`` default fractions,
        and an FQF network its own proposal (the target network's too, at s').
        """
        head = self.head
        if not isinstance(head, ImplicitQuantileHead):
            if fractions is not None:
                raise ValueError(
                    f"fractions apply to implicit_quantile and fqf heads only, not "
                    f"{type(head).__name__}"
                )
            return cast(QOutput, head(features))
        if fractions is not None:
            return head(features, fractions)
        if self.fraction_head is None:
            return head(features, self.default_fractions(features.shape[0], features.device))
        proposal = self.fraction_head(features)
        # The quantile loss must not move the proposal: FQF trains it by the fraction loss.
        out = head(features, proposal.tau_hat.detach())
        q = fraction_weighted_q(out.quantiles, proposal.tau)
        return FQFOutput(quantiles=out.quantiles, fractions=out.fractions, q=q, proposal=proposal)

    def default_fractions(self, batch: int, device: torch.device) -> Tensor:
        """K = num_quantile_samples fractions per row: U[0, 1] samples in training mode,
        evenly spaced midpoints in eval mode. [batch, K]."""
        if self.training:
            return sample_fractions(batch, self.num_quantile_samples, device=device)
        return midpoint_fractions(batch, self.num_quantile_samples, device=device)

    def forward(self, obs: ObsDict, fractions: Tensor | None = None) -> QOutput:
        """obs {key: [B, *shape]} -> the head's output (see ``head_output``)."""
        return self.head_output(self.encode(obs), fractions)

    def q_values(self, obs: ObsDict) -> Tensor:
        """obs {key: [B, *shape]} -> action values [B, A]."""
        return self(obs).q

    def greedy_actions(self, obs: ObsDict) -> Tensor:
        """obs {key: [B, *shape]} -> argmax_a Q(s, a): int64 [B]."""
        return self.q_values(obs).argmax(dim=1)

    def reset_noise(self, generator: torch.Generator | None = None) -> None:
        """Redraw the noise of every noisy layer (none without ``noisy``)."""
        for layer in self._noisy_layers:
            layer.reset_noise(generator)


def _one_line(space: gym.Space) -> str:
    # A Box repr prints non-uniform bounds as arrays, which may span lines.
    return " ".join(repr(space).split())


def _make_head(
    name: str,
    features: int,
    actions: int,
    settings: HeadSettings,
    *,
    num_atoms: int,
    v_min: float,
    v_max: float,
    num_quantiles: int,
    num_cosines: int,
) -> nn.Module:
    """The head ``name`` (one of Q_HEADS; fqf's quantile network is the implicit one)."""
    if name == "scalar":
        return ScalarQHead(features, actions, settings)
    if name == "categorical":
        return CategoricalQHead(
            features, actions, num_atoms=num_atoms, v_min=v_min, v_max=v_max, settings=settings
        )
    if name == "quantile":
        return QuantileQHead(features, actions, num_quantiles=num_quantiles, settings=settings)
    return ImplicitQuantileHead(features, actions, num_cosines=num_cosines, settings=settings)


def make_q_network(
    observation_space: gym.Space,
    action_space: gym.Space,
    *,
    head: str = "scalar",
    dueling: bool = False,
    noisy: bool = False,
    layer_norm: bool = False,
    encoder: str = "auto",
    mlp_hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "relu",
    head_hidden_sizes: Sequence[int] = (),
    num_atoms: int = 51,
    v_min: float = -10.0,
    v_max: float = 10.0,
    num_quantiles: int = 200,
    num_cosines: int = IQN_NUM_COSINES,
    num_quantile_samples: int = IQN_ACTING_SAMPLES,
    num_fractions: int = 32,
    normalize_pixels: bool = False,
) -> QNetwork:
    """The Q-network for these spaces: encoder ``encoder`` (any registered name; see
    ``models/registry.py``) over the observation specs, then the head ``head`` (one of
    Q_HEADS) with ``head_hidden_sizes`` hidden layers per stream.

    ``dueling``, ``noisy``: the head's streams (noisy layers are the head's; the encoder stays
    deterministic). ``layer_norm``: LayerNorm before every hidden activation, in the encoder
    (``layer_norm.add_layer_norm``) and the head (PQN). ``num_atoms``, ``v_min``, ``v_max``:
    the categorical support; ``num_quantiles``: QR-DQN's N; ``num_cosines``: IQN's n;
    ``num_quantile_samples``: IQN's K for acting; ``num_fractions``: FQF's N.

    Raises ValueError (one line) for an action space that is not Discrete, an unknown head,
    or settings out of range; UnknownEncoderError for an unknown encoder.
    """
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(
            f"value-based heads need a Discrete action space; got {_one_line(action_space)}"
        )
    if head not in Q_HEADS:
        raise ValueError(f"unknown Q head {head!r}; allowed: {', '.join(Q_HEADS)}")
    obs_specs = spaces.observation_specs(observation_space)
    torso = make_encoder(obs_specs, encoder, mlp_hidden_sizes, activation)
    if layer_norm:
        add_layer_norm(torso)
    settings = HeadSettings(
        hidden_sizes=tuple(int(h) for h in head_hidden_sizes),
        dueling=dueling,
        noisy=noisy,
        layer_norm=layer_norm,
        activation=activation,
    )
    features = int(torso.out_size)
    q_head = _make_head(
        head,
        features,
        int(action_space.n),
        settings,
        num_atoms=num_atoms,
        v_min=v_min,
        v_max=v_max,
        num_quantiles=num_quantiles,
        num_cosines=num_cosines,
    )
    fraction_head = FractionProposalHead(features, num_fractions) if head == "fqf" else None
    return QNetwork(
        torso,
        q_head,
        obs_specs=obs_specs,
        fraction_head=fraction_head,
        normalize_pixels=normalize_pixels,
        num_quantile_samples=num_quantile_samples,
    )
