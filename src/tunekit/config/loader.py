"""Build a :class:`Config` from a YAML/JSON file and command-line overrides.

Precedence: file < ``key=value`` / ``--key value`` overrides. Every problem becomes a
:class:`~tunekit.errors.ConfigError` whose message names the option, the value, where it came from
and what would be valid.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .field_errors import detail
from .files import load_yaml_text, read_config_file
from .llamafactory_options import WHY_UNSUPPORTED, unsupported
from .llamafactory_v1 import attach, is_v1_config, notes_of, read_v1_config
from .options import GROUPS
from .problems import Problem, ProblemsError, Said, config_error, excerpt, problems_text
from .schema import FORMER_NAMES, Config
from .secrets import _yaml_with_comments, mask_secrets, resolve_secrets, write_options

RESOLVED_CONFIG_NAME = "tunekit_config.yaml"
# where an option came from, as the messages say it (a file: Said("where_file", path=...))
WHERE_CONFIG = Said("where_config")
WHERE_COMMAND_LINE = Said("where_command_line")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def parse_scalar(text: str) -> Any:
    """Parse a command-line value the way YAML would, plus ``5e-05``-style floats (YAML 1.1 misses them)."""
    import yaml

    if text == "":
        return ""
    try:
        value = load_yaml_text(text, f"the command-line value {excerpt(text)}")  # aliases and duplicates checked too
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
            if not key.split("=", 1)[0].strip():
                raise config_error("args_no_name", arg=excerpt(arg))
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
            if not key.strip():
                raise config_error("args_no_name_before_equals", arg=excerpt(arg))
            out[key.strip()] = parse_scalar(raw.strip())
        else:
            raise config_error("args_unexpected", arg=repr(arg))
        i += 1
    return out


def _edit_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance: insertions, deletions, substitutions and adjacent swaps cost 1."""
    prev2, prev = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def suggest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Options ``name`` is a real typo of: at most one edit per four characters (``lora_rnak`` -> ``lora_rank``),
    or ``name`` is the start of the option (``model`` -> ``model_name_or_path``). Nothing else: a far-fetched
    "did you mean" (``use_muon`` -> ``use_cpu``) misleads more than no suggestion."""
    name = str(name)
    if len(name) > 100:
        return []
    budget = max(1, len(name) // 4)
    scored = sorted((d, c) for c in choices if (d := _edit_distance(name, c)) <= budget)
    close = [c for _, c in scored]
    if len(name) >= 4:
        close += sorted(c for c in choices if c.startswith(name) and c not in close)
    return close[:n]


# transformers' gradient_checkpointing_kwargs, in LLaMA-Factory configs as {use_reentrant: false}: use_reentrant_gc
GC_KWARGS = "gradient_checkpointing_kwargs"


def _current_names(values: Mapping[str, Any], sources: dict) -> Mapping[str, Any]:
    """Options given under a former name (``FORMER_NAMES``, declared in the schema) are read as the current one, and
    ``gradient_checkpointing_kwargs: {use_reentrant: B}`` as ``use_reentrant_gc: B`` (any other key is refused)."""
    if not any(k in values for k in (*FORMER_NAMES, GC_KWARGS)):
        return values
    values = dict(values)
    if GC_KWARGS in values:
        kwargs, where = values.pop(GC_KWARGS), sources.get(GC_KWARGS, WHERE_CONFIG)
        if (
            not isinstance(kwargs, Mapping)
            or set(kwargs) - {"use_reentrant"}
            or not isinstance(kwargs.get("use_reentrant", False), bool)
        ):
            raise config_error("gc_kwargs_other", (GC_KWARGS,), value=excerpt(kwargs), where=where)
        if "use_reentrant" in kwargs:
            values[f"{GC_KWARGS}.use_reentrant"] = kwargs["use_reentrant"]
            sources[f"{GC_KWARGS}.use_reentrant"] = where
    for former, name in {**FORMER_NAMES, f"{GC_KWARGS}.use_reentrant": "use_reentrant_gc"}.items():
        if former in values:
            value = values.pop(former)
            if name in values and values[name] != value:
                raise config_error(
                    "former_disagrees",
                    (name,),
                    former=former,
                    value=repr(value),
                    where=sources.get(former, WHERE_CONFIG),
                    name=name,
                    other=repr(values[name]),
                )
            values[name] = value
            sources.setdefault(name, sources.get(former, WHERE_CONFIG))
    return values


def build_config(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> Config:
    """Validate ``values`` into a Config; ``sources`` maps each key to where it came from (for messages)."""
    from pydantic import ValidationError

    sources = dict(sources or {})
    values = _current_names(values, sources)
    known = set(Config.model_fields)
    unknown = [k for k in values if k not in known]
    if unknown:
        not_yet = unsupported(known | set(FORMER_NAMES) | {GC_KWARGS})
        lines = []
        lacking: dict[tuple[str, str], list[str]] = {}  # (where, why) -> the options: one line for an engine's keys
        for key in unknown:
            where = sources.get(key, WHERE_CONFIG)
            if key in not_yet:
                lacking.setdefault((where, str(WHY_UNSUPPORTED.get(key, ""))), []).append(str(key))
                continue
            hint = suggest(key, known)
            shown = f"'{key}'" if isinstance(key, str) and len(key) <= 60 and key.isprintable() else excerpt(key)
            tail = Said("part_did_you_mean", names=tuple(hint)) if hint else Said("part_see_help")
            lines.append(Problem(Said("unknown_option", shown=shown, where=where, tail=tail), (str(key),)))
        lines[:0] = [_lacking(keys, where) for (where, _why), keys in lacking.items()]
        raise ConfigError(problems_text(lines), lines)
    _check_bools(values, sources)
    values = {k: _yaml_bool_words(k, _none_words(k, _comma_list(k, v))) for k, v in resolve_secrets(values).items()}
    try:
        return Config(**values)
    except ValidationError as exc:
        problems = _validation_problems(exc, values, sources)
        raise ConfigError(problems_text(problems), problems) from None


def _lacking(keys: list[str], where: str) -> Problem:
    """LLaMA-Factory options tunekit lacks, from one place and for one reason (an engine's keys): one problem."""
    why = Said("part_why_unsupported", why=WHY_UNSUPPORTED[keys[0]]) if keys[0] in WHY_UNSUPPORTED else None
    if len(keys) == 1:
        return Problem(Said("lf_unsupported", option=keys[0], where=where, why=why), (keys[0],))
    return Problem(Said("lf_unsupported_n", options=tuple(keys), where=where, why=why), tuple(keys))


def _accepts(annotation, kinds: tuple) -> bool:
    import typing

    if annotation in kinds or annotation is typing.Any:
        return True
    if typing.get_origin(annotation) is typing.Literal:
        return any(type(choice) in kinds for choice in typing.get_args(annotation))
    return any(_accepts(arg, kinds) for arg in typing.get_args(annotation))


def _check_bools(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """true/false for a number option is a mistake, not 1/0 (pydantic would read ``--seed`` with no value as 1)."""
    lines = []
    for key, value in values.items():
        annotation = Config.model_fields[key].annotation
        if isinstance(value, bool) and _accepts(annotation, (int, float)) and not _accepts(annotation, (bool,)):
            where = sources.get(key, WHERE_CONFIG)
            said = Said(
                "bool_for_number_cli" if where == WHERE_COMMAND_LINE else "bool_for_number",
                option=key,
                where=where,
                value=str(value).lower(),
                expected=_type_name(annotation),
            )
            lines.append(Problem(said, (key,)))
    if lines:
        raise ConfigError(problems_text(lines), lines)


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


def _comma_list(key: str, value: Any) -> Any:
    """A YAML/JSON list for a comma-separated text option (``dataset: [a, b]``) is that text (``a,b``), as
    LLaMA-Factory reads it (its ``split_arg`` keeps a list as the list)."""

    field = Config.model_fields[key]
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value)
        and field.annotation in (str, str | None)
        and "comma-separated" in (field.description or "").lower()
    ):
        return ",".join(str(v).strip() for v in value)
    return value


