"""Build a :class:`Config` from a YAML/JSON file and command-line overrides.

Precedence: file < ``key=value`` / ``--key value`` overrides. Every problem becomes a
:class:`~tunekit.errors.ConfigError` whose message names the option, the value, where it came from
and what would be valid.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import ConfigError
from .schema import Config
from .secrets import resolve_secrets, write_options

RESOLVED_CONFIG_NAME = "tunekit_config.yaml"
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def parse_scalar(text: str) -> Any:
    """Parse a command-line value the way YAML would, plus ``5e-05``-style floats (YAML 1.1 misses them)."""
    import yaml

    if text == "":
        return ""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and _FLOAT.match(text):
        return float(text)
    if value is None and text.lower() not in ("null", "~"):
        return text
    return value


def parse_overrides(args: Iterable[str]) -> dict[str, Any]:
    """``["a=1", "--b", "2", "--c=x", "--flag"]`` → ``{"a": 1, "b": 2, "c": "x", "flag": True}``."""
    args = list(args)
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            key = arg[2:]
            if "=" in key:
                key, raw = key.split("=", 1)
            elif i + 1 < len(args) and not args[i + 1].startswith("--") and "=" not in args[i + 1].split("/")[0][:1]:
                i += 1
                raw = args[i]
            else:
                raw = "true"
            out[key.replace("-", "_")] = parse_scalar(raw.strip())
        elif "=" in arg:
            key, raw = arg.split("=", 1)
            out[key.strip()] = parse_scalar(raw.strip())
        else:
            raise ConfigError(
                f"Unexpected argument {arg!r}: options are written key=value or --key value "
                f"(a config file must come first)."
            )
        i += 1
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Config file {path} does not exist.")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of option: value, found {type(data).__name__}.")
    return data


def suggest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    choices = list(choices)
    close = difflib.get_close_matches(name, choices, n=n, cutoff=0.6)
    if not close:
        close = [c for c in choices if name in c or c in name][:n]
    return close


def build_config(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> Config:
    """Validate ``values`` into a Config; ``sources`` maps each key to where it came from (for messages)."""
    from pydantic import ValidationError

    sources = dict(sources or {})
    known = set(Config.model_fields)
    unknown = [k for k in values if k not in known]
    if unknown:
        lines = []
        for key in unknown:
            hint = suggest(key, known)
            where = sources.get(key, "config")
            lines.append(
                f"Unknown option '{key}' ({where})."
                + (f" Did you mean: {', '.join(hint)}?" if hint else " See `tunekit train --help` for the options.")
            )
        raise ConfigError("\n".join(lines))
    values = {k: _yaml_bool_words(k, _none_words(k, v)) for k, v in resolve_secrets(values).items()}
    try:
        return Config(**values)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, values, sources)) from None


def _literal_choices(annotation) -> tuple:
    import typing

    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    return tuple(c for arg in typing.get_args(annotation) for c in _literal_choices(arg))  # Optional[Literal[...]]


def _yaml_bool_words(key: str, value: Any) -> Any:
    """YAML reads ``no``/``off``/``yes``/``on`` as booleans; ``eval_strategy: no`` means the choice "no"."""
    if not isinstance(value, bool):
        return value
    choices = _literal_choices(Config.model_fields[key].annotation)
    if value in choices:  # a Literal that holds True/False itself (gradient_checkpointing)
        return value
    words = ("yes", "on", "true") if value else ("no", "off", "false")
    return next((w for w in words if w in choices), value)


def _none_words(key: str, value: Any) -> Any:
    """``None``/``none`` (as LLaMA-Factory users write it) means null for options whose default is null."""
    if isinstance(value, str) and value.strip().lower() in ("none", "null") and Config.model_fields[key].default is None:
        return None
    return value


def _format_validation_error(exc, values: Mapping[str, Any], sources: Mapping[str, str]) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
        key = loc[0] if loc else None
        if key and key in Config.model_fields:
            given = values.get(key, err.get("input"))
            field = Config.model_fields[key]
            expected = _type_name(field.annotation)
            lines.append(
                f"Option '{key}' ({sources.get(key, 'config')}) got {given!r} ({type(given).__name__}), "
                f"expected {expected}: {err['msg']}."
            )
        else:  # model-level rule: the message is already complete
            msg = err["msg"]
            msg = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
            lines.append(msg)
    return "\n".join(dict.fromkeys(lines))


def _type_name(annotation) -> str:
    text = str(annotation).replace("typing.", "")
    text = re.sub(r"<class '(\w+)'>", r"\1", text)
    text = text.replace("Optional[", "").rstrip("]") if text.startswith("Optional[") else text
    return {"float": "a number (float)", "int": "a whole number (int)", "bool": "true or false (bool)", "str": "text (str)"}.get(text, text)


def load_config(path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()) -> Config:
    """Read ``path`` (YAML or JSON) and apply ``overrides`` (``key=value`` strings or a dict)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if path is not None:
        for key, value in read_config_file(path).items():
            values[key] = value
            sources[key] = f"in {path}"
    extra = dict(overrides) if isinstance(overrides, Mapping) else parse_overrides(overrides)
    for key, value in extra.items():
        values[key] = value
        sources[key] = "on the command line"
    return build_config(values, sources)


def config_to_dict(cfg: Config, only_set: bool = False) -> dict[str, Any]:
    data = cfg.model_dump(mode="json")
    if only_set:
        data = {k: v for k, v in data.items() if k in cfg.model_fields_set}
    return data


def save_config(cfg: Config, output_dir: str | Path, name: str = RESOLVED_CONFIG_NAME) -> Path:
    """Write every option (defaults included) so the run can be reproduced from the file alone."""
    # secrets become ${ENV_VAR} references, and a file holding one gets mode 0600 (config/secrets.py)
    return write_options(config_to_dict(cfg), Path(output_dir) / name)
