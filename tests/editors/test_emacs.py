"""Emacs (batch) connects to the server with Eglot and shows an inline completion with glm5.el.

The session (`tests/editors/emacs_session.el`) registers the server the way a user does
(`glm5-eglot-setup`), types, requests an inline completion, waits for the ghost-text overlay and
accepts it. The test checks that the overlay showed the server's text, that accepting inserted
exactly it, that the server heard about it, and that Eglot's completion-at-point also answers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from editor_support import EDITOR_CLIENT, TYPE_LINE, TYPE_MORE, apply_completion

pytestmark = pytest.mark.editor

SESSION = Path(__file__).with_name("emacs_session.el")


def run_emacs(emacs: str, env: dict[str, str], file: Path, cmd: list[str], timeout_s: float = 90) -> dict:
    result_path = file.parent.parent / "emacs-result.json"
    env = env | {
        "GLM5_PLUGIN": str(EDITOR_CLIENT / "emacs"),
        "GLM5_RESULT": str(result_path),
        "GLM5_CMD": json.dumps(cmd),
        "GLM5_FILE": str(file),
        "GLM5_LINE": str(TYPE_LINE),
        "GLM5_TYPE": "ar",
    }
    proc = subprocess.run(
        [emacs, "--batch", "-l", str(SESSION)],
        cwd=file.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert result_path.exists(), f"emacs wrote no result (rc={proc.returncode}): {proc.stderr[-3000:]}"
    result = json.loads(result_path.read_text())
    assert result.get("error") is None, (result, proc.stderr[-3000:])
    return result


def check_ghost_and_accept(result: dict) -> None:
    assert result["glm5_mode"] is True
    assert result["lines_before"][TYPE_LINE - 1].startswith("        result += ar"), "the typed text is missing"
    assert result["item_text"], "the server returned an empty completion"
    assert result["ghost_text"] == result["item_text"]
    expected = apply_completion(
        result["lines_before"], tuple(result["cursor_before"]), result["item_text"], result["item_range"]
    )
    assert result["lines_after"] == expected
    assert result["overlay_after"] is None
    assert result["local_counts"] == {"shown": 1, "accepted": 1, "rejected": 0}
    assert result["stats"]["telemetry"]["shown"] == 1
    assert result["stats"]["telemetry"]["accepted"] == 1


def test_fake_server_eglot_inline_completion(emacs_bin, editor_env, workspace, fake_server_cmd):
    env = editor_env | {"GLM5_FAKE_COMPLETION": "ea(w, h)\n        result -= 0", "GLM5_FAKE_DELAY_MS": "40"}
    result = run_emacs(emacs_bin, env, workspace / "main.py", fake_server_cmd)
    check_ghost_and_accept(result)
    assert result["lines_after"][TYPE_LINE - 1 : TYPE_LINE + 1] == [
        "        result += area(w, h)",
        "        result -= 0",
    ]
    assert result["seen_texts"][0] != result["item_text"], "no streamed partial text was drawn"
    assert result["init_options"]["streaming"] is True
    assert result["capf_labels"] == [result["item_text"]]  # Eglot offers the insertText
    explanation = result["explanation"].split("\n")
    assert "Budget: max_tokens 1536, header_share 0.3, suffix_share 0.15, align_lines 8" in explanation
    assert "1. file:///ws/geometry.py: imported definition" in explanation


def test_real_server_eglot_inline_completion(emacs_bin, editor_env, workspace, real_server_cmd, tiny_model):
    env = editor_env | {"GLM5_MODEL": str(tiny_model), "GLM5_TYPE_MORE": TYPE_MORE}
    result = run_emacs(emacs_bin, env, workspace / "main.py", real_server_cmd, timeout_s=120)
    check_ghost_and_accept(result)
    assert result["capf_labels"], "Eglot's completion-at-point got no item from textDocument/completion"
    assert result["explanation"].startswith("# GLM-5 completion context")
