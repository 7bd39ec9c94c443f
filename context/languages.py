"""Language registry: LSP languageId or file extension → tree-sitter grammar, queries and data.

Role: the single table of supported languages (Python, JavaScript, TypeScript, TSX, Go, Rust).
Each `Language` names its grammar, comment prefix and data files under `context/queries/`:
`<query_name>-tags.scm` (definitions, references, imports), `<query_name>-locals.scm` (identifiers
that are certainly value references, for `symbols.py`) and `<globals_name>-globals.txt` (builtins).
A dialect sharing another's queries (TSX shares TypeScript's) may add `<name>-<kind>.scm`.

Invariants:
- Grammars load lazily on first use and are cached, as are compiled queries and globals lists.
  Importing this module imports no grammar.
- Parsers are not thread-safe, so `Language.parser()` hands out one cached parser per thread.
- py-tree-sitter parses holding the interpreter lock; a text over `PARSE_CHUNK_BYTES` is handed
  to the parser in chunks of that size through a Python read callback, and each callback is a
  point where a waiting thread (the server's event loop) takes the lock: a 1 MB parse on a
  worker thread pauses the loop for one chunk's parse at a time, not for the whole parse.
- A shipped query that fails to compile is a bug in this package and raises `QueryError`.
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tree_sitter as ts

QUERY_DIR = Path(__file__).with_name("queries")
PARSE_CHUNK_BYTES = 8192


@dataclass(frozen=True, slots=True)
class Language:
    """One supported language. `name` is also the `languageId` used in prompts and snippets."""

    name: str
    lsp_ids: tuple[str, ...]
    extensions: tuple[str, ...]
    comment_prefix: str
    grammar_module: str
    grammar_function: str
    query_name: str
    globals_name: str = ""

    @property
    def ts_language(self) -> ts.Language:
        return _ts_language(self.grammar_module, self.grammar_function)

    def parser(self) -> ts.Parser:
        """This thread's parser for the language."""
        parsers = _thread_parsers.__dict__.setdefault("by_name", {})
        parser = parsers.get(self.name)
        if parser is None:
            parser = parsers[self.name] = ts.Parser(self.ts_language)
        return parser

    def parse(self, data: bytes, old_tree: ts.Tree | None = None) -> ts.Tree:
        source = data if len(data) <= PARSE_CHUNK_BYTES else _chunks(data)
        if old_tree is None:
            return self.parser().parse(source)
        return self.parser().parse(source, old_tree)

    @property
    def tags_query(self) -> ts.Query:
        return _query(self, "tags")

    @property
    def locals_query(self) -> ts.Query | None:
        """Value-reference patterns for `symbols.py`; None where another checker is used (Python)."""
        if not (QUERY_DIR / f"{self.query_name}-locals.scm").is_file():
            return None
        return _query(self, "locals")

    @property
    def scopes_query(self) -> ts.Query | None:
        """Binding patterns for `scopes.py` (names a file binds, instances, attributes); None if absent."""
        if not (QUERY_DIR / f"{self.query_name}-scopes.scm").is_file():
            return None
        return _query(self, "scopes")

    @property
    def globals(self) -> frozenset[str]:
        """Names every file may use without declaring them (builtins, prelude, host globals)."""
        return _globals(self.globals_name) if self.globals_name else frozenset()


_thread_parsers = threading.local()

LANGUAGES: tuple[Language, ...] = (
    Language("python", ("python",), (".py", ".pyi"), "#", "tree_sitter_python", "language", "python"),
    Language(
        "javascript",
        ("javascript", "javascriptreact", "jsx"),
        (".js", ".jsx", ".mjs", ".cjs"),
        "//",
        "tree_sitter_javascript",
        "language",
        "javascript",
        "javascript",
    ),
    Language(
        "typescript",
        ("typescript",),
        (".ts", ".mts", ".cts"),
        "//",
        "tree_sitter_typescript",
        "language_typescript",
        "typescript",
        "javascript",
    ),
    Language(
        "tsx",
        ("typescriptreact", "tsx"),
        (".tsx",),
        "//",
        "tree_sitter_typescript",
        "language_tsx",
        "typescript",
        "javascript",
    ),
    Language("go", ("go",), (".go",), "//", "tree_sitter_go", "language", "go", "go"),
    Language("rust", ("rust",), (".rs",), "//", "tree_sitter_rust", "language", "rust", "rust"),
)

_BY_ID = {lsp_id: lang for lang in LANGUAGES for lsp_id in (*lang.lsp_ids, lang.name)}
_BY_EXTENSION = {ext: lang for lang in LANGUAGES for ext in lang.extensions}
SOURCE_EXTENSIONS: frozenset[str] = frozenset(_BY_EXTENSION)


def language_for(language_id: str | None, path: str | os.PathLike[str] | None) -> Language | None:
    """The language of a document: its LSP `languageId` first, else its file extension."""
    if language_id and language_id.lower() in _BY_ID:
        return _BY_ID[language_id.lower()]
    if path:
        return _BY_EXTENSION.get(os.path.splitext(os.fspath(path))[1].lower())
    return None


def language_named(name: str) -> Language:
    """The language called `name` (see `LANGUAGES`); a KeyError names the supported ones."""
    try:
        return _BY_ID[name]
    except KeyError:
        supported = ", ".join(lang.name for lang in LANGUAGES)
        raise KeyError(f"unsupported language {name!r} (supported: {supported})") from None


@cache
def _ts_language(module: str, function: str) -> ts.Language:
    return ts.Language(getattr(importlib.import_module(module), function)())


@cache
def _query_cached(files: tuple[str, ...], module: str, function: str) -> ts.Query:
    source = "\n".join((QUERY_DIR / file).read_text(encoding="utf-8") for file in files)
    return ts.Query(_ts_language(module, function), source)


def _query(language: Language, kind: str) -> ts.Query:
    """The shared `<query_name>-<kind>.scm`, plus `<name>-<kind>.scm` when a dialect adds patterns."""
    files = [f"{language.query_name}-{kind}.scm"]
    if language.name != language.query_name and (QUERY_DIR / f"{language.name}-{kind}.scm").is_file():
        files.append(f"{language.name}-{kind}.scm")
    return _query_cached(tuple(files), language.grammar_module, language.grammar_function)


@cache
def _globals(name: str) -> frozenset[str]:
    file = QUERY_DIR / f"{name}-globals.txt"
    if not file.is_file():
        return frozenset()
    words = (line.split("#", 1)[0].strip() for line in file.read_text(encoding="utf-8").splitlines())
    return frozenset(word for word in words if word)


def _chunks(data: bytes):
    """A read callback giving the parser `data` one `PARSE_CHUNK_BYTES` slice at a time."""
    return lambda offset, _point: data[offset : offset + PARSE_CHUNK_BYTES]
