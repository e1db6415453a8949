"""Where each setting comes from: the layers of a resolved config, lowest first.

1. ``default``: the field's default in `Config`.
2. ``family``: the env family's settings (`config/families.py`), by the env's name, for the
   algorithm (a value-based algorithm's own, `config/algorithm_defaults.py`).
3. ``preset``: the settings of ``--preset``.
4. ``flag``: what the user gave (a CLI flag or a Python keyword). Always wins.

`make_config` resolves the layers and attaches the sources to the `Config` it returns;
`config_sources` reads them back, `config.json` stores them under ``SOURCES_KEY``, and
``sampleforge train --print_config`` prints them.

Must not: validate values (`validation.py` does) or touch environments beyond
`env_family`'s probe.
"""

from __future__ import annotations

from typing import Any, Mapping

from sampleforge.config.algorithms import ALGORITHM_FAMILIES
from sampleforge.config.families import env_family, family_settings
from sampleforge.config.presets import PRESET_NAMES, preset_settings
from sampleforge.config.schema import Config, config_fields

SOURCE_NAMES = ("default", "family", "preset", "flag")
SOURCES_KEY = "sources"  # in config.json, next to the settings


def layered_settings(
    base: Config | None, overrides: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The values to apply on top of `base` (None: the defaults) and the source of every
    setting of the result. The env family applies when the config is new or its env changes,
    and then only to settings that came from the defaults or the old family; the preset only
    when it is among `overrides`. Unknown names are passed through for validation to report.
    """
    sources = dict(config_sources(base)) if base is not None else {}
    values: dict[str, Any] = {}
    env = overrides.get("env", base.env if base is not None else Config.env)
    algorithm = overrides.get("algorithm", base.algorithm if base is not None else "appo")
    if not isinstance(algorithm, str) or algorithm not in ALGORITHM_FAMILIES:
        algorithm = "appo"  # validation reports the bad value
    if base is None or env != base.env or algorithm != base.algorithm:
        values.update(_family_layer(env, algorithm, sources))
    preset = overrides.get("preset")
    if preset in PRESET_NAMES:
        for name, value in preset_settings(preset, algorithm).items():
            values[name], sources[name] = value, "preset"
    for name, value in overrides.items():
        values[name], sources[name] = value, "flag"
    return values, sources


def _family_layer(env: Any, algorithm: str, sources: dict[str, str]) -> dict[str, Any]:
    """The family's values (the env's family, for the algorithm) for settings no preset or
    flag set; a setting the previous family set and this one does not goes back to its
    default. Updates `sources`."""
    family = env_family(env) if isinstance(env, str) else None
    settings = family_settings(family, env, algorithm)
    defaults = Config()
    values: dict[str, Any] = {}
    for f in config_fields():
        source = sources.get(f.name, "default")
        if source not in ("default", "family"):
            continue
        if f.name in settings:
            values[f.name], sources[f.name] = settings[f.name], "family"
        elif source == "family":
            values[f.name], sources[f.name] = getattr(defaults, f.name), "default"
    return values


def attach_sources(cfg: Config, sources: Mapping[str, str]) -> Config:
    """Record on `cfg` where each of its settings came from (unlisted ones: default)."""
    full = {f.name: sources.get(f.name, "default") for f in config_fields()}
    # Config is frozen; a plain dict, since configs are pickled to worker processes.
    object.__setattr__(cfg, "_sources", full)
    return cfg


def config_sources(cfg: Config) -> Mapping[str, str]:
    """{setting: source} for every setting of `cfg`. A config not built by `make_config`
    (e.g. `cfg.replace(...)`) reports values equal to the default as default, others as flag."""
    recorded = getattr(cfg, "_sources", None)
    if recorded is not None:
        return recorded
    defaults = Config()
    return {
        f.name: "default" if getattr(cfg, f.name) == getattr(defaults, f.name) else "flag"
        for f in config_fields()
    }


def describe_config(cfg: Config) -> list[str]:
    """One line per setting: name, value and source, in schema order (a data-parallel run's
    first says which settings are per rank)."""
    sources = config_sources(cfg)
    width = max(len(f.name) for f in config_fields())
    lines = []
    if cfg.distributed:
        lines.append(
            "# distributed: every rank runs this whole config (num_workers, num_envs_per_worker, "
            "batch_size and the rest apply per rank; a rank's seed is seed + rank x 1000003); "
            "train_for_env_steps counts every rank's steps"
        )
    for f in config_fields():
        value = getattr(cfg, f.name)
        if isinstance(value, tuple):
            value = ",".join(map(str, value))
        lines.append(f"{f.name:<{width}}  {str(value):<24} {sources[f.name]}")
    return lines


__all__ = [
    "SOURCE_NAMES",
    "SOURCES_KEY",
    "attach_sources",
    "config_sources",
    "describe_config",
    "layered_settings",
]
