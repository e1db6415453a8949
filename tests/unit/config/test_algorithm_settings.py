"""Each algorithm family declares its settings once, beside its loss; `Config` inherits them,
and the CLI flags and `--help` groups are derived from those declarations
(sampleforge/algo/settings.py, sampleforge/config/schema.py, sampleforge/config/cli_args.py)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from sampleforge.algo.actor_critic_settings import ActorCriticSettings
from sampleforge.algo.continuous_settings import ContinuousSettings
from sampleforge.algo.replay_settings import ReplaySettings
from sampleforge.algo.settings import ReturnSettings
from sampleforge.algo.value_settings import ValueSettings
from sampleforge.config import Config, config_fields, config_to_dict
from sampleforge.config.algorithms import family_algorithms
from sampleforge.config.cli_args import parse_config
from sampleforge.config.schema import GROUPS

SETTINGS_CLASSES = (
    ReturnSettings,
    ActorCriticSettings,
    ReplaySettings,
    ValueSettings,
    ContinuousSettings,
)


def _own_names(cls: type) -> set[str]:
    """The fields `cls` declares in its own body (not those it inherits)."""
    return set(inspect.get_annotations(cls))


def test_config_inherits_every_algorithms_settings():
    for cls in SETTINGS_CLASSES:
        assert issubclass(Config, cls), cls.__name__
        assert dataclasses.is_dataclass(cls)
        assert cls.__dataclass_params__.frozen, cls.__name__


@pytest.mark.parametrize("cls", SETTINGS_CLASSES, ids=lambda c: c.__name__)
def test_no_setting_of_an_algorithm_is_declared_again_in_config(cls):
    declared_again = _own_names(Config) & {f.name for f in dataclasses.fields(cls)}
    assert declared_again == set(), f"declared in {cls.__name__} and again in Config"


def test_every_setting_is_declared_in_exactly_one_class():
    # gamma in ReturnSettings only; no family re-declares a name another one owns.
    owners: dict[str, list[str]] = {}
    for cls in Config.__mro__:
        for name in _own_names(cls):
            owners.setdefault(name, []).append(cls.__name__)
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
    assert owners["gamma"] == ["ReturnSettings"]


@pytest.mark.parametrize(
    "cls, group",
    [
        (ActorCriticSettings, "actor_critic"),
        (ReplaySettings, "replay"),
        (ValueSettings, "value_based"),
        (ContinuousSettings, "continuous_control"),
    ],
)
def test_a_familys_own_settings_are_listed_in_its_group(cls, group):
    for name in _own_names(cls):
        assert cls.__dataclass_fields__[name].metadata["group"] == group, name


def test_fields_dicts_and_help_follow_the_declared_group_order():
    names = [f.name for f in config_fields()]
    assert names[0] == "env"  # not the inherited base classes' fields
    ranks = [GROUPS.index(f.metadata["group"]) for f in config_fields()]
    assert ranks == sorted(ranks)
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(Config))
    assert list(config_to_dict(Config())) == names  # config.json and --print_config


def _help_sections(capsys) -> dict[str, str]:
    """`--help`'s group sections: title -> body."""
    with pytest.raises(SystemExit):
        parse_config(["--help"])
    sections = {}
    for block in capsys.readouterr().out.split("\n\n"):
        title, _, body = block.partition(":\n")
        sections[title.strip()] = body
    return sections


@pytest.mark.parametrize(
    "cls, kind, families",
    [
        (ActorCriticSettings, "actor-critic", ("actor_critic",)),
        (ReplaySettings, "replay", ("value_based", "continuous_control")),
        (ValueSettings, "value-based", ("value_based", "pqn")),
        (ContinuousSettings, "continuous-control", ("continuous_control",)),
    ],
)
def test_help_shows_each_familys_group_with_its_algorithms_and_fields(capsys, cls, kind, families):
    sections = _help_sections(capsys)
    algorithms = [a for family in families for a in family_algorithms(family)]
    title = f"{kind} algorithms ({', '.join(algorithms)})"
    assert title in sections, list(sections)
    for name in _own_names(cls):
        assert f"--{name} " in sections[title], name
    titles = list(sections)
    assert titles.index("learner and optimizer") < titles.index(title) < titles.index("model")
    assert "--gamma " in sections["learner and optimizer"]  # shared by every family
