"""Reading a config file: YAML as every config reader should read it, and JSON.

Both refuse what would silently change a run: a key given twice (YAML's and JSON's parsers keep the last one),
and a YAML document whose aliases expand it past ``MAX_YAML_NODES`` ("billion laughs"). Every mistake is a
:class:`~tunekit.errors.ConfigError` naming the file, the line and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .problems import excerpt

# A config holds tens of options; YAML aliases can multiply a 471-byte file into 10**9 nodes ("billion
# laughs"). Refuse a document whose nodes, counted with every alias expanded, exceed this.
MAX_YAML_NODES = 100_000


def _yaml_loader_class():
    """SafeLoader (libyaml's when available) that refuses duplicate keys, naming both lines."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):
        def construct_mapping(self, node, deep=False):
            first: dict[Any, tuple[int, int]] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                at = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                if key in first:
                    (line, col), (line2, col2) = first[key], at
                    where = f"lines {line} and {line2}" if line != line2 else f"line {line}, columns {col} and {col2}"
                    raise ConfigError(f"{self.name}: key {excerpt(key)} is given twice ({where}); keep one of them.")
                first[key] = at
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def _expanded_nodes(root, path) -> int:
    """Nodes of the YAML graph with every alias expanded (memoized per node, so linear in the file size)."""
    import yaml

    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if children_done:
            active.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(node)] > MAX_YAML_NODES:
                raise ConfigError(
                    f"{path} expands to more than {MAX_YAML_NODES:,} YAML nodes through its aliases (*name) "
                    f"(line {node.start_mark.line + 1}); a config needs only a few dozen: write the values out."
                )
            continue
        if id(node) in active:
            raise ConfigError(
                f"{path}: a YAML alias refers to itself (line {node.start_mark.line + 1}); remove the recursion."
            )
        active.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def load_yaml_text(text: str, path) -> Any:
    """YAML text → data, as every config reader should: duplicate keys and alias bombs (more than
    ``MAX_YAML_NODES`` nodes once aliases are expanded) are :class:`ConfigError`s naming ``path``."""
    loader = _yaml_loader_class()(text)
    loader.name = str(path)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_nodes(node, path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _json_pairs(path):
    def hook(pairs):
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ConfigError(f"{path}: key {excerpt(key)} is given twice; keep one of them.")
            out[key] = value
        return out

    return hook


def _yaml_problem(exc: Exception) -> str:
    """One line for a YAML error (PyYAML's own text spans four lines, with a caret under the text): where and what."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or not problem:
        return " ".join(str(exc).split())
    if "could not determine a constructor for the tag" in problem:
        problem += " (a Python or custom tag: config files hold plain values only; remove the tag)"
    elif "tab character" in problem or ("cannot start any token" in problem and "\\t" in problem):
        problem += " (YAML indents with spaces, never tabs)"
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def read_config_file(path: str | Path) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"Config file {path} is a folder, not a file: give the YAML or JSON file inside it.")
    if not path.is_file():
        raise ConfigError(f"Config file {path} does not exist.")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} is not UTF-8: byte {exc.start} (line {line}: {raw[exc.start : exc.start + 4].hex(' ')}) "
            f"cannot be decoded. Save the config as UTF-8, e.g. `iconv -f <ENCODING> -t UTF-8`."
        ) from None
    try:
        data = (
            json.loads(text, object_pairs_hook=_json_pairs(path))
            if path.suffix == ".json"
            else load_yaml_text(text, path)
        )
    except (json.JSONDecodeError, yaml.YAMLError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else _yaml_problem(exc)
        why = why if len(why) <= 500 else why[:500] + " ..."
        raise ConfigError(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {why}") from None
    if data is None:
        raise ConfigError(
            f"{path} holds no options (it is empty or only comments): write the run's options into it "
            f"as `option: value` lines (see `tunekit train --help`)."
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of option: value, found {type(data).__name__}.")
    return data
