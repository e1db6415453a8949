"""The actor-critic policy: encoder(s) + core(s) + action head + value head.

Responsible for: assembling the model from gymnasium spaces and plain keyword arguments, the
two entry points of the system (``act`` for the inference worker, one step per env;
``evaluate`` for the learner, whole trajectories with backprop-through-time), and optional
observation and return normalisation whose statistics live in the model's buffers.

Must not: compute losses, own optimisers, read config objects, move data to the host
(no ``.numpy()``/``.cpu()`` in the forward paths) or assume a particular device.

Recurrent state layout: one flat float tensor per env, ``[B, rnn_state_size]``. With
``shared_weights=False`` the critic has its own encoder and core, and the state is
``cat(actor_state, critic_state)`` along dim 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import gymnasium as gym
import torch
from torch import nn

from sampleforge import spaces
from sampleforge.models.action_heads import (
    DiagGaussianDistribution,
    MultiCategoricalDistribution,
    make_action_head,
)
from sampleforge.models.cores import Core, make_core
from sampleforge.models.encoders import Encoder, encode, make_encoder
from sampleforge.models.init_schemes import apply_init_scheme, orthogonal_init
from sampleforge.models.normalizer import RunningMeanStd
from sampleforge.models.policy import ActOutput, ObsDict, Policy

VALUE_HEAD_GAIN = 1.0

# Normalised value targets are clipped to +-this many standard deviations. Wider than the
# observation normaliser's 5 (and Sample Factory 2's 5 for returns): return distributions are
# skewed, and with a fraction p of rewarding returns those lie sqrt((1 - p) / p) std above the
# mean (3 at p = 10%, 10 at p = 1%), so 5 would cut real signal. The clip is only a guard for
# unrepresentative statistics (the first batches; a jump in returns the count-weighted
# statistics have not caught up with), where an unbounded z-score would let the value loss
# swamp the shared encoder's gradient.
RETURNS_NORMALIZER_CLIP = 10.0

# Rows of a dataset merged into the pixel statistics (normalize_pixels).
PIXEL_STATISTICS_SAMPLES = 256


class EvaluateOutput(NamedTuple):
    """Result of ``ActorCritic.evaluate`` for a [T, B] trajectory batch."""

    log_probs: torch.Tensor  # [T, B]
    entropy: torch.Tensor  # [T, B]
    values: torch.Tensor  # [T, B], in reward units, as ``ActOutput.values``
    normalized_values: torch.Tensor  # [T, B], the value head's own output (== values when
    # normalize_returns is off); the learner's value loss regresses this one
    uniform_kl: torch.Tensor | None = None  # [T, B], symmetric KL of pi to the uniform
    # distribution (categorical actions only; None for Box actions)


class ActorCritic(Policy):
    """Actor-critic for one (observation space, action space) pair.

    Attributes: ``obs_specs`` (dict key -> TensorSpec), ``action_spec`` (TensorSpec of one
    action row), ``rnn_state_size`` (S; 0 without recurrence), ``normalized_keys`` (observation
    keys that are normalised: every float32 key with ``normalize_obs``, every uint8 image key,
    pixel by pixel, with ``normalize_pixels``; never discrete indices or bits),
    ``returns_normalizer`` (running statistics of the value targets when ``normalize_returns``
    is on, else None), ``encoder_compute_dtype`` (None, or bfloat16 on a learner's copy: see
    ``encoders.encode``).
    """

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        *,
        encoder: str = "auto",
        mlp_hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "elu",
        rnn_type: str = "none",
        rnn_size: int = 128,
        shared_weights: bool = True,
        normalize_obs: bool = False,
        normalize_returns: bool = False,
        normalize_pixels: bool = False,
        init_scheme: str = "ppo",
    ) -> None:
        super().__init__()
        self.obs_specs = spaces.observation_specs(obs_space)
        self.action_spec = spaces.action_spec(action_space)
        self.shared_weights = bool(shared_weights)
        self.normalize_obs = bool(normalize_obs)
        self.normalize_returns = bool(normalize_returns)
        self.normalize_pixels = bool(normalize_pixels)

        def build_encoder() -> Encoder:
            return make_encoder(self.obs_specs, encoder, mlp_hidden_sizes, activation)

        self.actor_encoder = build_encoder()
        self.actor_core = make_core(rnn_type, self.actor_encoder.out_size, rnn_size)
        self.critic_encoder: Encoder | None = None
        self.critic_core: Core | None = None
        if not self.shared_weights:
            self.critic_encoder = build_encoder()
            self.critic_core = make_core(rnn_type, self.critic_encoder.out_size, rnn_size)

        self.action_head = make_action_head(action_space, self.actor_core.out_size)
        critic_out = (self.critic_core or self.actor_core).out_size
        self.value_head = nn.Linear(critic_out, 1)
        orthogonal_init(self.value_head, VALUE_HEAD_GAIN)
        apply_init_scheme(self, init_scheme)

        self._actor_state_size = self.actor_core.state_size
        critic_state = 0 if self.critic_core is None else self.critic_core.state_size
        self.rnn_state_size = self._actor_state_size + critic_state

        # A ModuleList (not ModuleDict) so observation keys containing "." remain legal.
        self.normalized_keys: list[str] = []
        self.obs_normalizers = nn.ModuleList()
        for key, spec in self.obs_specs.items():
            if _normalized(spec, normalize_obs=self.normalize_obs, pixels=self.normalize_pixels):
                self.normalized_keys.append(key)
                self.obs_normalizers.append(RunningMeanStd(spec.shape))
        # The value head predicts (V - mean) / std of these statistics; the learner updates them
        # with its value targets. Buffers, so they are checkpointed and published with the weights.
        self.returns_normalizer: RunningMeanStd | None = None
        if self.normalize_returns:
            self.returns_normalizer = RunningMeanStd((), clip=RETURNS_NORMALIZER_CLIP)
        # The learner's copy may run its encoders in bfloat16 (`learner_precision`); not state,
        # so published weights and checkpoints are the same either way.
        self.encoder_compute_dtype: torch.dtype | None = None

    # ------------------------------------------------------------------ normalisation

    def normalize_observations(self, obs: ObsDict) -> dict[str, torch.Tensor]:
        """Return a new obs dict with float keys normalised (others passed through).

        obs: {key: [..., *spec.shape]} with any leading dims. Identity without normalize_obs and
        normalize_pixels.
        """
        out = dict(obs)
        for key, rms in zip(self.normalized_keys, self._normalizers()):
            out[key] = rms.normalize(obs[key])
        return out

    def _normalizers(self) -> list[RunningMeanStd]:
        return [cast(RunningMeanStd, rms) for rms in self.obs_normalizers]

    @torch.no_grad()
    def update_normalizer(self, obs: ObsDict) -> None:
        """Merge training observations into the statistics. obs: {key: [N, *spec.shape]}.

        Pixel keys merge at most PIXEL_STATISTICS_SAMPLES evenly spaced rows: a whole Atari
        dataset as floats is 115 MB, and running statistics need no more.
        """
        for key, rms in zip(self.normalized_keys, self._normalizers()):
            x = obs[key]
            if x.dtype == torch.uint8 and x.shape[0] > PIXEL_STATISTICS_SAMPLES:
                x = x[:: -(-x.shape[0] // PIXEL_STATISTICS_SAMPLES)]
            rms.update(x)

    def denormalize_values(self, normalized: torch.Tensor) -> torch.Tensor:
        """Value head output -> reward units (mean + std * x); identity without
        normalize_returns. Any shape; keeps gradients."""
        if self.returns_normalizer is None:
            return normalized
        return self.returns_normalizer.denormalize(normalized)

    # ------------------------------------------------------------------ helpers

    def _split_state(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, S] -> (actor [B, S_a], critic [B, S_c]); critic part is empty when shared."""
        return states[:, : self._actor_state_size], states[:, self._actor_state_size :]

    def _value(self, features: torch.Tensor) -> torch.Tensor:
        return self.value_head(features).squeeze(-1)

    # ------------------------------------------------------------------ entry points

    def act(
        self,
        obs: ObsDict,
        rnn_states: torch.Tensor,
        deterministic: bool = False,
        env_ids: torch.Tensor | None = None,
    ) -> ActOutput:
        """One policy step for B envs (the same policy for every env: ``env_ids`` is unused).

        obs: {key: [B, *shape]}; rnn_states: [B, S] (already zeroed by the caller for envs
        that just reset). Returns actions [B, A], log_probs [B], values [B], new states [B, S].

        ``values`` are in reward units: with ``normalize_returns`` the head's normalised output
        is de-normalised here with the statistics this copy of the model holds. This decides
        what inference workers store as the behaviour values (``batch.values``): estimates in
        reward units as the acting policy saw them, so they stay meaningful when the learner's
        statistics move on (the learner re-normalises them with its current statistics for
        value clipping), and every reader of ``act`` (evaluation, the API) gets returns.
        """
        obs = self.normalize_observations(obs)
        actor_state, critic_state = self._split_state(rnn_states)
        actor_features, new_actor_state = self.actor_core.step(
            encode(self.actor_encoder, obs, self.encoder_compute_dtype), actor_state
        )
        if self.critic_encoder is None or self.critic_core is None:  # shared weights
            critic_features, new_states = actor_features, new_actor_state
        else:
            critic_features, new_critic_state = self.critic_core.step(
                encode(self.critic_encoder, obs, self.encoder_compute_dtype), critic_state
            )
            new_states = torch.cat([new_actor_state, new_critic_state], dim=1)

        dist = self.action_head(actor_features)
        actions = dist.mode() if deterministic else dist.sample()
        return ActOutput(
            actions=actions,
            log_probs=dist.log_prob(actions),
            values=self.denormalize_values(self._value(critic_features)),
            new_rnn_states=new_states,
        )

    def _run_sequence(
        self,
        encoder: Encoder,
        core: Core,
        flat_obs: ObsDict,
        state0: torch.Tensor,
        episode_starts: torch.Tensor,
    ) -> torch.Tensor:
        """Encode [T*B] observations and run the core over time -> features [T*B, H]."""
        time, batch = episode_starts.shape
        features = encode(encoder, flat_obs, self.encoder_compute_dtype).reshape(time, batch, -1)
        out, _ = core.sequence(features, state0, episode_starts)
        return out.reshape(time * batch, -1)

    def evaluate(
        self,
        obs: ObsDict,
        rnn_states0: torch.Tensor,
        episode_starts: torch.Tensor,
        actions: torch.Tensor,
    ) -> EvaluateOutput:
        """Re-evaluate stored actions over whole trajectories (with gradients).

        obs: {key: [T, B, *shape]}; rnn_states0: [B, S] state before step 0; episode_starts:
        [T, B] (the state is zeroed before step t where set); actions: [T, B, A].
        Returns log_probs [T, B], entropy [T, B], values [T, B] in reward units (as ``act``)
        and normalized_values [T, B], the value head's raw output (the same tensor as values
        without ``normalize_returns``).
        """
        time, batch = episode_starts.shape
        flat_obs = {k: v.reshape(time * batch, *v.shape[2:]) for k, v in obs.items()}
        flat_obs = self.normalize_observations(flat_obs)
        actor_state, critic_state = self._split_state(rnn_states0)

        actor_features = self._run_sequence(
            self.actor_encoder, self.actor_core, flat_obs, actor_state, episode_starts
        )
        if self.critic_encoder is None or self.critic_core is None:  # shared weights
            critic_features = actor_features
        else:
            critic_features = self._run_sequence(
                self.critic_encoder, self.critic_core, flat_obs, critic_state, episode_starts
            )

        dist = self.action_head(actor_features)
        flat_actions = actions.reshape(time * batch, -1)
        normalized_values = self._value(critic_features).reshape(time, batch)
        return EvaluateOutput(
            log_probs=dist.log_prob(flat_actions).reshape(time, batch),
            entropy=dist.entropy().reshape(time, batch),
            values=self.denormalize_values(normalized_values),
            normalized_values=normalized_values,
            uniform_kl=_uniform_kl(dist, time, batch),
        )


def _normalized(spec: spaces.TensorSpec, *, normalize_obs: bool, pixels: bool) -> bool:
    """Whether an observation key gets running mean/std statistics. Discrete indices and
    MultiBinary bits (the integer specs) never do: the encoders one-hot the raw index, and
    a z-scored bit carries nothing more than the bit."""
    if spec.dtype == torch.uint8:
        return pixels
    return normalize_obs and spec.dtype == torch.float32


def _uniform_kl(
    dist: MultiCategoricalDistribution | DiagGaussianDistribution, time: int, batch: int
) -> torch.Tensor | None:
    """[T, B] symmetric KL of a categorical policy to the uniform one; None for a Gaussian,
    which has no uniform distribution to compare with."""
    if isinstance(dist, MultiCategoricalDistribution):
        return dist.symmetric_kl_to_uniform().reshape(time, batch)
    return None
