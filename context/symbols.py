"""Undeclared symbols of a file: names used as values that nothing in scope declares.

Role: feeds diagnostics and "add import / generate definition" code actions.
- Python: pyflakes' "undefined name" messages, mapped to UTF-16 ranges.
- JavaScript, TypeScript, TSX, Go, Rust: the language's `<lang>-locals.scm` marks identifiers in
  certain value positions (`@reference.*`); every other name-like node in the file counts as a
  declaration, wherever it is. A reference is reported only when its name is declared nowhere in
  the file, is not a language global (`<lang>-globals.txt`), and is not provided from elsewhere:
  JS/TS globals from `.d.ts` files (and, for scripts, from other files), Go names from the other
  files of the package, names in `/* global a, b */` comments.

Invariants: conservative — no report where the name might be declared. Constructs that can bring
in unknown names switch the check off for the file: Go dot imports, Go selector operands when a
non-standard-library import's package name is unknown, Rust glob imports, JS `with` statements.
Names inside parse-error regions count as declared and are never reported. Never raises.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import tree_sitter as ts
from pyflakes import checker, messages

from context.document import DocumentSnapshot
from context.index import WorkspaceIndex
from context.languages import Language
from context.positions import Position, Range, decode_prefix, encode_text, utf16_length
from context.tags import tags_of_text

_GLOBAL_COMMENT = re.compile(r"/\*\s*globals?\s+([^*]*)\*/")
_RUST_GLOB = re.compile(r"::\s*\*")
_JS_WITH = re.compile(r"\bwith\s*\(")


@dataclass(frozen=True, slots=True)
class UndeclaredSymbol:
    name: str
    range: Range
    kind: str  # "call" (the name is called) or "value"


UndefinedNames = Callable[[str, str], list[tuple[str, int, int]]]


def undeclared_symbols(
    snapshot: DocumentSnapshot, index: WorkspaceIndex | None = None, undefined_names: UndefinedNames | None = None
) -> list[UndeclaredSymbol]:
    """Names the file uses but nothing declares, in document order. For Python, `undefined_names`
    runs pyflakes (`python_undefined_names`, or a caller's way of running it elsewhere)."""
    language = snapshot.language
    if language is None:
        return []
    if language.name == "python":
        return _python(snapshot, undefined_names or python_undefined_names)
    if snapshot.tree is None or language.locals_query is None:
        return []
    return _tree_sitter(snapshot, language, snapshot.tree, index)


def python_undefined_names(text: str, filename: str) -> list[tuple[str, int, int]]:
    """pyflakes' undefined names of Python source `text`: (name, 0-based line, UTF-8 byte column);
    [] when it does not parse. Plain values in and out, so it can run in another process (the
    parse and the check hold the interpreter lock for seconds on a 1 MB file)."""
    try:
        tree = ast.parse(text, filename=filename)
    except (SyntaxError, ValueError):
        return []
    return [
        (message.message_args[0], message.lineno - 1, message.col)
        for message in checker.Checker(tree, filename=filename).messages
        if isinstance(message, messages.UndefinedName)
    ]


def _python(snapshot: DocumentSnapshot, undefined_names: UndefinedNames) -> list[UndeclaredSymbol]:
    found = [_python_symbol(snapshot, name, line, column) for name, line, column in undefined_names(snapshot.text, snapshot.path or "<document>")]
    return sorted(found, key=lambda s: s.range.start)


def _python_symbol(snapshot: DocumentSnapshot, name: str, line: int, byte_column: int) -> UndeclaredSymbol:
    text = snapshot.line(line)
    column = len(decode_prefix(encode_text(text)[:byte_column]))
    match = re.compile(rf"(?<![\w]){re.escape(name)}(?![\w])").search(text, column)
    start = match.start() if match else column
    end = start + len(name)
    kind = "call" if text[end:].lstrip().startswith("(") else "value"
    return UndeclaredSymbol(
        name, Range(Position(line, utf16_length(text[:start])), Position(line, utf16_length(text[:end]))), kind
    )


def _tree_sitter(
    snapshot: DocumentSnapshot, language: Language, tree: ts.Tree, index: WorkspaceIndex | None
) -> list[UndeclaredSymbol]:
    root = tree.root_node
    if _disabled(language, root, snapshot.text):
        return []
    candidates, declared = _references_and_declarations(snapshot, language, root)
    candidates = [(n, k) for n, k in candidates if _text(n) and _text(n) not in declared]
    if not candidates:
        return []
    external = _external_names(snapshot, language, root, index, {_text(n) for n, _ in candidates})
    if external is None:
        return []
    lines = snapshot.lines
    found = [
        UndeclaredSymbol(_text(n), Range(lines.position_of_byte(n.start_byte), lines.position_of_byte(n.end_byte)), k)
        for n, k in candidates
        if _text(n) not in external and not _go_uncertain_operand(language, root, n)
    ]
    return sorted(found, key=lambda s: s.range.start)


def _references_and_declarations(
    snapshot: DocumentSnapshot, language: Language, root: ts.Node
) -> tuple[list[tuple[ts.Node, str]], set[str]]:
    """Value references outside parse errors, and every name the file (or the language) declares."""
    captures = ts.QueryCursor(language.locals_query).captures(root)
    references: dict[tuple[int, int], tuple[ts.Node, str]] = {}
    for kind in ("value", "call"):
        for node in captures.get(f"reference.{kind}", []):
            references[node.byte_range] = (node, kind)
    errors = sorted(node.byte_range for node in captures.get("error", []))
    declared = {_text(n) for n in captures.get("name", []) if n.byte_range not in references}
    declared |= {_text(n) for n in captures.get("declaration", [])}
    declared |= language.globals
    if language.globals_name == "javascript":
        declared |= _comment_globals(snapshot.text)
    if language.name == "go":
        declared |= {name for spec in _go_import_specs(root) for name in _go_import_names(spec) or ()}
    candidates: list[tuple[ts.Node, str]] = []
    for node, kind in references.values():
        if _inside(node.byte_range, errors):
            declared.add(_text(node))
        else:
            candidates.append((node, kind))
    return candidates, declared


def _disabled(language: Language, root: ts.Node, text: str) -> bool:
    """Whether the file may pull in names this check cannot see (text tests err on the safe side)."""
    if language.name == "rust":
        return _RUST_GLOB.search(text) is not None
    if language.name == "go":
        return any(_go_import_names(spec) is None for spec in _go_import_specs(root))
    return _JS_WITH.search(text) is not None


def _external_names(
    snapshot: DocumentSnapshot, language: Language, root: ts.Node, index: WorkspaceIndex | None, names: set[str]
) -> set[str] | None:
    """Which of `names` other files provide; None when that cannot be known (check nothing)."""
    if language.name == "go":
        return _go_package_names(snapshot, index)
    if language.globals_name != "javascript" or index is None:
        return set()
    script = not any(child.type in ("import_statement", "export_statement") for child in root.children)
    provided = set()
    for name in names:
        for definition in index.definitions(name):
            if definition.path.endswith(".d.ts") or (script and definition.path != snapshot.path):
                provided.add(name)
    return provided


def _go_package_names(snapshot: DocumentSnapshot, index: WorkspaceIndex | None) -> set[str] | None:
    """Top-level names declared by the other `.go` files of this file's directory."""
    if snapshot.path is None:
        return set()
    directory = os.path.dirname(snapshot.path)
    try:
        siblings = [e.path for e in os.scandir(directory) if e.name.endswith(".go") and e.path != snapshot.path]
    except OSError:
        return set()
    names: set[str] = set()
    for path in siblings:
        tags = index.file_tags(path) if index is not None else None
        if tags is None:
            try:
                with open(path, encoding="utf-8") as file:
                    text = file.read()
            except (OSError, UnicodeDecodeError):
                return None
            tags = tags_of_text(snapshot.language, text, path)
        names.update(d.name for d in tags.definitions)
    return names


def _go_import_specs(root: ts.Node) -> list[ts.Node]:
    specs: list[ts.Node] = []
    for child in root.children:
        if child.type == "import_declaration":
            stack = [child]
            while stack:
                node = stack.pop()
                if node.type == "import_spec":
                    specs.append(node)
                else:
                    stack.extend(node.named_children)
    return specs


def _go_import_names(spec: ts.Node) -> set[str] | None:
    """The names an import spec binds; None for a dot import (binds everything exported)."""
    name = spec.child_by_field_name("name")
    if name is not None:
        if name.type == "dot":
            return None
        return {_text(name)}
    path = spec.child_by_field_name("path")
    return {_text(path).strip('"`').rsplit("/", 1)[-1]} if path is not None else set()


def _go_uncertain_operand(language: Language, root: ts.Node, node: ts.Node) -> bool:
    """A selector operand (`x.Y`) might name a package whose name is not its import path's last
    element (any import outside the standard library, unless it names its package)."""
    if language.name != "go" or node.parent is None or node.parent.type != "selector_expression":
        return False
    for spec in _go_import_specs(root):
        path = spec.child_by_field_name("path")
        if spec.child_by_field_name("name") is None and path is not None and "." in _text(path).split("/")[0]:
            return True
    return False


def _comment_globals(text: str) -> set[str]:
    """Names listed in `/* global a, b:writable */` comments."""
    names = set()
    for match in _GLOBAL_COMMENT.finditer(text):
        names.update(part.split(":")[0].strip() for part in match.group(1).split(","))
    return {name for name in names if name}


def _inside(span: tuple[int, int], regions: list[tuple[int, int]]) -> bool:
    return any(start <= span[0] and span[1] <= end for start, end in regions)


def _text(node: ts.Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogatepass")