def _none_words(key: str, value: Any) -> Any:
    """``None``/``none`` (as LLaMA-Factory users write it) means null for options whose default is null."""
    if (
        isinstance(value, str)
        and value.strip().lower() in ("none", "null")
        and Config.model_fields[key].default is None
    ):
        return None
    return value


def _validation_problems(exc, values: Mapping[str, Any], sources: Mapping[str, str]) -> list[Problem]:
    """pydantic's errors as problems: a field's error names the field; the schema's rules keep their own problems."""
    lines: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
        key = loc[0] if loc else None
        if key and key in Config.model_fields:
            given = values.get(key, err.get("input"))
            field = Config.model_fields[key]
            expected = _type_name(field.annotation)
            msg = err["msg"]
            msg = msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg
            if err.get("type") == "finite_number":
                msg += " (inf or nan makes the loss and every weight NaN)"
            said = Said(
                "option_invalid",
                option=key,
                where=sources.get(key, WHERE_CONFIG),
                given=excerpt(given),
                type=type(given).__name__,
                expected=expected,
                detail=detail(err, msg, _literal_choices(field.annotation)),
            )
            lines.append(Problem(said, (key,)))
        elif isinstance((err.get("ctx") or {}).get("error"), ProblemsError):  # the schema's rules (config/schema.py)
            lines.extend(err["ctx"]["error"].problems)
        else:  # another model-level rule: the message is already complete
            msg = err["msg"]
            msg = msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg
            lines.append(Problem(msg))
    first: dict[str, Problem] = {}
    for problem in lines:  # repeats dropped, the first kept
        first.setdefault(problem.message, problem)
    return list(first.values())


