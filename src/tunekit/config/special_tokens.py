"""Reading ``new_special_tokens_config``: LLaMA-Factory's YAML file of ``token: description`` lines.

Read as config files are (``config/files.py``'s YAML reader: duplicate keys and alias bombs refused), and checked
here, because a bad line would otherwise add a wrong token or start its embedding from nothing: each mistake is a
:class:`~tunekit.errors.ConfigError` naming the file and the fix.
"""

from __future__ import annotations

from pathlib import Path

from .files import _yaml_problem, load_yaml_text  # one line per YAML error, no file text quoted
from .problems import Said, config_error, excerpt

FIELD = ("new_special_tokens_config",)


def read_special_tokens(path: str | Path) -> dict[str, str]:
    """``{token: description}`` in the file's order (the order the tokens are added in)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise config_error("special_tokens_file_missing", FIELD, path=str(path))
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8-sig"), path)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        why = _yaml_problem(exc)[:300] if isinstance(exc, yaml.YAMLError) else f"not UTF-8 (byte {exc.start})"
        raise config_error("special_tokens_file_invalid", FIELD, path=str(path), why=why) from None
    if not isinstance(data, dict) or not data:
        kind = Said("part_special_tokens_nothing") if data is None or data == {} else type(data).__name__
        raise config_error("special_tokens_not_mapping", FIELD, path=str(path), kind=kind)
    for token, description in data.items():
        if not isinstance(token, str) or not token.strip():
            raise config_error("special_tokens_empty_token", FIELD, path=str(path), token=excerpt(token))
        if not isinstance(description, str):
            kind = type(description).__name__ if description is not None else "null"
            raise config_error("special_tokens_description", FIELD, path=str(path), token=excerpt(token), kind=kind)
    return dict(data)
