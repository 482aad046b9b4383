"""No module takes another package's private names: what one package offers another is public (no leading
underscore), so a rename inside a package never breaks a second one silently."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("swerl", "flows", "tasks")


def package_of(module: str) -> str:
    """``swerl.envs.docker_reaper`` -> ``swerl.envs``; a top-level package's own modules are that package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "swerl" else parts[0]


def private_imports_across_packages() -> list[str]:
    found = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
                    continue
                if node.module.split(".")[0] not in PACKAGES or package_of(node.module) == package_of(module):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{rel}.py:{node.lineno} takes {node.module}.{alias.name}")
    return found


def test_no_module_imports_another_package_s_private_names():
    assert private_imports_across_packages() == []


def test_the_check_sees_a_private_import_across_packages():
    assert package_of("swerl.envs.docker_reaper") == "swerl.envs"
    assert package_of("swerl.cli") == "swerl.cli" and package_of("tasks.common") == "tasks"
    tree = ast.parse("from swerl.demo.materialize import _RECORD_ORDER\n")
    node = tree.body[0]
    assert package_of(node.module) != package_of("swerl.curriculum.generate") and node.names[0].name.startswith("_")
