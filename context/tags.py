"""Tags of one parsed file: its definitions, the names it references and its imports.

Role: run the language's `queries/<lang>-tags.scm` over a tree and turn the captures into plain
dataclasses with LSP ranges (UTF-16). Imports are resolved to workspace files through an optional
`ImportResolver`.

Invariants:
- Never raises on file content: a file with syntax errors yields whatever its tree still holds,
  an unsupported language or a missing tree yields empty tags.
- When one name node matches several definition patterns, the first pattern in the query file
  wins (so a method is a "method", not also a "function").
- `Definition.text_snippet` is the definition's source, dedented, cut to `SNIPPET_LINES` lines
  (a cut snippet ends with a `<comment> ...` line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import tree_sitter as ts

from context.languages import Language
from context.positions import Range, TextIndex, decode_bytes

if TYPE_CHECKING:
    from context.document import DocumentSnapshot
    from context.resolve import ImportResolver

SNIPPET_LINES = 24
# A buffer over this many characters gets no whole-tree query on the path of a completion or an
# analysis (no tags from the editor's text: the workspace index keeps the file's tags from disk; no
# Python scopes for the constraint; no imports for retrieval): such a query runs in py-tree-sitter
# holding the interpreter lock for the whole tree, and its collector is Python per capture (2.7 s
# and more for 1 MB of Python on the loaded 2-core build machine).
MAX_BUFFER_TAG_CHARS = 250_000
SNIPPET_CHARS = 1600
_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    kind: str  # function, method, class, struct, interface, type, enum, trait, module, ...
    path: str
    range: Range  # the name
    body_range: Range  # the whole definition
    text_snippet: str


@dataclass(frozen=True, slots=True)
class Reference:
    name: str
    path: str
    range: Range
    kind: str = "call"  # call, method (a call through `x.`), class, type, import, macro, trait


@dataclass(frozen=True, slots=True)
class Import:
    """One import. `names` are the names taken from the module (a default import's local name in
    JS/TS); empty when the module itself is imported. `wildcard` marks `*` and namespace imports.
    `resolved_path` is the workspace file imported (a package directory for Go), else None."""

    module: str
    names: tuple[str, ...]
    range: Range
    resolved_path: str | None
    wildcard: bool = False


@dataclass(frozen=True, slots=True)
class FileTags:
    definitions: tuple[Definition, ...] = ()
    references: tuple[Reference, ...] = ()
    imports: tuple[Import, ...] = ()


EMPTY_TAGS = FileTags()


def extract_tags(
    source: DocumentSnapshot | tuple[Language | None, str, ts.Tree | None],
    resolver: ImportResolver | None = None,
    path: str = "",
) -> FileTags:
    """Tags of an open document's snapshot, or of `(language, text, tree)` at `path` (a None tree
    is parsed here)."""
    if isinstance(source, tuple):
        language, text, tree = source
        lines = TextIndex(text)
        if tree is None and language is not None:
            tree = language.parse(lines.data)
        return tags_of(language, lines, tree, path, resolver)
    return tags_of(source.language, source.lines, source.tree, source.path or "", resolver)


def tags_of_text(
    language: Language | None, text: str, path: str = "", resolver: ImportResolver | None = None
) -> FileTags:
    """Tags of a file's text (parsed here)."""
    return extract_tags((language, text, None), resolver, path)


def tags_of(
    language: Language | None,
    lines: TextIndex,
    tree: ts.Tree | None,
    path: str,
    resolver: ImportResolver | None = None,
) -> FileTags:
    """Tags of an already parsed text."""
    if language is None or tree is None:
        return EMPTY_TAGS
    collector = _Collector(language, lines, path)
    for pattern, captures in ts.QueryCursor(language.tags_query).matches(tree.root_node):
        collector.add(pattern, captures)
    return collector.finish(resolver)


