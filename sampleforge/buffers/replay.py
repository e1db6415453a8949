"""The transition replay of one policy (DQN family, Rainbow), fed from the sampler's trajectories.

Responsible for: storing the transitions of R streams (the env rows of the sampler) in rings,
image frames once each and compressed; sampling transitions uniformly or by priority
(prioritized experience replay, Schaul et al. 2016) with their n-step returns and bootstrap
observations (Hessel et al. 2018, eq. 2); taking priority updates; saving and restoring all of
it; saying how much memory a replay of a given size needs before it is built.

Must not: lock or start threads (``replay_sampler.BackgroundSampler`` does, around this class),
compute TD errors, or know about networks, configs or processes.

Layout: one ring per stream, ``capacity // num_streams`` slots each, rather than one global ring
with per-transition links. A stream's transitions are then contiguous in its ring, so the
n-step window of transition ``t`` is simply slots ``t .. t + n`` (no link to follow or to check
for having been overwritten), the next observation needs no pointer at all, and the rings line up
with the frame store's per-stream rings. The price is that a stream that adds less than the
others keeps its old transitions longer; the sampler steps all its env rows in lockstep, so the
streams fill at one rate.

Transition ``t`` of a stream (ids grow for ever; slot ``t % C``) holds obs_t, action_t,
reward_t, done_t, valid_t. The observation after the last added step (the stream's tail) is
written into the next slot already, with no step data yet: it is obs_{t+1} of the last
transition and obs_0 of the stream's next trajectory, so nothing is stored twice. A stream that
begins afresh (``starts[r]``) first turns its tail into a reset step (valid 0, done 1, reward 0:
the truncation encoding of ``algo.gae``), so windows before it bootstrap from the tail and none
runs into the new segment.

Frame keys (every uint8 image; ``replay_layout.frame_stacks_of``) keep their frames in a
``CompressedFrameStore`` per key and store per transition the ids of the frames of its
observation: one frame of the whole image, or, for a key the env declares a frame stack
(``stacked_keys``: ``[stack, H, W]``, the last ``stack`` frames), ``stack`` of them. When a
stack's ``obs_t[:-1]`` equals ``obs_{t-1}[1:]`` byte for byte only the newest frame is stored;
otherwise (an episode start, whatever the env's padding) every frame of the stack is, each
reusing the id of an equal frame just before it in the stack. Either way the observation is
rebuilt bit for bit. Only a declared stack is split: the frame rings hold about one new frame
per transition, which the channels of an RGB image, taken as frames, would overrun.

A transition is sampled only when it is valid, its window is complete (n steps stored, or an
episode end before the missing ones) and all frames of its observation and bootstrap
observation are still decodable. The first two are decided once, when the window completes,
and the transition's n-step return, discount and bootstrap distance are computed then too
(``algo.value_targets.n_step_returns``, over all its stream's newly complete windows at once)
and kept, so sampling only gathers them. A transition whose frames are found gone when drawn is
dropped from sampling and redrawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sampleforge.algo.value_targets import n_step_returns
from sampleforge.buffers.frame_store import CompressedFrameStore
from sampleforge.buffers.replay_layout import (
    BLOB_OVERHEAD_BYTES,
    ReplayLayout,
    estimate_replay_bytes,
    frame_stacks_of,
    sum_tree_bytes,
)
from sampleforge.buffers.sum_tree import SumTree
from sampleforge.spaces import TensorSpec

__all__ = [
    "ReplayBatch",
    "ReplayBuffer",
    "ReplaySettingsChanged",
    "estimate_replay_bytes",
    "frame_stacks_of",
]

_MAX_REDRAWS = 64


class ReplaySettingsChanged(ValueError):
    """A saved replay was made with other settings than this replay's: its layout or its
    stored n-step returns would not fit, so it cannot be loaded."""

    def __init__(self, saved: dict[str, Any], current: dict[str, Any]) -> None:
        changes = [
            f"{name} {saved.get(name)!r} -> {value!r}"
            for name, value in current.items()
            if saved.get(name) != value
        ]
        super().__init__(f"the saved replay was made with other settings ({', '.join(changes)})")


@dataclass(frozen=True)
class ReplayBatch:
    """A sampled batch, numpy arrays with the batch first."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray
    returns: np.ndarray
    """[B] float32: sum_{k < m} gamma^k r_{t+k}, m <= n the steps to the bootstrap."""
    discounts: np.ndarray
    """[B] float32: gamma^m, or 0 when the episode terminated within the window."""
    next_obs: dict[str, np.ndarray]
    """The bootstrap observation obs_{t+m}."""
    indices: np.ndarray
    """[B] int64 keys of the transitions for ``update_priorities``, unique for the replay's
    life: an update for a transition that has since been overwritten is dropped."""
    weights: np.ndarray
    """[B] float32 importance weights (PER), ones for uniform replay."""