def _type_name(annotation) -> str:
    text = str(annotation).replace("typing.", "")
    text = re.sub(r"<class '(\w+)'>", r"\1", text)
    text = text[len("Optional[") : -1] if text.startswith("Optional[") and text.endswith("]") else text
    text = text.removesuffix(" | None")  # an optional option: name the type a given value must have
    text = re.sub(r"^dict\[", "Dict[", text)  # the spelling of the messages from when the annotation was typing's
    return Said(f"type_{text}") if text in ("float", "int", "bool", "str") else text


def load_config(path: str | Path | None = None, overrides: Iterable[str] | Mapping[str, Any] = ()) -> Config:
    """Read ``path`` (YAML or JSON) and apply ``overrides`` (``key=value`` strings or a dict)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    extra = dict(overrides) if isinstance(overrides, Mapping) else parse_overrides(overrides)
    if path is not None:
        values = read_config_file(path)
        sources = dict.fromkeys(values, Said("where_file", path=str(path)))
    v1 = read_v1_config(values, path, extra) if is_v1_config(values) else None  # LLaMA-Factory v1 (llamafactory_v1)
    if v1 is not None:
        values, sources, extra = dict(v1.options), v1.sources(), v1.overrides
    for key, value in extra.items():
        values[key] = value
        sources[key] = WHERE_COMMAND_LINE
    cfg = build_config(values, sources)
    if v1 is not None:
        attach(cfg, v1)
    return cfg


def check_writable_folder(path: str | Path, option: str) -> None:
    """Fail now, naming ``option`` and ``path``, if the folder cannot be created or written (``/proc/x``, a read-only
    mount, a file in the way), instead of a traceback when the first file is saved. Leaves nothing behind."""
    import tempfile

    folder = Path(path).expanduser()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise config_error("args_folder_is_file", (option,), option=option, path=str(path), existing=str(existing))
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".tunekit-write-check-").cleanup()
    except OSError as exc:
        error = str(exc.strerror or exc)
        raise config_error(
            "args_folder_unwritable", (option,), option=option, path=str(path), error=error, existing=str(existing)
        ) from None


def config_to_dict(cfg: Config, only_set: bool = False) -> dict[str, Any]:
    data = cfg.model_dump(mode="json")
    if only_set:
        data = {k: v for k, v in data.items() if k in cfg.model_fields_set}
    return data


def save_config(
    cfg: Config, output_dir: str | Path, name: str = RESOLVED_CONFIG_NAME, notes: dict[str, str] | None = None
) -> Path:
    """Write every option (defaults included) so the run can be reproduced from the file alone: first the options
    the run was given (set by the user, or decided by auto_fit / gradient_checkpointing: auto), then the rest as
    resolved, each part grouped as docs/options.md groups them (a ``# <group>`` comment before each group).
    ``notes``: ``{option: text}`` written as a comment above that option (e.g. a DeepSpeed file's optimizer ran
    instead)."""
    data, comments = ordered_options(cfg)
    for key, text in [*notes_of(cfg).items(), *(notes or {}).items()]:  # notes_of: a LLaMA-Factory v1 file's mapping
        if key in data:
            comments[key] = f"{comments[key]}\n# {text}" if key in comments else text
    # secrets become ${ENV_VAR} references, and a file holding one gets mode 0600 (config/secrets.py)
    return write_options(data, Path(output_dir) / name, comments=comments)


def config_text(cfg: Config) -> str:
    """``tunekit train CONFIG --print-config``: the options set for the run as YAML (secrets masked), each under the
    note of the LLaMA-Factory v1 key it came from."""
    data, comments = ordered_options(cfg)
    data = {k: v for k, v in data.items() if k in cfg.model_fields_set}
    for key, text in notes_of(cfg).items():
        comments[key] = f"{comments[key]}\n# {text}" if key in comments else text
    return _yaml_with_comments(mask_secrets(data), comments) if data else "{}\n"


def ordered_options(cfg: Config) -> tuple[dict[str, Any], dict[str, str]]:
    """``(options, {first option of a group: heading})``: the set options first, then the rest, by option group."""
    values = config_to_dict(cfg)
    given = cfg.model_fields_set
    grouped = [(group.TITLE, list(group.model_fields)) for group in GROUPS]
    known = {k for _, keys in grouped for k in keys}
    grouped.append(("Other", [k for k in values if k not in known]))
    data: dict[str, Any] = {}
    comments: dict[str, str] = {}
    for part, wanted in (("set for this run", True), ("defaults and resolved values", False)):
        for title, group_keys in grouped:
            keys = [k for k in group_keys if k in values and (k in given) == wanted]
            if keys:
                comments[keys[0]] = f"{title}: {part}"
                data.update((k, values[k]) for k in keys)
    return data, comments
