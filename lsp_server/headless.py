"""`lsp_server complete FILE:LINE:COL`: one completion through the server's pipeline, on stdout.

Role: index the workspace, load the model, build the prompt exactly as the language server
does (`pipeline`, `candidates`), generate with the constraint and n-best, rerank the candidates
and print the best: the request is explicit, as a manual-trigger key's (with `--automatic` it is
a trigger while typing, which may abstain: then stdout stays empty); when the answer can only be the
model's own text, it streams to stdout as its lines become final. Diagnostics (what went wrong, how long it took) go to stderr, so stdout holds
only the completion text and scripts can use it as is.

Invariants: LINE and COL are 1-based and COL counts characters (code points), as editors show
them. Bad input (a malformed location, a missing or binary file, invalid UTF-8, a line past the
file's end or a column past its line's end, a `--workspace` that is not a folder, no model) exits
with status 2 and one line on stderr, before anything is indexed or loaded; a failed generation
exits with status 1. A completion printed ends with a newline (an abstention prints nothing).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from context.document import Document
from context.index import WorkspaceIndex
from context.languages import language_for
from context.positions import Position, TextIndex, utf16_length
from model_runtime.api import FinishReason, GenerationResult, StreamEvent
from model_runtime.remote.config import RemoteConfig

from . import candidates, pipeline
from .engine_client import RuntimeOptions, embedded_model_path, load_runtime
from .settings import ServerSettings


class UsageError(Exception):
    """Bad command-line input: reported on stderr with exit status 2."""


def parse_location(location: str) -> tuple[Path, int, int]:
    """FILE:LINE:COL (1-based) -> (path, line, column); the file may contain colons."""
    rest, sep1, column = location.rpartition(":")
    file, sep2, line = rest.rpartition(":")
    if not (sep1 and sep2 and file and line.isdigit() and column.isdigit() and int(line) >= 1 and int(column) >= 1):
        raise UsageError(f"expected FILE:LINE:COL with LINE, COL >= 1, got {location!r}")
    return Path(file), int(line), int(column)


def read_source(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if b"\0" in data[:8192]:
        raise UsageError(f"{path}: looks like a binary file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not valid UTF-8 (byte {exc.start})") from exc


def workspace_root(path: Path) -> Path:
    """The nearest enclosing git root, else the file's folder."""
    for parent in path.resolve().parents:
        if (parent / ".git").exists():
            return parent
    return path.resolve().parent


def lsp_position(path: Path, lines: TextIndex, line: int, column: int) -> Position:
    """1-based line and code-point column -> 0-based UTF-16 position; UsageError outside the file
    (the line after a final newline is in it, as editors show it; so is the column after a line's
    last character)."""
    if line > lines.line_count:
        raise UsageError(f"{path}: line {line} is past the end of the file ({lines.line_count} lines)")
    text = lines.line(line - 1)
    if column > len(text) + 1:
        raise UsageError(f"{path}:{line}: column {column} is past the end of the line ({len(text)} characters)")
    return Position(line - 1, utf16_length(text[: column - 1]))


def run_complete(args: argparse.Namespace) -> int:
    try:
        path, line, column = parse_location(args.location)
        text = read_source(path)
        position = lsp_position(path, TextIndex(text), line, column)
        if args.workspace is not None and not args.workspace.is_dir():
            raise UsageError(f"--workspace {args.workspace}: not a folder")
        if args.max_tokens is not None and not 1 <= args.max_tokens <= 4096:
            raise UsageError(f"--max-tokens must be in 1..4096, got {args.max_tokens}")
        remote = RemoteConfig(args.engine_url, api_key_env=args.engine_api_key_env) if args.engine_url else None
        model = args.model or ("" if remote else embedded_model_path())
        if model is None:
            raise UsageError("no model: give --model DIR (no embedded default model is installed)")
    except (UsageError, ValueError) as exc:
        print(f"lsp_server complete: {exc}", file=sys.stderr)
        return 2
    settings = ServerSettings()
    if args.max_tokens is not None:
        settings = replace(settings, max_tokens=args.max_tokens, single_line_max_tokens=args.max_tokens)
    if args.no_abstain:
        settings = replace(settings, abstain=False)
    language = language_for(None, str(path))
    document = Document(path.resolve().as_uri(), language.name if language else "plaintext", 1, text)
    root = args.workspace.resolve() if args.workspace else workspace_root(path)
    started = time.perf_counter()
    index = WorkspaceIndex([root])
    index.build(None)
    try:
        handle = load_runtime(model, RuntimeOptions(args.device or settings.device, args.dtype or settings.dtype, args.mtp or settings.mtp, remote, settings.threads, settings.compile_decode)).safe()
    except Exception as exc:
        print(f"lsp_server complete: cannot load model from {remote.base_url if remote else model}: {exc}", file=sys.stderr)
        return 2
    try:
        return _generate(handle, document, position, settings, index, started, args.automatic)
    finally:
        handle.engine.shutdown()


