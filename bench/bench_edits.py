"""Large edits against the event loop: how long a request waits behind a 1 MB didChange.

Drives `lsp_server --stdio` (a tiny random checkpoint; the model does not matter here) as an
editor does: a document is opened, then each round sends one edit and, right after it, a
`glm5.stats` request, and times that request's answer. The answer cannot come before the edit
was handled (messages are handled in order), so its latency is the edit's cost on the event
loop plus a stats round trip. Edits: a one-character edit of a small file (the baseline), and
1 MB full replacements and one-character edits of 1 MB texts of three shapes (code; one line of
emoji; a million blank lines). Prints p50 and p95 per edit kind and the ratio of each p50 to the
baseline's, for each server given by `--repo` (a checkout; several run side by side, one after
the other in the same run).

Usage: python bench/bench_edits.py [--rounds 10] [--repo DIR ...]
Leaves out: pygls's JSON decoding of the message is included (it is part of the path); the
work left off the loop (parsing on first use, analysis) is not timed here, only what the loop
does before it can answer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "lsp_server")]

from lsp_fuzz import WireClient  # noqa: E402

SHAPES = {
    "code": "def f(x):\n    return x + 1\n",
    "emoji line": "😀",
    "blank lines": "\n",
}
SIZE = 1_000_000


def _texts() -> dict[str, str]:
    return {name: unit * (SIZE // len(unit)) for name, unit in SHAPES.items()}


class Server:
    def __init__(self, repo: Path, model: Path, workspace: Path, log: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(repo), GLM5_LSP_CACHE_DIR=str(workspace.parent / f"{log.stem}-kv"))
        # -P: not the working directory (this checkout) but PYTHONPATH picks the server's code
        argv = [sys.executable, "-P", "-m", "lsp_server", "--stdio", "--model", str(model), "--log-file", str(log)]
        self.client = WireClient(argv, env, log.with_suffix(".stderr"))
        self.ids = iter(range(1, 10**9))
        self.version = 1
        init = {"processId": os.getpid(), "rootUri": workspace.as_uri(), "capabilities": {},
                "initializationOptions": {"warmup": False}}  # no engine work during the measurement
        self.request("initialize", init)
        self.client.notify("initialized", {})
        self._wait_ready()

    def _wait_ready(self, timeout: float = 300.0) -> None:
        """Until start-up says ready (the model load imports torch, which would stall every
        measurement made meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [n["params"].get("state") for n in list(self.client.notifications) if n.get("method") == "glm5/status"]
            if "ready" in states or "error" in states:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the server was not ready within {timeout:g} s")

    def request(self, method: str, params) -> float:
        rid = next(self.ids)
        start = time.perf_counter()
        self.client.request(method, params, rid)
        if self.client.wait(rid, 120) is None:
            raise RuntimeError(f"{method}: no answer within 120 s")
        return time.perf_counter() - start

    def edit_then_stats(self, uri: str, change: dict) -> float:
        """Send `change`, then a stats request at once; seconds from the edit to the answer."""
        self.version += 1
        start = time.perf_counter()
        self.client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": self.version}, "contentChanges": [change]})
        self.request("workspace/executeCommand", {"command": "glm5.stats"})
        return time.perf_counter() - start

    def close(self) -> None:
        self.request("shutdown", None)
        self.client.notify("exit", None)
        try:
            self.client.process.wait(int(os.environ.get("GLM5_BENCH_EXIT_S", "30")))
        finally:
            self.client.close()


def _one_char(line: int) -> dict:
    at = {"line": line, "character": 0}
    return {"range": {"start": at, "end": at}, "text": "y"}


def measure(server: Server, workspace: Path, rounds: int) -> dict[str, list[float]]:
    uri = (workspace / "big.py").as_uri()
    server.client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": "x = 1\n"}})
    small = (workspace / "small.py").as_uri()
    server.client.notify("textDocument/didOpen", {"textDocument": {"uri": small, "languageId": "python", "version": 1, "text": "x = 1\n" * 50}})
    server.request("workspace/executeCommand", {"command": "glm5.stats"})
    times: dict[str, list[float]] = {"small file, 1 char (baseline)": []}
    texts = _texts()
    for _ in range(rounds):
        times["small file, 1 char (baseline)"].append(server.edit_then_stats(small, _one_char(3)))
        for name, text in texts.items():
            times.setdefault(f"1 MB {name}, full replace", []).append(server.edit_then_stats(uri, {"text": text}))
            times.setdefault(f"1 MB {name}, 1 char", []).append(server.edit_then_stats(uri, _one_char(1)))
    return times


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repo", type=Path, action="append", help="checkout whose server to run (default: this one)")
    args = parser.parse_args()
    from model_runtime.testing import make_tiny_checkpoint

    repos = args.repo or [REPO]
    with tempfile.TemporaryDirectory(prefix="glm5-edits-") as scratch:
        root = Path(scratch)
        model = make_tiny_checkpoint(root / "model")
        print("| server | edit | p50 ms | p95 ms | p50 / baseline p50 |")
        print("|---|---|---|---|---|")
        for n, repo in enumerate(repos):
            workspace = root / f"ws{n}"
            workspace.mkdir()
            server = Server(repo.resolve(), model, workspace, root / f"server{n}.log")
            try:
                times = measure(server, workspace, args.rounds)
            finally:
                server.close()
            base = statistics.median(times["small file, 1 char (baseline)"])
            for kind, values in times.items():
                p50 = statistics.median(values)
                print(f"| {repo.name} | {kind} | {p50 * 1e3:.1f} | {p95(values) * 1e3:.1f} | {p50 / base:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
