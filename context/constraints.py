"""The IDE state at a cursor, and the decode-time constraint built from it.

Role: `build_site` gathers what the server knows at one cursor — the partial word being typed
(for token healing), the qualifier before it (`geometry.cen|`), the brackets open on this
statement, the names defined there and the members of every name the workspace can resolve —
into a `Site`. `constraint_spec(site)` turns it into the plain-data `ConstraintSpec` the engine
applies as a token mask; retrieval (`retrieval.py`) and reranking (`rerank.py`) read the same
`Site`.

Invariants:
- Pure Python, no torch; never raises on document content.
- Permissive where unsure: `defined` is None (no identifier check) for languages other than
  Python and for files with a star import; a qualifier the workspace cannot resolve has no
  member scope (see `members.py`).
- `heal_prefix` is left empty here: it depends on the tokenizer, and the server fills it after
  `model_runtime.healing.heal` backs the prompt off.
"""

from __future__ import annotations

import keyword
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from context.brackets import open_brackets
from context.classify import CompletionKind
from context.document import DocumentSnapshot
from context.index import WorkspaceIndex
from context.members import MemberResolver, disk_reader
from context.positions import Position
from context.resolve import ImportResolver
from context.scopes import PYTHON_BUILTINS, cursor_chains, scopes_of_tree, visible_at
from context.tags import MAX_BUFFER_TAG_CHARS
from model_runtime.api import ConstraintSpec, MemberScope

BRACKET_LINES = 60  # how far back the bracket scan starts
MAX_MEMBER_SCOPES = 96
_TYPED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_QUALIFIER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.$")


@dataclass(frozen=True, slots=True)
class Site:
    """What the IDE knows at one cursor."""

    snapshot: DocumentSnapshot
    position: Position
    kind: CompletionKind
    line_prefix: str  # the cursor line up to the cursor
    line_suffix: str  # the rest of the cursor line
    typed: str  # the partial identifier just before the cursor ("" if none)
    qualifier: str | None  # `name` in `name.typed|`
    open_brackets: str  # innermost last
    defined: frozenset[str] | None  # names legal in a use position; None = unknown
    members: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def language(self) -> str:
        return self.snapshot.language.name if self.snapshot.language else self.snapshot.language_id


def build_site(
    snapshot: DocumentSnapshot,
    position: Position,
    kind: CompletionKind,
    index: WorkspaceIndex | None = None,
    open_docs: Sequence[DocumentSnapshot] = (),
) -> Site:
    """The `Site` at `position` (see the module docstring)."""
    lines = snapshot.lines
    offset = lines.offset_at(position)
    line = lines.position_at(offset).line
    start = lines.line_start(line)
    line_prefix = snapshot.text[start:offset]
    line_suffix = lines.line(line)[offset - start :]
    typed_match = _TYPED.search(line_prefix)
    typed = typed_match.group() if typed_match else ""
    if typed and typed[0].isdigit():
        typed = ""
    qualifier_match = _QUALIFIER.search(line_prefix[: len(line_prefix) - len(typed)])
    qualifier = qualifier_match.group(1) if qualifier_match else None
    first = lines.line_start(max(0, line - BRACKET_LINES))
    language = snapshot.language.name if snapshot.language else ""
    brackets = open_brackets(snapshot.text[first:offset], language)
    defined, members = _names(snapshot, offset, index, open_docs)
    return Site(snapshot, position, kind, line_prefix, line_suffix, typed, qualifier, brackets, defined, members)


def constraint_spec(site: Site) -> ConstraintSpec:
    """The engine's monitor for `site`: single line, open brackets, member scopes, defined names."""
    scopes = tuple(MemberScope(q, m) for q, m in sorted(site.members.items())[:MAX_MEMBER_SCOPES])
    defined = tuple(sorted(site.defined)) if site.defined is not None else None
    return ConstraintSpec(
        language=site.language,
        single_line=site.kind is CompletionKind.SINGLE_LINE,
        open_brackets=site.open_brackets,
        member_scopes=scopes,
        defined_names=defined,
    )


def _names(
    snapshot: DocumentSnapshot, offset: int, index: WorkspaceIndex | None, open_docs: Sequence[DocumentSnapshot]
) -> tuple[frozenset[str] | None, dict[str, tuple[str, ...]]]:
    """(names legal in a use position or None, `{qualifier: members}`) at `offset` (Python only)."""
    language = snapshot.language
    if language is None or language.name != "python" or len(snapshot.text) > MAX_BUFFER_TAG_CHARS or snapshot.tree is None:
        return None, {}
    scopes = scopes_of_tree(snapshot.tree)
    data = snapshot.lines.data
    byte = snapshot.lines.byte_at(offset)
    visible = visible_at(scopes, snapshot.tree, data, byte)
    defined = None if scopes.star_import else frozenset((visible | PYTHON_BUILTINS) - set(keyword.kwlist))
    path = snapshot.path or ""
    resolver = index.resolver if index is not None else ImportResolver([os.path.dirname(path)] if path else [])
    texts = {d.path: d.text for d in open_docs if d.path}
    member_resolver = MemberResolver(path, scopes, resolver, disk_reader(texts))
    receiver = scopes.enclosing_class(byte) if _in_method(cursor_chains(snapshot.tree, data, byte)) else None
    instances: dict[str, str] = {}
    for chain in cursor_chains(snapshot.tree, data, byte):
        instances.update(scopes.instances_visible(chain))
    return defined, member_resolver.table(visible, receiver, instances)


def _in_method(chains: list[list[tuple[tuple[int, int], str]]]) -> bool:
    """Whether a function directly inside a class encloses the cursor."""
    for chain in chains:
        kinds = [kind for _, kind in chain]
        if "function_definition" in kinds:
            inner = kinds.index("function_definition")
            if inner + 1 < len(kinds) and kinds[inner + 1] == "class_definition":
                return True
    return False
