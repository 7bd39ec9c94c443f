"""Python scopes of one file: the names it binds, where each is visible, its classes, instances and imports.

Role: the IDE state behind a completion's constraint (`constraints.py`), its member lists
(`members.py`) and the reranker's undefined-name check (`rerank.py`). Bindings come from
`queries/python-scopes.scm`; each binding belongs to the innermost scope node around it (a
def/class name to the scope around its definition).

Invariants:
- Never raises on file content: a file with syntax errors yields what its tree still holds.
- Permissive where unsure: a name bound anywhere in a visible scope counts as visible (as pyflakes
  does), and `visible_at` also looks through the scopes around the last code before the cursor,
  since a cursor on a blank line may continue the block above it.
- Pure; `scopes_of_text` is memoised by the text itself.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import tree_sitter as ts

from context.languages import language_named
from context.positions import decode_bytes

SCOPE_TYPES = frozenset(
    {
        "module", "function_definition", "lambda", "class_definition", "list_comprehension",
        "set_comprehension", "dictionary_comprehension", "generator_expression",
    }
)
PYTHON_BUILTINS = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__spec__", "__builtins__"}
MODULE_DUNDERS = ("__name__", "__file__", "__doc__", "__dict__", "__spec__", "__path__", "__all__")
Span = tuple[int, int]  # byte range of a scope node


@dataclass(frozen=True, slots=True)
class Binding:
    name: str
    kind: str  # def, param, local, import, global
    scope: Span
    scope_type: str


@dataclass(frozen=True, slots=True)
class ClassInfo:
    name: str
    span: Span  # the whole class definition
    bases: tuple[str, ...]  # base class expressions as written (`Base`, `mod.Base`)
    members: tuple[str, ...]  # names bound in the class body, and attributes set on `self`/`cls` in its methods


@dataclass(frozen=True, slots=True)
class Instance:
    """`name = Cls(...)`, `name: Cls = ...` or a parameter `name: Cls`, in `scope`."""

    name: str
    class_expr: str
    scope: Span


@dataclass(frozen=True, slots=True)
class ImportBinding:
    """`import module as name` (member None) or `from module import member as name`."""

    name: str
    module: str
    member: str | None


@dataclass(frozen=True, slots=True)
class FileScopes:
    bindings: tuple[Binding, ...]
    classes: tuple[ClassInfo, ...]
    instances: tuple[Instance, ...]
    imports: tuple[ImportBinding, ...]
    star_import: bool  # `from x import *` anywhere: the set of defined names is unknown
    module_span: Span

    def module_names(self) -> set[str]:
        """Names bound at module level (what `import this_file` makes reachable as attributes)."""
        return {b.name for b in self.bindings if b.scope == self.module_span or b.kind == "global"}

    def visible(self, chain: Iterable[tuple[Span, str]]) -> set[str]:
        """Names visible from a point whose scope chain (innermost first) is `chain`."""
        spans: set[Span] = {self.module_span}
        for depth, (span, kind) in enumerate(chain):
            if kind != "class_definition" or depth == 0:
                spans.add(span)
        return {b.name for b in self.bindings if b.scope in spans or b.kind == "global"}

    def top_level_class(self, name: str) -> ClassInfo | None:
        found = [c for c in self.classes if c.name == name]
        return min(found, key=lambda c: c.span[0]) if found else None

    def enclosing_class(self, byte: int) -> ClassInfo | None:
        """The innermost class whose definition contains `byte`."""
        around = [c for c in self.classes if c.span[0] <= byte <= c.span[1]]
        return max(around, key=lambda c: c.span[0]) if around else None

    def instances_visible(self, chain: Iterable[tuple[Span, str]]) -> dict[str, str]:
        spans = {self.module_span, *(span for span, _ in chain)}
        found: dict[str, str] = {}
        for instance in self.instances:  # later assignments win
            if instance.scope in spans:
                found[instance.name] = instance.class_expr
        return found


def scope_chain(tree: ts.Tree, byte: int) -> list[tuple[Span, str]]:
    """Scope nodes around `byte`, innermost first (the module last)."""
    node: ts.Node | None = tree.root_node.descendant_for_byte_range(byte, byte)
    chain: list[tuple[Span, str]] = []
    while node is not None:
        if node.type in SCOPE_TYPES and (node.type == "module" or node.start_byte < byte):
            chain.append(((node.start_byte, node.end_byte), node.type))
        node = node.parent
    if not chain or chain[-1][1] != "module":
        chain.append(((tree.root_node.start_byte, tree.root_node.end_byte), "module"))
    return chain


def cursor_chains(tree: ts.Tree, data: bytes, byte: int) -> list[list[tuple[Span, str]]]:
    """The scope chain at `byte` and the one at the last non-blank byte before it."""
    chains = [scope_chain(tree, byte)]
    before = len(data[:byte].rstrip()) - 1
    if before >= 0:
        chains.append(scope_chain(tree, before))
    return chains


def visible_at(scopes: FileScopes, tree: ts.Tree, data: bytes, byte: int) -> set[str]:
    """Names visible at `byte` (see the module invariants), builtins not included."""
    names: set[str] = set()
    for chain in cursor_chains(tree, data, byte):
        names |= scopes.visible(chain)
    return names


@lru_cache(maxsize=128)
def scopes_of_text(text: str) -> FileScopes:
    """The scopes of a Python source text (parsed here)."""
    data = text.encode("utf-8", "surrogatepass")
    return scopes_of_tree(language_named("python").parse(data))


def scopes_of_tree(tree: ts.Tree) -> FileScopes:
    language = language_named("python")
    query = language.scopes_query
    root = tree.root_node
    module_span = (root.start_byte, root.end_byte)
    bindings: list[Binding] = []
    instances: list[Instance] = []
    attributes: list[tuple[ts.Node, ts.Node]] = []
    statements: dict[str, list[ts.Node]] = {"import.statement": [], "class.definition": []}
    assert query is not None, "python-scopes.scm ships with this package"
    for _, captures in ts.QueryCursor(query).matches(root):
        for capture, nodes in captures.items():
            if capture in statements:
                statements[capture].extend(nodes)
            if capture.startswith("bind."):
                kind = capture.removeprefix("bind.")
                for node in nodes:
                    bindings.append(_binding(node, kind, module_span))
        if "instance.name" in captures:
            name = captures["instance.name"][0]
            scope = _scope_of(name, module_span)[0]
            instances.append(Instance(_text(name), _text(captures["instance.class"][0]), scope))
        if "attr.object" in captures:
            attributes.append((captures["attr.object"][0], captures["attr.name"][0]))
    imports, star = _imports(_in_order(statements["import.statement"]))
    classes = _classes(_in_order(statements["class.definition"]), bindings, attributes)
    return FileScopes(tuple(dict.fromkeys(bindings)), classes, tuple(instances), imports, star, module_span)


def _binding(node: ts.Node, kind: str, module_span: Span) -> Binding:
    start = node.parent if kind == "def" and node.parent is not None else node
    scope, scope_type = _scope_of(start, module_span)
    return Binding(_text(node), kind, scope, scope_type)


def _scope_of(node: ts.Node, module_span: Span) -> tuple[Span, str]:
    parent = node.parent
    while parent is not None:
        if parent.type in SCOPE_TYPES:
            return (parent.start_byte, parent.end_byte), parent.type
        parent = parent.parent
    return module_span, "module"


def _in_order(nodes: list[ts.Node]) -> list[ts.Node]:
    """Captured nodes in document order (outer before inner), each once."""
    unique = {(n.start_byte, -n.end_byte): n for n in nodes}
    return [unique[key] for key in sorted(unique)]


def _classes(definitions: list[ts.Node], bindings: list[Binding], attributes: list[tuple[ts.Node, ts.Node]]) -> tuple[ClassInfo, ...]:
    classes: list[ClassInfo] = []
    for node in definitions:
        span = (node.start_byte, node.end_byte)
        name = node.child_by_field_name("name")
        members = [b.name for b in bindings if b.scope == span]
        for obj, attr in attributes:
            method = _enclosing(obj, "function_definition")
            if method is not None and _enclosing(method, "class_definition") == node and _is_receiver(method, _text(obj)):
                members.append(_text(attr))
        supers = node.child_by_field_name("superclasses")
        bases = tuple(_text(b) for b in (supers.named_children if supers else ()) if b.type in ("identifier", "attribute"))
        classes.append(ClassInfo(_text(name) if name else "", span, bases, tuple(dict.fromkeys(members))))
    return tuple(classes)


def _is_receiver(method: ts.Node, name: str) -> bool:
    """Whether `name` is the method's first parameter (self, cls, ...)."""
    params = method.child_by_field_name("parameters")
    first = next((p for p in params.named_children), None) if params is not None else None
    return first is not None and first.type == "identifier" and _text(first) == name


