"""Reading a config file: YAML as every config reader should read it, and JSON.

Both refuse what would silently change a run: a key given twice (YAML's and JSON's parsers keep the last one),
and a YAML document whose aliases expand it past ``MAX_YAML_NODES`` ("billion laughs"). Every mistake is a
:class:`~tunekit.errors.ConfigError` naming the file, the line and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .problems import Said, config_error, excerpt

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
                    where = (
                        Said("part_cfgfile_lines", line=line, line2=line2)
                        if line != line2
                        else Said("part_cfgfile_columns", line=line, column=col, column2=col2)
                    )
                    raise config_error("cfgfile_key_twice_at", path=str(self.name), key=excerpt(key), where=where)
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
                line = node.start_mark.line + 1
                raise config_error("cfgfile_alias_bomb", path=str(path), limit=MAX_YAML_NODES, line=line)
            continue
        if id(node) in active:
            raise config_error("cfgfile_alias_loop", path=str(path), line=node.start_mark.line + 1)
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
                raise config_error("cfgfile_key_twice", path=str(path), key=excerpt(key))
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
        raise config_error("cfgfile_is_folder", path=str(path))
    if not path.is_file():
        raise config_error("cfgfile_missing", path=str(path))
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        shown = raw[exc.start : exc.start + 4].hex(" ")
        raise config_error("cfgfile_not_utf8", path=str(path), byte=exc.start, line=line, bytes=shown) from None
    try:
        data = (
            json.loads(text, object_pairs_hook=_json_pairs(path))
            if path.suffix == ".json"
            else load_yaml_text(text, path)
        )
    except (json.JSONDecodeError, yaml.YAMLError, RecursionError) as exc:
        why = Said("part_json_nested") if isinstance(exc, RecursionError) else _yaml_problem(exc)
        why = why if len(why) <= 500 else why[:500] + " ..."
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise config_error("cfgfile_invalid", path=str(path), kind=kind, why=why) from None
    if data is None:
        raise config_error("cfgfile_empty", path=str(path))
    if not isinstance(data, dict):
        raise config_error("cfgfile_not_mapping", path=str(path), kind=type(data).__name__)
    return data
