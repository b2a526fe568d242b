"""The size limits of the project's guide, as a test: no module in ``src/`` over 500 lines, no function over 80.

A module that is a data table (one literal: help texts, a name list) may be longer; each is listed in
:data:`DATA_TABLES` with the reason. Functions are measured from their ``def`` line (decorators excluded) to
their last line, nested functions counted within their parent as well as on their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT

SRC = ROOT / "src" / "tunekit"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# Modules that are data, not code: the length is the table's, and splitting it would only scatter one list.
# None today (config/help_zh.py, the longest table, is 269 lines); add "path": "why" here, never a code module.
DATA_TABLES: dict[str, str] = {}


def _modules(src: Path = SRC) -> list[Path]:
    return sorted(p for p in src.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path, src: Path = SRC) -> str:
    return path.relative_to(src).as_posix()


def long_modules() -> list[str]:
    out = []
    for path in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES and _rel(path) not in DATA_TABLES:
            out.append(f"{_rel(path)}: {lines} lines")
    return out


def long_functions() -> list[str]:
    out = []
    for path in _modules():
        if _rel(path) in DATA_TABLES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out.append(f"{_rel(path)}:{node.lineno} {node.name}: {lines} lines")
    return out


def test_no_module_over_500_lines():
    assert long_modules() == []


def test_no_function_over_80_lines():
    assert long_functions() == []


def test_the_data_table_allow_list_names_existing_modules():
    assert [m for m in DATA_TABLES if not (SRC / m).is_file()] == []


def test_the_measure_catches_a_long_function(tmp_path):
    """The function measure counts def-to-end lines (a long function is found, a short one is not)."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))  # def line + 80 body lines = 81
    tree = ast.parse(f"def long():\n{body}\n\ndef short():\n    return 1\n")
    sizes = {n.name: n.end_lineno - n.lineno + 1 for n in tree.body}
    assert sizes == {"long": MAX_FUNCTION_LINES + 1, "short": 2}


MAX_DEFERRED_IMPORTS_PER_1000_LINES = 3


def deferred_own_imports(src: Path = SRC) -> tuple[list[str], int]:
    """Imports of tunekit's own modules inside functions (docs/architecture.md: only to keep a command's start-up
    free of a heavy package), and the lines of src/tunekit they are counted against."""
    found, total_lines = [], 0
    for path in _modules(src):
        text = path.read_text(encoding="utf-8")
        total_lines += len(text.splitlines())
        for func in ast.walk(ast.parse(text)):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in func.body:
                for imp in ast.walk(node):
                    own = (
                        isinstance(imp, ast.ImportFrom) and (imp.level > 0 or (imp.module or "").startswith("tunekit"))
                    ) or (isinstance(imp, ast.Import) and any(a.name.startswith("tunekit") for a in imp.names))
                    if own:
                        found.append(f"{_rel(path, src)}:{imp.lineno}")
    return sorted(set(found)), total_lines


def test_imports_of_tunekit_inside_functions_stay_rare():
    found, lines = deferred_own_imports()
    assert len(found) * 1000 <= MAX_DEFERRED_IMPORTS_PER_1000_LINES * lines, found


def test_the_deferred_import_count_sees_a_function_level_import(tmp_path):
    """The count is not vacuous: a module with one import of tunekit inside a function is found."""
    (tmp_path / "m.py").write_text("def f():\n    from tunekit.env import env_flag\n    return env_flag\n")
    found, lines = deferred_own_imports(tmp_path)
    assert (found, lines) == (["m.py:2"], 3)
