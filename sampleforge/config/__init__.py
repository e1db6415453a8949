"""Training settings: one typed schema, validated before anything starts, exposed as CLI flags."""

from sampleforge.config.schema import Config, config_fields, config_to_dict
from sampleforge.config.validation import (
    ConfigError,
    config_from_dict,
    make_config,
    validate_config,
)

__all__ = [
    "Config",
    "ConfigError",
    "config_fields",
    "config_from_dict",
    "config_to_dict",
    "make_config",
    "validate_config",
]
