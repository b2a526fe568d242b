"""The size limits of the project's guide, as a test: no module in ``src/`` over 500 lines, no function over 80.

A module that is a data table (one literal: help texts, a name list) may be longer; each is listed in
:data:`DATA_TABLES` with the reason. Functions are measured from their ``def`` line (decorators excluded) to
their last line, nested functions counted within their parent as well as on their own.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tunekit"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# Modules that are data, not code: the length is the table's, and splitting it would only scatter one list.
# None today (config/help_zh.py, the longest table, is 269 lines); add "path": "why" here, never a code module.
DATA_TABLES: dict[str, str] = {}


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


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