class ReplayBuffer:
    """Per-stream rings of transitions with n-step sampling, uniform or prioritized."""

    def __init__(
        self,
        *,
        capacity: int,
        num_streams: int,
        obs_specs: dict[str, TensorSpec],
        action_spec: TensorSpec,
        n_step: int,
        gamma: float,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        stacked_keys: Sequence[str] = (),
        keyframe_interval: int = 16,
    ):
        if not 1 <= n_step <= 255:  # steps to the bootstrap are kept as uint8
            raise ValueError(f"n_step must be in [1, 255], got {n_step}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if not alpha >= 0.0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if not priority_eps > 0.0:
            raise ValueError(f"priority_eps must be > 0, got {priority_eps}")
        self._stacks = frame_stacks_of(obs_specs, stacked_keys)
        max_stack = max([s for s, _ in self._stacks.values()], default=1)
        self._layout = ReplayLayout.of(capacity, num_streams, n_step, keyframe_interval, max_stack)
        self.capacity = capacity
        self.num_streams = num_streams
        self.n_step, self.gamma = n_step, gamma
        self.prioritized, self.alpha, self.priority_eps = prioritized, alpha, priority_eps
        self.beta = beta
        self.obs_specs, self.action_spec = dict(obs_specs), action_spec
        # Keys stored as compressed frames, and those of them that are stacks of frames.
        self.frame_keys = list(self._stacks)
        self.stacked_keys = sorted(stacked_keys)
        self._allocate()

    def _allocate(self) -> None:
        r, c = self.num_streams, self._layout.slots_per_stream
        self._raw = {
            k: np.zeros((r, c, *s.shape), s.numpy_dtype)
            for k, s in self.obs_specs.items()
            if k not in self._stacks
        }
        self._frame_ids = {k: np.zeros((r, c, st), np.int64) for k, (st, _) in self._stacks.items()}
        self._stores = {
            k: CompressedFrameStore(
                num_streams=r,
                capacity=self._layout.frames_per_stream,
                frame_shape=shape,
                keyframe_interval=self._layout.keyframe_interval,
            )
            for k, (_, shape) in self._stacks.items()
        }
        self._last_stack = {
            k: np.zeros((r, st, *shape), np.uint8) for k, (st, shape) in self._stacks.items()
        }
        self._last_ids = {k: np.zeros((r, st), np.int64) for k, (st, _) in self._stacks.items()}
        action = self.action_spec
        self._actions = np.zeros((r, c, *action.shape), action.numpy_dtype)
        self._rewards = np.zeros((r, c), np.float32)
        self._dones = np.zeros((r, c), np.uint8)
        self._valids = np.zeros((r, c), np.uint8)
        self._ready = np.zeros((r, c), bool)
        # The n-step result of each sampleable transition, fixed once its window is complete.
        self._returns = np.zeros((r, c), np.float32)
        self._discounts = np.zeros((r, c), np.float32)
        self._boot_steps = np.zeros((r, c), np.uint8)
        self._tree = SumTree(r * c)
        self._count = np.zeros(r, np.int64)  # transitions stored per stream, ever
        self._has_tail = np.zeros(r, bool)  # obs of transition _count[s] is stored
        self._num_ready = 0
        self._max_priority = 1.0

    # ----------------------------------------------------------------------------- settings

    @property
    def beta(self) -> float:
        """The importance-sampling exponent; the caller anneals it towards 1."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {value}")
        self._beta = float(value)

    @property
    def num_sampleable(self) -> int:
        """How many transitions may be sampled now."""
        return self._num_ready

    @property
    def slots_per_stream(self) -> int:
        return self._layout.slots_per_stream

    def compressed_bytes_per_frame(self) -> float | None:
        """The mean compressed size of the frames held now (every frame key), or None while
        none are held."""
        frames = sum(store.frames_stored for store in self._stores.values())
        compressed = sum(store.compressed_bytes for store in self._stores.values())
        return compressed / frames if frames else None

    def nbytes(self) -> int:
        """The memory held now: numpy rings, the sum tree and the compressed frames."""
        arrays = [self._actions, self._rewards, self._dones, self._valids, self._ready]
        arrays += [self._returns, self._discounts, self._boot_steps]
        arrays += [*self._raw.values(), *self._frame_ids.values(), *self._last_stack.values()]
        arrays += [*self._last_ids.values()]
        total = sum(a.nbytes for a in arrays) + sum_tree_bytes(self._tree.capacity)
        for store in self._stores.values():
            slots = store.num_streams * store.capacity
            total += slots * 8 + store.compressed_bytes + store.frames_stored * BLOB_OVERHEAD_BYTES
            total += store.num_streams * math.prod(store.frame_shape)
        return total

    # ----------------------------------------------------------------------------- adding

    def add(
        self,
        streams: np.ndarray,
        obs: dict[str, np.ndarray],
        actions: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        valids: np.ndarray,
        starts: np.ndarray | None = None,
    ) -> int:
        """Append a trajectory of T steps of R streams.

        streams: [R] distinct ints in [0, num_streams); obs: key -> [T + 1, R, ...], obs[T]
        the observation after the last step; actions: [T, R, ...]; rewards, dones, valids:
        [T, R]; starts: [R] bool, True where the stream begins afresh (else obs[0] must be
        the stream's last observation, which is checked). Returns the valid transitions
        stored: what a rate limiter counts as inserts (reset steps and other policies' steps
        are stored but never sampled, and would inflate the ratio per sampleable transition).
        """
        streams = np.asarray(streams, dtype=np.int64)
        self._check_trajectory(streams, obs, actions, rewards, dones, valids)
        starts = np.zeros(len(streams), bool) if starts is None else np.asarray(starts, bool)
        for j, s in enumerate(streams.tolist()):
            self._add_stream(
                s,
                {k: v[:, j] for k, v in obs.items()},
                actions[:, j],
                (rewards[:, j], dones[:, j], valids[:, j]),
                bool(starts[j]),
            )
        return int(np.count_nonzero(valids > 0))

    def _check_trajectory(
        self,
        streams: np.ndarray,
        obs: dict[str, np.ndarray],
        actions: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        valids: np.ndarray,
    ) -> int:
        if streams.ndim != 1 or len(np.unique(streams)) != len(streams):
            raise ValueError(f"streams must be [R] distinct ints, got {streams}")
        if streams.size and (streams.min() < 0 or streams.max() >= self.num_streams):
            raise ValueError(f"streams must be in [0, {self.num_streams}), got {streams}")
        t, r = rewards.shape
        if t + 1 >= self._layout.slots_per_stream:
            raise ValueError(
                f"a trajectory of {t} steps does not fit rings of "
                f"{self._layout.slots_per_stream} slots per stream; raise the capacity"
            )
        for name, array in (("dones", dones), ("valids", valids)):
            if array.shape != (t, r):
                raise ValueError(f"{name} must be [T, R] = {(t, r)}, got {array.shape}")
        if r != len(streams) or actions.shape[:2] != (t, r):
            raise ValueError(f"actions must be [T, R, ...] = {(t, r)}, got {actions.shape}")
        if set(obs) != set(self.obs_specs):
            raise ValueError(f"obs keys must be {sorted(self.obs_specs)}, got {sorted(obs)}")
        for key, array in obs.items():
            want = (t + 1, r, *self.obs_specs[key].shape)
            if array.shape != want:
                raise ValueError(
                    f"obs[{key!r}] must be [T + 1, R, ...] = {want}, got {array.shape}"
                )
        return t

    def _add_stream(
        self,
        s: int,
        obs: dict[str, np.ndarray],
        actions: np.ndarray,
        step_data: tuple[np.ndarray, np.ndarray, np.ndarray],
        start: bool,
    ) -> None:
        c = self._layout.slots_per_stream
        count_before = int(self._count[s])
        if self._has_tail[s] and start:
            # The old tail becomes a reset step: windows before it end there (bootstrapping
            # from the tail) and none crosses into the new segment.
            slot = count_before % c
            self._actions[s, slot] = 0
            self._rewards[s, slot], self._dones[s, slot], self._valids[s, slot] = 0.0, 1, 0
            self._count[s] += 1
            self._has_tail[s] = False
        elif self._has_tail[s]:
            self._check_continues(s, {k: v[0] for k, v in obs.items()})
        count = int(self._count[s])
        skip = 1 if self._has_tail[s] else 0  # obs[0] is already stored, as the tail
        new_tids = np.arange(count + skip, count + len(actions) + 1)
        self._forget(s, new_tids % c)
        rows = {k: v[skip:] for k, v in obs.items()}
        for key, values in rows.items():
            if key in self._stacks:
                self._frame_ids[key][s, new_tids % c] = self._append_frames(s, key, values)
            else:
                self._raw[key][s, new_tids % c] = values
        step_slots = np.arange(count, count + len(actions)) % c
        rewards, dones, valids = step_data
        self._actions[s, step_slots] = actions
        self._rewards[s, step_slots] = rewards
        self._dones[s, step_slots] = dones
        self._valids[s, step_slots] = valids
        self._count[s] = count + len(actions)
        self._has_tail[s] = True
        self._mark_ready(s, max(count_before - self.n_step, self._oldest(s)))

    def continues(self, stream: int, first_obs: dict[str, np.ndarray]) -> bool:
        """Whether a trajectory starting with `first_obs` (key -> one observation) continues
        `stream`: the stream has a tail and it equals `first_obs` byte for byte."""
        return self._mismatched_key(stream, first_obs) is None

    def _mismatched_key(self, s: int, first_obs: dict[str, np.ndarray]) -> str | None:
        if not self._has_tail[s]:
            return next(iter(first_obs), "")
        slot = int(self._count[s]) % self._layout.slots_per_stream
        for key, value in first_obs.items():
            stored = self._last_stack[key][s] if key in self._stacks else self._raw[key][s, slot]
            if np.ascontiguousarray(value).tobytes() != stored.tobytes():
                return key
        return None

    def _check_continues(self, s: int, first_obs: dict[str, np.ndarray]) -> None:
        key = self._mismatched_key(s, first_obs)
        if key is not None:
            raise ValueError(
                f"stream {s}: obs[0][{key!r}] is not the last observation of its previous "
                f"trajectory; pass starts[r]=True for a stream that begins afresh"
            )

    def _oldest(self, s: int) -> int:
        """The oldest transition of stream s whose slot still holds it."""
        return max(0, int(self._count[s]) + 1 - self._layout.slots_per_stream)

    def _forget(self, s: int, slots: np.ndarray) -> None:
        """The transitions in these slots are about to be overwritten: stop sampling them."""
        rows = s * self._layout.slots_per_stream + slots
        self._num_ready -= int(self._ready[s, slots].sum())
        self._ready[s, slots] = False
        self._tree.update(rows, np.zeros(len(rows)))

    def _append_frames(self, s: int, key: str, values: np.ndarray) -> np.ndarray:
        """Store the new frames of stacked observations ``values`` ([K, ...]) of stream s in
        time order -> their frame ids [K, stack]."""
        stack, frame_shape = self._stacks[key]
        values = values.reshape(len(values), stack, *frame_shape)
        store, last = self._stores[key], self._last_stack[key]
        previous = np.concatenate([last[s][None], values[:-1]])
        if stack > 1:
            shifted = (values[:, :-1] == previous[:, 1:]).reshape(len(values), -1).all(axis=1)
            # The first obs of a stream has no predecessor (last[s] is zeros or stale).
            shifted[0] &= bool(self._has_tail[s])
        else:
            shifted = np.zeros(len(values), bool)
        ids = np.empty((len(values), stack), np.int64)
        last_ids = self._last_ids[key][s].copy()
        for i, stacked in enumerate(values):
            if shifted[i]:
                ids[i, :-1] = last_ids[1:]
                ids[i, -1] = store.append(s, stacked[-1])
            else:
                for j in range(stack):
                    if j > 0 and np.array_equal(stacked[j], stacked[j - 1]):
                        ids[i, j] = ids[i, j - 1]
                    else:
                        ids[i, j] = store.append(s, stacked[j])
            last_ids = ids[i]
        self._last_ids[key][s] = last_ids
        last[s] = values[-1]
        return ids

    def _mark_ready(self, s: int, first_tid: int) -> None:
        """Make sampleable the valid transitions from ``first_tid`` on whose windows are now
        complete, at the highest priority so far (Schaul et al. 2016, Algorithm 1)."""
        c = self._layout.slots_per_stream
        tids = np.arange(first_tid, int(self._count[s]))
        slots = tids % c
        candidates = ~self._ready[s, slots] & (self._valids[s, slots] > 0)
        tids = tids[candidates]
        if not tids.size:
            return
        streams = np.full(len(tids), s)
        window = self._n_step(streams, tids)
        complete = self._window_complete(streams, tids, window)
        tids, slots = tids[complete], tids[complete] % c
        self._ready[s, slots] = True
        self._returns[s, slots] = window.returns.numpy()[complete]
        self._discounts[s, slots] = window.discounts.numpy()[complete]
        self._boot_steps[s, slots] = window.steps.numpy()[complete]
        self._num_ready += len(tids)
        priority = self._max_priority**self.alpha if self.prioritized else 1.0
        self._tree.update(s * c + tids % c, np.full(len(tids), priority))

    # ----------------------------------------------------------------------------- windows

    def _n_step(self, streams: np.ndarray, tids: np.ndarray) -> Any:
        """n_step_returns over the windows of transitions (streams[k], tids[k]); rows not
        stored yet read as reset steps (valid 0), which ends a window just as the truth may."""
        c = self._layout.slots_per_stream
        rows = tids[None, :] + np.arange(self.n_step)[:, None]  # [n, K]
        stored = rows < self._count[streams][None, :]
        slots = streams[None, :], rows % c
        return n_step_returns(
            rewards=torch.from_numpy(np.where(stored, self._rewards[slots], 0.0)),
            dones=torch.from_numpy(np.where(stored, self._dones[slots], 0)),
            valids=torch.from_numpy(np.where(stored, self._valids[slots], 0)),
            gamma=self.gamma,
        )

    def _window_complete(self, streams: np.ndarray, tids: np.ndarray, window: Any) -> np.ndarray:
        """Whether each window's end is known: n steps, a termination, or a real reset step
        (stored, not merely missing) m steps on."""
        steps, discounts = window.steps.numpy(), window.discounts.numpy()
        ended_early = (steps < self.n_step) & (discounts > 0)
        return ~(ended_early & (tids + steps >= self._count[streams]))

    # ----------------------------------------------------------------------------- sampling

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplayBatch:
        """``batch_size`` transitions: proportional to priority**alpha (stratified over the
        total, as Schaul et al.) when prioritized, else uniformly and independently, both
        among the sampleable transitions only."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        rows = self._draw(batch_size, rng, stratified=self.prioritized)
        for _ in range(_MAX_REDRAWS):
            streams, tids = self._locate(rows)
            frame_ids = self._stack_ids(streams, tids)
            gone = ~self._frames_decodable(streams, frame_ids)
            if not gone.any():
                return self._batch(streams, tids, frame_ids)
            self._drop(rows[gone])
            rows[gone] = self._draw(int(gone.sum()), rng, stratified=False)
        raise RuntimeError(f"no decodable transitions found in {_MAX_REDRAWS} draws")

    def read(self, indices: np.ndarray) -> ReplayBatch:
        """The batch of the transitions ``indices`` (keys from ``ReplayBatch.indices``, all
        still sampleable), as ``sample`` would give them."""
        streams, tids = self._decode_keys(np.asarray(indices, np.int64))
        if not self._live(streams, tids).all():
            raise KeyError("some indices are no longer (or not yet) sampleable")
        frame_ids = self._stack_ids(streams, tids)
        if not self._frames_decodable(streams, frame_ids).all():
            raise KeyError("some indices have frames that are no longer stored")
        return self._batch(streams, tids, frame_ids)

    def _draw(self, count: int, rng: np.random.Generator, *, stratified: bool) -> np.ndarray:
        if self._num_ready == 0:
            raise ValueError("the replay holds no sampleable transition yet")
        if stratified:
            return self._tree.sample(count, rng)
        total = self._tree.total
        return self._tree.find(np.minimum(rng.random(count) * total, np.nextafter(total, 0)))

    def _locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tree rows -> (stream, transition id) of their current occupants."""
        c = self._layout.slots_per_stream
        streams, slots = rows // c, rows % c
        count = self._count[streams]
        return streams, count - (count - slots) % c

    def _drop(self, rows: np.ndarray) -> None:
        rows = np.unique(rows)
        c = self._layout.slots_per_stream
        streams, slots = rows // c, rows % c
        self._num_ready -= int(self._ready[streams, slots].sum())
        self._ready[streams, slots] = False
        self._tree.update(rows, np.zeros(len(rows)))

    def _stack_ids(self, streams: np.ndarray, tids: np.ndarray) -> dict[str, np.ndarray]:
        """Frame key -> the frame ids of the observations and then the bootstrap observations
        of transitions: [2 K, stack]."""
        c = self._layout.slots_per_stream
        next_slots = (tids + self._boot_steps[streams, tids % c]) % c
        both = np.concatenate([tids % c, next_slots])
        return {
            k: ids[np.concatenate([streams, streams]), both] for k, ids in self._frame_ids.items()
        }

    def _frames_decodable(
        self, streams: np.ndarray, frame_ids: dict[str, np.ndarray]
    ) -> np.ndarray:
        ok = np.ones(len(streams), bool)
        both = np.concatenate([streams, streams])[:, None]
        for key, store in self._stores.items():
            decodable = np.all(store.decodable(both, frame_ids[key]), axis=1)
            ok &= decodable[: len(streams)] & decodable[len(streams) :]
        return ok

    def _batch(
        self, streams: np.ndarray, tids: np.ndarray, frame_ids: dict[str, np.ndarray]
    ) -> ReplayBatch:
        c = self._layout.slots_per_stream
        slots = tids % c
        next_slots = (tids + self._boot_steps[streams, slots]) % c
        obs, next_obs = {}, {}
        for key, raw in self._raw.items():
            obs[key], next_obs[key] = raw[streams, slots], raw[streams, next_slots]
        both = np.concatenate([streams, streams])[:, None]
        for key, store in self._stores.items():
            # One decode for both: the two stacks of a transition share most of their frames.
            frames = store.get(both, frame_ids[key], check=False)  # checked by the caller
            frames = frames.reshape(2, len(tids), *self.obs_specs[key].shape)
            obs[key], next_obs[key] = frames[0], frames[1]
        rows = streams * c + slots
        if self.prioritized:
            probabilities = self._tree.priorities(rows) / self._tree.total
            weights = (self._num_ready * probabilities) ** -self._beta
            weights /= weights.max()  # normalised by the batch's largest weight
        else:
            weights = np.ones(len(tids))
        return ReplayBatch(
            obs=obs,
            actions=self._actions[streams, slots],
            returns=self._returns[streams, slots],
            discounts=self._discounts[streams, slots],
            next_obs=next_obs,
            indices=tids * self.num_streams + streams,
            weights=weights.astype(np.float32),
        )

    # ----------------------------------------------------------------------------- priorities

    def _decode_keys(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return keys % self.num_streams, keys // self.num_streams

    def _live(self, streams: np.ndarray, tids: np.ndarray) -> np.ndarray:
        """Whether each transition still occupies its slot and is sampleable."""
        oldest = np.maximum(0, self._count[streams] + 1 - self._layout.slots_per_stream)
        live = (tids >= oldest) & (tids < self._count[streams])
        return live & self._ready[streams, tids % self._layout.slots_per_stream]

    def update_priorities(self, indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Set the priorities of sampled transitions to ``(|td_error| + priority_eps)``
        (raised to alpha in the tree). Transitions overwritten or dropped since they were
        sampled are skipped; a uniform replay ignores the call."""
        td_errors = np.asarray(td_errors, np.float64)
        if not np.all(np.isfinite(td_errors)):
            raise ValueError(f"td_errors must be finite, got {td_errors}")
        if not self.prioritized:
            return
        streams, tids = self._decode_keys(np.asarray(indices, np.int64))
        live = self._live(streams, tids)
        priorities = np.abs(td_errors[live]) + self.priority_eps
        if priorities.size:
            self._max_priority = max(self._max_priority, float(priorities.max()))
        rows = streams[live] * self._layout.slots_per_stream + tids[live] % self.slots_per_stream
        self._tree.update(rows, priorities**self.alpha)

    # ----------------------------------------------------------------------------- state

    def _settings(self) -> dict[str, Any]:
        """What a saved state must agree on to be loaded (beta may change)."""
        return {
            "capacity": self.capacity,
            "num_streams": self.num_streams,
            "n_step": self.n_step,
            "gamma": self.gamma,
            "prioritized": self.prioritized,
            "alpha": self.alpha,
            "frame_keys": list(self.frame_keys),
            "stacked_keys": list(self.stacked_keys),
            "keyframe_interval": self._layout.keyframe_interval,
            "obs": {k: [list(s.shape), str(s.dtype)] for k, s in sorted(self.obs_specs.items())},
            "action": [list(self.action_spec.shape), str(self.action_spec.dtype)],
        }

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue, as torch tensors, numbers, strings, lists and dicts
        (loadable with ``torch.load(weights_only=True)``); arrays are copies."""
        state: dict[str, Any] = {
            "settings": self._settings(),
            "max_priority": self._max_priority,
            "priorities": self._tree.priorities(np.arange(self._tree.capacity)),
            "count": self._count,
            "has_tail": self._has_tail,
            "actions": self._actions,
            "rewards": self._rewards,
            "dones": self._dones,
            "valids": self._valids,
            "ready": self._ready,
            "returns": self._returns,
            "discounts": self._discounts,
            "boot_steps": self._boot_steps,
            "raw": self._raw,
            "frame_ids": self._frame_ids,
            "last_stack": self._last_stack,
            "last_ids": self._last_ids,
            "frames": {k: store.state_dict() for k, store in self._stores.items()},
        }
        return _to_torch(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict`` of a replay with the same settings (beta aside)."""
        saved = _with_stacked_keys(state["settings"])
        if saved != self._settings():
            raise ReplaySettingsChanged(saved, self._settings())
        state = _to_numpy(state)
        self._allocate()
        names = ["count", "has_tail", "actions", "rewards", "dones", "valids", "ready"]
        for name in [*names, "returns", "discounts", "boot_steps"]:
            getattr(self, f"_{name}")[...] = state[name]
        for name in ("raw", "frame_ids", "last_stack", "last_ids"):
            for key, array in getattr(self, f"_{name}").items():
                array[...] = state[name][key]
        for key, store in self._stores.items():
            store.load_state_dict(state["frames"][key])
        self._max_priority = float(state["max_priority"])
        self._num_ready = int(self._ready.sum())
        self._tree.update(np.arange(self._tree.capacity), state["priorities"])


def _to_torch(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, dict):
        return {k: _to_torch(v) for k, v in value.items()}
    return value


def _with_stacked_keys(settings: dict[str, Any]) -> dict[str, Any]:
    """Saved replay settings, with the stacked keys that replays saved before they were
    recorded had: every frame key of shape [c, H, W] with 1 < c <= 16."""
    if "stacked_keys" in settings:
        return settings
    shapes = {key: shape for key, (shape, _) in settings["obs"].items()}
    stacked = [k for k in settings["frame_keys"] if len(shapes[k]) == 3 and 1 < shapes[k][0] <= 16]
    return {**settings, "stacked_keys": sorted(stacked)}


def _to_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        # A checkpoint loaded for a CUDA learner maps every tensor there, the replay's too.
        return value.cpu().numpy()
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    return value
