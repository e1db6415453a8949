"""The transition replay against a direct reference: n-step returns and bootstrap observations
over streams with terminations, truncations and restarts; Atari observations bit for bit;
prioritized sampling and its weights; ring wrap-around; saving; the background sampler and its
samples-per-insert limit."""

from __future__ import annotations

import io
import threading
import time
import tracemalloc

import numpy as np
import pytest
import torch

from sampleforge.buffers.rate_limiter import SampleToInsertRatio
from sampleforge.buffers.replay import ReplayBuffer, estimate_replay_bytes
from sampleforge.buffers.replay_sampler import BackgroundSampler
from sampleforge.envs.atari import make_atari_env
from sampleforge.envs.registry import EnvContext
from sampleforge.spaces import TensorSpec

STACK, FRAME = 3, (6, 6)
OBS_SPECS = {
    "image": TensorSpec(shape=(STACK, *FRAME), dtype=torch.uint8),
    "vec": TensorSpec(shape=(2,), dtype=torch.float32),
}
ACTION_SPEC = TensorSpec(shape=(1,), dtype=torch.int64)


class SyntheticStreams:
    """R fake envs and the plain record of what each stream delivered, in the replay's row
    order. Every frame is random (so distinct); episodes end by termination or truncation
    (truncation: final obs, then a reset step); even streams pad a new episode's stack by
    repeating its first frame, odd ones with zero frames; ``restart`` abandons an episode."""

    def __init__(self, num_streams: int, seed: int, p_end: float = 0.08):
        self.rng = np.random.default_rng(seed)
        self.num_streams, self.p_end = num_streams, p_end
        self.stacks = [self._reset_stack(s) for s in range(num_streams)]
        self.vecs = [self._vec() for _ in range(num_streams)]
        self.pending_reset = [False] * num_streams
        self.obs: list[list[dict[str, np.ndarray]]] = [[] for _ in range(num_streams)]
        self.steps: list[list[tuple[int, float, int, int]]] = [[] for _ in range(num_streams)]

    def _frame(self) -> np.ndarray:
        return self.rng.integers(0, 256, FRAME, dtype=np.uint8)

    def _vec(self) -> np.ndarray:
        return self.rng.normal(size=2).astype(np.float32)

    def _reset_stack(self, s: int) -> np.ndarray:
        first = self._frame()
        pad = first if s % 2 == 0 else np.zeros(FRAME, np.uint8)
        return np.stack([pad] * (STACK - 1) + [first])

    def _current(self, s: int) -> dict[str, np.ndarray]:
        return {"image": self.stacks[s].copy(), "vec": self.vecs[s].copy()}

    def _begin_episode(self, s: int) -> None:
        self.stacks[s], self.vecs[s] = self._reset_stack(s), self._vec()

    def _advance(self, s: int) -> None:
        self.stacks[s] = np.concatenate([self.stacks[s][1:], self._frame()[None]])
        self.vecs[s] = self._vec()

    def _step(self, s: int) -> tuple[int, float, int, int]:
        """One env step of stream s: (action, reward, done, valid), moving its observation."""
        action = int(self.rng.integers(6))
        if self.pending_reset[s]:
            self.pending_reset[s] = False
            self._begin_episode(s)
            return action, 0.0, 1, 0
        reward = float(self.rng.normal())
        event = self.rng.random()
        if event < self.p_end / 2:  # termination: the next obs starts a new episode
            self._begin_episode(s)
            return action, reward, 1, 1
        self._advance(s)
        if event < self.p_end:  # truncation: the next obs is the final one, then a reset step
            self.pending_reset[s] = True
        return action, reward, 0, 1

    def trajectory(self, steps: int, restart: np.ndarray | None = None) -> dict:
        """The arguments of ReplayBuffer.add for all streams, recording them."""
        r = self.num_streams
        restart = np.zeros(r, bool) if restart is None else restart
        obs = {k: np.zeros((steps + 1, r, *s.shape), s.numpy_dtype) for k, s in OBS_SPECS.items()}
        actions = np.zeros((steps, r, 1), np.int64)
        rewards, dones, valids = (np.zeros((steps, r), np.float32) for _ in range(3))
        for s in range(r):
            if restart[s]:
                self._begin_episode(s)
                self.pending_reset[s] = False
                if self.steps[s]:  # the replay turns the old tail into a reset step
                    self.steps[s].append((0, 0.0, 1, 0))
            if not self.obs[s] or restart[s]:
                self.obs[s].append(self._current(s))
            for key in obs:
                obs[key][0, s] = self._current(s)[key]
            for t in range(steps):
                action, reward, done, valid = self._step(s)
                self.steps[s].append((action, reward, done, valid))
                self.obs[s].append(self._current(s))
                actions[t, s, 0], rewards[t, s], dones[t, s], valids[t, s] = (
                    action,
                    reward,
                    done,
                    valid,
                )
                for key in obs:
                    obs[key][t + 1, s] = self._current(s)[key]
        return {
            "streams": np.arange(r),
            "obs": obs,
            "actions": actions,
            "rewards": rewards,
            "dones": dones,
            "valids": valids,
            "starts": restart,
        }

    def expected(self, s: int, tid: int, n: int, gamma: float) -> tuple[float, float, int] | None:
        """Direct n-step return of transition tid: (return, discount, steps), None while its
        window reaches past what was delivered."""
        steps = self.steps[s]
        ret, discount, m = 0.0, 1.0, 0
        for k in range(n):
            j = tid + k
            if j >= len(steps):
                return None
            _, reward, done, valid = steps[j]
            if k > 0 and not valid:
                break  # a reset step: bootstrap from the final observation obs[j]
            ret += discount * reward
            discount *= gamma
            m += 1
            if done:
                discount = 0.0
                break
        return ret, discount, m

    def sampleable(self, n: int, gamma: float, slots: int) -> dict[int, tuple]:
        """Key -> (stream, tid, expected) of every transition the replay should offer."""
        found = {}
        for s in range(self.num_streams):
            oldest = max(0, len(self.steps[s]) + 1 - slots)
            for tid in range(oldest, len(self.steps[s])):
                expected = self.expected(s, tid, n, gamma)
                if self.steps[s][tid][3] and expected is not None:
                    found[tid * self.num_streams + s] = (s, tid, expected)
        return found