def _generate(
    handle, document: Document, position: Position, settings: ServerSettings, index: WorkspaceIndex, started: float, automatic: bool
) -> int:
    snapshot = document.snapshot()
    prepared = pipeline.prepare(
        snapshot, position, handle.tokenizer, handle.context_length, settings, index, [], None,
        force=True, roots=[str(r) for r in index.roots],
    )
    assert prepared.prompt is not None  # force=True always builds a prompt
    plan = candidates.make_plan(
        prepared, settings, handle.tokenizer, index, [], getattr(handle.engine, "score", None) is not None, handle.identity, explicit=not automatic
    )
    out = _LineStreamer(prepared)
    prescored = None
    if plan.reach is not None and not plan.out_of_reach:
        prescored = candidates.prescore_sync(handle.engine, plan, prepared, handle.tokenizer)
    early = candidates.settled_early(plan, prescored)
    if early is not None:
        out.finish(early)
        why = candidates.early_why(plan, prescored, early)
        why = f"nothing shown: {why}" if why else "shown without decoding: nothing the model could decode would change the reranker's choice"
        print(f"[{len(prepared.prompt.ids)} prompt tokens, {why}, {time.perf_counter() - started:.2f} s]", file=sys.stderr)
        return 0
    done = threading.Event()
    box: list[GenerationResult] = []

    def on_done(result: GenerationResult) -> None:
        box.append(result)
        done.set()

    handle.engine.submit(plan.request("headless", prepared.sampling), None if plan.gated else out.on_event, on_done)
    done.wait()
    result = box[0]
    if result.finish_reason is FinishReason.ERROR:
        print(f"lsp_server complete: generation failed: {result.error}", file=sys.stderr)
        return 1
    decision = candidates.settle_sync(handle.engine, plan, prepared, result, handle.tokenizer, prescored)
    out.finish(decision.text)
    shown = f"nothing shown: {decision.why}" if not decision.text else f"{len(decision.candidates)} candidates"
    print(
        f"[{len(prepared.prompt.ids)} prompt tokens, {len(result.token_ids)} generated, {shown}, "
        f"{time.perf_counter() - started:.2f} s]",
        file=sys.stderr,
    )
    return 0


class _LineStreamer:
    """Writes the post-processed completion to stdout one finished line at a time."""

    def __init__(self, prepared: pipeline.Prepared) -> None:
        self._prepared = prepared
        self.printed = ""

    def on_event(self, event: StreamEvent) -> None:
        text = pipeline.finish(self._prepared, event.text)
        stable = text[: text.rfind("\n") + 1]
        if len(stable) > len(self.printed) and stable.startswith(self.printed):
            self._write(stable[len(self.printed) :])

    def finish(self, final: str) -> None:
        if final.startswith(self.printed):
            self._write(final[len(self.printed) :])
        else:
            print("lsp_server complete: the final completion differs from the streamed lines:", file=sys.stderr)
            print(final, file=sys.stderr)
        if self.printed and not self.printed.endswith("\n"):
            sys.stdout.write("\n")
        sys.stdout.flush()

    def _write(self, text: str) -> None:
        self.printed += text
        sys.stdout.write(text)
        sys.stdout.flush()
