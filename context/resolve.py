"""Import resolution: which workspace file (or Go package directory) an import refers to.

Role: best-effort mapping of an import's module string to a path, per language:
- Python: relative imports from the importing file's package; absolute imports against the
  importing file's ancestor directories (up to its workspace root), each root and `root/src`.
- JavaScript / TypeScript: relative specifiers (`./x`, `../x`) with the usual extension and
  `index` probing (a `.js` specifier also finds the `.ts` source); bare specifiers against each
  root and `root/src` (a `baseUrl`-style layout). Packages in node_modules are never resolved.
- Go: import paths under the module path of the nearest `go.mod` resolve to a package directory.
- Rust: `crate::`, `self::`, `super::` and local module paths resolve to `x.rs` / `x/mod.rs`.

Invariants: never raises; touches the filesystem only through the `is_file` / `is_dir` callables
(stat calls, plus reading `go.mod`); returns absolute, normalised paths or None.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

_JS_EXTENSIONS = (".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")
_JS_SOURCE_FOR = {".js": (".ts", ".tsx"), ".jsx": (".tsx",), ".mjs": (".mts",), ".cjs": (".cts",)}
_GO_MODULE = re.compile(r"^\s*module\s+(\S+)", re.MULTILINE)


class ImportResolver:
    """Resolves import module strings to files under the given workspace roots."""

    def __init__(
        self,
        roots: Sequence[str | os.PathLike[str]] = (),
        is_file: Callable[[str], bool] = os.path.isfile,
        is_dir: Callable[[str], bool] = os.path.isdir,
    ) -> None:
        self.roots = tuple(os.path.abspath(os.fspath(root)) for root in roots)
        self._is_file = is_file
        self._is_dir = is_dir
        self._go_modules: dict[str, tuple[float, str | None]] = {}

    def resolve(self, language: str, module: str, from_path: str) -> str | None:
        """The file (or, for Go, the package directory) that `module` names, seen from `from_path`."""
        if not module or not from_path:
            return None
        if language == "python":
            return self._python(module, from_path)
        if language in ("javascript", "typescript", "tsx"):
            return self._javascript(module, from_path)
        if language == "go":
            return self._go(module, from_path)
        if language == "rust":
            return self._rust(module.split("::"), from_path)
        return None

    def resolve_submodule(self, language: str, module: str, name: str, from_path: str) -> str | None:
        """For `from module import name` / `use module::name`: the file of `name` when it is a module."""
        if language == "python":
            joined = module + name if module.endswith(".") else f"{module}.{name}"
            return self._python(joined, from_path)
        if language == "rust":
            return self._rust([*module.split("::"), name], from_path, exact=True)
        return None

    def _python(self, module: str, from_path: str) -> str | None:
        dotted = module.lstrip(".")
        parts = dotted.split(".") if dotted else []
        if module.startswith("."):
            base = os.path.dirname(from_path)
            for _ in range(len(module) - len(dotted) - 1):
                base = os.path.dirname(base)
            return self._python_in(base, parts)
        for base in self._python_bases(from_path):
            found = self._python_in(base, parts)
            if found:
                return found
        return None

    def _python_in(self, base: str, parts: list[str]) -> str | None:
        stem = os.path.join(base, *parts)
        init = os.path.join(stem, "__init__.py")
        candidates = (stem + ".py", stem + ".pyi", init) if parts else (init,)
        return next((os.path.normpath(c) for c in candidates if self._is_file(c)), None)

    def _python_bases(self, from_path: str) -> list[str]:
        bases: list[str] = []
        root = self._root_of(from_path)
        directory = os.path.dirname(from_path)
        while True:
            bases.append(directory)
            parent = os.path.dirname(directory)
            if root is None or directory == root or parent == directory:
                break
            directory = parent
        for workspace_root in self.roots:
            bases += [workspace_root, os.path.join(workspace_root, "src")]
        return list(dict.fromkeys(bases))

    def _javascript(self, module: str, from_path: str) -> str | None:
        if module.startswith(("./", "../")) or module in (".", ".."):
            return self._js_file(os.path.join(os.path.dirname(from_path), module))
        if module.startswith("/"):
            return self._js_file(module)
        for root in self.roots:
            for base in (root, os.path.join(root, "src")):
                found = self._js_file(os.path.join(base, module))
                if found:
                    return found
        return None

    def _js_file(self, stem: str) -> str | None:
        stem = os.path.normpath(stem)
        if "node_modules" in Path(stem).parts:
            return None
        root, ext = os.path.splitext(stem)
        candidates = [root + source for source in _JS_SOURCE_FOR.get(ext, ())]
        candidates += [stem] if ext else []
        candidates += [stem + e for e in _JS_EXTENSIONS]
        candidates += [os.path.join(stem, "index" + e) for e in _JS_EXTENSIONS]
        return next((c for c in candidates if self._is_file(c)), None)

    def _go(self, module: str, from_path: str) -> str | None:
        directory = os.path.dirname(from_path)
        root = self._root_of(from_path)
        while True:
            module_path = self._go_module_path(directory)
            if module_path is not None:
                if module == module_path:
                    return directory
                if module.startswith(module_path + "/"):
                    package = os.path.join(directory, *module[len(module_path) + 1 :].split("/"))
                    return package if self._is_dir(package) else None
                return None
            parent = os.path.dirname(directory)
            if directory == root or parent == directory:
                return None
            directory = parent

    def _go_module_path(self, directory: str) -> str | None:
        go_mod = os.path.join(directory, "go.mod")
        try:
            mtime = os.stat(go_mod).st_mtime
        except OSError:
            return None
        cached = self._go_modules.get(directory)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            match = _GO_MODULE.search(Path(go_mod).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None
        path = match.group(1).strip('"') if match else None
        self._go_modules[directory] = (mtime, path)
        return path

    def _rust(self, segments: list[str], from_path: str, exact: bool = False) -> str | None:
        head, rest = segments[0], segments[1:]
        current: str | None
        if head == "crate":
            base = self._rust_crate_dir(from_path)
            current = self._rust_module_file(base, crate_root=True) if base else None
        elif head in ("self", "super"):
            base, current, rest = _rust_module_dir(from_path), from_path, segments
            while rest and rest[0] in ("self", "super"):
                if rest[0] == "super":
                    base = os.path.dirname(base)
                    current = self._rust_module_file(base, crate_root=False)
                rest = rest[1:]
        else:
            base, current, rest = _rust_module_dir(from_path), None, segments
        if base is None:
            return None
        consumed = 0
        for segment in rest:
            stem = os.path.join(base, segment)
            child = next((c for c in (stem + ".rs", os.path.join(stem, "mod.rs")) if self._is_file(c)), None)
            if child is None:
                break
            current, base, consumed = child, stem, consumed + 1
        if current is None or (exact and consumed != len(rest)):
            return None
        return os.path.normpath(current)

    def _rust_module_file(self, directory: str, crate_root: bool) -> str | None:
        """The file defining the module whose children live in `directory`."""
        names = ("lib.rs", "main.rs") if crate_root else ("mod.rs",)
        candidates = [os.path.join(directory, name) for name in names]
        if not crate_root:
            candidates += [directory + ".rs", os.path.join(directory, "lib.rs"), os.path.join(directory, "main.rs")]
        return next((c for c in candidates if self._is_file(c)), None)

    def _rust_crate_dir(self, from_path: str) -> str | None:
        directory = os.path.dirname(from_path)
        root = self._root_of(from_path)
        while True:
            if self._is_file(os.path.join(directory, "Cargo.toml")):
                src = os.path.join(directory, "src")
                return src if self._is_dir(src) else directory
            parent = os.path.dirname(directory)
            if directory == root or parent == directory:
                return None
            directory = parent

    def _root_of(self, path: str) -> str | None:
        matches = [root for root in self.roots if path == root or path.startswith(root + os.sep)]
        return max(matches, key=len, default=None)


def _rust_module_dir(from_path: str) -> str:
    """The directory holding the child modules of the module defined by `from_path`."""
    stem, name = os.path.splitext(from_path)[0], os.path.basename(from_path)
    return os.path.dirname(from_path) if name in ("mod.rs", "lib.rs", "main.rs") else stem
