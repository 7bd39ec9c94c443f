"""End to end: the command line. `lsp_server complete FILE:LINE:COL` with the tiny model, its
input errors, `--help`, and the server over `--tcp`."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient

from lsp_harness import REPO, client_capabilities, server_env

pytestmark = pytest.mark.e2e


def lsp_server(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lsp_server", *args], cwd=REPO, env=server_env(), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("headless")
    (root / "shapes.py").write_text("def area(r):\n    return 3.14 * r * r\n")
    (root / "main.py").write_text("from shapes import area\n\nprint(area(2))\nvalue = \n")
    (root / "bad.py").write_bytes(b"x = '\xff'\n")
    return root


def test_complete_streams_a_completion_to_stdout(project, tiny_checkpoint):
    done = lsp_server("complete", f"{project / 'main.py'}:4:9", "--workspace", str(project),
                      "--model", str(tiny_checkpoint), "--max-tokens", "6", "--no-abstain")
    assert done.returncode == 0, done.stderr
    assert "prompt tokens" in done.stderr and "generated" in done.stderr
    assert done.stdout.strip()  # without abstaining the best candidate is printed
    assert done.stdout.endswith("\n")  # a line of its own in a terminal or a script
    assert "\n" not in done.stdout.rstrip("\n")  # a single-line completion at the end of `value = `


def test_another_models_reranker_weights_never_silence_this_model(project, tiny_checkpoint):
    """The shipped reranker weights, fitted for the embedded model, would show nothing at
    `value = ` here whatever the model says; the tiny model has no weights of its own, so even a
    trigger while typing (--automatic) runs it and judges its own best candidate by the checks."""
    done = lsp_server("complete", f"{project / 'main.py'}:4:9", "--workspace", str(project), "--model", str(tiny_checkpoint), "--automatic")
    assert done.returncode == 0, done.stderr
    assert "generated" in done.stderr and "the model was not run" not in done.stderr
    assert done.stdout.strip() or "nothing shown: no candidate passed the syntax checks" in done.stderr


@pytest.mark.parametrize(
    ("location", "options", "message"),
    [
        ("main.py", [], "expected FILE:LINE:COL"),
        ("main.py:0:1", [], "expected FILE:LINE:COL"),
        ("main.py:4:x", [], "expected FILE:LINE:COL"),
        ("missing.py:1:1", [], "cannot read"),
        ("bad.py:1:1", [], "not valid UTF-8"),
        ("main.py:6:1", [], "line 6 is past the end of the file (5 lines)"),  # line 5 follows the final newline
        ("main.py:6:1", ["--no-abstain"], "line 6 is past the end of the file"),
        ("main.py:99:1", ["--no-abstain"], "line 99 is past the end of the file"),
        ("main.py:4:10", ["--no-abstain"], "column 10 is past the end of the line (8 characters)"),
        ("main.py:4:9", ["--workspace", "no/such/folder"], "--workspace no/such/folder: not a folder"),
    ],
)
def test_complete_rejects_bad_input_with_status_2_and_one_line(project, tiny_checkpoint, location, options, message):
    done = lsp_server("complete", f"{project}/{location}", "--model", str(tiny_checkpoint), *options, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_every_command_line_prints_the_package_version():
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for argv, name in (
        (["-m", "lsp_server"], "lsp_server"), (["-m", "model_runtime"], "python -m model_runtime"),
        (["-m", "model_runtime", "serve"], "glm5-serve"),
    ):
        done = subprocess.run([sys.executable, *argv, "--version"], cwd=REPO, env=server_env(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout == f"{name} {version}\n", (argv, done.stdout, done.stderr)


def test_help_says_lines_and_columns_are_one_based():
    done = lsp_server("complete", "--help", timeout=60)
    assert done.returncode == 0 and "1-based" in done.stdout


def test_the_server_speaks_lsp_over_tcp(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(  # no model: this checks the transport, not completions
        [sys.executable, "-m", "lsp_server", "--tcp", f"127.0.0.1:{port}", "--log-file", str(tmp_path / "tcp.log")],
        cwd=REPO, env=server_env(),
    )
    try:
        asyncio.run(_tcp_session(port))
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()


async def _tcp_session(port: int) -> None:
    client = LanguageClient("tcp-test", "1")
    for _ in range(200):
        try:
            await client.start_tcp("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.05)
    result = await client.initialize_async(types.InitializeParams(capabilities=client_capabilities()))
    assert result.capabilities.inline_completion_provider is not None
    client.initialized(types.InitializedParams())
    await client.shutdown_async(None)
    client.exit(None)
    await asyncio.sleep(0.2)
