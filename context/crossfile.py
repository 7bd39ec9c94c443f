"""Cross-file context for one completion: the snippets from other files worth showing the model.

Role: gather candidates from four sources, each with a reason and a human-readable detail:
- "imported-definition": definitions, in other files, of the names this file imports (and, for
  whole-module imports, of the module's names this file uses); nearer uses score higher.
- "nearby-identifier-definition": definitions, in other files, of identifiers within
  `nearby_lines` of the cursor (names with definitions in too many files are skipped as ambiguous).
- "similar-window": the window of each other open document most similar (Jaccard over
  identifiers) to the code before the cursor.
- "recent-edit": what the user recently changed, newest first.
Then deduplicate and fit them into `budget_tokens`: each source first gets its share
(`CrossFileOptions.shares`), then leftover budget goes to the best remaining candidates.

Invariants: pure apart from reading the index; never quotes the current file's text within
`exclude_before`/`exclude_after` lines of the cursor (that text is in the prompt already); token
counts are those of the rendered snippet (`fim.render_snippet`). Returns snippets in reason order,
then by descending score.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from context.document import DocumentSnapshot
from context.edits import Edit
from context.fim import render_snippet
from context.index import WorkspaceIndex
from context.languages import language_for
from context.positions import Position, Range
from context.similar import best_window, line_tokens, tokens_before
from context.tags import MAX_BUFFER_TAG_CHARS, Definition, FileTags, Import, extract_tags

REASONS = ("imported-definition", "nearby-identifier-definition", "similar-window", "recent-edit")
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")


@dataclass(frozen=True, slots=True)
class Snippet:
    path: str
    range: Range
    text: str
    reason: str  # one of REASONS
    score: float
    tokens: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class CrossFileOptions:
    nearby_lines: int = 3
    window_lines: int = 30
    max_similar: int = 4
    min_similarity: float = 0.1
    max_open_chars: int = 400_000
    max_recent_edits: int = 6
    max_per_source: int = 12
    ambiguous_files: int = 4
    exclude_before: int = 120
    exclude_after: int = 60
    shares: dict[str, float] = field(
        default_factory=lambda: {
            "imported-definition": 0.4,
            "nearby-identifier-definition": 0.25,
            "similar-window": 0.2,
            "recent-edit": 0.15,
        }
    )


@dataclass(frozen=True, slots=True)
class _Candidate:
    path: str
    range: Range
    text: str
    reason: str
    score: float
    detail: str


def gather_snippets(
    snapshot: DocumentSnapshot,
    position: Position,
    index: WorkspaceIndex | None,
    open_docs: list[DocumentSnapshot],
    recent_edits: list[Edit],
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    options: CrossFileOptions = CrossFileOptions(),
) -> list[Snippet]:
    """The snippets to put in the prompt header for a completion at `position` (see module doc)."""
    if budget_tokens <= 0:
        return []
    cursor = snapshot.lines.position_at(snapshot.offset_at(position))
    tags = _current_tags(snapshot, index)
    candidates: list[_Candidate] = []
    if index is not None:
        candidates += _imported(snapshot, cursor, tags, index, options)
        candidates += _nearby(snapshot, cursor, tags, index, options)
    candidates += _similar(snapshot, cursor, open_docs, options)
    candidates += _edits(snapshot, cursor, recent_edits, options)
    return _fit(_dedupe(candidates), budget_tokens, count_tokens, snapshot, options)


def _current_tags(snapshot: DocumentSnapshot, index: WorkspaceIndex | None) -> FileTags:
    """The current file's imports and definitions: the index's copy when it has one (the server
    keeps it in step with the buffer; a few keystrokes behind is fine for imports), else parsed;
    none for a buffer over `MAX_BUFFER_TAG_CHARS` that the index does not hold."""
    if index is not None and snapshot.path:
        indexed = index.file_tags(snapshot.path)
        if indexed is not None:
            return indexed
    if snapshot.language is None or len(snapshot.text) > MAX_BUFFER_TAG_CHARS:
        return FileTags()
    return extract_tags(snapshot, index.resolver if index else None)


def _imported(
    snapshot: DocumentSnapshot, cursor: Position, tags: FileTags, index: WorkspaceIndex, options: CrossFileOptions
) -> list[_Candidate]:
    """Definitions of imported names, and of a whole-module import's names that this file uses."""
    named: list[tuple[Definition, str]] = []
    used_only: list[tuple[Definition, str]] = []
    for item in tags.imports:
        line = item.range.start.line + 1
        for name in item.names:
            for definition in _imported_definitions(name, item, snapshot.path, index)[:1]:
                named.append((definition, f"definition of `{name}` imported at line {line}"))
        if item.resolved_path and (item.wildcard or not item.names):
            for definition in _module_definitions(item.resolved_path, index):
                if definition.path != snapshot.path:
                    detail = f"definition of `{definition.name}` from `{item.module}` (imported at line {line})"
                    used_only.append((definition, detail))
    uses = _uses(snapshot, tags, {definition.name for definition, _ in named + used_only})
    chosen = named + [(d, detail) for d, detail in used_only if d.name in uses]
    found = [
        _from_definition(definition, "imported-definition", _closeness(uses.get(definition.name), cursor), detail)
        for definition, detail in chosen
    ]
    found.sort(key=lambda c: -c.score)
    return found[: options.max_per_source]


