"""What `name.` may be followed by: members of the module, class or instance a name resolves to.

Role: `member_table` resolves every name visible at the cursor that the workspace can explain —
an imported workspace module (its module-level names), a class defined in this file or imported
from a workspace file (its body names, attributes set on `self`/`cls`, and its bases' members),
an instance (`p = Point(...)`, `p: Point`), and `self`/`cls` inside a method (the enclosing
class) — into `{qualifier: members}` for the decode-time constraint (`ConstraintSpec.member_scopes`)
and for the reranker's unknown-member check.

Invariants:
- Only what is known: a name whose target is outside the workspace (a stdlib or third-party
  module), a class with a base that cannot be resolved, or anything ambiguous gets no entry,
  so the constraint never forbids a member it cannot see.
- Bases that are builtin classes contribute `dir()` of the builtin; every class gets `object`'s.
- Never raises; files are read through open snapshots first, then from disk.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from context.ignore import read_source
from context.resolve import ImportResolver
from context.scopes import MODULE_DUNDERS, ClassInfo, FileScopes, scopes_of_text

MAX_DEPTH = 4  # base-class hops followed
OBJECT_MEMBERS = tuple(dir(object))
TextSource = Callable[[str], str | None]  # path -> text (open buffer or disk), None if unreadable


@dataclass(frozen=True, slots=True)
class _Module:
    path: str
    scopes: FileScopes


class MemberResolver:
    """Resolves qualifiers seen from one file (`path`, with scopes `scopes`)."""

    def __init__(self, path: str, scopes: FileScopes, resolver: ImportResolver, read: TextSource) -> None:
        self.path = path
        self.scopes = scopes
        self.resolver = resolver
        self.read = read
        self._modules: dict[str, _Module | None] = {}

    def table(self, visible: set[str], receiver: ClassInfo | None, instances: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
        """`{qualifier: members}` for the visible names that resolve (see the module docstring)."""
        here = _Module(self.path, self.scopes)
        table: dict[str, tuple[str, ...]] = {}
        if receiver is not None:
            members = self._class_members(here, receiver, 0)
            if members is not None:
                table["self"] = table["cls"] = members
        for name in sorted(visible):
            members = self._name_members(here, name, instances)
            if members is not None:
                table[name] = members
        return table

    def _name_members(self, here: _Module, name: str, instances: Mapping[str, str]) -> tuple[str, ...] | None:
        if name in instances:
            target = self._resolve_expr(here, instances[name], 0)
            return self._class_members(*target, 0) if target is not None else None
        module = self._import_target(here, name)
        if module is not None:
            return tuple(sorted(module.scopes.module_names() | set(MODULE_DUNDERS) | self._submodules(module.path)))
        target = self._resolve_expr(here, name, 0)
        return self._class_members(*target, 0) if target is not None else None

    def _resolve_expr(self, module: _Module, expr: str, depth: int) -> tuple[_Module, ClassInfo] | None:
        """The workspace class that `expr` (`Cls` or `mod.Cls`) names, seen from `module`."""
        head, _, rest = expr.partition(".")
        if rest:
            target = self._import_target(module, head)
            return self._resolve_expr(target, rest, depth + 1) if target is not None and depth < MAX_DEPTH else None
        local = module.scopes.top_level_class(expr)
        if local is not None:
            return module, local
        for imported in module.scopes.imports:
            if imported.name == expr and imported.member is not None and depth < MAX_DEPTH:
                source = self._module(self.resolver.resolve("python", imported.module, module.path))
                if source is not None:
                    return self._resolve_expr(source, imported.member, depth + 1)
        return None

    def _class_members(self, module: _Module, cls: ClassInfo, depth: int) -> tuple[str, ...] | None:
        members = set(cls.members) | set(OBJECT_MEMBERS)
        for base in cls.bases:
            builtin = getattr(builtins, base, None)
            if isinstance(builtin, type):
                members |= set(dir(builtin))
                continue
            target = self._resolve_expr(module, base, 0) if depth < MAX_DEPTH else None
            inherited = self._class_members(*target, depth + 1) if target is not None else None
            if inherited is None:
                return None
            members |= set(inherited)
        return tuple(sorted(members))

    def _import_target(self, module: _Module, name: str) -> _Module | None:
        """The workspace module that `name` is bound to by an import in `module`."""
        for imported in module.scopes.imports:
            if imported.name != name:
                continue
            if imported.member is None:
                return self._module(self.resolver.resolve("python", imported.module, module.path))
            return self._module(self.resolver.resolve_submodule("python", imported.module, imported.member, module.path))
        return None

    def _module(self, path: str | None) -> _Module | None:
        if path is None:
            return None
        if path not in self._modules:
            text = self.read(path)
            self._modules[path] = _Module(path, scopes_of_text(text)) if text is not None else None
        return self._modules[path]

    @staticmethod
    def _submodules(path: str) -> set[str]:
        """A package's `__init__.py`: its sibling modules are attributes once imported."""
        if os.path.basename(path) != "__init__.py":
            return set()
        try:
            entries = os.listdir(os.path.dirname(path))
        except OSError:
            return set()
        return {os.path.splitext(e)[0] for e in entries if e.endswith(".py") and e != "__init__.py"}


def disk_reader(open_texts: Mapping[str, str], max_bytes: int = 1_000_000) -> TextSource:
    """Reads a path from the open buffers first, else from disk (None when unreadable)."""

    def read(path: str) -> str | None:
        if path in open_texts:
            return open_texts[path]
        return read_source(path, max_bytes).text

    return read
