"""The sizes of a transition replay: which observation keys are stored as frames, how many
slots each stream's rings get, and the memory a replay of a given capacity needs.

Responsible for: the one layout that ``replay.ReplayBuffer`` allocates and that
``estimate_replay_bytes`` prices, so that a caller can refuse a replay that cannot fit before
anything is allocated or any process starts.

Must not: allocate the replay, or know what is stored in it beyond sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sampleforge.spaces import TensorSpec

# Bytes a compressed frame costs beyond its LZ4 payload: a Python bytes object's header (33
# bytes, rounded up by the allocator) plus its pointer in the ring's list.
BLOB_OVERHEAD_BYTES = 56
# Default for estimate_replay_bytes: the mean LZ4-compressed size of an 84x84 Atari frame
# (keyframes and differences together) measured 173 bytes on random-play Pong and 145 on
# Breakout (benchmarks/replay_bench.py); this is about 3x that, since busier screens compress
# worse; larger frames are priced in proportion to their bytes. A caller that knows its game
# should state its own figure.
DEFAULT_COMPRESSED_BYTES_PER_FRAME = 512
_DEFAULT_COMPRESSED_FRACTION = DEFAULT_COMPRESSED_BYTES_PER_FRAME / (84 * 84)


def frame_stacks_of(
    obs_specs: dict[str, TensorSpec], stacked_keys: Sequence[str] = ()
) -> dict[str, tuple[int, tuple[int, ...]]]:
    """The observation keys stored as compressed frames, each with (frames per observation,
    shape of one frame): every uint8 observation of 2 or more dims. A key in ``stacked_keys``
    (its first axis stacks the env's last frames, each observation shifting in one: what
    gymnasium's FrameStackObservation makes) is that many frames, stored once each; any other
    image (an RGB ``[3, H, W]`` too) is one frame of its whole shape."""
    for key in stacked_keys:
        spec = obs_specs.get(key)
        if spec is None or spec.dtype != torch.uint8 or len(spec.shape) < 3:
            raise ValueError(
                f"stacked key {key!r} must be a uint8 observation [stack, H, W, ...], got {spec}"
            )
    frames = {}
    for key, spec in obs_specs.items():
        if key in stacked_keys:
            frames[key] = (spec.shape[0], tuple(spec.shape[1:]))
        elif spec.dtype == torch.uint8 and len(spec.shape) >= 2:
            frames[key] = (1, tuple(spec.shape))
    return frames


@dataclass(frozen=True)
class ReplayLayout:
    """The sizes every allocation of a replay follows (shared by the replay and the estimate)."""

    num_streams: int
    slots_per_stream: int
    frames_per_stream: int
    keyframe_interval: int

    @staticmethod
    def of(
        capacity: int, num_streams: int, n_step: int, keyframe_interval: int, max_stack: int
    ) -> ReplayLayout:
        if num_streams < 1:
            raise ValueError(f"num_streams must be >= 1, got {num_streams}")
        slots = capacity // num_streams
        if capacity < least_replay_capacity(num_streams, n_step):
            raise ValueError(
                f"capacity {capacity} gives {slots} transitions per stream for {num_streams} "
                f"streams; need at least n_step + 2 = {n_step + 2} per stream"
            )
        # A frame per observation, plus the stack of the oldest one, the keyframe its delta
        # needs and 1/64 spare for episode starts whose stacks share no frames with the last.
        frames = slots + max_stack + keyframe_interval + slots // 64
        return ReplayLayout(num_streams, slots, frames, keyframe_interval)


def least_replay_capacity(num_streams: int, n_step: int) -> int:
    """The smallest capacity that gives every stream an n-step transition and the one after."""
    return num_streams * (n_step + 2)


def estimate_replay_bytes(
    *,
    capacity: int,
    num_streams: int,
    obs_specs: dict[str, TensorSpec],
    action_spec: TensorSpec,
    n_step: int = 1,
    stacked_keys: Sequence[str] = (),
    keyframe_interval: int = 16,
    compressed_bytes_per_frame: int | None = None,
) -> int:
    """The memory a ``ReplayBuffer`` with these settings needs when full, in bytes.

    Exact for everything stored raw (numpy rings, frame ids, the sum tree, the frame stores'
    indexes); for the compressed frames an upper bound as long as the frames held compress,
    on average, to at most ``compressed_bytes_per_frame`` (the caller's stated figure for its
    game; by default 512 bytes, or that per 84x84 frame's worth of bytes; each frame also costs
    ``BLOB_OVERHEAD_BYTES`` for its Python object, counted here). Every frame slot of every
    stream is counted as used. ``stacked_keys``: as ``frame_stacks_of``.
    """
    stacks = frame_stacks_of(obs_specs, stacked_keys)
    max_stack = max([stack for stack, _ in stacks.values()], default=1)
    layout = ReplayLayout.of(capacity, num_streams, n_step, keyframe_interval, max_stack)
    rows = layout.num_streams * layout.slots_per_stream
    # action; reward, done, valid, ready; the n-step return, discount and steps
    per_slot = _spec_bytes(action_spec) + 4 + 1 + 1 + 1 + 4 + 4 + 1
    total = rows * per_slot + sum_tree_bytes(rows)
    for key, spec in obs_specs.items():
        if key not in stacks:
            total += rows * _spec_bytes(spec)
            continue
        stack, frame_shape = stacks[key]
        frame_bytes = math.prod(frame_shape)
        compressed = compressed_bytes_per_frame
        if compressed is None:
            compressed = max(
                DEFAULT_COMPRESSED_BYTES_PER_FRAME,
                math.ceil(frame_bytes * _DEFAULT_COMPRESSED_FRACTION),
            )
        total += rows * stack * 8  # frame ids
        total += num_streams * (stack * frame_bytes + stack * 8)  # last stack and its ids
        frames = num_streams * layout.frames_per_stream
        total += frames * (8 + compressed + BLOB_OVERHEAD_BYTES)
        total += num_streams * frame_bytes  # each stream's last keyframe, kept raw
    return total


def _spec_bytes(spec: TensorSpec) -> int:
    return math.prod(spec.shape) * spec.numpy_dtype.itemsize


def sum_tree_bytes(capacity: int) -> int:
    return 2 * (1 << max(0, (capacity - 1).bit_length())) * 8
