"""Model-backed code actions: "Declare `x`" and "Fix with model", with a checker in the loop.

Role: compute the edit of an action the user picked (lazily, from `codeAction/resolve` or the
`glm5.applyFix` command). Each attempt is a fill-in-the-middle generation:
- declare: the middle of `<prefix><indent>x = ` ... `\n<the statement using x>...`, one line;
- fix: the lines of the diagnostic's range, regenerated with the diagnostic in the header.
Every candidate is checked with `context.check` (parser + pyflakes for Python, tree-sitter
error nodes elsewhere). A rejected candidate's first problem goes back into the prompt header
(as a comment) for the next attempt, up to `fixAttempts`. Only a passing candidate is returned.

Invariants: the document is never written here; the caller returns the edit (versioned) to
the client, which applies it. Every step is logged with the request's trace id.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from context.check import check_code, new_problems
from context.classify import CompletionKind
from context.document import Document, DocumentSnapshot
from context.fim import comment_prefix, file_header, fim_prompt_ids
from context.positions import Position, Range
from context.postprocess import PostContext, postprocess
from context.symbols import undeclared_symbols
from model_runtime.api import GenerationRequest, SamplingParams

from .errors import NoPassingFix, StaleRequest
from .settings import ServerSettings
from .state import WorkspaceState
from .statements import declaration_site

if TYPE_CHECKING:
    from .engine_client import EngineClient, ModelHandle

log = logging.getLogger(__name__)

_trace_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Replacement:
    """The passing fix: replace `range` of document `uri` (at `version`) with `text`."""

    uri: str
    version: int
    range: Range
    text: str
    attempts: int


@dataclass(frozen=True, slots=True)
class _Task:
    """One fix to find: regenerate text[start:end] (whole lines, or an insertion at a line start)."""

    snapshot: DocumentSnapshot
    start: int  # string offsets of the replaced span
    end: int
    lead: str  # text the middle starts with (e.g. "x = "), kept in the edit
    goal: str  # what the header asks for
    single_line: bool
    target: str | None = None  # a checker message that must disappear
    name: str | None = None  # a name that must no longer be undeclared


class Fixer:
    """Fixes documents of `state` with `engine` under `settings()`; `busy(goal)` shows the work
    in the editor's status while it runs."""

    def __init__(
        self, state: WorkspaceState, engine: EngineClient, settings: Callable[[], ServerSettings],
        busy: Callable[[str], AbstractContextManager[None]],
    ) -> None:
        self._state = state
        self._engine = engine
        self._settings = settings
        self._busy = busy

    async def declare(self, uri: str, version: int, name: str, use: Range) -> Replacement:
        snapshot = self._current(uri, version)
        site = declaration_site(snapshot, use.start, name)
        offset = snapshot.offset_at(Position(site.line, 0))
        task = _Task(
            snapshot, offset, offset, f"{site.indent}{site.head}", f"declare `{name}` with the value the code below needs",
            single_line=True, name=name,
        )
        return await self._solve(task, trace=f"declare-{next(_trace_ids)}")

    async def fix(self, uri: str, version: int, where: Range, message: str, name: str | None = None) -> Replacement:
        """Regenerate the lines of `where`; `name`: the diagnostic is our undeclared `name`."""
        snapshot = self._current(uri, version)
        start, end = _whole_lines(snapshot, where)
        task = _Task(snapshot, start, end, "", f"fix: {message.strip()}", single_line=False, target=message.strip(), name=name)
        return await self._solve(task, trace=f"fix-{next(_trace_ids)}")

    def _current(self, uri: str, version: int) -> DocumentSnapshot:
        snapshot = self._state.snapshot(uri)
        if snapshot.version != version:
            raise StaleRequest(uri, version, snapshot.version)
        return snapshot

    async def _solve(self, task: _Task, trace: str) -> Replacement:
        with self._busy(task.goal):
            return await self._attempts(task, trace)

    async def _attempts(self, task: _Task, trace: str) -> Replacement:
        snapshot = task.snapshot
        handle = await self._engine.ready()
        feedback: str | None = None
        attempts = self._settings().fix_attempts
        for attempt in range(1, attempts + 1):
            request = self._request(handle, task, feedback, f"{trace}.{attempt}", attempt)
            log.info("%s: attempt %d/%d, %d prompt tokens", trace, attempt, attempts, len(request.prompt_ids))
            result = await self._engine.generate(request)
            middle, feedback = await asyncio.to_thread(_evaluate, task, result.text)
            log.debug("%s: attempt %d wrote %r", trace, attempt, middle)
            log.info("%s: attempt %d %s", trace, attempt, "passed" if feedback is None else f"rejected: {feedback}")
            if feedback is None:
                self._current(snapshot.uri, snapshot.version)
                span = Range(snapshot.position_at(task.start), snapshot.position_at(task.end))
                return Replacement(snapshot.uri, snapshot.version, span, middle, attempt)
        raise NoPassingFix(f"no candidate passed the checks after {attempts} attempts (last: {feedback})")

    def _request(self, handle: ModelHandle, task: _Task, feedback: str | None, rid: str, attempt: int) -> GenerationRequest:
        snapshot = task.snapshot
        language = snapshot.language.name if snapshot.language else snapshot.language_id
        mark = comment_prefix(language)
        header = f"{mark} task: {task.goal}\n"
        if feedback is not None:
            header += f"{mark} a previous attempt was rejected: {feedback}\n"
        header += file_header(snapshot.path or snapshot.uri, language)
        settings = self._settings()
        max_tokens = settings.single_line_max_tokens if task.single_line else settings.max_tokens * 2
        budget = max(32, min(settings.prompt_tokens, handle.context_length - max_tokens) - handle.tokenizer.count(header) - 8)
        prefix, suffix = _window(handle, snapshot.text[: task.start] + task.lead, snapshot.text[task.end :], budget)
        ids = fim_prompt_ids(handle.tokenizer, header, prefix, suffix)
        sampling = SamplingParams(
            max_tokens=max_tokens,
            temperature=0.0 if attempt == 1 else min(1.0, 0.3 * attempt),
            seed=attempt,
            stop_strings=("\n",) if task.single_line else (),
        )
        return GenerationRequest(rid, tuple(ids), sampling)