def _imported_definitions(name: str, item: Import, current: str | None, index: WorkspaceIndex) -> list[Definition]:
    definitions = [d for d in index.definitions(name) if d.path != current]
    if item.resolved_path:
        target = item.resolved_path
        exact = [d for d in definitions if d.path == target or os.path.dirname(d.path) == target]
        if exact:
            return exact
    tail = item.module.strip("./").replace(".", "/").replace("::", "/").rsplit("/", 1)[-1]
    by_module = [d for d in definitions if tail and os.path.splitext(os.path.basename(d.path))[0] == tail]
    if by_module:
        return by_module
    return definitions if len({d.path for d in definitions}) == 1 else []


def _module_definitions(target: str, index: WorkspaceIndex) -> list[Definition]:
    tags = index.file_tags(target)
    if tags is not None:
        return list(tags.definitions)
    return [d for path in index.files_in(target) for d in (index.file_tags(path) or FileTags()).definitions]


def _nearby(
    snapshot: DocumentSnapshot, cursor: Position, tags: FileTags, index: WorkspaceIndex, options: CrossFileOptions
) -> list[_Candidate]:
    local = {d.name for d in tags.definitions}
    imported = {i.resolved_path for i in tags.imports if i.resolved_path}
    seen: set[str] = set()
    found: list[_Candidate] = []
    for name, distance in _identifiers_near(snapshot, cursor, options.nearby_lines):
        if name in seen or name in local:
            continue
        seen.add(name)
        definitions = [d for d in index.definitions(name) if d.path != snapshot.path]
        if not definitions or len({d.path for d in definitions}) > options.ambiguous_files:
            continue
        best = min(definitions, key=lambda d: _definition_rank(d, imported, snapshot.path))
        detail = f"definition of `{name}` used near the cursor (line {cursor.line + 1 + distance})"
        found.append(_from_definition(best, "nearby-identifier-definition", 1.0 / (1 + abs(distance)), detail))
        if len(found) >= options.max_per_source:
            break
    return found


def _identifiers_near(snapshot: DocumentSnapshot, cursor: Position, radius: int) -> Iterable[tuple[str, int]]:
    """(identifier, line offset from the cursor) around the cursor, nearest lines first; the word
    being typed at the cursor is left out."""
    column = snapshot.offset_at(cursor) - snapshot.lines.line_start(cursor.line)
    for distance in sorted(range(-radius, radius + 1), key=lambda d: (abs(d), d)):
        line = snapshot.line(cursor.line + distance)
        for match in _IDENTIFIER.finditer(line):
            if distance == 0 and match.start() <= column <= match.end():
                continue
            yield match.group(), distance


def _definition_rank(definition: Definition, imported: set[str], current: str | None) -> tuple[int, str]:
    if definition.path in imported or os.path.dirname(definition.path) in imported:
        return 0, definition.path
    same_dir = current is not None and os.path.dirname(definition.path) == os.path.dirname(current)
    return (1 if same_dir else 2), definition.path


def _similar(
    snapshot: DocumentSnapshot, cursor: Position, open_docs: list[DocumentSnapshot], options: CrossFileOptions
) -> list[_Candidate]:
    line_prefix = snapshot.text[snapshot.lines.line_start(cursor.line) : snapshot.offset_at(cursor)]
    reference = tokens_before(snapshot.text, cursor.line, line_prefix, options.window_lines)
    budget = options.max_open_chars
    found: list[_Candidate] = []
    for doc in open_docs:
        if doc.uri == snapshot.uri or (doc.path and doc.path == snapshot.path) or not doc.text.strip():
            continue
        budget -= len(doc.text)
        if budget < 0:
            break
        window = best_window(reference, doc.text, options.window_lines)
        if window is None or window.score < options.min_similarity:
            continue
        text = "\n".join(doc.line(n) for n in range(window.first_line, window.last_line + 1))
        span = Range(Position(window.first_line, 0), Position(window.last_line, len(doc.line(window.last_line))))
        name = os.path.basename(doc.path or doc.uri)
        detail = f"lines {window.first_line + 1}-{window.last_line + 1} of {name} resemble the code before the cursor (Jaccard {window.score:.2f})"
        found.append(_Candidate(doc.path or doc.uri, span, text, "similar-window", window.score, detail))
    found.sort(key=lambda c: -c.score)
    return found[: options.max_similar]


