"""The VS Code extension inside a real VS Code (code-server), driven through chromium by Playwright.

Each test installs the built `.vsix` with `--install-extension`, starts code-server on a fixture
workspace and works the editor as a user would:
- with the scripted server (`fake_server.py`, a known completion streamed in three slow pieces):
  the status bar goes from warming (with a percentage) to ready; typing shows ghost text whose
  streamed partial text is drawn before the final text; Tab leaves exactly the server's text in
  the buffer; "Show context of the last completion" opens the explanation;
- with the real server and the embedded model: ghost text, Tab, then "Show what the model looked
  at" decorates the file's lines and opens the report. Screenshots of the ghost text and of the
  heat map are saved with the test (and to GLM5_CAPTURE_DIR when set, for editor-client/captures/).

Skipped only when code-server, chromium, Playwright or the .vsix is missing
(`editor-client/install-test-deps.sh`); under GLM5_REQUIRE_EDITORS=1 a missing one fails.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from editor_support import REPO, TYPE_LINE, apply_completion, missing

pytestmark = pytest.mark.editor

FAKE_COMPLETION = "ea(w, h)\n        result -= 0"

BASE_SETTINGS = {
    "editor.quickSuggestions": {"other": False, "comments": False, "strings": False},
    "editor.suggestOnTriggerCharacters": False,
    "editor.wordBasedSuggestions": "off",
    "editor.minimap.enabled": False,
    "files.autoSave": "off",
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "security.workspace.trust.enabled": False,
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "chat.disableAIFeatures": True,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "glm5.debounceMs": 50,
}


# The editor's plumbing is under test with the real server: the plain pipeline (the model's
# constrained greedy text, streamed as it comes), since reranking and abstaining hold text back
# or show none, and no decode-time budget, whose cut depends on the machine's load.
PLAIN_PIPELINE = {"numCandidates": 1, "retrieval": False, "rerank": False, "abstain": False, "maxDecodeMs": 0}


@pytest.fixture
def code_server_module():
    try:
        import code_server
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing("playwright is not installed (pip install -e '.[test]')")
    code_server.launcher()
    code_server.chromium()
    return code_server


def start(code_server, tmp_path: Path, env: dict[str, str], settings: dict):
    server = code_server.CodeServer(tmp_path / "vscode", env, BASE_SETTINGS | settings)
    assert code_server.EXTENSION_ID in server.install_extension().split()
    server.start()
    return server


def check_accepted(path: Path, before: str, cursor_col: int, text: str) -> None:
    """The saved file is `before` with `text` inserted at the cursor of line TYPE_LINE."""
    lines = before.split("\n")
    expected = apply_completion(lines, (TYPE_LINE, cursor_col), text, None)
    assert path.read_text().split("\n") == expected


def save_capture(page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot))
    target = os.environ.get("GLM5_CAPTURE_DIR")
    if target:
        shutil.copy(shot, Path(target) / name)
    return shot


def test_fake_server_streams_ghost_text_and_tab_accepts_it(code_server_module, tmp_path, editor_env, workspace):
    fake_python = tmp_path / "fake-python"  # the extension runs `<python> -m lsp_server --stdio`
    fake_python.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{REPO / 'tests/editors/fake_server.py'}'\n")
    fake_python.chmod(0o755)
    env = editor_env | {"GLM5_FAKE_COMPLETION": FAKE_COMPLETION, "GLM5_FAKE_DELAY_MS": "400"}
    server = start(code_server_module, tmp_path, env, {"glm5.pythonPath": str(fake_python)})
    try:
        with code_server_module.workbench(server, workspace) as bench:
            bench.open_file("main.py")
            bench.wait_status("check")
            status = bench.observed()["status"]
            warming = [i for i, s in enumerate(status) if s.startswith("sync GLM-5 ") and s.endswith("%")]
            assert warming and warming[0] < status.index("check GLM-5"), status

            before = (workspace / "main.py").read_text()
            bench.go_to_line_end(TYPE_LINE)
            bench.page.keyboard.type("ar", delay=30)
            final = bench.wait_ghost(lambda text: text == FAKE_COMPLETION, timeout_s=30)
            seen = bench.observed()["ghost"]
            partial = [t for t in seen[: seen.index(final)] if t and FAKE_COMPLETION.startswith(t)]
            assert partial, f"no streamed text was drawn before the final text: {seen}"

            bench.wait_ghost_settled()  # VS Code redraws the ghost text once its provider resolves
            bench.page.keyboard.press("Tab")
            bench.wait_ghost(lambda text: text == "", timeout_s=10)
            saved = workspace / "main.py"
            try:
                bench.save_until(lambda: "result -= 0" in saved.read_text(), "the file was saved")
            except AssertionError as exc:
                line = saved.read_text().split("\n")[TYPE_LINE - 1]
                raise AssertionError(f"{exc}; line {TYPE_LINE} on disk: {line!r}; ghost: {bench.observed()['ghost']}") from exc
            check_accepted(workspace / "main.py", before.replace("result += ", "result += ar"), len("        result += ar"), FAKE_COMPLETION)

            bench.run_command("GLM-5: Show context of the last completion")
            bench.wait_for_text("GLM-5 completion")
            reports = [t for group in bench.tabs() for t in group if "completion context" in t]
            assert len(reports) == 1 and "•" not in reports[0], bench.tabs()  # one read-only report
    finally:
        server.stop()


GEOMETRY = '''\
"""Shapes and their areas."""


def rectangle_area(width, height):
    """The area of a width x height rectangle."""
    return width * height


def triangle_area(base, height):
    """Half the base times the height."""
    return base * height / 2


def circle_area(radius):
    """Pi r squared."""
    return 3.14159 * radius * radius


def rectangle_perimeter(width, height):
    """Twice the width plus twice the height."""
    return 2 * (width + height)


def circle_perimeter(radius):
    """Two pi r."""
    return 2 * 3.14159 * radius
'''

SHAPES = '''\
from geometry import circle_area, rectangle_area, triangle_area


def total_area(shapes):
    """The summed area of (kind, size) pairs."""
    total = 0.0
    for kind, size in shapes:
        if kind == "circle":
            total += circle_area(size)
        elif kind == "triangle":
            total += triangle_area(*size)
        elif kind == "rectangle":
            total += 
    return total


def largest(shapes):
    """The pair with the largest area."""
    return max(shapes, key=lambda shape: total_area([shape]))


def parse(text):
    """(kind, size) pairs from lines such as "circle 2" or "rectangle 3 4"."""
    shapes = []
    for line in text.splitlines():
        kind, *numbers = line.split()
        sizes = [float(n) for n in numbers]
        shapes.append((kind, sizes[0] if kind == "circle" else tuple(sizes)))
    return shapes


def report(text):
    """One line per shape, then the total."""
    shapes = parse(text)
    lines = [f"{kind}: {total_area([(kind, size)]):.2f}" for kind, size in shapes]
    lines.append(f"total: {total_area(shapes):.2f}")
    return "\\n".join(lines)
'''


def test_real_server_ghost_text_and_attention_heat_map(code_server_module, tmp_path, editor_env):
    root = tmp_path / "shapes"
    root.mkdir()
    (root / "geometry.py").write_text(GEOMETRY)
    (root / "shapes.py").write_text(SHAPES)
    line = SHAPES.split("\n").index("            total += ") + 1
    server = start(code_server_module, tmp_path, editor_env, {"glm5.pythonPath": sys.executable, "glm5.maxTokens": 24, "glm5.serverOptions": PLAIN_PIPELINE})
    try:
        with code_server_module.workbench(server, root) as bench:
            bench.open_file("shapes.py")
            bench.wait_status("check", timeout_s=180)
            status = bench.observed()["status"]
            assert any(s.startswith("sync GLM-5 ") for s in status[: status.index("check GLM-5")]), status

            bench.go_to_line_end(line)
            bench.page.keyboard.type("rectangle_", delay=30)
            bench.wait_ghost(bool, timeout_s=60)
            bench.wait_until(lambda: bench.observed()["status"][-1].startswith("check"), "the completion finished")
            shown = bench.wait_ghost_settled(timeout_s=10)
            save_capture(bench.page, tmp_path, "vscode-ghost-text.png")
            bench.page.keyboard.press("Tab")
            bench.wait_ghost(lambda text: text == "", timeout_s=10)
            bench.save_until(lambda: "total += rectangle_" in (root / "shapes.py").read_text(), "the file was saved")
            expected = SHAPES.replace("total += \n", f"total += rectangle_{shown}\n")
            saved = (root / "shapes.py").read_text()
            assert [x.rstrip() for x in saved.split("\n")] == [x.rstrip() for x in expected.split("\n")]

            bench.run_command("GLM-5: Show what the model looked at")
            bench.wait_for_text("What the model", timeout_s=120)
            heat = bench.heat_lines("shapes.py")
            assert heat, "no line of shapes.py was decorated"
            assert len([t for group in bench.tabs() for t in group if "What the model looked at" in t]) == 1, bench.tabs()
            save_capture(bench.page, tmp_path, "vscode-heat-map.png")
    finally:
        logs = server.extension_logs()
        server.stop()
    assert logs.count("attention heat:") == 1, logs[-3000:]
