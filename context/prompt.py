"""The completion prompt: cross-file header, suffix and prefix, fitted to a token budget.

Role: `build_prompt` turns a snapshot, a cursor and the chosen snippets into the token ids of a
fill-in-the-middle prompt in the SPM order of `context.fim` (header · suffix · prefix), so that
typing, which only changes the end of the prefix, leaves every earlier token unchanged and the
engine's prefix cache reuses it.

Budget (`PromptBudget`, in tokens of the model's tokenizer): the header may use `header_share`
of `max_tokens`, the suffix `suffix_share`, the prefix the rest. The header holds snippets most
stable first — imported definitions, nearby-identifier definitions, similar windows, recent edits
(each group sorted by path and line, not by score) — then `file_header(path)`. The suffix keeps
whole lines nearest the cursor; the prefix keeps whole lines nearest the cursor and starts on a
line number that is a multiple of `align_lines`, so it does not move on every keystroke. Budget
the prefix leaves unused (short files) extends the suffix, in steps of `SUFFIX_STEP` tokens.

Invariants: pure (given a deterministic tokenizer); `len(ids) <= max_tokens` whenever the five
special tokens and the file header fit; never quotes the current file's prefix or suffix lines
twice (a snippet from the current file overlapping them is dropped).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from context.crossfile import REASONS, Snippet
from context.document import DocumentSnapshot
from context.fim import FimMode, TokenizerLike, file_header, fim_prompt_ids, render_snippet
from context.languages import language_for
from context.positions import Position

SPECIAL_TOKENS = 5  # [gMASK] <sop> <|code_suffix|> <|code_prefix|> <|code_middle|>
SUFFIX_STEP = 64


@dataclass(frozen=True, slots=True)
class PromptBudget:
    max_tokens: int = 2048
    header_share: float = 0.3
    suffix_share: float = 0.15
    align_lines: int = 8

    def __post_init__(self) -> None:
        if self.max_tokens < 16:
            raise ValueError(f"max_tokens must be >= 16, got {self.max_tokens}")
        if not (0 <= self.header_share and 0 <= self.suffix_share and self.header_share + self.suffix_share < 1):
            raise ValueError(
                f"header_share and suffix_share must be >= 0 and sum below 1, got {self.header_share} and {self.suffix_share}"
            )
        if self.align_lines < 1:
            raise ValueError(f"align_lines must be >= 1, got {self.align_lines}")


@dataclass(frozen=True, slots=True)
class Prompt:
    ids: tuple[int, ...]
    header: str
    prefix: str
    suffix: str
    snippets_used: tuple[Snippet, ...]
    token_counts: Mapping[str, int]  # header, suffix, prefix, special, total
    mode: FimMode
    prefix_start_line: int
    suffix_end_line: int


def build_prompt(
    snapshot: DocumentSnapshot,
    position: Position,
    snippets: Sequence[Snippet],
    tokenizer: TokenizerLike,
    budget: PromptBudget = PromptBudget(),
    roots: Sequence[str] = (),
) -> Prompt:
    """The SPM prompt for a completion at `position` (see the module docstring)."""
    counter = _counter(tokenizer)
    lines = snapshot.lines
    offset = lines.offset_at(position)
    line = lines.position_at(offset).line
    language = snapshot.language.name if snapshot.language else snapshot.language_id
    path = _display_path(snapshot, roots)
    file_line = file_header(path, language)
    suffix_share = int(budget.max_tokens * budget.suffix_share)
    suffix_end = _suffix_end(snapshot, offset, line, suffix_share, counter)
    file_tokens = counter.snippet(file_line)
    room = budget.max_tokens - SPECIAL_TOKENS - file_tokens
    earliest = _prefix_start(snapshot, offset, line, room - _suffix_tokens(snapshot, offset, suffix_end, counter), 1, counter)
    usable = [s for s in snippets if not (s.path == snapshot.path and s.range.overlaps_lines(earliest, suffix_end))]
    header_room = int(budget.max_tokens * budget.header_share) - file_tokens
    chosen = _choose_snippets(usable, header_room, counter, roots)
    header = "".join(_render(s, roots) for s in chosen) + file_line
    header_tokens = len(tokenizer.encode(header))
    prefix_room = budget.max_tokens - SPECIAL_TOKENS - header_tokens - _suffix_tokens(snapshot, offset, suffix_end, counter)
    start = _prefix_start(snapshot, offset, line, prefix_room, budget.align_lines, counter)
    if start == 0:
        leftover = prefix_room - counter.text(snapshot.text[:offset])
        if leftover >= SUFFIX_STEP:
            extra = leftover // SUFFIX_STEP * SUFFIX_STEP
            suffix_end = _suffix_end(snapshot, offset, line, suffix_share + extra, counter)
    prefix = snapshot.text[lines.line_start(start) : offset]
    suffix = snapshot.text[offset : _line_end_with_break(snapshot, suffix_end)]
    ids, prefix, start = _fit(tokenizer, header, prefix, suffix, budget, snapshot, offset, start)
    suffix_tokens = counter.text(suffix)
    counts = {
        "header": header_tokens,
        "suffix": suffix_tokens,
        "prefix": len(ids) - SPECIAL_TOKENS - header_tokens - suffix_tokens,
        "special": SPECIAL_TOKENS,
        "total": len(ids),
    }
    return Prompt(tuple(ids), header, prefix, suffix, tuple(chosen), counts, FimMode.SPM, start, suffix_end)


def _choose_snippets(snippets: Sequence[Snippet], room: int, counter: _Counter, roots: Sequence[str]) -> list[Snippet]:
    """Best snippets first (as given) while they fit; then ordered most stable first."""
    chosen, used = [], 0
    for snippet in snippets:
        tokens = counter.snippet(_render(snippet, roots))
        if used + tokens <= room:
            chosen.append(snippet)
            used += tokens
    rank = {reason: i for i, reason in enumerate(REASONS)}
    return sorted(chosen, key=lambda s: (rank.get(s.reason, len(rank)), s.path, s.range.start))


def _render(snippet: Snippet, roots: Sequence[str]) -> str:
    language = language_for(None, snippet.path)
    return render_snippet(_relative(snippet.path, roots), snippet.text, language.name if language else "")


def _suffix_end(snapshot: DocumentSnapshot, offset: int, line: int, room: int, counter: _Counter) -> int:
    """Last line of the suffix: the cursor line, then whole following lines while they fit."""
    lines = snapshot.lines
    used = counter.text(snapshot.text[offset : lines.line_end(line)])
    end = line
    while end + 1 < lines.line_count:
        cost = counter.line(lines.line(end + 1))
        if used + cost > room:
            break
        used += cost
        end += 1
    return end


def _suffix_tokens(snapshot: DocumentSnapshot, offset: int, end: int, counter: _Counter) -> int:
    lines = snapshot.lines
    line = lines.position_at(offset).line
    rest = counter.text(snapshot.text[offset : lines.line_end(line)])
    return rest + sum(counter.line(lines.line(n)) for n in range(line + 1, end + 1))


def _prefix_start(snapshot: DocumentSnapshot, offset: int, line: int, room: int, align: int, counter: _Counter) -> int:
    """First prefix line: as far up as `room` allows, then down to a multiple of `align`."""
    lines = snapshot.lines
    used = counter.text(snapshot.text[lines.line_start(line) : offset])
    start = line
    while start > 0:
        cost = counter.line(lines.line(start - 1))
        if used + cost > room:
            break
        used += cost
        start -= 1
    if start == 0:
        return 0
    return min(line, -(-start // align) * align)


def _line_end_with_break(snapshot: DocumentSnapshot, line: int) -> int:
    lines = snapshot.lines
    return lines.line_start(line + 1) if line + 1 < lines.line_count else len(snapshot.text)


def _fit(
    tokenizer: TokenizerLike,
    header: str,
    prefix: str,
    suffix: str,
    budget: PromptBudget,
    snapshot: DocumentSnapshot,
    offset: int,
    start: int,
) -> tuple[list[int], str, int]:
    """Exact ids; if per-line estimates undercounted, drop prefix lines (then characters) until they fit."""
    lines = snapshot.lines
    cursor_line = lines.position_at(offset).line
    while True:
        ids = fim_prompt_ids(tokenizer, header, prefix, suffix, FimMode.SPM)
        if len(ids) <= budget.max_tokens or not prefix:
            return ids, prefix, start
        if start < cursor_line:
            start = min(cursor_line, start + budget.align_lines)
            prefix = snapshot.text[lines.line_start(start) : offset]
        else:
            prefix = prefix[max(1, len(prefix) // 8) :]


def _display_path(snapshot: DocumentSnapshot, roots: Sequence[str]) -> str:
    if snapshot.path:
        return _relative(snapshot.path, roots)
    return snapshot.uri.rsplit("/", 1)[-1]


def _relative(path: str, roots: Sequence[str]) -> str:
    for root in sorted(roots, key=len, reverse=True):
        if path.startswith(root.rstrip(os.sep) + os.sep):
            return os.path.relpath(path, root).replace(os.sep, "/")
    return path


class _Counter:
    """Token counts of texts; those of lines (newline included) and snippets memoised per tokenizer."""

    LIMIT = 50_000

    def __init__(self, tokenizer: TokenizerLike) -> None:
        self.tokenizer = tokenizer
        self.lines: dict[str, int] = {}
        self.snippets: dict[str, int] = {}

    def line(self, text: str) -> int:
        count = self.lines.get(text)
        if count is None:
            if len(self.lines) > self.LIMIT:
                self.lines.clear()
            count = self.lines[text] = len(self.tokenizer.encode(text + "\n"))
        return count

    def text(self, text: str) -> int:
        return len(self.tokenizer.encode(text)) if text else 0

    def snippet(self, text: str) -> int:
        """Like `text`, memoised: rendered snippets recur from one keystroke to the next."""
        count = self.snippets.get(text)
        if count is None:
            if len(self.snippets) > self.LIMIT:
                self.snippets.clear()
            count = self.snippets[text] = self.text(text)
        return count


_COUNTERS: weakref.WeakKeyDictionary[object, _Counter] = weakref.WeakKeyDictionary()
_COUNTERS_LOCK = threading.Lock()


def _counter(tokenizer: TokenizerLike) -> _Counter:
    try:
        with _COUNTERS_LOCK:
            counter = _COUNTERS.get(tokenizer)
            if counter is None:
                counter = _COUNTERS[tokenizer] = _Counter(tokenizer)
            return counter
    except TypeError:  # not weak-referenceable: count without a memo
        return _Counter(tokenizer)
