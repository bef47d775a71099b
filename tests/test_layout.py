"""The package's form: module and function sizes, no private names across modules, no dates.

The layers and the absence of import cycles are checked by ``lint-imports`` (the contracts in
``pyproject.toml``, run by ``.ci/run``); these are the rules it does not cover.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pymc_tempering"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_MODULE_LINES = 700
MAX_BODY_LINES = 80  # a function's body, after its docstring
DATE = re.compile(r"20\d\d-\d\d-\d\d")


def _name(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def test_the_package_has_modules():
    assert len(MODULES) > 20


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_module_size(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)}: {lines} lines"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_function_bodies(path):
    long = [
        f"{node.name} ({_body_lines(node)} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and _body_lines(node) > MAX_BODY_LINES
    ]
    assert not long, f"{_name(path)}: {long}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_private_name_from_another_module(path):
    """``from pymc_tempering.x import _y`` reaches into another module's internals: a name
    another module needs is public, or lives with its one user."""
    private = [
        f"{alias.name} from {node.module}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pymc_tempering")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert not private, f"{_name(path)}: {private}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_dates(path):
    """Docstrings describe behaviour; when something was measured belongs to git history."""
    dated = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if DATE.search(line)]
    assert not dated, f"{_name(path)}: lines {dated}"
