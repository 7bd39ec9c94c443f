"""Clean-up of a raw model completion before it is shown as ghost text.

Role: an ordered list of small pure filters (tabby-agent style), each `(text, ctx) -> text`:
 1. `strip_special_tokens`      cut at the first special-token text (eos, FIM, role markers)
 2. `continue_typed_line`       after typed code, the text continues that line: no second
                                indentation, no re-typed line
 3. `cut_to_single_line`        single-line requests keep only the first line
 4. `limit_to_block`            multi-line requests stop where the enclosing block ends
                                (indentation for Python, bracket depth everywhere)
 5. `drop_repetitive_lines`     cut where the model starts looping over the same lines
 6. `drop_duplicate_suffix_lines`  never re-type the lines that follow the cursor
 7. `drop_line_suffix_overlap`  never re-type the rest of the cursor line
 8. `drop_unmatched_closers`    drop closing brackets/quotes the rest of the line already has
 9. `trim_trailing_whitespace`
10. `drop_empty`                whitespace only → ""

Invariants: every filter is pure and total (any string in, a string out, never longer than its
input); `postprocess` applies them in this order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from context.classify import CompletionKind
from context.document import DocumentSnapshot
from context.positions import Position

FOLLOWING_LINES = 40
OPEN_TO_CLOSE = {"(": ")", "[": "]", "{": "}"}
CLOSERS = frozenset(OPEN_TO_CLOSE.values())
QUOTES = frozenset("\"'`")
SPECIAL_TOKEN = re.compile(r"<\|[a-z_]+\|>|\[gMASK\]|\[sMASK\]|\[MASK\]|<sop>|<eop>")
_SKIPPED = {
    "python": re.compile(r"#[^\n]*|\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'"),
    "rust": re.compile(r"//[^\n]*|/\*[\s\S]*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\\n])'"),
    "go": re.compile(r"//[^\n]*|/\*[\s\S]*?\*/|\"(?:\\.|[^\"\\\n])*\"|`[^`]*`|'(?:\\.|[^'\\\n])+'"),
}
_SKIPPED_JS = re.compile(r"//[^\n]*|/\*[\s\S]*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`")


@dataclass(frozen=True, slots=True)
class PostContext:
    """Where the completion goes: the cursor line split at the cursor and the lines after it."""

    snapshot: DocumentSnapshot
    position: Position
    kind: CompletionKind
    language: str
    line_prefix: str
    line_suffix: str
    following: tuple[str, ...]

    @classmethod
    def of(cls, snapshot: DocumentSnapshot, position: Position, kind: CompletionKind) -> PostContext:
        lines = snapshot.lines
        offset = lines.offset_at(position)
        line = lines.position_at(offset).line
        column = offset - lines.line_start(line)
        text = lines.line(line)
        following = tuple(lines.line(n) for n in range(line + 1, min(lines.line_count, line + 1 + FOLLOWING_LINES)))
        language = snapshot.language.name if snapshot.language else snapshot.language_id
        return cls(snapshot, position, kind, language, text[:column], text[column:], following)


Filter = Callable[[str, PostContext], str]


def strip_special_tokens(text: str, ctx: PostContext) -> str:
    match = SPECIAL_TOKEN.search(text)
    return text[: match.start()] if match else text


def continue_typed_line(text: str, ctx: PostContext) -> str:
    """After typed code on the cursor line, make the text continue that line. A model trained on
    whole-line middles writes a fresh line there: indentation first (`s += ` -> `            s +=
    1`), often re-typing what was typed. Inserted at the cursor that reads `s +=             s +=
    1`, so: a re-typed line keeps only what it adds, and the leading run of spaces shrinks to
    what the junction needs (none after a space, at most one after code)."""
    typed = ctx.line_prefix.strip()
    if not typed:
        return text
    first, newline, rest = text.partition("\n")
    body = first.lstrip(" \t")
    if not body:
        return text
    lead = first[: len(first) - len(body)]
    if lead and body.startswith(typed) and (typed[-1:].isspace() or not _joins_word(typed, body[len(typed) :])):
        body = body[len(typed) :]
        lead = body[: len(body) - len(body.lstrip(" \t"))]
        body = body.lstrip(" \t")
        if not body:
            return ""
    if ctx.line_prefix[-1:] in (" ", "\t"):
        lead = ""
    elif len(lead) > 1:
        lead = " "
    return lead + body + newline + rest


def _joins_word(typed: str, after: str) -> bool:
    """Whether `after` would extend the last word of `typed` (`ret` + `urn`): then the text is not
    a re-typed copy of the line but a longer word."""
    return bool(after) and (typed[-1].isalnum() or typed[-1] == "_") and (after[0].isalnum() or after[0] == "_")


def cut_to_single_line(text: str, ctx: PostContext) -> str:
    if ctx.kind is not CompletionKind.SINGLE_LINE:
        return text
    return text.split("\n", 1)[0].rstrip("\r")


def limit_to_block(text: str, ctx: PostContext) -> str:
    if ctx.kind is not CompletionKind.MULTI_LINE:
        return text
    if ctx.language == "python":
        text = _limit_by_indentation(text, ctx)
    return _limit_by_brackets(text, ctx)


def drop_repetitive_lines(text: str, ctx: PostContext) -> str:
    """Cut at the second repeat of a line or block of up to 4 lines repeated 3+ times in a row."""
    lines = text.split("\n")
    keys = [line.strip() for line in lines]
    for start in range(len(lines)):
        for period in range(1, 5):
            block = keys[start : start + period]
            if len(block) < period or not any(block):
                continue
            repeats = 1
            while keys[start + repeats * period : start + (repeats + 1) * period] == block:
                repeats += 1
            if repeats >= 3:
                return "\n".join(lines[: start + period])
    return text


def drop_duplicate_suffix_lines(text: str, ctx: PostContext) -> str:
    """Drop completion lines that re-type the lines after the cursor (Tabby's rule), and cut at a
    line equal to the next non-blank line of the document."""
    after = [line.strip() for line in ctx.following if line.strip()]
    if not after or "\n" not in text:
        return text
    lines = text.rstrip().split("\n")
    keys = [line.strip() for line in lines]
    for index in range(1, len(lines)):
        if keys[index] == after[0] and len(after[0]) >= 4 and not set(after[0]) <= CLOSERS | {";", ","}:
            return "\n".join(lines[:index])
    for size in range(len(lines) - 1, 0, -1):
        if keys[-size:] == after[:size]:
            return "\n".join(lines[:-size])
    return text


def drop_line_suffix_overlap(text: str, ctx: PostContext) -> str:
    """When the completion ends with the rest of the cursor line, drop that copy (unless it closes
    a bracket the completion itself opened)."""
    rest = ctx.line_suffix.strip()
    body = text.rstrip()
    if not rest or not body.endswith(rest) or len(body) == len(rest):
        return text
    kept = body[: -len(rest)]
    return kept.rstrip() if _net_brackets(kept, ctx.language) <= 0 else text


def drop_unmatched_closers(text: str, ctx: PostContext) -> str:
    """Drop trailing closers the completion did not open when the rest of the line starts with them."""
    rest = ctx.line_suffix.lstrip()
    if not rest or rest[0] not in CLOSERS | QUOTES:
        return text
    body = text.rstrip()
    unmatched = _unmatched_closers(body, ctx.language)
    tail = len(body)
    while tail > 0 and (tail - 1 in unmatched or body[tail - 1] in " \t"):
        tail -= 1
    closers = "".join(body[i] for i in range(tail, len(body)) if i in unmatched)
    if closers and rest.replace(" ", "").startswith(closers):
        return body[:tail].rstrip()
    if body[-1:] in QUOTES and body.count(body[-1]) % 2 == 1 and rest[0] == body[-1]:
        return body[:-1]
    return text


def trim_trailing_whitespace(text: str, ctx: PostContext) -> str:
    return "\n".join(line.rstrip() for line in text.split("\n")).rstrip()


def drop_empty(text: str, ctx: PostContext) -> str:
    return text if text.strip() else ""


FILTERS: tuple[Filter, ...] = (
    strip_special_tokens,
    continue_typed_line,
    cut_to_single_line,
    limit_to_block,
    drop_repetitive_lines,
    drop_duplicate_suffix_lines,
    drop_line_suffix_overlap,
    drop_unmatched_closers,
    trim_trailing_whitespace,
    drop_empty,
)


def postprocess(raw: str, ctx: PostContext, filters: tuple[Filter, ...] = FILTERS) -> str:
    text = raw.replace("\r\n", "\n")
    for step in filters:
        text = step(text, ctx)
    return text


def _limit_by_indentation(text: str, ctx: PostContext) -> str:
    """Python: stop at the first later line indented less than the block being written."""
    lines = text.split("\n")
    head = ctx.line_prefix + lines[0]
    if head.strip():
        limit = _indent(head) + (1 if head.rstrip().endswith(":") else 0)
    else:
        first_code = next((line for line in lines[1:] if line.strip()), "")
        limit = _indent(ctx.line_prefix) if ctx.line_prefix else _indent(first_code)
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() and _indent(line) < limit:
            return "\n".join(lines[:index])
    return text


def _limit_by_brackets(text: str, ctx: PostContext) -> str:
    """Stop before a closer that closes more than the document is missing; after closing exactly
    the missing ones, stop at the end of that line. A trailing block left open (the model ran
    out of tokens) is dropped back to the last line where the brackets balanced."""
    missing = max(0, _net_brackets(ctx.snapshot.text, ctx.language))
    masked = _mask(text, ctx.language)
    depth, balanced_end = 0, -1
    for index, char in enumerate(masked):
        if char in OPEN_TO_CLOSE:
            depth += 1
        elif char in CLOSERS:
            depth -= 1
            if depth < -missing:
                line_start = text.rfind("\n", 0, index) + 1
                cut = line_start if not text[line_start:index].strip() else index
                return text[:cut].rstrip()
            if missing and depth == -missing:
                end = text.find("\n", index)
                return text if end < 0 else text[:end]
        elif char == "\n" and depth == 0 and text[:index].strip():
            balanced_end = index
    if depth > 0 and balanced_end > 0 and ctx.language != "python":
        return text[:balanced_end]
    return text


def _indent(line: str) -> int:
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip())


def _mask(text: str, language: str) -> str:
    """`text` with string and comment contents blanked (same length), so brackets in them don't count."""
    pattern = _SKIPPED.get(language, _SKIPPED_JS)
    return pattern.sub(lambda m: " " * len(m.group()), text)


def _net_brackets(text: str, language: str) -> int:
    masked = _mask(text, language)
    return sum(masked.count(o) - masked.count(c) for o, c in OPEN_TO_CLOSE.items())


def _unmatched_closers(text: str, language: str) -> set[int]:
    stack: list[str] = []
    unmatched: set[int] = set()
    for index, char in enumerate(_mask(text, language)):
        if char in OPEN_TO_CLOSE:
            stack.append(OPEN_TO_CLOSE[char])
        elif char in CLOSERS:
            if stack and stack[-1] == char:
                stack.pop()
            else:
                unmatched.add(index)
    return unmatched