def _edits(snapshot: DocumentSnapshot, cursor: Position, edits: list[Edit], options: CrossFileOptions) -> list[_Candidate]:
    first, last = cursor.line - options.exclude_before, cursor.line + options.exclude_after
    found: list[_Candidate] = []
    for rank, edit in enumerate(edits):
        if not edit.after.strip():
            continue
        if edit.path == snapshot.path and edit.range.overlaps_lines(first, last):
            continue
        lines = f"{edit.range.start.line + 1}-{edit.range.end.line + 1}"
        detail = f"recent edit of lines {lines} of {os.path.basename(edit.path)}"
        found.append(_Candidate(edit.path, edit.range, edit.after, "recent-edit", 1.0 / (1 + rank), detail))
        if len(found) >= options.max_recent_edits:
            break
    return found


def _uses(snapshot: DocumentSnapshot, tags: FileTags, names: set[str]) -> dict[str, list[int]]:
    """Lines where each of `names` occurs outside import statements."""
    import_lines = {n for i in tags.imports for n in range(i.range.start.line, i.range.end.line + 1)}
    uses: dict[str, list[int]] = {}
    for number, tokens in enumerate(line_tokens(snapshot.text)):
        if number not in import_lines and not tokens.isdisjoint(names):
            for token in tokens & names:
                uses.setdefault(token, []).append(number)
    return uses


def _closeness(lines: list[int] | None, cursor: Position) -> float:
    """1..2 for names used in the file (nearer uses score higher), 0.5 for names only imported."""
    if not lines:
        return 0.5
    return 1.0 + 1.0 / (1 + min(abs(n - cursor.line) for n in lines) / 20)


def _from_definition(definition: Definition, reason: str, score: float, detail: str) -> _Candidate:
    return _Candidate(definition.path, definition.body_range, definition.text_snippet, reason, score, detail)


def _dedupe(candidates: list[_Candidate]) -> list[_Candidate]:
    """Keep the first of candidates covering the same lines of the same file (sources come in
    priority order); drop text already contained in a kept snippet of the same file."""
    kept: list[_Candidate] = []
    for candidate in candidates:
        if any(_duplicates(candidate, other) for other in kept):
            continue
        kept.append(candidate)
    return kept


def _duplicates(candidate: _Candidate, other: _Candidate) -> bool:
    if candidate.path != other.path:
        return False
    if candidate.text in other.text:
        return True
    start = max(candidate.range.start.line, other.range.start.line)
    end = min(candidate.range.end.line, other.range.end.line)
    length = candidate.range.end.line - candidate.range.start.line + 1
    return end >= start and (end - start + 1) * 2 > length


def _fit(
    candidates: list[_Candidate],
    budget: int,
    count_tokens: Callable[[str], int],
    snapshot: DocumentSnapshot,
    options: CrossFileOptions,
) -> list[Snippet]:
    fallback = snapshot.language.name if snapshot.language else snapshot.language_id
    sized = [_sized(c, count_tokens, fallback) for c in candidates]
    chosen: list[Snippet] = []
    used = 0
    for reason in REASONS:
        share = int(budget * options.shares.get(reason, 0.0))
        spent = 0
        for snippet in sorted((s for s in sized if s.reason == reason), key=lambda s: -s.score):
            if spent + snippet.tokens <= share and used + snippet.tokens <= budget:
                chosen.append(snippet)
                spent += snippet.tokens
                used += snippet.tokens
    for snippet in sorted(sized, key=lambda s: (REASONS.index(s.reason), -s.score)):
        if snippet not in chosen and used + snippet.tokens <= budget:
            chosen.append(snippet)
            used += snippet.tokens
    return sorted(chosen, key=lambda s: (REASONS.index(s.reason), -s.score))


def _sized(candidate: _Candidate, count_tokens: Callable[[str], int], fallback: str) -> Snippet:
    language = language_for(None, candidate.path)
    rendered = render_snippet(candidate.path, candidate.text, language.name if language else fallback)
    return Snippet(
        candidate.path, candidate.range, candidate.text, candidate.reason, candidate.score,
        count_tokens(rendered), candidate.detail,
    )
