"""Latency as the user meets it, through `lsp_server --stdio`: the first completion after opening
the editor, and the pauses while typing.

1. startup: the editor opens a long file with the cursor at its end and asks for a completion
   right after `initialized` (by default engine.py in `model_runtime/` as of a pinned commit,
   `--startup-rev`, so that edits of the working tree do not change the workload); timed from
   `initialized` to the answer's arrival (also from the server's spawn, which adds the
   interpreter, pygls and the handshake). A cold start (empty KV cache
   directory) against a restart with the cache the cold run persisted, per model: the embedded
   model and a mid-size random GLM-5 checkpoint (`bench_runtime`'s "mid", with the embedded model's
   BPE tokenizer; "mid-test" is the same weights with the tests' byte-like tokenizer). Also: the completion's
   prompt / cached tokens and the start-up phases from `glm5.stats`. `--prompt-tokens` raises the
   server's prompt budget (a ~12 s cold start on the mid model needs ~4k tokens here).
2. typing: a span of an unseen file (not in the workspace, fresh KV cache) typed back; at each
   natural pause (after a space, `(`, `.`, `:` or a newline; a newline brings its indentation,
   as an editor's auto-indent does) one inline completion, each answer awaited before typing on.
   p50/p95 to the first streamed text and to the final text, one server per variant, one after
   the other: as shipped (candidates, retrieval, rerank, abstain; decode budget `maxDecodeMs`
   200), the model at every pause (the same with `skipUnreachable` off: the model decodes and
   every candidate is scored at each pause), the plain streamed pipeline (one greedy candidate), the same with
   compiled decoding (`compileDecode`, typing from when its compile is ready), the same typing at
   once while that compile runs in the background (what a user meets in the first seconds after
   every start with compiling on), the same with MTP speculative decoding (`mtp`), and the plain
   one without the decode budget.

What it leaves out: the client's own debounce and rendering; the machine's other load (printed).

Usage: python bench/bench_latency.py [--tables startup,typing] [--models embedded,mid]
                                     [--file PATH] [--chars 300] [--startup-file PATH | --startup-rev REV]
                                     [--prompt-tokens N] [--repeats N] [--variants LABEL,...]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from lsprotocol import types

from bench_typing import REPO, _inline, _open, pct, record_session, start_server, stop_server

PAUSES = frozenset(" (.:\n")
STARTUP_REV = "6377e8d"  # the start-up workload: model_runtime/ as of this commit (`pinned_workspace`)
# One fixed place: extracted under each run's own temporary directory, the prompt came to 4,040
# tokens in one run and 4,076 in the next.
STARTUP_DIR = Path(tempfile.gettempdir()) / "glm5-bench-startup"
TYPING_FILE = REPO / "lsp_server" / "completions.py"


def pinned_workspace(rev: str, into: Path) -> Path:
    """`model_runtime/` (without the embedded model's files) as of commit `rev`, extracted under
    `into` (emptied first); returns its engine.py, the file the start-up table opens. Pinned, so
    the workload stays the same when the working tree changes: before, every edit of engine.py
    changed the prompt and with it what the random mid model decodes."""
    command = ["git", "-C", str(REPO), "archive", rev, "model_runtime", ":(exclude)model_runtime/default_model"]
    done = subprocess.run(command, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"--startup-rev {rev}: git archive failed ({done.stderr.decode(errors='replace').strip()}); "
                         "fetch that commit or give --startup-file")
    shutil.rmtree(into, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into / "model_runtime" / "engine.py"


def mid_checkpoint(tokenizer: str = "bpe") -> str:
    """`bench_runtime`'s mid-size config, random weights (built once), with the embedded model's
    trained 8,192-token BPE ("bpe": about 3.5 characters of code per token, nearer a real GLM-5
    tokenizer) or the tests' little BPE ("test": 410 tokens, about one per character; what this
    benchmark used before 2026-12-02 evening)."""
    if tokenizer not in ("bpe", "test"):
        raise ValueError(f"mid tokenizer: expected bpe or test, got {tokenizer!r}")
    path = Path(tempfile.gettempdir()) / ("glm5-bench-mid" if tokenizer == "test" else "glm5-bench-mid-bpe")
    if not (path / "config.json").is_file():
        from bench_runtime import SIZES

        from model_runtime.embedded import DEFAULT_MODEL_DIR
        from model_runtime.testing import make_tiny_checkpoint

        source = DEFAULT_MODEL_DIR if tokenizer == "bpe" else None
        make_tiny_checkpoint(path, SIZES["mid"].replace(max_position_embeddings=8192), tokenizer_dir=source)
    return str(path)


def model_dir(name: str) -> str:
    if name in ("mid", "mid-test"):
        return mid_checkpoint("bpe" if name == "mid" else "test")
    from model_runtime.embedded import DEFAULT_MODEL_DIR

    return str(DEFAULT_MODEL_DIR) if name == "embedded" else name


async def _stats(client) -> dict:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command="glm5.stats", arguments=[{"recent": 500}]))


# ---- 1. first completion after start-up -----------------------------------------------------
async def first_completion(model: str, path: Path, cache: str, log: Path, options: dict | None = None) -> dict:
    """Open `path` with the cursor at its end right after `initialized` and ask at once."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    end = (len(lines) - 1, len(lines[-1]))
    asked: dict = {}

    def open_and_ask(client) -> None:
        uri = path.resolve().as_uri()
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        client.protocol.notify("glm5/didChangeCursor", {"textDocument": {"uri": uri}, "position": {"line": end[0], "character": end[1]}})
        asked["start"] = time.perf_counter()
        asked["future"] = _inline(client, uri, *end, msg_id="first", automatic=False)
        asked["future"].add_done_callback(lambda _: asked.setdefault("done", time.perf_counter()))

    spawned = time.perf_counter()
    client, _ = await start_server(model, path.parent, True, 24, log, open_and_ask, {"GLM5_LSP_CACHE_DIR": cache}, options)
    try:
        await asyncio.wrap_future(asked["future"])
        latency = asked["done"] - asked["start"]  # the answer's arrival, not `start_server`'s wait for "ready"
        stats = await _stats(client)
        record = next((r for r in stats["recent"] if r["request_id"] == "first"), {})
        from_spawn = asked["done"] - spawned
        return {"ms": latency * 1000, "spawn_ms": from_spawn * 1000, **record, "phases": stats.get("startup_ms", {})}
    finally:
        await stop_server(client)


