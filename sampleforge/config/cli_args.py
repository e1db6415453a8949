"""Command-line flags derived from `Config`: one `--name` per field, help from its metadata.

Flags are parsed as strings and converted by `make_config`, so the CLI and the Python API accept
and reject exactly the same values with the same messages.
"""

from __future__ import annotations

import argparse
import math
import typing
from typing import Any, Sequence

from sampleforge.config.algorithms import REPLAY_FAMILIES, FamilyName, family_algorithms
from sampleforge.config.schema import Config, config_fields
from sampleforge.config.validation import ConfigError, make_config, suggest_name


def _algorithms_title(kind: str, families: tuple[FamilyName, ...]) -> str:
    """'<kind> algorithms (a, b, c)': the algorithms of `families` that read a group's settings."""
    names = [name for family in families for name in family_algorithms(family)]
    return f"{kind} algorithms ({', '.join(names)})"


# Titles of the help groups (their order: `schema.GROUPS`). An algorithm family's group names
# the algorithms that read it, as `config/algorithms.py` lists them; PQN is a family of its own
# that reads the value-based settings.
_GROUP_TITLES = {
    "experiment": "experiment",
    "stopping": "when to stop",
    "sampling": "sampling (rollout and inference workers)",
    "population": "policies, self-play and population-based training",
    "distributed": "data-parallel training (torchrun; docs/distributed.md)",
    "learner": "learner and optimizer",
    "actor_critic": _algorithms_title("actor-critic", ("actor_critic",)),
    "replay": _algorithms_title("replay", REPLAY_FAMILIES),
    "value_based": _algorithms_title("value-based", ("value_based", "pqn")),
    "continuous_control": _algorithms_title("continuous-control", ("continuous_control",)),
    "model": "model",
    "reliability": "faults and recovery",
    "evaluation": "evaluation during training",
    "logging": "logging and checkpoints",
}


class ConfigArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose unknown-flag error suggests the closest known flag.

    Abbreviations are off: `--num_worker` must not silently mean `--num_workers`.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        if message.startswith("unrecognized arguments:"):
            bad = [w.split("=")[0] for w in message.split(":", 1)[1].split() if w.startswith("--")]
            message = f"{message}{self._hint(bad[0]) if bad else ''}"
        # One line, not argparse's usage first: a training command's usage lists every flag.
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _hint(self, flag: str) -> str:
        """Which subcommands have `flag` (it is no typo there), or the closest known flag."""
        owners = [name for name, flags in self._subcommand_flags().items() if flag in flags]
        if owners:
            return f" ({flag} is a flag of {', '.join(f'{self.prog} {o}' for o in owners)})"
        return suggest_name(flag, self._known_flags())

    def _subcommand_flags(self) -> dict[str, list[str]]:
        return {
            name: [s for a in sub._actions for s in a.option_strings]
            for action in self._actions
            if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()
        }

    def _known_flags(self) -> list[str]:
        """Every flag of this parser and of its subcommands (unknown flags of a subcommand
        are reported by the top-level parser)."""
        flags = [s for action in self._actions for s in action.option_strings]
        return flags + [s for sub in self._subcommand_flags().values() for s in sub]


def bool_arg(value: str) -> bool:
    """argparse type of a boolean flag's value: true/false, 1/0, yes/no, on/off."""
    lowered = value.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not a boolean (use true or false)")


def positive_number(value: str) -> float:
    """argparse type of a flag that takes a finite number > 0 (a frame rate, a duration)."""
    return _finite_number(value, zero_allowed=False)


def nonnegative_number(value: str) -> float:
    """argparse type of a flag that takes a finite number >= 0 (a share of a GPU)."""
    return _finite_number(value, zero_allowed=True)


def _finite_number(value: str, zero_allowed: bool) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not (math.isfinite(number) and (number > 0 or (zero_allowed and number == 0))):
        least = ">= 0" if zero_allowed else "> 0"
        raise argparse.ArgumentTypeError(
            f"{value} is not allowed (allowed: a finite number {least})"
        )
    return number


def add_switch(parser: Any, flag: str, help: str) -> None:
    """A boolean flag that takes both forms: `--flag` alone, or `--flag true|false`."""
    parser.add_argument(
        flag, nargs="?", const=True, default=False, type=bool_arg, metavar="BOOL", help=help
    )


def _metavar(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    inner = args[0] if args and typing.get_origin(annotation) is not typing.Literal else annotation
    if typing.get_origin(inner) is typing.Literal:
        return "{" + ",".join(map(str, typing.get_args(inner))) + "}"
    return getattr(inner, "__name__", "VALUE").upper()


def add_config_arguments(
    parser: argparse.ArgumentParser, heading: str | None = None, note: str | None = None
) -> None:
    """Add one flag per Config field, grouped as in the schema (`schema.GROUPS`), defaults shown
    in --help.

    For commands that only read a run's settings (enjoy, eval, export): `heading` prefixes
    every group title and `note` describes the first, so that the command's own flags, added
    before, stand apart.
    """
    hints = typing.get_type_hints(Config)
    defaults = Config()
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in config_fields():
        group_name = f.metadata["group"]
        if group_name not in groups:
            title = _GROUP_TITLES.get(group_name, group_name)
            groups[group_name] = parser.add_argument_group(
                title if heading is None else f"{heading}: {title}",
                description=None if groups else note,
            )
        default = getattr(defaults, f.name)
        if isinstance(default, tuple):
            default = ",".join(map(str, default))
        # a boolean flag alone means true: `--serial_mode` as well as `--serial_mode true`
        switch = hints[f.name] is bool
        groups[group_name].add_argument(
            f"--{f.name}",
            type=str,
            default=argparse.SUPPRESS,
            metavar=_metavar(hints[f.name]),
            nargs="?" if switch else None,
            const="true" if switch else None,
            # argparse treats "%" in help as a format directive.
            help=f"{f.metadata['help']} (default: {default})".replace("%", "%%"),
        )


def config_from_args(args: argparse.Namespace, base: Config | None = None) -> Config:
    """A validated Config from the flags that were given (absent flags keep `base`'s values)."""
    names = {f.name for f in config_fields()}
    given = {k: v for k, v in vars(args).items() if k in names}
    return make_config(base, **given)


def parse_config(argv: Sequence[str]) -> Config:
    """Parse flags only (no subcommand): used by tests and scripts."""
    parser = ConfigArgumentParser(prog="sampleforge")
    add_config_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


__all__ = [
    "ConfigArgumentParser",
    "add_config_arguments",
    "add_switch",
    "bool_arg",
    "config_from_args",
    "parse_config",
    "nonnegative_number",
    "positive_number",
    "ConfigError",
]
