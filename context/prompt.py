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
    site = _Site.at(snapshot, position, _counter(tokenizer))
    language = snapshot.language.name if snapshot.language else snapshot.language_id
    file_line = file_header(_display_path(snapshot, roots), language)
    suffix_room = int(budget.max_tokens * budget.suffix_share)
    suffix_end = site.suffix_end(suffix_room)
    chosen = _header_snippets(site, snippets, budget, file_line, suffix_end, roots)
    header = "".join(_render(s, roots) for s in chosen) + file_line
    header_tokens = site.counter.text(header)
    prefix_room = budget.max_tokens - SPECIAL_TOKENS - header_tokens - site.suffix_tokens(suffix_end)
    start = site.prefix_start(prefix_room, budget.align_lines)
    if start == 0:
        leftover = prefix_room - site.counter.text(snapshot.text[: site.offset])
        if leftover >= SUFFIX_STEP:
            suffix_end = site.suffix_end(suffix_room + leftover // SUFFIX_STEP * SUFFIX_STEP)
    suffix = snapshot.text[site.offset : site.after_line(suffix_end)]
    ids, prefix, start = _fit(tokenizer, site, header, suffix, start, budget)
    suffix_tokens = site.counter.text(suffix)
    counts = {
        "header": header_tokens,
        "suffix": suffix_tokens,
        "prefix": len(ids) - SPECIAL_TOKENS - header_tokens - suffix_tokens,
        "special": SPECIAL_TOKENS,
        "total": len(ids),
    }
    return Prompt(tuple(ids), header, prefix, suffix, tuple(chosen), counts, FimMode.SPM, start, suffix_end)


def _header_snippets(
    site: _Site, snippets: Sequence[Snippet], budget: PromptBudget, file_line: str, suffix_end: int, roots: Sequence[str]
) -> list[Snippet]:
    """Snippets for the header: none from the current file's prefix/suffix window (the prefix can
    start no earlier than `earliest`), best first (as given) while they fit, then most stable first."""
    counter = site.counter
    file_tokens = counter.snippet(file_line)
    widest = budget.max_tokens - SPECIAL_TOKENS - file_tokens - site.suffix_tokens(suffix_end)
    earliest = site.prefix_start(widest, 1)
    path = site.snapshot.path
    room = int(budget.max_tokens * budget.header_share) - file_tokens
    chosen, used = [], 0
    for snippet in snippets:
        if snippet.path == path and snippet.range.overlaps_lines(earliest, suffix_end):
            continue
        tokens = counter.snippet(_render(snippet, roots))
        if used + tokens <= room:
            chosen.append(snippet)
            used += tokens
    rank = {reason: i for i, reason in enumerate(REASONS)}
    return sorted(chosen, key=lambda s: (rank.get(s.reason, len(rank)), s.path, s.range.start))


def _render(snippet: Snippet, roots: Sequence[str]) -> str:
    language = language_for(None, snippet.path)
    return render_snippet(_relative(snippet.path, roots), snippet.text, language.name if language else "")


@dataclass(frozen=True, slots=True)
class _Site:
    """The cursor in a snapshot, with the line arithmetic of prefix and suffix trimming."""

    snapshot: DocumentSnapshot
    offset: int
    line: int
    counter: _Counter

    @classmethod
    def at(cls, snapshot: DocumentSnapshot, position: Position, counter: _Counter) -> _Site:
        offset = snapshot.offset_at(position)
        return cls(snapshot, offset, snapshot.position_at(offset).line, counter)

    def suffix_end(self, room: int) -> int:
        """Last line of the suffix: the cursor line, then whole following lines while they fit."""
        lines = self.snapshot.lines
        used = self.counter.text(self.snapshot.text[self.offset : lines.line_end(self.line)])
        end = self.line
        while end + 1 < lines.line_count:
            cost = self.counter.line(lines.line(end + 1))
            if used + cost > room:
                break
            used += cost
            end += 1
        return end

    def suffix_tokens(self, end: int) -> int:
        lines = self.snapshot.lines
        rest = self.counter.text(self.snapshot.text[self.offset : lines.line_end(self.line)])
        return rest + sum(self.counter.line(lines.line(n)) for n in range(self.line + 1, end + 1))

    def prefix_start(self, room: int, align: int) -> int:
        """First prefix line: as far up as `room` allows, then down to a multiple of `align`."""
        lines = self.snapshot.lines
        used = self.counter.text(self.snapshot.text[lines.line_start(self.line) : self.offset])
        start = self.line
        while start > 0:
            cost = self.counter.line(lines.line(start - 1))
            if used + cost > room:
                break
            used += cost
            start -= 1
        return 0 if start == 0 else min(self.line, -(-start // align) * align)

    def prefix_from(self, start: int) -> str:
        return self.snapshot.text[self.snapshot.lines.line_start(start) : self.offset]

    def after_line(self, line: int) -> int:
        """Offset just past `line` and its terminator."""
        lines = self.snapshot.lines
        return lines.line_start(line + 1) if line + 1 < lines.line_count else len(self.snapshot.text)


def _fit(
    tokenizer: TokenizerLike, site: _Site, header: str, suffix: str, start: int, budget: PromptBudget
) -> tuple[list[int], str, int]:
    """Exact ids; if per-line estimates undercounted, drop prefix lines (then characters) until they fit."""
    prefix = site.prefix_from(start)
    while True:
        ids = fim_prompt_ids(tokenizer, header, prefix, suffix, FimMode.SPM)
        if len(ids) <= budget.max_tokens or not prefix:
            return ids, prefix, start
        if start < site.line:
            start = min(site.line, start + budget.align_lines)
            prefix = site.prefix_from(start)
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
