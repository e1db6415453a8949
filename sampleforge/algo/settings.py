"""How an algorithm declares its settings, once, next to its loss.

Responsible for: ``setting``, the dataclass field that carries a setting's default, its
``--help`` text and the help group it is listed under, and ``ReturnSettings``, what every
algorithm shares (the discount). Each algorithm family's settings are a frozen dataclass of
such fields in its loss module (``ActorCriticSettings`` in ``actor_critic_loss.py``,
``ValueSettings`` in ``q_learning.py``); the run's ``Config`` (``config/schema.py``) inherits
every one of them, so a loss reads its hyper-parameters straight from the config, and the CLI
flags and ``--help`` groups are derived from these declarations.

Must not: import anything but the standard library (config, models and learners build on it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


def setting(default: Any, help: str, group: str, auto: Optional[Callable[[], Any]] = None) -> Any:
    """A settings field: its default, the `--help` text and the help group it is listed under.

    `auto`, if given, computes the value when the user passes the word "auto".
    """
    metadata = {"help": help, "group": group, "auto": auto}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ReturnSettings:
    """What every algorithm's targets share."""

    gamma: float = setting(0.99, "Discount factor.", "learner")