class _Collector:
    def __init__(self, language: Language, lines: TextIndex, path: str) -> None:
        self.language = language
        self.lines = lines
        self.path = path
        self.definitions: dict[tuple[int, int], tuple[int, Definition]] = {}
        self.references: dict[tuple[int, int], Reference] = {}
        self.imports: dict[tuple[int, int, str], _PendingImport] = {}

    def add(self, pattern: int, captures: dict[str, list[ts.Node]]) -> None:
        for capture, nodes in captures.items():
            if capture.startswith("name.definition."):
                self._definition(pattern, capture.removeprefix("name.definition."), nodes[0], captures)
            elif capture.startswith("name.reference."):
                kind = capture.removeprefix("name.reference.")
                for node in nodes:
                    self.references.setdefault(node.byte_range, Reference(_text(node), self.path, self.range(node), kind))
        if "import" in captures:
            self._import(captures)

    def finish(self, resolver: ImportResolver | None) -> FileTags:
        definitions = sorted((d for _, d in self.definitions.values()), key=lambda d: d.range.start)
        references = sorted(self.references.values(), key=lambda r: r.range.start)
        imports: list[Import] = []
        for pending in self.imports.values():
            imports += pending.build(self.language.name, self.path, resolver)
        imports.sort(key=lambda i: i.range.start)
        return FileTags(tuple(definitions), tuple(references), tuple(imports))

    def range(self, node: ts.Node) -> Range:
        lines = self.lines
        return Range(
            lines.position_of_point(node.start_byte, node.start_point),
            lines.position_of_point(node.end_byte, node.end_point),
        )

    def _definition(self, pattern: int, kind: str, name: ts.Node, captures: dict[str, list[ts.Node]]) -> None:
        key = name.byte_range
        if key in self.definitions and self.definitions[key][0] <= pattern:
            return
        body = self.range(captures.get(f"definition.{kind}", [name])[0])
        definition = Definition(_text(name), kind, self.path, self.range(name), body, self._snippet(body))
        self.definitions[key] = (pattern, definition)

    def _snippet(self, body: Range) -> str:
        """The definition's whole lines, dedented, cut to SNIPPET_LINES / SNIPPET_CHARS."""
        lines = self.lines
        first, last = body.start.line, body.end.line
        shown = min(last, first + SNIPPET_LINES - 1)
        end = lines.offset_at(body.end) if shown == last else lines.line_end(shown)
        kept = _dedent(_split_lines(lines.text[lines.line_start(first) : end]))
        size, count = 0, 0
        for count, line in enumerate(kept, start=1):
            size += len(line) + 1
            if size > SNIPPET_CHARS:
                count -= 1
                break
        else:
            if shown == last:
                return "\n".join(kept)
        kept = kept[: max(count, 1)]
        indent = kept[-1][: len(kept[-1]) - len(kept[-1].lstrip())]
        return "\n".join([*kept, f"{indent}{self.language.comment_prefix} ..."])

    def _import(self, captures: dict[str, list[ts.Node]]) -> None:
        statement = captures["import"][0]
        if "import.use" in captures:
            for module, name in _rust_use_paths(captures["import.use"][0], ()):
                self._pending(statement, module).add_name(name)
            return
        module_node = captures.get("import.module", [None])[0]
        if module_node is None:
            return
        module = _text(module_node)
        if module_node.parent is not None and module_node.parent.type == "mod_item":
            module = f"self::{module}"
        pending = self._pending(statement, module)
        for node in captures.get("import.name", []):
            pending.add_name(_text(node))
        if "import.wildcard" in captures:
            pending.add_name("*")

    def _pending(self, statement: ts.Node, module: str) -> _PendingImport:
        key = (statement.start_byte, statement.end_byte, module)
        if key not in self.imports:
            self.imports[key] = _PendingImport(module, self.range(statement))
        return self.imports[key]


class _PendingImport:
    def __init__(self, module: str, range: Range) -> None:
        self.module = module
        self.range = range
        self.names: dict[str, None] = {}

    def add_name(self, name: str | None) -> None:
        if name:
            self.names[name] = None

    def build(self, language: str, path: str, resolver: ImportResolver | None) -> list[Import]:
        """One import for the module; names that are themselves modules become imports of their own."""
        wildcard = "*" in self.names
        names = [n for n in self.names if n != "*"]
        if resolver is None:
            return [Import(self.module, tuple(names), self.range, None, wildcard)]
        imports, kept = [], []
        for name in names:
            submodule = resolver.resolve_submodule(language, self.module, name, path)
            if submodule:
                separator = "::" if language == "rust" else ("" if self.module.endswith(".") else ".")
                imports.append(Import(f"{self.module}{separator}{name}", (), self.range, submodule))
            else:
                kept.append(name)
        if kept or wildcard or not names:
            resolved = resolver.resolve(language, self.module, path)
            imports.insert(0, Import(self.module, tuple(kept), self.range, resolved, wildcard))
        return imports


def _rust_use_paths(node: ts.Node, prefix: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """Flatten a Rust use tree into (module path, imported name) pairs; `*` for a glob."""
    kind = node.type
    if kind == "scoped_identifier":
        path = node.child_by_field_name("path")
        name = node.child_by_field_name("name")
        head = _rust_path(path) if path is not None else ()
        return [("::".join((*prefix, *head)), _text(name) if name is not None else None)]
    if kind == "use_as_clause":
        path = node.child_by_field_name("path")
        return _rust_use_paths(path, prefix) if path is not None else []
    if kind == "scoped_use_list":
        path = node.child_by_field_name("path")
        inner = (*prefix, *(_rust_path(path) if path is not None else ()))
        listing = node.child_by_field_name("list")
        return _rust_use_paths(listing, inner) if listing is not None else []
    if kind == "use_list":
        pairs: list[tuple[str, str | None]] = []
        for child in node.named_children:
            pairs += _rust_use_paths(child, prefix)
        return pairs
    if kind == "use_wildcard":
        inner = (*prefix, *(segment for child in node.named_children for segment in _rust_path(child)))
        return [("::".join(inner), "*")]
    if kind == "self" and prefix:
        return [("::".join(prefix), None)]
    if kind in ("identifier", "crate", "super", "self"):
        return [("::".join(prefix), _text(node))] if prefix else [(_text(node), None)]
    return []


def _rust_path(node: ts.Node) -> tuple[str, ...]:
    if node.type == "scoped_identifier":
        path = node.child_by_field_name("path")
        name = node.child_by_field_name("name")
        head = _rust_path(path) if path is not None else ()
        return (*head, _text(name)) if name is not None else head
    return (_text(node),)


def _split_lines(text: str) -> list[str]:
    return _EOL.split(text)


def _dedent(lines: list[str]) -> list[str]:
    """Remove the indentation all non-blank lines share (blank lines become empty)."""
    code = [line for line in lines if line.strip()]
    if not code:
        return [""] * len(lines)
    width = min(len(line) - len(line.lstrip()) for line in code)
    prefix = code[0][:width]
    if not all(line.startswith(prefix) for line in code):
        return [line if line.strip() else "" for line in lines]
    return [line[width:] if line.strip() else "" for line in lines]


def _text(node: ts.Node) -> str:
    return decode_bytes(node.text or b"")
