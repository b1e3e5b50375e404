"""The READMEs' Python blocks against the installed package.

The repository README's blocks run, in order, in one namespace (a later block may
use what an earlier one made, as a reader would); their own asserts check the
values they show. python/README.md's blocks are a reference sheet (top-level
`await`, cluster addresses, certificate files), so they are compiled and every
`sluicegate` name they use must exist in the installed package.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import sluicegate

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(relative: str) -> list[tuple[int, str]]:
    """Each ```python block of a README, with the line its code starts on."""
    text = (ROOT / relative).read_text(encoding="utf-8")
    blocks = [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]
    assert blocks, f"{relative} has no python block: the test would check nothing"
    return blocks


def test_repository_readme_python_blocks_run() -> None:
    namespace: dict[str, Any] = {"__name__": "readme"}
    for line, code in python_blocks("README.md"):
        # Padding keeps the README's line numbers in a traceback.
        exec(compile("\n" * (line - 1) + code, str(ROOT / "README.md"), "exec"), namespace)
    # The middleware example built an app with the limiter in front of it.
    assert type(namespace["app"]).__name__ == "FastAPI"


def sluicegate_names(tree: ast.AST) -> set[str]:
    """Dotted names under `sluicegate` the code uses: `sluicegate.X.Y` attribute
    chains and `from sluicegate[.mod] import X`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sluicegate":
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Attribute):
            parts: list[str] = []
            cur: ast.expr = node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id == "sluicegate":
                names.add(".".join(["sluicegate", *reversed(parts)]))
    return names


def resolve(dotted: str) -> object:
    parts = dotted.split(".")
    obj: object = sluicegate
    for i, part in enumerate(parts[1:], start=1):
        if not hasattr(obj, part):
            # A submodule not imported yet (sluicegate.asgi).
            obj = importlib.import_module(".".join(parts[: i + 1]))
        else:
            obj = getattr(obj, part)
    return obj


def test_python_readme_blocks_name_the_installed_api() -> None:
    used: set[str] = set()
    for line, code in python_blocks("python/README.md"):
        tree = compile(
            "\n" * (line - 1) + code,
            str(ROOT / "python/README.md"),
            "exec",
            flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        )
        used |= sluicegate_names(tree)
    assert len(used) >= 10, used
    missing = []
    for name in sorted(used):
        try:
            resolve(name)
        except (AttributeError, ImportError):
            missing.append(name)
    assert not missing, f"python/README.md uses names the package does not have: {missing}"
