"""Secret options (API keys, tokens, passwords): never written in plain text, read from the environment.

An option is a secret when its name is one of :data:`ENV_VARS` or ends with ``_key``, ``_token``,
``_secret`` or ``password`` (``swanlab_api_key``, ``hub_token``, ...). Every writer of options — the
resolved ``tunekit_config.yaml``, the web board's saved configs, command previews and job logs — passes
them through :func:`mask_secrets`, which replaces a secret's value with a *reference* to its environment
variable, ``${SWANLAB_API_KEY}``. Reading a config (:func:`resolve_secrets`, called by the loader) turns a
reference back into the variable's value (``None`` when the variable is unset, so the option's own
"set X or $VAR" message applies). A file that holds a reference is written with mode 0600.

Two limits serve the web board, whose user must not learn the server's environment: within
:func:`references_kept` a reference stays as written (what the board reads is sent to the browser), and
when ``$TUNEKIT_SECRET_VARS`` is set (the board sets it for its jobs: the variables the user set through the
board) only the variables it lists are expanded; a reference to any other is ``None``, as if unset.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from .lists import split_list

SECRET_SUFFIXES = ("_key", "_token", "_secret", "password")
# Options whose environment variable is the one their library reads itself; any other secret option
# uses its upper-cased name (``my_service_token`` -> ``MY_SERVICE_TOKEN``).
ENV_VARS = {
    "swanlab_api_key": "SWANLAB_API_KEY",
    "hub_token": "HF_TOKEN",
    "hf_hub_token": "HF_TOKEN",
    "wandb_api_key": "WANDB_API_KEY",
    "ms_hub_token": "MODELSCOPE_API_TOKEN",
    "om_hub_token": "MODELERS_API_TOKEN",
}
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
SECRET_VARS_ENV = "TUNEKIT_SECRET_VARS"  # comma-separated: the only variables references may be expanded from
_KEEP_REFERENCES: ContextVar[bool] = ContextVar("tunekit_keep_secret_references", default=False)


def is_secret(name: str) -> bool:
    """Whether option ``name`` holds a secret (its value is never written in plain text)."""
    return name in ENV_VARS or name.lower().endswith(SECRET_SUFFIXES)


def env_var(name: str) -> str:
    """The environment variable a secret option is read from."""
    return ENV_VARS.get(name, name.upper())


def reference(name: str) -> str:
    """``${ENV_VAR}``: what is written in place of the secret option ``name``."""
    return "${" + env_var(name) + "}"


def referenced_var(value: Any) -> str | None:
    """``SWANLAB_API_KEY`` for the value ``"${SWANLAB_API_KEY}"``; ``None`` for anything else."""
    match = _REFERENCE.match(value) if isinstance(value, str) else None
    return match.group(1) if match else None


def mask_secrets(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``values`` with every set secret replaced by its ``${ENV_VAR}`` reference.

    The one function every writer of options uses (saved configs, previews, job logs)."""
    return {
        k: (reference(k) if is_secret(k) and v not in (None, "") and referenced_var(v) is None else v)
        for k, v in values.items()
    }


def secret_env(values: Mapping[str, Any]) -> dict[str, str]:
    """``{ENV_VAR: value}`` for the secrets set in plain text in ``values`` (how a job receives them)."""
    return {
        env_var(k): str(v)
        for k, v in values.items()
        if is_secret(k) and v not in (None, "") and referenced_var(v) is None
    }


def has_secrets(values: Mapping[str, Any]) -> bool:
    """Whether ``values`` holds any secret (in plain text or as a reference)."""
    return any(is_secret(k) and v not in (None, "") for k, v in values.items())


def resolve_secrets(values: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``${ENV_VAR}`` values of secret options replaced by the variable's value (``None`` when unset, or when
    ``$TUNEKIT_SECRET_VARS`` is set and does not list it); unchanged within :func:`references_kept`."""
    if _KEEP_REFERENCES.get():
        return dict(values)
    environ = os.environ if environ is None else environ
    listed = environ.get(SECRET_VARS_ENV)
    allowed = None if listed is None else set(split_list(listed))
    out = dict(values)
    for k, v in values.items():
        var = referenced_var(v) if is_secret(k) else None
        if var is not None:
            out[k] = (environ.get(var) or None) if allowed is None or var in allowed else None
    return out


@contextmanager
def references_kept():
    """Within: configs read keep ``${ENV_VAR}`` references as written (never the server's values)."""
    token = _KEEP_REFERENCES.set(True)
    try:
        yield
    finally:
        _KEEP_REFERENCES.reset(token)


def job_secret_env(secrets: Mapping[str, str]) -> dict[str, str]:
    """The environment a job gets for ``secrets`` (``{ENV_VAR: value}``): them, and ``$TUNEKIT_SECRET_VARS``
    naming them, so the job expands references to those variables only."""
    return {**secrets, SECRET_VARS_ENV: ",".join(sorted(secrets))}


def write_options(
    data: Mapping[str, Any], path: str | Path, fmt: str = "yaml", comments: Mapping[str, str] | None = None
) -> Path:
    """Write ``data`` (options) as YAML or JSON with secrets masked, atomically; mode 0600 when it
    holds any secret reference, else the usual mode (0644 under the common umask). ``comments`` (YAML only):
    ``{option: text}`` writes ``# text`` on the line before that option (section headings)."""
    import json

    path = Path(path)
    masked = mask_secrets(data)
    if fmt == "json":
        text = json.dumps(masked, indent=2, ensure_ascii=False) + "\n"
    elif not masked:
        text = "{}\n"
    else:
        text = _yaml_with_comments(masked, comments or {})
    private = has_secrets(masked)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(tmp, flags, 0o600 if private else 0o666)
    if private:
        os.fchmod(fd, 0o600)  # an older .tmp keeps its mode through O_CREAT
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def _yaml_with_comments(data: Mapping[str, Any], comments: Mapping[str, str]) -> str:
    """``data`` as YAML in its order, each run of keys that starts at a ``comments`` key dumped under ``# text``."""
    import yaml

    chunks: list[tuple[str | None, dict]] = [(None, {})]
    for key, value in data.items():
        if key in comments:
            chunks.append((comments[key], {}))
        chunks[-1][1][key] = value
    parts = [
        (f"\n# {note}\n" if note else "") + yaml.safe_dump(chunk, sort_keys=False, allow_unicode=True)
        for note, chunk in chunks
        if chunk
    ]
    return "".join(parts).lstrip("\n")


__all__ = [
    "ENV_VARS",
    "SECRET_SUFFIXES",
    "SECRET_VARS_ENV",
    "env_var",
    "has_secrets",
    "is_secret",
    "job_secret_env",
    "mask_secrets",
    "reference",
    "referenced_var",
    "references_kept",
    "resolve_secrets",
    "secret_env",
    "write_options",
]
