"""Recording an agent's episodes as an MP4 video.

Responsibility: stream rendered RGB frames into an H.264 MP4 with imageio's ffmpeg plugin
(``pip install 'sampleforge[eval]'`` brings imageio and imageio-ffmpeg, which ships its own
ffmpeg binary). Frames go to the encoder as they arrive, so long episodes do not pile up in
memory.

Must not: step environments or choose actions (``EpisodeRunner`` does, and hands frames over).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# H.264 encoders work on 16x16 macroblocks; frames are padded to a multiple of it.
_MACRO_BLOCK = 16


class VideoRecorder:
    """Frames in, one MP4 out; use as a context manager (or call `close`).

    Frames must all have the same shape, [height, width, 3] uint8.
    """

    def __init__(self, path: Path | str, *, fps: float = 30.0) -> None:
        if not fps > 0:
            raise ValueError(f"fps: {fps} must be > 0")
        self.path = Path(path)
        self.fps = float(fps)
        self.frames_written = 0
        self._writer: Any = None

    def add(self, frame: np.ndarray | None) -> None:
        """Encode one rendered frame (None, from an env that cannot render, is an error)."""
        if frame is None:
            raise ValueError(
                "the env rendered no frame: it must be built with "
                "render_mode='rgb_array' (its factory must pass "
                "context.render_mode on)"
            )
        array = np.asarray(frame)
        if array.ndim != 3 or array.shape[2] != 3:
            raise ValueError(f"frame has shape {array.shape}; expected (height, width, 3) RGB")
        if self._writer is None:
            self._writer = self._open()
        self._writer.append_data(_pad_to_macro_block(array.astype(np.uint8, copy=False)))
        self.frames_written += 1

    def close(self) -> None:
        """Finish the file. Safe to call twice."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "VideoRecorder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> Any:
        try:
            import imageio.v2 as imageio
        except ImportError as err:
            raise ImportError(
                "writing videos needs imageio and imageio-ffmpeg: pip install 'sampleforge[eval]'"
            ) from err
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return imageio.get_writer(
            self.path,
            format="FFMPEG",
            mode="I",
            fps=self.fps,
            codec="libx264",
            quality=7,
            macro_block_size=1,
            ffmpeg_log_level="error",
        )


def _pad_to_macro_block(frame: np.ndarray) -> np.ndarray:
    """Pad the bottom and right edges with black up to a multiple of 16 pixels."""
    height, width = frame.shape[:2]
    pad_h = -height % _MACRO_BLOCK
    pad_w = -width % _MACRO_BLOCK
    if not (pad_h or pad_w):
        return frame
    return np.pad(frame, ((0, pad_h), (0, pad_w), (0, 0)))
