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

from typing import Any

import lz4.block
import numpy as np

# Frame ids of one stream stay below this (2^40 frames: 35 years at 1,000 frames/s), so a
# (stream, id) pair packs into one int64.
_ID_SPAN = 1 << 40


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

    def get(self, streams: np.ndarray, frame_ids: np.ndarray, *, check: bool = True) -> np.ndarray:
        """Decode frames: ``streams`` and ``frame_ids`` of any matching shape S (every frame
        decodable; ``check=False`` skips verifying that, for a caller that just has) -> uint8
        array of shape S + frame_shape."""
        streams, frame_ids = np.broadcast_arrays(np.asarray(streams), np.asarray(frame_ids))
        if check and not np.all(self.decodable(streams, frame_ids)):
            raise KeyError("some requested frames are no longer (or not yet) in the store")
        # Each stored payload is decoded once per call, however many requested frames need it
        # (a frame asked twice, a keyframe shared by deltas or asked itself): a replay batch
        # asks for overlapping frame stacks. A (stream, id) pair packs into one int64, so one
        # sort finds them all, and a frame's keyframe sorts just before its deltas.
        flat_streams, flat_ids = streams.ravel().astype(np.int64), frame_ids.ravel()
        keyframe_ids = self._keyframe_of[flat_streams, flat_ids % self.capacity]
        base = _ID_SPAN * flat_streams
        wanted = base + flat_ids
        needed = np.unique(np.concatenate([wanted, base + keyframe_ids]))
        needed_streams, needed_ids = np.divmod(needed, _ID_SPAN)
        payloads = self._decode_all(needed_streams, needed_ids)
        deltas = self._keyframe_of[needed_streams, needed_ids % self.capacity] != needed_ids
        # The deltas of a keyframe are the rows right after it, up to the next keyframe: add
        # it to them as one slice (a masked gather and scatter of the rows costs 2-3x more).
        keyframe_rows = np.flatnonzero(~deltas).tolist()
        for start, end in zip(keyframe_rows, keyframe_rows[1:] + [len(needed)]):
            if end > start + 1:
                payloads[start + 1 : end] += payloads[start]
        frames = payloads[np.searchsorted(needed, wanted)]
        return frames.reshape(streams.shape + self.frame_shape)

    def _decode_all(self, streams: np.ndarray, frame_ids: np.ndarray) -> np.ndarray:
        """The stored payloads (keyframes or differences) of frames -> writable [K, bytes]."""
        blobs, capacity, size = self._blobs, self.capacity, self._frame_bytes
        decompress = lz4.block.decompress
        # A bytearray join is writable: numpy takes it without another copy.
        raw = bytearray().join(
            [
                decompress(blobs[s][slot], uncompressed_size=size)
                for s, slot in zip(streams.tolist(), (frame_ids % capacity).tolist())
            ]
        )
        return np.frombuffer(raw, dtype=np.uint8).reshape(len(streams), size)

    def state_dict(self) -> dict[str, Any]:
        """The whole store as numpy arrays and ints: the blobs concatenated in (stream, slot)
        order with their lengths, so a million frames save as two arrays, not a million
        objects."""
        blobs = [blob for ring in self._blobs for blob in ring]
        has_keyframe = np.array([k is not None for k in self._last_keyframe])
        last_keyframes = np.zeros((self.num_streams, *self.frame_shape), np.uint8)
        for s, keyframe in enumerate(self._last_keyframe):
            if keyframe is not None:
                last_keyframes[s] = keyframe
        return {
            "blob_bytes": np.frombuffer(b"".join(blobs), dtype=np.uint8).copy(),
            "blob_lengths": np.array([len(b) for b in blobs], dtype=np.int64),
            "keyframe_of": self._keyframe_of.copy(),
            "next_id": self._next_id.copy(),
            "last_keyframes": last_keyframes,
            "has_last_keyframe": has_keyframe,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict`` of a store of the same streams, capacity and frame shape."""
        lengths = np.asarray(state["blob_lengths"])
        if lengths.shape != (self.num_streams * self.capacity,):
            raise ValueError(
                f"saved frame store holds {lengths.size} slots; this one has "
                f"{self.num_streams} x {self.capacity}"
            )
        data = np.asarray(state["blob_bytes"]).tobytes()
        ends = np.cumsum(lengths).tolist()
        starts = [0, *ends[:-1]]
        blobs = [data[a:b] for a, b in zip(starts, ends)]
        c = self.capacity
        self._blobs = [blobs[s * c : (s + 1) * c] for s in range(self.num_streams)]
        self._compressed_bytes = int(lengths.sum())
        self._keyframe_of = np.array(state["keyframe_of"], dtype=np.int64)
        self._next_id = np.array(state["next_id"], dtype=np.int64)
        self._last_keyframe = [
            np.array(keyframe) if has else None
            for keyframe, has in zip(state["last_keyframes"], state["has_last_keyframe"])
        ]
