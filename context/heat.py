"""Where the model looked: a prompt's per-token DSA selection counts mapped back to source lines.

Role: `heat_map` takes a `Prompt` (the SPM layout of `context.fim`: [gMASK] <sop> header
<|code_suffix|> suffix <|code_prefix|> prefix <|code_middle|>), the character span of every token
of its three text segments (each segment is tokenized on its own, so the spans come from encoding
each segment again), and one count per prompt token (`AttentionRecord.selections`), and sums the
counts per cross-file snippet, per line of each snippet, and per line of the current file.

A token belongs to the line its first character is on. Header tokens outside every snippet body
(the `# file:` lines) and the five special tokens are reported as `other`. Shares are fractions
of all selections of prompt tokens, so snippets + current file + other sum to 1.

Invariants: pure (no torch, no LSP); the segment token counts must add up to the prompt's ids, or
`HeatMapError` says which part disagrees (heat is never silently shifted onto the wrong lines).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from context.crossfile import Snippet
from context.prompt import SPECIAL_TOKENS, Prompt

Spans = Sequence[tuple[int, int]]


class HeatMapError(ValueError):
    """The selection counts or token spans do not fit the prompt."""


@dataclass(frozen=True, slots=True)
class LineHeat:
    line: int  # zero-based line in its file
    selections: int
    share: float


@dataclass(frozen=True, slots=True)
class SnippetHeat:
    snippet: Snippet
    selections: int
    share: float
    tokens: int  # prompt tokens of the snippet (its path line included)
    lines: tuple[LineHeat, ...]


@dataclass(frozen=True, slots=True)
class HeatMap:
    total: int  # selections of all prompt tokens
    snippets: tuple[SnippetHeat, ...]  # in prompt order
    lines: tuple[LineHeat, ...]  # current file, by line
    current_file: int  # selections of the current file's prefix and suffix tokens
    other: int  # special tokens and `# file:` lines


@dataclass(frozen=True, slots=True)
class PromptSpans:
    """Character spans of the tokens of each text segment of a prompt."""

    header: Spans
    suffix: Spans
    prefix: Spans


def heat_map(prompt: Prompt, spans: PromptSpans, selections: Sequence[int], cursor_line: int) -> HeatMap:
    """Sum `selections` (one per prompt token) by snippet and by line (see the module docstring)."""
    n_header, n_suffix, n_prefix = len(spans.header), len(spans.suffix), len(spans.prefix)
    expected = n_header + n_suffix + n_prefix + SPECIAL_TOKENS
    if len(prompt.ids) != expected:
        raise HeatMapError(f"segments hold {expected} tokens with the specials, the prompt {len(prompt.ids)}")
    if len(selections) != len(prompt.ids):
        raise HeatMapError(f"{len(selections)} selection counts for a prompt of {len(prompt.ids)} tokens")
    header_at = 2
    suffix_at = header_at + n_header + 1
    prefix_at = suffix_at + n_suffix + 1
    total = sum(selections)
    file_lines: dict[int, int] = {}
    _add_lines(file_lines, prompt.suffix, spans.suffix, selections[suffix_at : suffix_at + n_suffix], cursor_line)
    first_prefix_line = cursor_line - prompt.prefix.count("\n")
    _add_lines(file_lines, prompt.prefix, spans.prefix, selections[prefix_at : prefix_at + n_prefix], first_prefix_line)
    snippets = _snippets(prompt, spans.header, selections[header_at : header_at + n_header], total)
    current = sum(file_lines.values())
    return HeatMap(
        total=total,
        snippets=snippets,
        lines=_line_heat(file_lines, total),
        current_file=current,
        other=total - current - sum(s.selections for s in snippets),
    )


def _snippets(prompt: Prompt, spans: Spans, counts: Sequence[int], total: int) -> tuple[SnippetHeat, ...]:
    """Each snippet's text is found in the header in order (its `# file:` line just before it)."""
    starts = [start for start, _ in spans]
    heats, cursor = [], 0
    for snippet in prompt.snippets_used:
        body = prompt.header.find(snippet.text, cursor)
        if body < 0:
            raise HeatMapError(f"snippet {snippet.path}:{snippet.range.start.line + 1} is not in the prompt header")
        end = body + len(snippet.text)
        first, body_first, last = (bisect.bisect_left(starts, x) for x in (cursor, body, end))
        lines: dict[int, int] = {}
        _add_lines(lines, prompt.header, spans[body_first:last], counts[body_first:last], snippet.range.start.line, body)
        selected = sum(counts[first:last])
        heats.append(SnippetHeat(snippet, selected, _share(selected, total), last - first, _line_heat(lines, total)))
        cursor = end
    return tuple(heats)


def _add_lines(
    into: dict[int, int], text: str, spans: Spans, counts: Sequence[int], first_line: int, origin: int = 0
) -> None:
    """Add each token's count to the line (of `text`, from offset `origin` = `first_line`) it starts on."""
    newlines = [i for i, ch in enumerate(text) if ch == "\n" and i >= origin]
    for (start, _), count in zip(spans, counts):
        line = first_line + bisect.bisect_left(newlines, max(start, origin))
        into[line] = into.get(line, 0) + count


def _line_heat(lines: dict[int, int], total: int) -> tuple[LineHeat, ...]:
    return tuple(LineHeat(line, count, _share(count, total)) for line, count in sorted(lines.items()))


def _share(count: int, total: int) -> float:
    return count / total if total else 0.0
