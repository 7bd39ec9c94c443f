"""Fuzz one `lsp_server --stdio` process (a tiny random checkpoint) with a few thousand malformed
and adversarial messages, a fixed seed; it must never crash or leave a request unanswered, a
valid completion must work every 100 messages, every document must match the client's copy after
each run of sync notifications (a wrongly typed edit changes nothing), no bad input may be answered
with an InternalError, and it must exit cleanly after `shutdown`.
bench/bench_fuzz.py runs the same fuzzer longer."""

from __future__ import annotations

import os

from lsp_fuzz import INTERNAL_ERROR, Fuzzer, run_fuzz

CASES = int(os.environ.get("GLM5_FUZZ_CASES", "3000"))  # bench/bench_fuzz.py runs 10,000 with 1 MB strings too


def test_the_server_survives_malformed_and_adversarial_messages(tmp_path_factory):
    from model_runtime.testing import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path_factory.mktemp("fuzz-model"))
    workspace = tmp_path_factory.mktemp("fuzz-ws")
    (workspace / "lib.py").write_text("def helper(x):\n    return x * 2\n")
    fuzzer = Fuzzer(model, workspace, workspace.parent / "fuzz-server.log")
    try:
        fuzzer.start()
        run_fuzz(fuzzer, CASES, huge=(10_000, 100_000))
    finally:
        code = fuzzer.finish()
    report = fuzzer.report
    assert report.crashes == 0 and report.hangs == [] and report.probe_failures == [], report
    assert report.desyncs == [] and report.sync_checks > CASES // 20, report.desyncs[:5]
    assert fuzzer.client.error_codes.get(INTERNAL_ERROR, 0) == 0, fuzzer.client.internal_errors
    assert report.messages == CASES and report.probes >= CASES // 100
    assert code == 0
