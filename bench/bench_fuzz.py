"""LSP fuzz benchmark: >= 10,000 malformed and adversarial messages to one `lsp_server --stdio`.

The same fuzzer as tests/lsp_server/test_lsp_fuzz.py (tests/lsp_server/lsp_fuzz.py), run longer
and with a seed of your choice, against a tiny random checkpoint (the model's answers do not
matter here; the protocol, state and engine paths do). Reports crashes (the process exited),
hangs (a request left unanswered for 30 s, a health probe that failed, an exit that did not
happen), health probes run and the p50/p95/max wait for their answers, documents out of sync with
the client (compared after every run of sync notifications), error responses by code
(InternalError ones listed), messages per second, and the mix of message kinds.

Usage: python bench/bench_fuzz.py [--cases 10000] [--seed 12] [--probe-every 100]
What it leaves out: concurrency from several clients, and real model weights (a tiny random
checkpoint keeps the run short).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "lsp_server")]

from lsp_fuzz import INTERNAL_ERROR, Fuzzer, run_fuzz  # noqa: E402


def _progress(report) -> None:
    slowest = sorted(report.seconds.items(), key=lambda kv: -kv[1])[:4]
    print(f"{time.strftime('%H:%M:%S')} {report.messages} messages; slowest kinds: {', '.join(f'{k} {v:.1f}s' for k, v in slowest)}; "
          f"probe wait p50 {report.probe_wait(0.5):.3f} p95 {report.probe_wait(0.95):.3f} max {max(report.probe_waits, default=0):.3f} s; "
          f"desyncs {len(report.desyncs)} in {report.sync_checks} checks; "
          f"hangs {report.hangs[-3:]}, probe failures {report.probe_failures[-2:]}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--probe-every", type=int, default=100)
    args = parser.parse_args()
    from model_runtime.testing import make_tiny_checkpoint

    with tempfile.TemporaryDirectory(prefix="glm5-fuzz-") as scratch:
        root = Path(scratch)
        model = make_tiny_checkpoint(root / "model")
        workspace = root / "ws"
        workspace.mkdir()
        (workspace / "lib.py").write_text("def helper(x):\n    return x * 2\n")
        fuzzer = Fuzzer(model, workspace, root / "server.log", args.probe_every, progress=_progress)
        start = time.perf_counter()
        failure = None
        try:
            fuzzer.start()
            run_fuzz(fuzzer, args.cases, args.seed)
        except Exception as exc:  # reported below with the counts
            failure = f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            code = fuzzer.finish()
        seconds = time.perf_counter() - start
        report = fuzzer.report
        client = fuzzer.client
        internal = client.error_codes.get(INTERNAL_ERROR, 0)
        print("| cases | seed | crashes | hangs | probes (failed) | probe wait p50 / p95 / max s | sync checks | desyncs "
              "| internal errors | exit code | seconds | messages/s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        print(f"| {report.messages} | {args.seed} | {report.crashes} | {len(report.hangs)} | {report.probes} ({len(report.probe_failures)}) "
              f"| {report.probe_wait(0.5):.3f} / {report.probe_wait(0.95):.3f} / {max(report.probe_waits, default=float('nan')):.3f} "
              f"| {report.sync_checks} | {len(report.desyncs)} | {internal} | {code} | {seconds:.0f} | {report.messages / seconds:.0f} |")
        print("error responses by code:", dict(sorted(client.error_codes.items())))
        by_uri: dict[str, int] = {}
        for line in report.desyncs:
            uri = line.split(", ", 1)[1].split(": client", 1)[0]
            by_uri[uri] = by_uri.get(uri, 0) + 1
        print("desyncs by document:", by_uri)
        print("kinds (count, seconds):", ", ".join(
            f"{k or '(empty method)'} {n} {report.seconds.get(k, 0):.1f}s" for k, n in sorted(report.kinds.items(), key=lambda kv: -kv[1])
        ))
        for line in [*report.hangs, *report.probe_failures, *report.desyncs[:20], *client.internal_errors][:60]:
            print("  ", line)
        if failure:
            print("stopped early:", failure)
        bad = report.crashes or report.hangs or report.probe_failures or report.desyncs or internal or code != 0 or failure
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
