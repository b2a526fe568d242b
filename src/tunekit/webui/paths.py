"""Which files the board may read and write, and how its messages quote what it read.

Whoever reaches the board types paths into it; the board must not become a way to read the server's
files or to plant code. The rules (see docs/webui.md, "Security model"):

- Every path an option names (model, adapters, data, config files, output folders) must resolve — after
  following symlinks — inside an *allowed root*: the workspace (the folder the board works in), the
  Hugging Face hub cache, and each ``--allow-path DIR`` the person who started the board gave.
  Below a root, no folder or file may start with ``.`` (``~/.ssh``, ``.git``, ``.env``).
- Every place a dataset names (``dataset_info.json``'s ``file_name`` / ``script_url``, the name as a path) obeys
  the same rule; its hub fields (``hf_hub_url``, ``ms_hub_url``, ``om_hub_url``) must be hub ids, never local
  paths, and ``cloud_file_name`` is refused. The board's jobs and its sample preview read data *confined* to
  the roots (``tunekit.data.dataset_info.confined_to`` / ``$TUNEKIT_DATA_ROOTS``), so a ``dataset_info.json``
  changed after the check is held to the same rule.
- "Save config" writes only ``.yaml`` / ``.yml`` / ``.json`` files, only inside the workspace, and
  replaces an existing file only when asked to.
- Options that run code named by the user (``trust_remote_code``, ``reward_funcs``) are refused unless the
  board was started with ``--allow-remote-code``.
- Messages quote what a file holds only as a short escaped excerpt (:func:`excerpt`, :func:`safe_message`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tunekit.config.engines import DEEPSPEED_PRESETS  # presets are not paths (declared once: z1 was missing here)
from tunekit.config.lists import split_list
from tunekit.config.problems import Said, message_of
from tunekit.data.dataset_info import entry_locations, hub_id_problem, read_dataset_info
from tunekit.errors import ConfigError, TunekitError

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
MAX_CONFIG_BYTES = 1_000_000
EXCERPT_CHARS = 24  # the most of a file's text a message quotes

# option -> what it names; "read" paths are opened by the board or its jobs, "write" folders are created
READ_OPTIONS = (
    "model_name_or_path",
    "adapter_name_or_path",
    "ref_model",
    "ref_model_adapters",
    "reward_model",
    "reward_model_adapters",
    "dataset_dir",
    "media_dir",
    "deepspeed",
    "fsdp_config",
    "tokenized_path",
    "resume_from_checkpoint",
    "export_quantization_dataset",
    "new_special_tokens_config",
)
DATASET_OPTIONS = ("dataset", "eval_dataset", "export_quantization_dataset")  # names in dataset_info.json, or paths
WRITE_OPTIONS = ("output_dir", "export_dir", "cache_dir", "swanlab_logdir", "ray_storage_path")
LIST_OPTIONS = ("adapter_name_or_path", "ref_model_adapters", "reward_model_adapters")  # comma-separated
CODE_OPTIONS = ("trust_remote_code", "reward_funcs", "ray_init_kwargs")  # ray.init: runtime_env installs code


class PathRefused(ConfigError):
    """A path the board may not read or write."""


def excerpt(text: Any, limit: int = EXCERPT_CHARS) -> str:
    """``text`` escaped (no newlines, control characters or backticks) and cut to ``limit`` characters."""
    s = repr(str(text))[1:-1].replace("`", "\\x60")
    return s if len(s) <= limit else s[:limit] + "…"


_QUOTED = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"")


def safe_message(message: str, max_lines: int = 6, limit: int = EXCERPT_CHARS) -> str:
    """A message safe to show: every quoted piece cut to a short excerpt, each line to 200 characters,
    at most ``max_lines`` lines (the rest counted)."""

    def cut(m: re.Match) -> str:
        q = "'" if m.group(1) is not None else '"'
        return q + excerpt(m.group(1) if m.group(1) is not None else m.group(2), limit) + q

    lines = [_QUOTED.sub(cut, line) for line in str(message).splitlines()]
    lines = [excerpt(line, 200) if len(line) > 200 else line.replace("`", "'") for line in lines]
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... and {len(lines) - max_lines} more line(s)"]
    return "\n".join(lines)


def _default_caches() -> list[Path]:
    """The Hugging Face hub cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub``): where hub ids are downloaded to."""
    try:
        from huggingface_hub import constants

        return [Path(constants.HF_HUB_CACHE)]
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency of transformers
        return [Path(os.path.expanduser("~/.cache/huggingface/hub"))]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class PathPolicy:
    """The allowed roots of one board, and the checks of every path it is given."""

    def __init__(
        self,
        workspace: str | Path,
        allow: Iterable[str | Path] = (),
        caches: Iterable[str | Path] | None = None,
        allow_remote_code: bool = False,
    ):
        self.workspace = Path(workspace).expanduser().resolve()
        self.extra = [Path(p).expanduser().resolve() for p in allow]
        self.caches = [Path(p).expanduser().resolve() for p in (_default_caches() if caches is None else caches)]
        self.allow_remote_code = allow_remote_code

    @property
    def roots(self) -> list[Path]:
        return [self.workspace, *self.caches, *self.extra]

    def _resolve(self, value: str) -> Path:
        p = Path(str(value)).expanduser()
        return (p if p.is_absolute() else self.workspace / p).resolve()

    def _hidden_below(self, path: Path, root: Path) -> str | None:
        hidden = [part for part in path.relative_to(root).parts if part.startswith(".")]
        return hidden[0] if hidden else None

    def check(self, value: str, what: str, roots: list[Path] | None = None) -> Path:
        """``value`` resolved; :class:`PathRefused` unless it is inside one of ``roots`` (default: all)."""
        path = self._resolve(value)
        roots = self.roots if roots is None else roots
        for root in roots:
            if _inside(path, root):
                hidden = self._hidden_below(path, root)
                if hidden is None:
                    return path
                raise PathRefused(Said("path_hidden", what=what, value=excerpt(value, 80), hidden=excerpt(hidden, 40)))
        where = tuple(str(r) for r in roots)
        raise PathRefused(Said("path_outside", what=what, value=excerpt(value, 80), roots=where))

    # ---------------------------------------------------------------- config files
    def config_file(self, value: str, *, write: bool = False) -> Path:
        """A config file to load (any allowed root) or save (the workspace only): .yaml/.yml/.json."""
        if not str(value or "").strip():
            raise PathRefused(Said("board_config_name"))
        what = Said("path_what_config_file")
        path = self.check(value, what, [self.workspace] if write else None)
        if path.suffix.lower() not in CONFIG_SUFFIXES:
            verb = Said("part_board_saves") if write else Said("part_board_loads")
            raise PathRefused(Said("board_config_suffix", what=what, value=excerpt(value, 80), verb=verb))
        return path

    # ---------------------------------------------------------------- options
    def problems(self, values: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``(option, message)`` for every path option of ``values`` the board may not use."""
        out: list[tuple[str, str]] = []

        def check(option: str, value: str, what: str | None = None) -> bool:
            try:
                self.check(value, what or Said("path_what_option", option=option))
            except PathRefused as exc:
                out.append((option, exc.args[0]))  # the keyed message (the board says it in the page's language)
                return False
            return True

        for option in READ_OPTIONS + WRITE_OPTIONS:
            value = values.get(option)
            if value in (None, "") or isinstance(value, bool):
                continue
            if option == "deepspeed" and str(value) in DEEPSPEED_PRESETS:
                continue
            parts = [p.strip() for p in str(value).split(",")] if option in LIST_OPTIONS else [str(value)]
            for part in filter(None, parts):
                check(option, part)
        if not self.allow_remote_code:
            for option in CODE_OPTIONS:
                if values.get(option) not in (None, "", False):
                    out.append((option, Said("path_remote_code", option=option)))
        dataset_dir = values.get("dataset_dir") or "data"
        if not any(o == "dataset_dir" for o, _ in out):
            for option in DATASET_OPTIONS:
                for name in _names(values.get(option)):
                    problem = self.dataset_problem(option, name, dataset_dir)
                    if problem:
                        out.append((option, problem))
        return out

    def dataset_problem(self, option: str, name: str, dataset_dir: str) -> str | None:
        """Why dataset ``name`` (a dataset_info.json entry, else a path) names a place the board may not read."""
        what = Said("path_what_dataset", option=option, name=excerpt(name, 40))
        ddir = self._resolve(dataset_dir)
        try:
            info = read_dataset_info(ddir)
        except (TunekitError, OSError) as exc:  # nothing is checked, so nothing may be read: refused
            safe = safe_message(str(exc), 1)  # keyed (said in the page's language) unless the text had to be cut
            return Said("path_dataset_info", what=what, error=message_of(exc) if safe == str(exc) else safe)
        if name in info:
            places = entry_locations(info[name], ddir)
        else:  # a path, as resolve_datasets reads it: as given (relative to the workspace), else in dataset_dir
            p = Path(name).expanduser()
            places = [("file", "path", str(p))] + ([("file", "path", str(ddir / name))] if not p.is_absolute() else [])
        for key, kind, value in places:
            try:
                if kind == "path":
                    self.check(value, Said("path_what_key", what=what, key=key))
                elif kind == "hub":
                    problem = hub_id_problem(value, self.workspace)
                    if problem:
                        return Said("path_hub", what=what, key=key, value=excerpt(value, 80), problem=problem)
                else:
                    return Said("path_cloud", what=what, key=key)
            except PathRefused as exc:
                return exc.args[0]
        return None


def _names(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return split_list(value)
