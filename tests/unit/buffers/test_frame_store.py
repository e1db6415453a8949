"""The compressed frame store gives back every frame bit for bit, across keyframes, streams and
ring wrap-around, and says which frames it no longer holds."""

from __future__ import annotations

import numpy as np
import pytest

from sampleforge.buffers.frame_store import CompressedFrameStore
from sampleforge.envs.atari import make_atari_env
from sampleforge.envs.registry import EnvContext


def _moving_square_frames(count: int, seed: int) -> list[np.ndarray]:
    """A static noisy background with a square that moves: like a game screen, mostly still."""
    rng = np.random.default_rng(seed)
    background = rng.integers(0, 256, size=(84, 84), dtype=np.uint8)
    frames = []
    for t in range(count):
        frame = background.copy()
        x, y = (3 * t) % 76, (5 * t) % 76
        frame[y : y + 8, x : x + 8] = 255 - frame[y : y + 8, x : x + 8]
        frames.append(frame)
    return frames


def test_every_frame_round_trips_bit_for_bit_across_streams():
    store = CompressedFrameStore(
        num_streams=2, capacity=64, frame_shape=(84, 84), keyframe_interval=8
    )
    streams = [_moving_square_frames(50, seed=0), _moving_square_frames(50, seed=1)]
    for a, b in zip(*streams):
        store.append(0, a)
        store.append(1, b)
    ids = np.arange(50)
    for s in (0, 1):
        got = store.get(np.full(50, s), ids)
        np.testing.assert_array_equal(got, np.stack(streams[s]))
    # Any order and shape, several frames of one keyframe interval in one call.
    got = store.get(np.array([[1, 0], [0, 1]]), np.array([[17, 3], [49, 16]]))
    expected = np.stack([[streams[1][17], streams[0][3]], [streams[0][49], streams[1][16]]])
    np.testing.assert_array_equal(got, expected)


def test_mostly_still_frames_compress_far_below_their_raw_size():
    store = CompressedFrameStore(
        num_streams=1, capacity=256, frame_shape=(84, 84), keyframe_interval=16
    )
    for frame in _moving_square_frames(256, seed=2):
        store.append(0, frame)
    per_frame = store.compressed_bytes / store.frames_stored
    # The noisy background is incompressible in a keyframe (7 KB); each difference is mostly
    # zeros. Storing every frame raw would take 7,056 bytes per frame.
    assert per_frame < 7056 / 8


def test_the_ring_forgets_the_oldest_frames_and_their_dependents():
    store = CompressedFrameStore(
        num_streams=1, capacity=32, frame_shape=(84, 84), keyframe_interval=8
    )
    frames = _moving_square_frames(45, seed=3)
    for frame in frames:
        store.append(0, frame)
    decodable = store.decodable(np.zeros(45, dtype=np.int64), np.arange(45))
    # Slots 13..44 are held, but 13..15 depend on keyframe 8, which slot reuse removed.
    assert not decodable[:16].any()
    assert decodable[16:].all()
    np.testing.assert_array_equal(
        store.get(np.zeros(29, dtype=np.int64), np.arange(16, 45)), np.stack(frames[16:])
    )
    assert not store.decodable(np.array([0]), np.array([45]))[0]  # not written yet
    with pytest.raises(KeyError, match="no longer"):
        store.get(np.array([0]), np.array([10]))


def test_an_atari_episode_round_trips_bit_for_bit():
    env = make_atari_env("PongNoFrameskip-v4", EnvContext(seed=0))
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    frames = [obs[-1].copy()]
    done = False
    while not done and len(frames) < 600:
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        frames.append(obs[-1].copy())
        done = terminated or truncated
    env.close()
    store = CompressedFrameStore(
        num_streams=1, capacity=2048, frame_shape=(84, 84), keyframe_interval=16
    )
    for frame in frames:
        store.append(0, frame)
    got = store.get(np.zeros(len(frames), dtype=np.int64), np.arange(len(frames)))
    np.testing.assert_array_equal(got, np.stack(frames))
    assert store.compressed_bytes / len(frames) < 500  # bytes per frame on Pong's screen


def test_bad_frames_are_refused():
    store = CompressedFrameStore(
        num_streams=1, capacity=16, frame_shape=(4, 4), keyframe_interval=4
    )
    with pytest.raises(ValueError, match="uint8"):
        store.append(0, np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(ValueError, match=r"\(4, 4\)"):
        store.append(0, np.zeros((4, 5), dtype=np.uint8))