def _enclosing(node: ts.Node, kind: str) -> ts.Node | None:
    parent = node.parent
    while parent is not None and parent.type != kind:
        if parent.type in SCOPE_TYPES and parent.type != kind and kind == "class_definition":
            return None  # a nested function's class is not this method's
        parent = parent.parent
    return parent


def _imports(statements: list[ts.Node]) -> tuple[tuple[ImportBinding, ...], bool]:
    found: list[ImportBinding] = []
    star = False
    for node in statements:
        if node.type == "import_statement":
            for name in node.children_by_field_name("name"):
                if name.type == "aliased_import":
                    alias = name.child_by_field_name("alias")
                    found.append(ImportBinding(_text(alias), _text(name.child_by_field_name("name")), None))
                else:
                    first = _text(name).split(".")[0]
                    found.append(ImportBinding(first, first, None))
            continue
        module = node.child_by_field_name("module_name")
        module_text = _text(module) if module is not None else ""
        star = star or any(c.type == "wildcard_import" for c in node.children)
        for name in node.children_by_field_name("name"):
            if name.type == "aliased_import":
                member = _text(name.child_by_field_name("name"))
                found.append(ImportBinding(_text(name.child_by_field_name("alias")), module_text, member))
            else:
                found.append(ImportBinding(_text(name), module_text, _text(name)))
    return tuple(found), star


def _text(node: ts.Node | None) -> str:
    return decode_bytes(node.text or b"") if node is not None else ""