def _whole_lines(snapshot: DocumentSnapshot, where: Range) -> tuple[int, int]:
    """Offsets of the whole lines `where` touches (an end at column 0 of a later line excluded)."""
    lines = snapshot.lines
    last = where.end.line - 1 if where.end.character == 0 and where.end.line > where.start.line else where.end.line
    end = lines.line_start(last + 1) if last + 1 < lines.line_count else len(snapshot.text)
    return lines.line_start(where.start.line), end


def _evaluate(task: _Task, raw: str) -> tuple[str, str | None]:
    """(worker thread) The candidate's replacement text, and None if it passes, else why not."""
    middle = task.lead + _shape(raw, task)
    text = task.snapshot.text
    candidate = text[: task.start] + middle + text[task.end :]
    return middle, _verdict(task, middle, candidate)


def _shape(raw: str, task: _Task) -> str:
    """The model's text post-processed as a completion at the hole (one line for declarations,
    the enclosing block otherwise, never re-typing the lines after it), as whole lines."""
    snapshot, text = task.snapshot, task.snapshot.text
    newline = "\n" if task.end < len(text) or text.endswith("\n") else ""
    holed = Document(snapshot.uri, snapshot.language_id, snapshot.version, text[: task.start] + task.lead + "\n" + text[task.end :])
    cursor = holed.snapshot().position_at(task.start + len(task.lead))
    kind = CompletionKind.SINGLE_LINE if task.single_line else CompletionKind.MULTI_LINE
    return postprocess(raw, PostContext.of(holed.snapshot(), cursor, kind)) + newline


def _verdict(task: _Task, middle: str, candidate: str) -> str | None:
    """None when the candidate passes, else the reason (fed back into the next prompt)."""
    snapshot = task.snapshot
    language = snapshot.language.name if snapshot.language else snapshot.language_id
    if middle == snapshot.text[task.start : task.end]:
        return "the candidate changed nothing"
    if not middle[len(task.lead) :].strip():
        return "the candidate was empty"
    new = new_problems(language, snapshot.text, candidate, errors_only=True)
    if new:
        return f"{new[0].message} (line {new[0].range.start.line + 1})"
    if task.target is not None and any(p.message == task.target for p in check_code(language, candidate)):
        return f"still reported: {task.target}"
    if task.name is not None:
        document = Document(snapshot.uri, snapshot.language_id, snapshot.version, candidate)
        if task.name in {s.name for s in undeclared_symbols(document.snapshot(), None)}:
            return f"`{task.name}` is still not declared"
    return None


def _window(handle: ModelHandle, prefix: str, suffix: str, budget: int) -> tuple[str, str]:
    """Whole lines nearest the hole: about 3/4 of `budget` tokens before it, 1/4 after."""
    count = handle.tokenizer.count
    keep_before, keep_after = (budget * 3) // 4, budget // 4
    head, _, last = prefix.rpartition("\n")
    before_lines, used = [last], count(last)
    for line in reversed(head.split("\n") if head else []):
        used += count(line) + 1
        if used > keep_before:
            break
        before_lines.append(line)
    after_lines, used = [], 0
    for line in suffix.split("\n"):
        used += count(line) + 1
        if used > keep_after and after_lines:
            break
        after_lines.append(line)
    return "\n".join(reversed(before_lines)), "\n".join(after_lines)
