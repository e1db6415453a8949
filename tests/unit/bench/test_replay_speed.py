"""The replay figures `sampleforge bench` reports for a replay algorithm (bench/replay_speed.py):
a replay filled by random play of the run's env, with the run's replay settings."""

import numpy as np
import pytest

from sampleforge.bench.replay_speed import fill_by_random_play, replay_speed
from sampleforge.config import make_config


def test_random_play_fills_every_stream_past_its_ring():
    replay = fill_by_random_play(
        "CartPole-v1", capacity=400, streams=4, n_step=3, gamma=0.99, prioritized=True
    )
    assert replay.num_sampleable >= 4 * (100 - 3 - 1)  # every ring full, less the n-step tail
    batch = replay.sample(64, np.random.default_rng(0))
    # Real CartPole observations, and a random policy fails within tens of steps: some of 64
    # windows of 3 steps end in a termination (discount 0).
    assert np.abs(batch.obs["obs"]).max() < 5.0 and (batch.discounts == 0).any()
    assert replay.compressed_bytes_per_frame() is None  # vector observations: no frames


@pytest.mark.timeout(120)
def test_atari_frames_of_a_full_1m_replay_take_under_500_bytes_per_transition():
    cfg = make_config(algorithm="rainbow", env="atari_pong", replay_size=1_000_000)  # n = 3, PER
    speed = replay_speed(cfg, transitions=2_000, streams=2, seconds=0.05, repeats=1)
    # Issue 37's target: at most 0.5 KB per 84x84 4-stack transition (one frame stored per
    # transition, LZ4-compressed against a keyframe: 7,056 raw bytes a frame).
    assert speed.bytes_per_transition_at_capacity < 500
    assert speed.compressed_bytes_per_frame is not None
    assert 10 < speed.compressed_bytes_per_frame < 7_056 / 10
    for rate in (
        speed.batches_per_cpu_sec,
        speed.sum_tree_samples_per_cpu_sec,
        speed.sum_tree_updates_per_cpu_sec,
    ):
        assert rate > 0
