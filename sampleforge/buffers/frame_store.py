"""Image frames of many env streams, each frame stored once and compressed losslessly.

Responsible for: appending the frames of each stream (one env column of the sampler) in time
order into a ring per stream, compressing them, and decoding any set of live frames back bit for
bit; saying which frames are still decodable.

Must not: know about transitions, rewards or frame stacks (the replay above it maps a stacked
observation to the ids of its frames), or lock: one thread owns a store.

How a frame is stored: every ``keyframe_interval``-th frame of a stream is a keyframe, compressed
alone; the frames after it are stored as their byte-wise difference from that keyframe (modulo
256), which is mostly zeros for Atari-like games (the background does not move), then
compressed. Differences against the keyframe rather than the previous frame keep every frame
two decodes away (its keyframe, itself) however deep into the interval it is, which bounds the
cost of a random read: the replay samples without locality, so a chain would be decoded anew for
every sample. The codec is LZ4's block format, chosen for decoding speed (several GB/s per core):
decoding is on the sampling path, compression only on the insert path.

Frame ids are per stream and grow for ever: frame ``i`` of stream ``s`` lives in slot
``i % capacity`` of that stream's ring until ``capacity`` newer frames replace it. A delta
frame is decodable only while its keyframe is too, so the oldest ``keyframe_interval - 1`` frames
of a stream may be lost a little before their own slots are reused.
"""

from __future__ import annotations

import lz4.block
import numpy as np


class CompressedFrameStore:
    """Rings of compressed frames, one per stream, each holding ``capacity`` frames."""

    def __init__(
        self,
        *,
        num_streams: int,
        capacity: int,
        frame_shape: tuple[int, ...],
        keyframe_interval: int = 16,
    ):
        if capacity < keyframe_interval:
            raise ValueError(f"capacity {capacity} < keyframe_interval {keyframe_interval}")
        self.num_streams = num_streams
        self.capacity = capacity
        self.frame_shape = tuple(frame_shape)
        self.keyframe_interval = keyframe_interval
        self._frame_bytes = int(np.prod(frame_shape))
        self._blobs: list[list[bytes]] = [[b""] * capacity for _ in range(num_streams)]
        self._keyframe_of = np.full((num_streams, capacity), -1, dtype=np.int64)
        self._next_id = np.zeros(num_streams, dtype=np.int64)
        self._compressed_bytes = 0
        self._last_keyframe: list[np.ndarray | None] = [None] * num_streams

    @property
    def frames_stored(self) -> int:
        """How many frames the rings hold now (all streams)."""
        return int(np.minimum(self._next_id, self.capacity).sum())

    @property
    def compressed_bytes(self) -> int:
        """The bytes of compressed frames held now."""
        return self._compressed_bytes

    def next_id(self, stream: int) -> int:
        """The id the next frame appended to ``stream`` will get."""
        return int(self._next_id[stream])

    def append(self, stream: int, frame: np.ndarray) -> int:
        """Store ``frame`` (uint8, ``frame_shape``) as the newest of ``stream``; returns its id."""
        if frame.shape != self.frame_shape or frame.dtype != np.uint8:
            raise ValueError(
                f"frame must be uint8 {self.frame_shape}, got {frame.dtype} {frame.shape}"
            )
        frame_id = int(self._next_id[stream])
        slot = frame_id % self.capacity
        keyframe = self._last_keyframe[stream]
        if frame_id % self.keyframe_interval == 0 or keyframe is None:
            payload, keyframe_id = frame, frame_id
            self._last_keyframe[stream] = frame.copy()
        else:
            payload = frame - keyframe  # uint8 arithmetic wraps: exact modulo 256
            keyframe_id = frame_id - frame_id % self.keyframe_interval
        blob = lz4.block.compress(np.ascontiguousarray(payload), store_size=False)
        ring = self._blobs[stream]
        self._compressed_bytes += len(blob) - len(ring[slot])
        ring[slot] = blob
        self._keyframe_of[stream, slot] = keyframe_id
        self._next_id[stream] = frame_id + 1
        return frame_id

    def decodable(self, streams: np.ndarray, frame_ids: np.ndarray) -> np.ndarray:
        """Whether each frame (``streams[k]``, ``frame_ids[k]``) can still be decoded: it and
        its keyframe are both in the ring. Any shapes that broadcast -> bool array."""
        streams, frame_ids = np.broadcast_arrays(np.asarray(streams), np.asarray(frame_ids))
        oldest = self._next_id[streams] - self.capacity
        in_ring = (frame_ids >= np.maximum(oldest, 0)) & (frame_ids < self._next_id[streams])
        slots = np.where(in_ring, frame_ids, 0) % self.capacity
        return in_ring & (self._keyframe_of[streams, slots] >= oldest)

    def get(self, streams: np.ndarray, frame_ids: np.ndarray) -> np.ndarray:
        """Decode frames: ``streams`` and ``frame_ids`` of any matching shape S (every frame
        decodable) -> uint8 array of shape S + frame_shape."""
        streams, frame_ids = np.broadcast_arrays(np.asarray(streams), np.asarray(frame_ids))
        if not np.all(self.decodable(streams, frame_ids)):
            raise KeyError("some requested frames are no longer (or not yet) in the store")
        flat_streams, flat_ids = streams.ravel(), frame_ids.ravel()
        keyframe_ids = self._keyframe_of[flat_streams, flat_ids % self.capacity]
        payloads = self._decode_all(flat_streams, flat_ids)
        deltas = keyframe_ids != flat_ids
        if deltas.any():
            # Each keyframe is decoded once per call, however many of its frames were asked.
            pairs = np.stack([flat_streams[deltas], keyframe_ids[deltas]], axis=1)
            needed, which = np.unique(pairs, axis=0, return_inverse=True)
            keyframes = self._decode_all(needed[:, 0], needed[:, 1])
            payloads[deltas] += keyframes[which.ravel()]
        return payloads.reshape(streams.shape + self.frame_shape)

    def _decode_all(self, streams: np.ndarray, frame_ids: np.ndarray) -> np.ndarray:
        """The stored payloads (keyframes or differences) of frames -> writable [K, bytes]."""
        blobs, capacity, size = self._blobs, self.capacity, self._frame_bytes
        raw = b"".join(
            lz4.block.decompress(blobs[s][i % capacity], uncompressed_size=size)
            for s, i in zip(streams.tolist(), frame_ids.tolist())
        )
        return np.frombuffer(raw, dtype=np.uint8).reshape(len(streams), size).copy()