async def startup_table(models: list[str], path: Path, logs: Path, prompt_tokens: int | None, repeats: int) -> None:
    # The model must run: this measures its prompt's KV cache, not the skipping of unreachable requests.
    options = {"skipUnreachable": False, **({"promptTokens": prompt_tokens} if prompt_tokens else {})}
    budget = f"promptTokens {prompt_tokens}" if prompt_tokens else "default prompt budget"
    print(f"\nfirst completion after start-up: {path.name} ({len(path.read_text().splitlines())} lines), cursor at its end, {budget}, "
          f"timed from `initialized`; of {repeats} cold/restart pairs, the pair with the median restart")
    print("| model | run | first completion ms | vs cold | after the model loaded ms | vs cold | from spawn ms | prompt | cached | cached % | load ms | index ms | store ms | warm-up ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    spread: list[str] = []
    phase_rows: list[tuple[str, dict]] = []
    for name in models:
        pairs = []
        for i in range(repeats):
            model, cache = model_dir(name), tempfile.mkdtemp(prefix="bench-latency-kv-")
            cold = await first_completion(model, path, cache, logs / f"{name}-cold-{i}.log", options)
            pairs.append((cold, await first_completion(model, path, cache, logs / f"{name}-restart-{i}.log", options)))
        cold, warm = sorted(pairs, key=lambda p: p[1]["ms"])[len(pairs) // 2]
        cold_after = cold["ms"] - cold["phases"].get("load", 0)
        for label, run in (("cold start (empty cache)", cold), ("restart, cache on disk", warm)):
            phase_rows.append((name, {**run, "label": label}))
            phases = run["phases"]
            after = run["ms"] - phases.get("load", 0)  # the load starts at `initialized`
            share = 100 * run.get("cached_tokens", 0) / max(1, run.get("prompt_tokens", 0))
            print(f"| {name} | {label} | {run['ms']:,.0f} | {cold['ms'] / run['ms']:.1f}x | {after:,.0f} | {cold_after / after:.1f}x | {run['spawn_ms']:,.0f} | "
                  f"{run.get('prompt_tokens', '-')} | {run.get('cached_tokens', '-')} | {share:.0f}% | "
                  + " | ".join(f"{phases.get(k, 0):,.0f}" for k in ("load", "index", "store", "warmup")) + " |")
        spread.append(f"{name}: cold " + ", ".join(f"{c['ms']:,.0f}" for c, _ in pairs) + " ms; restart "
                      + ", ".join(f"{w['ms']:,.0f}" for _, w in pairs) + " ms")
    print("\nevery pair, first completion from `initialized`: " + "; ".join(spread))
    print("\nthe shown pairs' first completions, phase by phase (ms; `glm5.stats` recent records): prompt = building the prompt, "
          "plan = site, constraint and retrieval, generate = the engine's prefill and decode, settle = scoring the candidates and deciding")
    print("| model | run | prompt | plan | generate | settle | decode steps | generated tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for name, run in phase_rows:
        print(f"| {name} | {run['label']} | {1000 * (run.get('prepare_s', 0) - run.get('plan_s', 0)):,.0f} | {1000 * run.get('plan_s', 0):,.0f} | "
              f"{1000 * run.get('generate_s', 0):,.0f} | {1000 * run.get('settle_s', 0):,.0f} | {run.get('decode_steps', '-')} | {run.get('generated_tokens', '-')} |")


# ---- 2. typing with a request at each pause -------------------------------------------------
def typed_chunks(text: str) -> list[str]:
    """What the user types, one edit per character, except that a newline carries the next
    line's indentation with it (editors auto-indent: nobody types those spaces)."""
    chunks: list[str] = []
    for char in text:
        if char in " \t" and chunks and chunks[-1].startswith("\n") and not chunks[-1].strip(" \t\n"):
            chunks[-1] += char
        else:
            chunks.append(char)
    return chunks


PLAIN = {"numCandidates": 1, "retrieval": False, "rerank": False, "abstain": False}  # the greedy text, streamed
COMPILED = {"compileDecode": True}
SPECULATIVE = {"mtp": True}
START_SETTINGS = ("compileDecode", "mtp")  # start-up settings: sent as initializationOptions
DURING_COMPILE = {"typeDuringCompile": True}  # the benchmark's own: type at once, while compileDecode compiles
TYPING_VARIANTS = (
    ("as shipped", {}),
    ("model at every pause", {"skipUnreachable": False}),  # the full candidate pipeline, never skipped
    ("plain streamed pipeline", PLAIN),
    ("plain streamed pipeline with compileDecode", {**PLAIN, **COMPILED}),
    ("plain streamed pipeline while compileDecode compiles", {**PLAIN, **COMPILED, **DURING_COMPILE}),
    ("plain streamed pipeline with mtp", {**PLAIN, **SPECULATIVE}),
    ("plain streamed pipeline without a decode budget", {**PLAIN, "maxDecodeMs": 0}),
)
INDUCTOR_CACHE = Path(tempfile.gettempdir()) / "glm5-bench-inductor"  # shared by runs: the cold compile once


async def typing_run(model: str, rec, settings: dict, log: Path) -> dict[str, list[float]]:
    """Type `rec` back; at each pause ask and await the answer. Returns latencies (s) and counts.
    With `compileDecode`, typing starts once the background compile is ready (its cost is the
    start-up's, `bench_compile.py`)."""
    root = Path(rec.path).parent
    env = {"GLM5_LSP_CACHE_DIR": tempfile.mkdtemp(prefix="bench-latency-kv-"), "TORCHINDUCTOR_CACHE_DIR": str(INDUCTOR_CACHE)}
    start = {key: settings[key] for key in START_SETTINGS if key in settings}
    during = settings.get("typeDuringCompile", False)
    settings = {key: value for key, value in settings.items() if key not in start and key not in DURING_COMPILE}
    client, notes = await start_server(model, root, True, 96, log, None, env, start)
    if start.get("compileDecode") and not during:
        await _compiled_ready(client)
    if settings:
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"glm5": settings}))
    out: dict[str, list[float]] = {
        "first": [], "final": [], "shown": [], "steps": [], "tokens": [], "prepare": [], "generate": [], "settle": [], "server": [], "unreachable": [],
    }  # fmt: skip
    try:
        uri = _open(client, rec, rec.initial_text)
        line, character, version = *rec.start, 1
        for i, char in enumerate(typed_chunks("".join(c for _, c in rec.keystrokes))):
            version += 1
            client.text_document_did_change(types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[types.TextDocumentContentChangePartial(
                    range=types.Range(start=types.Position(line=line, character=character), end=types.Position(line=line, character=character)),
                    text=char)]))
            line, character = (line + 1, len(char) - 1) if char.startswith("\n") else (line, character + len(char.encode("utf-16-le")) // 2)
            if char[0] not in PAUSES:
                continue
            msg_id, sent = f"p{i}", time.perf_counter()
            answer = await asyncio.wrap_future(_inline(client, uri, line, character, msg_id))
            out["final"].append(time.perf_counter() - sent)
            if answer is not None and answer.items:
                out["shown"].append(out["final"][-1])
            streamed = [at for at, m, p in notes if m == "glm5/inlineCompletionProgress" and str(p.requestId) == msg_id]
            if streamed:
                out["first"].append(streamed[0] - sent)
        stats = await _stats(client)
        if start.get("compileDecode"):
            engine = stats["engine"]
            out["compiled"] = [engine["compiled_steps"], engine["compiled_fallbacks"], engine["compile_seconds"], engine["compiled_decode"]]
        for record in stats["recent"]:
            if record["outcome"] == "out_of_reach":
                out["unreachable"].append(float(record["settle_s"] > 0))  # 1: scored first, then skipped
            if record["outcome"] in ("answered", "empty", "out_of_reach") and (record["prompt_tokens"] or record["outcome"] == "out_of_reach"):
                out["steps"].append(record["decode_steps"])
                out["tokens"].append(record["generated_tokens"])
                out["prepare"].append(record["prepare_s"])
                out["generate"].append(record["generate_s"])
                out["settle"].append(record["settle_s"])
                out["server"].append(record["total_s"])
    finally:
        await stop_server(client)
    return out


async def _compiled_ready(client) -> None:
    while (state := (await _stats(client))["engine"]["compiled_decode"]) == "compiling":
        await asyncio.sleep(1.0)
    if state != "ready":
        raise RuntimeError(f"compiled decoding is {state}, not ready")


async def typing_table(model_name: str, path: Path, chars: int, logs: Path, variants: list[str]) -> None:
    model = model_dir(model_name)
    with tempfile.TemporaryDirectory(prefix="bench-latency-ws-") as ws:
        unseen = Path(ws) / path.name  # a workspace of its own: nothing indexed or cached before
        unseen.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        rec = record_session(unseen, chars, 0.0, 0.0)
        pauses = sum(1 for c in typed_chunks("".join(c for _, c in rec.keystrokes)) if c[0] in PAUSES)
        print(f"\ntyping {chars} characters into {path.name} (unseen), {model_name} model: a request at each of {pauses} pauses, each awaited")
        print("| pipeline | requests | first text p50 ms | first text p95 ms | final p50 ms | final p95 ms | with text | their final p50 ms | their final p95 ms | decode steps (mean) | tokens (mean) | prepare p50 ms | generate p50 ms | settle p50 ms | server p50 ms | decode skipped |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        notes: list[str] = []
        for i, (label, settings) in enumerate(TYPING_VARIANTS):
            if variants and label not in variants:
                continue
            run = await typing_run(model, rec, settings, logs / f"typing-{i}.log")
            first, final, shown = run["first"] or [0.0], run["final"], run["shown"] or [0.0]
            print(f"| {label} | {len(final)} | {pct(first, .5) * 1000:,.1f} | {pct(first, .95) * 1000:,.1f} | "
                  f"{pct(final, .5) * 1000:,.1f} | {pct(final, .95) * 1000:,.1f} | {len(run['shown'])} | "
                  f"{pct(shown, .5) * 1000:,.1f} | {pct(shown, .95) * 1000:,.1f} | "
                  f"{statistics.mean(run['steps'] or [0]):.1f} | {statistics.mean(run['tokens'] or [0]):.1f} | "
                  + " | ".join(f"{pct(run[k] or [0.0], .5) * 1000:,.1f}" for k in ("prepare", "generate", "settle", "server"))
                  + f" | {len(run['unreachable'])} ({sum(run['unreachable']):.0f} after scoring) |")
            if "compiled" in run:
                steps, fallbacks, seconds, state = run["compiled"]
                when = "before typing" if not settings.get("typeDuringCompile") else f"while typing (compile {state} at the end)"
                notes.append(f"{label}: {steps:.0f} decode steps compiled, {fallbacks:.0f} fell back to eager; compiled in {seconds:.1f} s {when}")
        print("\n".join(notes))


async def main_async(args: argparse.Namespace) -> None:
    logs = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    print(f"load average at start: {os.getloadavg()}; server logs in {logs}")
    tables = args.tables.split(",")
    if "startup" in tables:
        path = Path(args.startup_file) if args.startup_file else pinned_workspace(args.startup_rev, STARTUP_DIR / args.startup_rev)
        print(f"start-up workload: {path}" + ("" if args.startup_file else f" (model_runtime/ at {args.startup_rev})"))
        await startup_table(args.models.split(","), path, logs, args.prompt_tokens, args.repeats)
    if "typing" in tables:
        await typing_table(args.typing_model, Path(args.file), args.chars, logs, args.variants)
    print(f"\nload average at end: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="startup,typing")
    parser.add_argument("--models", default="embedded,mid", help="startup table: embedded, mid, mid-test or checkpoint directories")
    parser.add_argument("--startup-file", default=None, help="startup table: the file to open (default: engine.py of --startup-rev)")
    parser.add_argument("--startup-rev", default=STARTUP_REV, help="startup table: the commit whose model_runtime/ is the workspace")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="startup table: the server's promptTokens (default: its own)")
    parser.add_argument("--repeats", type=int, default=1, help="startup table: cold/restart pairs per model (the median restart's pair is shown)")
    parser.add_argument("--typing-model", default="embedded")
    parser.add_argument("--file", default=str(TYPING_FILE), help="typing table: the file to type into")
    parser.add_argument("--chars", type=int, default=300)
    parser.add_argument("--variants", default="", help="typing table: comma-separated labels of TYPING_VARIANTS (default: all)")
    args = parser.parse_args()
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    known = [label for label, _ in TYPING_VARIANTS]
    if unknown := [v for v in args.variants if v not in known]:
        parser.error(f"--variants: unknown {unknown}; the labels are {known}")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
