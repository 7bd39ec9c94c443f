"""The completion pipeline without LSP: snapshot + position -> prompt -> (model) -> final text.

Role: shared by the language server and the headless `lsp_server complete` command, so both
run exactly the same steps: classify the cursor (empty / single line / multi line), gather
cross-file snippets, build the budgeted FIM prompt, choose sampling, and post-process the
model's raw text (also its partial text while streaming).

Invariants: pure with respect to its inputs (no I/O, no engine); the prompt plus the token cap
always fits the model's context length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from context.classify import CompletionKind, classify
from context.crossfile import Snippet, gather_snippets
from context.document import DocumentSnapshot
from context.edits import RecentEdits
from context.index import WorkspaceIndex
from context.positions import Position
from context.postprocess import PostContext, postprocess
from context.prompt import Prompt, PromptBudget, build_prompt
from model_runtime.api import SamplingParams
from model_runtime.tokenizer import GlmTokenizer

from .settings import ServerSettings

if TYPE_CHECKING:
    from .state import WorkspaceState

RECENT_EDITS = 16
MAX_LINE_CHARS = 20_000  # a longer line at the cursor is minified or generated text: no completion there
BLOCK_OPENERS = (":", "{", "(", "[", "=>", "\\")
MULTILINE_MIN_CONFIDENCE = 0.05  # past its first line, a block stops where the model is this unsure


@dataclass(frozen=True, slots=True)
class Prepared:
    """Everything needed to run one completion and post-process its output."""

    snapshot: DocumentSnapshot
    position: Position
    kind: CompletionKind
    prompt: Prompt | None  # None when the cursor is a place not to complete (kind EMPTY)
    sampling: SamplingParams
    snippets: tuple[Snippet, ...]
    budget: PromptBudget | None

    @property
    def post_context(self) -> PostContext:
        return PostContext.of(self.snapshot, self.position, self.kind)


def completion_kind(snapshot: DocumentSnapshot, position: Position, multiline: str) -> CompletionKind:
    """The syntax tree's decision, overridden by the `multiline` setting (never/always). With
    "auto", a block is only proposed where one starts: an empty line inside a block's body
    (not after an opener, not indented deeper than the line before) gets a single line, since
    text past it is rarely accepted and costs decode time."""
    kind = classify(snapshot, position)
    if kind is CompletionKind.EMPTY:
        return kind
    if multiline == "auto":
        return CompletionKind.SINGLE_LINE if kind is CompletionKind.MULTI_LINE and not _block_starts(snapshot, position) else kind
    return CompletionKind.MULTI_LINE if multiline == "always" else CompletionKind.SINGLE_LINE


def _block_starts(snapshot: DocumentSnapshot, position: Position) -> bool:
    """Whether a block may start at `position`: the line is not empty (the classifier saw an
    opener), or the previous non-blank line opens a block, or this line is indented deeper."""
    line = snapshot.line(position.line)
    if line.strip():
        return True
    previous = next((snapshot.line(n) for n in range(position.line - 1, -1, -1) if snapshot.line(n).strip()), None)
    if previous is None:
        return True  # an empty file, or only blank lines above: new code
    return previous.rstrip().endswith(BLOCK_OPENERS) or position.character > len(previous) - len(previous.lstrip())


def sampling_for(kind: CompletionKind, settings: ServerSettings, seed: int | None = None) -> SamplingParams:
    single = kind is CompletionKind.SINGLE_LINE
    return SamplingParams(
        max_tokens=settings.single_line_max_tokens if single else settings.max_tokens,
        temperature=settings.temperature,
        seed=seed,
        stop_strings=("\n",) if single else (),
        max_decode_ms=settings.max_decode_ms,
        min_confidence=0.0 if single else MULTILINE_MIN_CONFIDENCE,
    )


def prepare(
    snapshot: DocumentSnapshot,
    position: Position,
    tokenizer: GlmTokenizer,
    context_length: int,
    settings: ServerSettings,
    index: WorkspaceIndex | None,
    open_docs: list[DocumentSnapshot],
    recent_edits: RecentEdits | None,
    force: bool = False,
    roots: Sequence[str] = (),
) -> Prepared:
    """Build the request for a completion at `position` (`force`: complete even where EMPTY).
    A cursor on a line longer than `MAX_LINE_CHARS` gets no prompt (EMPTY), forced or not.

    `roots` (workspace folders) make the paths in the prompt header relative.
    """
    if len(snapshot.line(position.line)) > MAX_LINE_CHARS:  # minified or generated: no useful prompt
        return Prepared(snapshot, position, CompletionKind.EMPTY, None, sampling_for(CompletionKind.EMPTY, settings), (), None)
    kind = completion_kind(snapshot, position, settings.multiline)
    if kind is CompletionKind.EMPTY and force:
        kind = CompletionKind.SINGLE_LINE
    sampling = sampling_for(kind, settings)
    if kind is CompletionKind.EMPTY:
        return Prepared(snapshot, position, kind, None, sampling, (), None)
    budget = PromptBudget(max_tokens=max(16, min(settings.prompt_tokens, context_length - sampling.max_tokens)))
    edits = recent_edits.recent(RECENT_EDITS) if recent_edits is not None else []
    header_tokens = int(budget.max_tokens * budget.header_share)
    snippets = gather_snippets(snapshot, position, index, open_docs, edits, header_tokens, tokenizer.count)
    prompt = build_prompt(snapshot, position, snippets, tokenizer, budget, roots)
    return Prepared(snapshot, position, kind, prompt, sampling, tuple(snippets), budget)


def prepare_later(
    state: WorkspaceState, settings: ServerSettings, snapshot: DocumentSnapshot, position: Position, tokenizer: GlmTokenizer,
    context_length: int, force: bool = False,
) -> Callable[[], Prepared]:
    """`prepare` with the workspace's context (index, other open documents, recent edits, roots)
    captured now, on the event loop, and the work left to a call that may run on a worker thread,
    on its own copy of the tree (trees are not thread-safe; a large document's version is parsed
    there if nothing parsed it yet)."""
    args = (
        position, tokenizer, context_length, settings, state.index, state.open_snapshots(exclude=snapshot.uri),
        state.recent_edits, force, [str(r) for r in state.roots],
    )
    return lambda: prepare(snapshot.with_own_tree(), *args)


def finish(prepared: Prepared, raw: str) -> str:
    """The text to show for the model's raw output (or its partial output while streaming)."""
    return postprocess(raw, prepared.post_context)


def block_finished(raw: str, final: str) -> bool:
    """True when post-processing cut `raw` at a line and the model already wrote past it.

    Then more tokens cannot change the answer, and generation can stop early.
    """
    if not final.strip() or not raw.startswith(final):
        return False
    rest = raw[len(final) :]
    newline = rest.find("\n")
    return newline >= 0 and rest[newline + 1 :].strip() != ""
