"""The typed configuration: one schema for YAML, CLI flags, help, the web board and the docs."""

from .loader import (
    RESOLVED_CONFIG_NAME,
    build_config,
    config_to_dict,
    load_config,
    parse_overrides,
    parse_scalar,
    save_config,
)
from .schema import Config, iter_fields

__all__ = [
    "Config",
    "RESOLVED_CONFIG_NAME",
    "build_config",
    "config_to_dict",
    "iter_fields",
    "load_config",
    "parse_overrides",
    "parse_scalar",
    "save_config",
]
