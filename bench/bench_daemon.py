"""Four editors typing at once: four in-process servers, against four servers sharing one `glm5-serve`.

Side by side in one run, each editor a pygls client driving `lsp_server --stdio` as an editor
does, each in its own file: it types one character (an incremental didChange at the cursor),
asks for an inline completion (Invoked) there, waits for the answer, thinks `--think-ms`, and
again, `--requests` times. Waiting for each answer keeps every request to the end (none goes
stale), so the latency is the whole pipeline's under 1 or 4 concurrent editors:

1. lone       one editor, one in-process server (the baseline latency);
2. in-process four editors, four servers, each loading its own copy of the model;
3. daemon x1  one editor through `glm5-serve` (the HTTP hop alone);
4. daemon     four editors, four servers started with `--engine-url` (tokenizer from the model
              directory), one `glm5-serve` holding the model and batching all four.

Reported: each process's RSS at the end and its peak (VmHWM), total RSS per scenario, the RSS
each editor past the first adds, and latency to the final answer (p50/p95) of the requests
answered (errors and time-outs are counted, not timed), with the ratio to the lone editor. Targets: per-editor memory past the
first <= 100 MB, latency within 1.5x of a lone editor.

Leaves out: the editor processes themselves, the page cache shared by the mmapped weights
(counted in each process's RSS), and network latency (everything runs on 127.0.0.1).

Usage: python bench/bench_daemon.py [--model DIR] [--requests 12] [--think-ms 300] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests" / "remote")]

from bench_typing import pct  # noqa: E402
from daemon import Daemon  # noqa: E402

FILES = ["context/postprocess.py", "context/prompt.py", "context/classify.py", "lsp_server/completions.py"]
TARGET_MB, TARGET_RATIO = 100.0, 1.5


@dataclass
class Scenario:
    name: str
    latencies: list[float] = field(default_factory=list)
    rss: dict[str, tuple[float, float]] = field(default_factory=dict)  # process -> (RSS MB, peak MB)
    outcomes: dict[str, int] = field(default_factory=dict)


def memory_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def start_editor(argv: list[str], root: Path, max_tokens: int, cache: str) -> tuple[LanguageClient, list]:
    client = LanguageClient("bench-daemon", "1")
    notes: list = []
    for method in ("glm5/inlineCompletionProgress", "glm5/status"):
        client.feature(method)(lambda params, m=method: notes.append((time.perf_counter(), m, params)))
    for method in (types.PROGRESS, types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, types.WINDOW_LOG_MESSAGE, types.WINDOW_SHOW_MESSAGE):
        client.feature(method)(lambda params: None)
    client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)(lambda params: None)
    await client.start_io(sys.executable, "-m", "lsp_server", "--stdio", *argv, cwd=str(REPO), env={**os.environ, "GLM5_LSP_CACHE_DIR": cache})
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=True)),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name=root.name)],
        initialization_options={"streaming": False, "debounceMs": 0, "maxTokens": max_tokens, "singleLineMaxTokens": max_tokens},
    ))
    client.initialized(types.InitializedParams())
    deadline = time.monotonic() + 300
    while not any(m == "glm5/status" and p.state in ("ready", "error") for _, m, p in notes):
        if time.monotonic() > deadline:
            raise SystemExit("a server did not get ready within 300 s")
        await asyncio.sleep(0.05)
    state = [p for _, m, p in notes if m == "glm5/status"][-1]
    if state.state != "ready":
        raise SystemExit(f"server not ready: {state.message}")
    return client, notes


async def type_and_complete(client: LanguageClient, path: Path, requests: int, think_s: float) -> list[tuple[float, str]]:
    """Open `path`, then `requests` times: type a space at the end of a line a third into the
    file, ask for a completion there and wait for it. Returns (latency s, outcome) per request."""
    text = path.read_text()
    lines = text.split("\n")
    line = len(lines) // 3
    uri = path.resolve().as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    results = []
    for i in range(requests):
        at = types.Position(line=line, character=len(lines[line]) + i)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=i + 2),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=" ")]))
        position = types.Position(line=line, character=at.character + 1)
        start = time.perf_counter()
        try:
            answer = await client.text_document_inline_completion_async(types.InlineCompletionParams(
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
                text_document=types.TextDocumentIdentifier(uri=uri), position=position))
            outcome = "answered" if answer and answer.items else "empty"
        except JsonRpcException as exc:  # e.g. the remote engine's time bound: counted, not timed
            outcome = "timeout" if "did not finish within" in str(exc) else "error"
        results.append((time.perf_counter() - start, outcome))
        await asyncio.sleep(think_s)
    return results


async def run_scenario(name: str, argv: list[str], files: list[str], args: argparse.Namespace, cache: str) -> Scenario:
    scenario = Scenario(name)
    editors = await asyncio.gather(*(start_editor(argv, REPO, args.max_tokens, cache) for _ in files))
    try:
        runs = await asyncio.gather(*(type_and_complete(c, REPO / f, args.requests, args.think_ms / 1000) for (c, _), f in zip(editors, files, strict=True)))
        for i, (client, _) in enumerate(editors):
            scenario.rss[f"server {i + 1}"] = memory_mb(client._server.pid)
    finally:
        for client, _ in editors:
            await client.shutdown_async(None)
            client.exit(None)
            await client.stop()
    for latency, outcome in (r for run in runs for r in run):
        scenario.outcomes[outcome] = scenario.outcomes.get(outcome, 0) + 1
        if outcome in ("answered", "empty"):
            scenario.latencies.append(latency)
    return scenario


def report(scenarios: list[Scenario]) -> None:
    lone = scenarios[0]
    print(f"\n{'scenario':<12}{'process':<12}{'RSS MB':>9}{'peak MB':>9}")
    for s in scenarios:
        for process, (rss, peak) in s.rss.items():
            print(f"{s.name:<12}{process:<12}{rss:>9.1f}{peak:>9.1f}")
    print(f"\n{'scenario':<12}{'total RSS MB':>13}{'per editor past the first MB':>30}{'requests':>10}{'p50 ms':>9}{'p95 ms':>9}{'p50 vs lone':>12}")
    for s in scenarios:
        total = sum(rss for rss, _ in s.rss.values())
        servers = [rss for p, (rss, _) in s.rss.items() if p.startswith("server")]
        extra = sum(servers[1:]) / (len(servers) - 1) if len(servers) > 1 else float("nan")
        p50, p95 = pct(s.latencies, 0.5) * 1000, pct(s.latencies, 0.95) * 1000
        ratio = p50 / (pct(lone.latencies, 0.5) * 1000)
        print(f"{s.name:<12}{total:>13.1f}{extra:>30.1f}{len(s.latencies):>10}{p50:>9.1f}{p95:>9.1f}{ratio:>12.2f}")
    print("\noutcomes: " + "; ".join(f"{s.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(s.outcomes.items())) for s in scenarios))
    daemon = scenarios[-1]
    servers = [rss for p, (rss, _) in daemon.rss.items() if p.startswith("server")]
    ratio = pct(daemon.latencies, 0.5) / pct(lone.latencies, 0.5)
    print(f"targets: per-editor memory past the first {sum(servers[1:]) / 3:.1f} MB (<= {TARGET_MB:.0f}); "
          f"daemon p50 {ratio:.2f}x lone (<= {TARGET_RATIO})")


async def main_async(args: argparse.Namespace) -> None:
    model = args.model or str(REPO / "model_runtime" / "default_model")
    logs = Path(tempfile.mkdtemp(prefix="bench-daemon-"))
    print(f"model {model}; editors x {args.requests} completions each; logs {logs}; load {Path('/proc/loadavg').read_text().strip()}")
    scenarios = [await run_scenario("lone", ["--model", model], FILES[:1], args, tempfile.mkdtemp(dir=logs))]
    scenarios.append(await run_scenario("in-process", ["--model", model], FILES, args, tempfile.mkdtemp(dir=logs)))
    daemon = Daemon.start(Path(model), logs / "serve.log", env={"GLM5_LSP_CACHE_DIR": tempfile.mkdtemp(dir=logs)})
    try:
        remote = ["--engine-url", daemon.url, "--model", model]
        scenarios.append(await run_scenario("daemon x1", remote, FILES[:1], args, tempfile.mkdtemp(dir=logs)))
        shared = await run_scenario("daemon", remote, FILES, args, tempfile.mkdtemp(dir=logs))
        shared.rss = {"glm5-serve": memory_mb(daemon.process.pid), **shared.rss}
        scenarios.append(shared)
    finally:
        daemon.stop()
    report(scenarios)
    print(f"load after: {Path('/proc/loadavg').read_text().strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--requests", type=int, default=12, help="completions each editor asks for")
    parser.add_argument("--think-ms", type=float, default=300.0, help="pause after each answer")
    parser.add_argument("--max-tokens", type=int, default=16)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
