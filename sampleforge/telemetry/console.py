"""Human-readable progress on the terminal: one-line status and a progress bar.

Responsibility: format the periodic status line and drive a tqdm bar toward
the env-step budget.

What this module must not do: compute metrics, write files, or emit anything
when not asked (the runner decides when to print); the bar stays silent when
stderr is not a terminal so logs and CI output are not flooded.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

__all__ = ["ProgressBar", "format_status_line"]

_SEP = " | "


def format_status_line(
    *,
    env_steps: int,
    target_env_steps: int | None,
    fps: dict[str, float],
    mean_return: float | None,
    mean_length: float | None,
    policy_lag: tuple[float, float, float] | None,
    losses: dict[str, float],
    learning_rate: float | None,
) -> str:
    """Return one compact status line, e.g.::

        steps 120,000/1,000,000 (12.0%) | fps 10s:9,876 60s:9,500 | return 21.50 len 88.0
        | lag 0.0/1.3/4.0 | loss policy:-0.0123 value:0.456 | lr 3.00e-04

    (printed on a single line). Sections with no data (empty dicts, None) are
    omitted, except return/length which show ``n/a`` until episodes finish.
    ``policy_lag`` is ``(min, mean, max)``.
    """
    parts = [_steps_part(env_steps, target_env_steps)]
    if fps:
        parts.append("fps " + " ".join(f"{window}:{rate:,.0f}" for window, rate in fps.items()))
    parts.append(f"return {_fmt(mean_return, '.2f')} len {_fmt(mean_length, '.1f')}")
    if policy_lag is not None:
        parts.append("lag {:.1f}/{:.1f}/{:.1f}".format(*policy_lag))
    if losses:
        parts.append("loss " + " ".join(f"{name}:{value:.4g}" for name, value in losses.items()))
    if learning_rate is not None:
        parts.append(f"lr {learning_rate:.2e}")
    return _SEP.join(parts)


def _steps_part(env_steps: int, target: int | None) -> str:
    if not target:
        return f"steps {env_steps:,}"
    return f"steps {env_steps:,}/{target:,} ({100.0 * env_steps / target:.1f}%)"


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


class ProgressBar:
    """tqdm bar counting env steps toward ``target_env_steps``.

    Disabled (every call is a cheap no-op) when the target is None or the
    stream is not a terminal, unless ``enabled`` forces a choice.
    """

    def __init__(
        self,
        target_env_steps: int | None,
        *,
        initial: int = 0,
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        """Create the bar; ``initial`` is the step count when resuming."""
        stream = sys.stderr if stream is None else stream
        if enabled is None:
            enabled = target_env_steps is not None and _is_tty(stream)
        self._bar: tqdm | None = None
        if enabled:
            self._bar = tqdm(
                total=target_env_steps,
                initial=initial,
                file=stream,
                unit="step",
                unit_scale=True,
                dynamic_ncols=True,
                mininterval=1.0,  # redraws cost terminal I/O; once a second is plenty
            )

    @property
    def enabled(self) -> bool:
        """Whether a bar is actually drawn."""
        return self._bar is not None

    def update_to(self, env_steps: int) -> None:
        """Move the bar to the absolute step count ``env_steps``."""
        if self._bar is None:
            return
        delta = env_steps - self._bar.n
        if delta > 0:
            self._bar.update(delta)

    def write(self, line: str) -> None:
        """Print ``line`` without breaking the bar (plain print when disabled)."""
        if self._bar is None:
            print(line, flush=True)
        else:
            self._bar.write(line)

    def close(self) -> None:
        """Finish the bar; safe to call more than once."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
