"""Cross-file snippets for training samples: definitions from sibling modules of the same package.

Role: give a training sample the kind of header the language server builds at serving time
(`context/crossfile.py`): first the definitions the file imports from its siblings, then the
sibling definitions whose names the file uses. The model learns to read the header. Python
only, with `ast`.

Invariants:
- Pure: a `SiblingIndex` is built from texts; nothing here reads files.
- A snippet is the definition's source (decorators included), cut to `SNIPPET_LINES` lines.
- Snippets never come from the file itself, and each definition appears at most once.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass

SNIPPET_LINES = 12


@dataclass(frozen=True, slots=True)
class Definition:
    path: str  # relative path of the module that defines it
    name: str
    text: str  # its source, at most SNIPPET_LINES lines


class SiblingIndex:
    """Top-level definitions of the modules of one directory, by module path."""

    def __init__(self, modules: Mapping[str, str]) -> None:
        self._defs: dict[str, dict[str, Definition]] = {
            path: _definitions(path, text) for path, text in modules.items()
        }

    def imported_by(self, path: str, text: str) -> list[Definition]:
        """Sibling definitions that file `path` (content `text`) imports by name."""
        out: dict[tuple[str, str], Definition] = {}
        for module, names in _sibling_imports(path, text):
            defs = self._defs.get(module, {}) if module != path else {}
            for name in names:
                if name in defs:
                    out.setdefault((module, name), defs[name])
        return list(out.values())

    def for_file(self, path: str, text: str) -> list[Definition]:
        """The header's definitions for file `path`: those it imports, then those it uses."""
        chosen = {(d.path, d.name): d for d in self.imported_by(path, text)}
        for d in self.used_in(path, text):
            chosen.setdefault((d.path, d.name), d)
        return list(chosen.values())

    def used_in(self, path: str, code: str) -> list[Definition]:
        """Sibling definitions whose names occur in `code` (a window of file `path`)."""
        used = set(_IDENTIFIER.findall(code))
        return [
            definition
            for module in sorted(self._defs)
            if module != path
            for name, definition in self._defs[module].items()
            if name in used
        ]


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _definitions(path: str, text: str) -> dict[str, Definition]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    lines = text.splitlines()
    out: dict[str, Definition] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name.startswith("__"):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        end = min(node.end_lineno or node.lineno, start + SNIPPET_LINES)
        out[node.name] = Definition(path, node.name, "\n".join(lines[start:end]) + "\n")
    return out


def _sibling_imports(path: str, text: str) -> list[tuple[str, list[str]]]:
    """(sibling module path, imported names) for each `from X import a, b` that names a sibling."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    directory = posixpath.dirname(path)
    package = directory.replace("/", ".")
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.level == 1:
            module = node.module
        elif node.level == 0 and package and node.module.startswith(package + "."):
            module = node.module[len(package) + 1 :]
        else:
            continue
        if "." in module:
            continue
        names = [a.name for a in node.names if a.name != "*"]
        out.append((posixpath.join(directory, module + ".py"), names))
    return out