def _replay(num_streams: int, slots: int, n: int = 3, **kwargs) -> ReplayBuffer:
    return ReplayBuffer(
        capacity=num_streams * slots,
        num_streams=num_streams,
        obs_specs=OBS_SPECS,
        action_spec=ACTION_SPEC,
        n_step=n,
        gamma=0.9,
        keyframe_interval=4,
        **{"stacked_keys": ["image"], **kwargs},
    )


def _fill(replay: ReplayBuffer, streams: SyntheticStreams, adds: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i in range(adds):
        restart = (rng.random(streams.num_streams) < 0.15) if i else None
        replay.add(**streams.trajectory(int(rng.integers(1, 12)), restart))


def _check_batch(batch, streams: SyntheticStreams, n: int, gamma: float) -> None:
    """Every transition of the batch matches the direct record."""
    for b, key in enumerate(batch.indices.tolist()):
        s, tid = key % streams.num_streams, key // streams.num_streams
        ret, discount, m = streams.expected(s, tid, n, gamma)
        assert batch.returns[b] == pytest.approx(ret, abs=1e-5)
        assert batch.discounts[b] == pytest.approx(discount, abs=1e-6)
        assert batch.actions[b, 0] == streams.steps[s][tid][0]
        for name in OBS_SPECS:
            np.testing.assert_array_equal(batch.obs[name][b], streams.obs[s][tid][name])
            np.testing.assert_array_equal(batch.next_obs[name][b], streams.obs[s][tid + m][name])


def test_n_step_returns_and_next_obs_match_a_direct_loop_over_every_transition():
    streams, replay = SyntheticStreams(4, seed=0), _replay(4, slots=400)
    _fill(replay, streams, adds=25, seed=1)
    expected = streams.sampleable(3, 0.9, replay.slots_per_stream)
    assert replay.num_sampleable == len(expected) > 200
    keys = np.array(sorted(expected))
    _check_batch(replay.read(keys), streams, 3, 0.9)
    # Sampling offers exactly these transitions, whatever restarts and episode ends lie between.
    seen = set()
    for _ in range(40):
        batch = replay.sample(64, np.random.default_rng(len(seen)))
        seen.update(batch.indices.tolist())
        np.testing.assert_array_equal(batch.weights, 1.0)
    assert seen <= set(expected) and len(seen) > 0.8 * len(expected)
    # The windows that end at a restart or a truncation bootstrap from the final observation.
    ends = [b for b in expected.values() if 0 < b[2][1] and b[2][2] < 3]
    assert len(ends) > 10


def test_windows_complete_only_once_their_steps_arrive():
    streams, replay = SyntheticStreams(2, seed=3, p_end=0.0), _replay(2, slots=64, n=5)
    replay.add(**streams.trajectory(3))
    assert replay.num_sampleable == 0  # 3 steps: no 5-step window yet
    replay.add(**streams.trajectory(4))  # 7 steps: transitions 0..2 complete
    assert replay.num_sampleable == 2 * 3
    _check_batch(replay.read(np.array(sorted(streams.sampleable(5, 0.9, 64)))), streams, 5, 0.9)
    replay.add(**streams.trajectory(1, restart=np.array([True, False])))
    # Stream 0's restart ends its open windows (at its old tail); stream 1 gains one.
    assert replay.num_sampleable == 6 + 4 + 1
    _check_batch(replay.read(np.array(sorted(streams.sampleable(5, 0.9, 64)))), streams, 5, 0.9)


def test_ring_wrap_around_never_yields_overwritten_data():
    streams, replay = SyntheticStreams(3, seed=4), _replay(3, slots=24, prioritized=True)
    rng = np.random.default_rng(5)
    stale = None
    for i in range(60):
        replay.add(
            **streams.trajectory(int(rng.integers(1, 9)), (rng.random(3) < 0.1) if i else None)
        )
        if replay.num_sampleable:
            batch = replay.sample(16, rng)
            _check_batch(batch, streams, 3, 0.9)
            for key in batch.indices.tolist():  # every one still in its stream's ring
                s, tid = key % 3, key // 3
                assert tid >= len(streams.steps[s]) + 1 - replay.slots_per_stream
            if stale is None:
                stale = batch.indices
            replay.update_priorities(batch.indices, rng.random(16))
    assert sum(len(s) for s in streams.steps) > 10 * 3 * 24  # wrapped many times
    # An update for transitions long overwritten changes nothing.
    before = replay.state_dict()["priorities"]
    replay.update_priorities(stale, np.full(len(stale), 1e6))
    torch.testing.assert_close(replay.state_dict()["priorities"], before)


def _atari_episode_adds(steps: int, reset_every: int, chunk: int):
    """Pong under random play, reset (truncated) every `reset_every` steps, cut into
    trajectories of `chunk` steps: (list of add kwargs, list of every observation in order)."""
    env = make_atari_env("PongNoFrameskip-v4", EnvContext(seed=0))
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    record, rows = [obs], []
    pending_reset = False
    for t in range(steps):
        action = int(rng.integers(env.action_space.n))
        if pending_reset:
            obs, _ = env.reset()
            rows.append((action, 0.0, 1, 0))
            pending_reset = False
        else:
            obs, reward, terminated, truncated, _ = env.step(action)
            pending_reset = (t + 1) % reset_every == 0 and not terminated
            rows.append((action, float(reward), int(terminated), 1))
            if terminated:
                obs, _ = env.reset()
        record.append(obs)
    env.close()
    adds = []
    for start in range(0, steps, chunk):
        part = rows[start : start + chunk]
        adds.append(
            {
                "streams": np.array([0]),
                "obs": {"obs": np.stack(record[start : start + len(part) + 1])[:, None]},
                "actions": np.array([[[a]] for a, _, _, _ in part], np.int64),
                "rewards": np.array([[r] for _, r, _, _ in part], np.float32),
                "dones": np.array([[d] for _, _, d, _ in part], np.float32),
                "valids": np.array([[v] for _, _, _, v in part], np.float32),
            }
        )
    return adds, record


def test_atari_observations_round_trip_bit_for_bit():
    adds, record = _atari_episode_adds(steps=360, reset_every=110, chunk=32)
    replay = ReplayBuffer(
        capacity=1024,
        num_streams=1,
        obs_specs={"obs": TensorSpec(shape=(4, 84, 84), dtype=torch.uint8)},
        action_spec=ACTION_SPEC,
        n_step=3,
        gamma=0.99,
        stacked_keys=["obs"],  # what make_atari_env's FrameStackObservation is found to be
    )
    assert replay.frame_keys == ["obs"]
    for kwargs in adds:
        replay.add(**kwargs)
    rows = [
        (v, d) for kwargs in adds for v, d in zip(kwargs["valids"][:, 0], kwargs["dones"][:, 0])
    ]
    keys = np.array([t for t in range(len(rows) - 2) if rows[t][0]])  # the last two: incomplete
    batch = replay.read(keys)
    covered = set()
    for b, tid in enumerate(keys.tolist()):
        m = 1  # the steps to the bootstrap, by a direct loop
        while m < 3 and not rows[tid + m - 1][1] and rows[tid + m][0]:
            m += 1
        np.testing.assert_array_equal(batch.obs["obs"][b], record[tid])
        np.testing.assert_array_equal(batch.next_obs["obs"][b], record[tid + m])
        covered.update((tid, tid + m))
    # Every observation came back, the truncations' final ones as bootstrap observations.
    assert covered == set(range(len(record)))
    assert replay.num_sampleable == len(keys)
    # One frame per observation: the shift found at every step, each reset's repeated first
    # frame stored once.
    assert replay._stores["obs"].frames_stored == len(record)


def test_single_frame_images_are_stored_as_frames_and_round_trip():
    specs = {"screen": TensorSpec(shape=(10, 12), dtype=torch.uint8)}
    replay = ReplayBuffer(
        capacity=64, num_streams=1, obs_specs=specs, action_spec=ACTION_SPEC, n_step=1, gamma=0.5
    )
    assert replay.frame_keys == ["screen"]
    frames = np.random.default_rng(21).integers(0, 256, (21, 1, 10, 12), dtype=np.uint8)
    ones = np.ones((20, 1), np.float32)
    replay.add(
        np.array([0]), {"screen": frames}, np.zeros((20, 1, 1), np.int64), ones, 0 * ones, ones
    )
    batch = replay.read(np.arange(20))
    np.testing.assert_array_equal(batch.obs["screen"], frames[:20, 0])
    np.testing.assert_array_equal(batch.next_obs["screen"], frames[1:, 0])
    assert replay._stores["screen"].frames_stored == 21


@pytest.mark.parametrize("shape", [(3, 8, 8), (7, 7, 3)], ids=["rgb_chw", "minigrid_hwc"])
def test_an_image_that_is_no_frame_stack_is_one_frame_and_the_whole_replay_stays_sampleable(
    shape,
):
    """Channels are not frames: taken as a stack of 3 (or 7) frames, every transition stored
    that many, the frame ring (about one frame per transition) evicted the frames of live
    transitions, and sampling silently lost two thirds of the replay."""
    specs = {"obs": TensorSpec(shape=shape, dtype=torch.uint8)}
    replay = ReplayBuffer(
        capacity=640, num_streams=1, obs_specs=specs, action_spec=ACTION_SPEC, n_step=3, gamma=0.9
    )
    assert replay.frame_keys == ["obs"] and replay.stacked_keys == []
    rng = np.random.default_rng(5)
    record = []
    for chunk in range(100):  # 2,000 steps: the rings wrap three times
        obs = rng.integers(0, 256, (21, 1, *shape), dtype=np.uint8)
        if chunk:
            obs[0] = record[-1][-1]  # each chunk starts at the last one's tail
        record.append(obs)
        ones = np.ones((20, 1), np.float32)
        replay.add(
            np.array([0]), {"obs": obs}, np.zeros((20, 1, 1), np.int64), ones, 0 * ones, ones
        )
    assert replay.num_sampleable >= 640 - 20 - 3
    for _ in range(50):
        replay.sample(32, rng)
    assert replay.num_sampleable >= 640 - 20 - 3  # nothing dropped as undecodable
    steps = np.concatenate([obs[:-1, 0] for obs in record] + [record[-1][-1:, 0]])
    first = 2000 + 1 - 640  # the oldest transition still in the ring (its tail holds obs 2000)
    batch = replay.read(np.arange(first, first + 8))
    np.testing.assert_array_equal(batch.obs["obs"], steps[first : first + 8])
    np.testing.assert_array_equal(batch.next_obs["obs"], steps[first + 3 : first + 11])


def _per_replay(transitions: int, alpha: float) -> tuple[ReplayBuffer, SyntheticStreams]:
    streams = SyntheticStreams(1, seed=6, p_end=0.0)
    replay = _replay(1, slots=transitions + 8, n=1, prioritized=True, alpha=alpha, beta=0.5)
    replay.add(**streams.trajectory(transitions))
    return replay, streams


def test_prioritized_sampling_follows_priorities_and_weights_follow_the_formula():
    replay, _ = _per_replay(40, alpha=0.7)
    keys = np.arange(40)
    td_errors = np.linspace(0.0, 4.0, 40)
    replay.update_priorities(keys, td_errors)
    p = (np.abs(td_errors) + replay.priority_eps) ** 0.7
    probabilities = p / p.sum()
    rng = np.random.default_rng(7)
    counts = np.zeros(40)
    for _ in range(300):
        batch = replay.sample(100, rng)
        np.add.at(counts, batch.indices, 1)
        w = (40 * probabilities[batch.indices]) ** -0.5
        np.testing.assert_allclose(batch.weights, w / w.max(), rtol=1e-5)
    frequencies = counts / counts.sum()
    np.testing.assert_allclose(frequencies, probabilities, atol=0.004)
    assert counts[0] < 20  # priority eps**alpha: almost never drawn


def test_new_transitions_get_the_highest_priority_so_far():
    replay, streams = _per_replay(20, alpha=1.0)
    replay.update_priorities(np.arange(20), np.full(20, 0.5))
    replay.update_priorities(np.array([3]), np.array([9.0]))  # max so far: 9 + eps
    replay.update_priorities(np.array([3]), np.array([0.5]))
    replay.add(**streams.trajectory(1))  # transition 20
    counts = np.bincount(replay.sample(100_000, np.random.default_rng(8)).indices, minlength=21)
    expected = np.full(21, 0.5)
    expected[20] = 9.0
    np.testing.assert_allclose(counts / counts.sum(), expected / expected.sum(), atol=0.004)


def test_state_dict_round_trips_through_torch_save_weights_only():
    streams = SyntheticStreams(3, seed=9)
    replay = _replay(3, slots=30, prioritized=True)
    _fill(replay, streams, adds=12, seed=10)
    replay.update_priorities(replay.sample(32, np.random.default_rng(0)).indices, np.arange(32))
    buffer = io.BytesIO()
    torch.save(replay.state_dict(), buffer)
    buffer.seek(0)
    restored = _replay(3, slots=30, prioritized=True)
    restored.load_state_dict(torch.load(buffer, weights_only=True))

    def same(a, b):
        for field in ("actions", "returns", "discounts", "indices", "weights"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        for key in OBS_SPECS:
            np.testing.assert_array_equal(a.obs[key], b.obs[key])
            np.testing.assert_array_equal(a.next_obs[key], b.next_obs[key])

    same(replay.sample(64, np.random.default_rng(1)), restored.sample(64, np.random.default_rng(1)))
    # And both continue alike: tails, last stacks and frame rings came back too.
    more = streams.trajectory(9)
    replay.add(**more)
    restored.add(**more)
    same(replay.sample(64, np.random.default_rng(2)), restored.sample(64, np.random.default_rng(2)))
    with pytest.raises(ValueError, match="settings"):
        _replay(3, slots=31).load_state_dict(replay.state_dict())


def test_a_replay_saved_before_stacked_keys_were_recorded_loads_as_the_stack_it_was():
    streams = SyntheticStreams(2, seed=9)
    replay = _replay(2, slots=30)
    _fill(replay, streams, adds=6, seed=10)
    old = replay.state_dict()
    del old["settings"]["stacked_keys"]  # what an earlier version saved
    restored = _replay(2, slots=30)
    restored.load_state_dict(old)
    batch = restored.read(replay.sample(16, np.random.default_rng(3)).indices)
    np.testing.assert_array_equal(batch.obs["image"], replay.read(batch.indices).obs["image"])
    # The same save is no replay of whole images: that layout stores other frames.
    with pytest.raises(ValueError, match="settings"):
        _replay(2, slots=30, stacked_keys=[]).load_state_dict(old)


def test_a_trajectory_that_does_not_continue_its_stream_is_refused():
    streams, replay = SyntheticStreams(2, seed=11), _replay(2, slots=40)
    replay.add(**streams.trajectory(4))
    other = SyntheticStreams(2, seed=12).trajectory(4)
    with pytest.raises(ValueError, match="stream 0: obs\\[0\\]"):
        replay.add(**other)
    with pytest.raises(ValueError, match="need at least n_step \\+ 2"):
        _replay(2, slots=4, n=3)


def _warm_up() -> None:
    """Add to and sample a replay once, so that what the first use allocates for good (lazy
    imports, caches) is not counted as the next replay's memory."""
    streams, replay = SyntheticStreams(1, seed=20), _replay(1, slots=16)
    replay.add(**streams.trajectory(8))
    replay.sample(4, np.random.default_rng(0))


def _traced_bytes(build) -> tuple[object, int]:
    """(what build() returns, the bytes it allocated and still holds)."""
    _warm_up()
    tracemalloc.start()
    try:
        built = build()
        return built, tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def test_the_memory_estimate_is_what_numpy_allocates_for_raw_keys():
    specs = {"vec": OBS_SPECS["vec"], "small": TensorSpec(shape=(3,), dtype=torch.uint8)}
    kwargs = dict(capacity=4000, num_streams=4, obs_specs=specs, action_spec=ACTION_SPEC)
    replay, allocated = _traced_bytes(lambda: ReplayBuffer(**kwargs, n_step=3, gamma=0.9))
    estimate = estimate_replay_bytes(**kwargs, n_step=3)
    assert replay.nbytes() == estimate
    assert estimate <= allocated <= estimate + 10_000  # the objects around the arrays


def test_the_memory_estimate_bounds_a_full_replay_of_frames():
    streams = SyntheticStreams(2, seed=13)
    trajectories = [streams.trajectory(8) for _ in range(140)]  # 1,120 steps > 1,024 slots
    kwargs = dict(
        capacity=2048,
        num_streams=2,
        obs_specs=OBS_SPECS,
        action_spec=ACTION_SPEC,
        stacked_keys=["image"],
    )

    def build() -> ReplayBuffer:
        replay = ReplayBuffer(**kwargs, n_step=3, gamma=0.9, keyframe_interval=4)
        for trajectory in trajectories:
            replay.add(**trajectory)
        return replay

    replay, allocated = _traced_bytes(build)
    store = replay._stores["image"]
    assert store.frames_stored == store.num_streams * store.capacity  # every frame slot used
    # Random 6x6 frames do not compress: 36 bytes plus LZ4's framing.
    largest = max(len(blob) for ring in store._blobs for blob in ring)
    estimate = estimate_replay_bytes(**kwargs, n_step=3, keyframe_interval=4)
    bound = estimate_replay_bytes(
        **kwargs, n_step=3, keyframe_interval=4, compressed_bytes_per_frame=largest
    )
    assert replay.nbytes() <= bound < estimate
    assert bound - 100_000 < allocated <= bound + 10_000  # frames: ~200 KB of it


def _run_producer_consumer(insert_delay: float, get_delay: float, seconds: float):
    """A producer adding 4 x 8 transitions per call and a learner taking batches of 32, each
    pausing as told, for `seconds`: -> (limiter, batches consumed)."""
    streams = SyntheticStreams(4, seed=15)
    replay = _replay(4, slots=256, n=2)
    limiter = SampleToInsertRatio(2.0, min_size_to_sample=64, error_buffer=64.0)
    sampler = BackgroundSampler(replay, limiter, batch_size=32, seed=0, queue_size=2)
    stop = threading.Event()
    trajectories = [streams.trajectory(8) for _ in range(300)]

    def produce():
        for trajectory in trajectories:
            while not stop.is_set() and not sampler.add(**trajectory, timeout=0.05):
                pass
            if stop.is_set():
                return
            time.sleep(insert_delay)

    producer = threading.Thread(target=produce)
    producer.start()
    consumed, deadline = 0, time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                batch = sampler.get(timeout=0.1)
            except TimeoutError:
                continue
            consumed += 1
            sampler.update_priorities(batch.indices, np.ones(32))
            time.sleep(get_delay)
    finally:
        stop.set()
        producer.join(5)
        sampler.close()
    assert not producer.is_alive() and not sampler._thread.is_alive()
    return limiter, consumed


@pytest.mark.parametrize(
    "insert_delay, get_delay", [(0.0, 0.01), (0.01, 0.0)], ids=["slow learner", "slow producer"]
)
def test_the_background_sampler_holds_the_samples_per_insert_ratio(insert_delay, get_delay):
    limiter, consumed = _run_producer_consumer(insert_delay, get_delay, seconds=1.5)
    assert consumed > 20
    assert limiter.observed_samples_per_insert == pytest.approx(2.0, rel=0.15)
    # What the learner took lags what was sampled by the queue (2) at most, plus one in hand.
    assert 0 <= limiter.samples / 32 - consumed <= 3


def test_the_limiter_counts_only_the_transitions_a_sample_may_draw():
    """Reset steps (and, in multi-policy runs, other policies' steps) are stored but never
    sampled: counted as inserts they would raise the ratio per sampleable transition."""
    trajectory = SyntheticStreams(2, seed=3, p_end=0.6).trajectory(16)
    valid = int((trajectory["valids"] > 0).sum())
    assert valid < 32  # truncations left reset steps
    limiter = SampleToInsertRatio(1.0, min_size_to_sample=1, error_buffer=64.0)
    sampler = BackgroundSampler(_replay(2, slots=40), limiter, batch_size=4, seed=0)
    try:
        assert sampler.insert(**trajectory) == valid
        assert limiter.inserts == valid
    finally:
        sampler.close(timeout=2)


def test_a_limiter_too_narrow_for_a_whole_batch_is_refused():
    # error_buffer 1 at ratio 1 allows 2 samples once inserts are held back: batches of 8
    # could never be drawn, and the inserting side would wait for ever.
    limiter = SampleToInsertRatio(1.0, min_size_to_sample=10, error_buffer=1.0)
    with pytest.raises(
        ValueError, match=r"at least \(batch_size \+ samples_per_insert\) / 2 = 4.5"
    ):
        BackgroundSampler(_replay(1, slots=32), limiter, batch_size=8, seed=0)
    wide = SampleToInsertRatio(1.0, min_size_to_sample=10, error_buffer=4.5)
    BackgroundSampler(_replay(1, slots=32), wide, batch_size=8, seed=0).close(timeout=2)


def test_the_background_sampler_closes_while_waiting_and_reports_its_failure():
    replay = _replay(1, slots=32)
    limiter = SampleToInsertRatio(1.0, min_size_to_sample=4, error_buffer=8.0)
    sampler = BackgroundSampler(replay, limiter, batch_size=4, seed=0)
    with pytest.raises(TimeoutError):
        sampler.get(timeout=0.05)  # nothing inserted: the thread waits
    sampler.close(timeout=2)
    with pytest.raises(ValueError, match="finite"):
        sampler.update_priorities(np.array([0]), np.array([np.nan]))


def _threadless_run(sampler: BackgroundSampler, streams: SyntheticStreams, rounds: int) -> list:
    """Insert, take what is ready and write priorities back, `rounds` times."""
    indices = []
    for _ in range(rounds):
        sampler.insert(**streams.trajectory(4))
        for batch in sampler.take_ready(2):
            indices.append(batch.indices.tolist())
            sampler.update_priorities(batch.indices, np.abs(batch.returns) + 0.1)
    return indices


def test_without_a_thread_the_draws_follow_the_calls_alone_and_a_saved_state_continues_them():
    """Serial mode: a seeded run repeats itself and an exact resume continues it (with the
    thread, what is drawn when depends on its timing)."""

    def make() -> BackgroundSampler:
        limiter = SampleToInsertRatio(4.0, min_size_to_sample=16, error_buffer=64.0)
        replay = _replay(2, slots=64, prioritized=True, alpha=0.6)
        return BackgroundSampler(replay, limiter, batch_size=8, seed=3, threaded=False)

    threads_before = threading.active_count()
    first, second = make(), make()
    assert threading.active_count() == threads_before
    assert _threadless_run(first, SyntheticStreams(2, seed=1), 12) == _threadless_run(
        second, SyntheticStreams(2, seed=1), 12
    )
    streams = SyntheticStreams(2, seed=1)
    straight, halves = make(), make()
    drawn = _threadless_run(straight, streams, 12)
    assert len(drawn) >= 12
    again = SyntheticStreams(2, seed=1)
    head = _threadless_run(halves, again, 6)
    resumed = make()
    resumed.load_state_dict(halves.replay.state_dict(), halves.limiter.state_dict())
    resumed.load_extra_state(halves.state_dict())
    assert head + _threadless_run(resumed, again, 6) == drawn
    with pytest.raises(TimeoutError):  # nothing else would ever make a batch: no wait
        make().get(timeout=10.0)
