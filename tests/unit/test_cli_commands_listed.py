"""The CLI's commands are listed in one place (``swerl.cli.COMMANDS``): no command module registers itself on import."""

from __future__ import annotations

import ast
from pathlib import Path

import swerl.cli
from swerl.cli import COMMANDS, GROUPS, app

CLI = Path(swerl.cli.__file__).parent


def test_no_command_module_registers_a_command_or_makes_a_group():
    found = []
    for path in sorted(CLI.glob("*.py")):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("command", "add_typer", "Typer"):
                found.append(f"{path.name}:{node.lineno} {node.attr}")
    assert found == []


def test_every_listed_command_is_what_swerl_help_shows():
    groups = {g.name: g.typer_instance for g in app.registered_groups}
    assert list(groups) == list(GROUPS)
    shown = [(None, c.name) for c in app.registered_commands] + [
        (name, c.name) for name, group in groups.items() for c in group.registered_commands]
    assert sorted(shown, key=str) == sorted(((g, n) for g, n, _ in COMMANDS), key=str)
    assert len(shown) == len(COMMANDS) == 21
