"""Headless Neovim drives the glm5 plugin: type, see the server's ghost text, accept it.

Each test runs `nvim --headless --clean` with `tests/editors/nvim_session.lua` and checks, from
the JSON the session writes, that the ghost text drawn is the completion the server returned and
that accepting it leaves exactly that text in the buffer. Both display paths run on the same
Neovim 0.12: the native `vim.lsp.inline_completion`, and the plugin's own virtual text (what
Neovim < 0.12 uses).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from editor_support import EDITOR_CLIENT, TYPE_LINE, TYPE_MORE, apply_completion, caret_notation

pytestmark = pytest.mark.editor

SESSION = Path(__file__).with_name("nvim_session.lua")


def run_nvim(
    nvim: str, env: dict[str, str], file: Path, cmd: list[str], *, native: bool, timeout_s: float = 60
) -> dict:
    result_path = file.parent.parent / "nvim-result.json"
    env = env | {
        "GLM5_PLUGIN": str(EDITOR_CLIENT / "nvim"),
        "GLM5_RESULT": str(result_path),
        "GLM5_CMD": json.dumps(cmd),
        "GLM5_FILE": str(file),
        "GLM5_LINE": str(TYPE_LINE),
        "GLM5_TYPE": "ar",
        "GLM5_NATIVE": "1" if native else "0",
        "GLM5_TIMEOUT_MS": str(int(timeout_s * 1000) - 5000),
    }
    proc = subprocess.run(
        [nvim, "--headless", "--clean", "-n", "-c", f"luafile {SESSION}"],
        cwd=file.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert result_path.exists(), f"nvim wrote no result (rc={proc.returncode}): {proc.stderr[-2000:]}"
    result = json.loads(result_path.read_text())
    assert result.get("error") is None, result
    return result


def check_ghost_and_accept(result: dict) -> None:
    assert result["lines_before"][TYPE_LINE - 1].startswith("        result += ar"), "the typed text is missing"
    assert result["item_text"], "the server returned an empty completion"
    assert result["ghost_text"] == caret_notation(result["item_text"])
    expected = apply_completion(
        result["lines_before"], tuple(result["cursor_before"]), result["item_text"], result["item_range"]
    )
    assert result["lines_after"] == expected
    assert result["local_counts"] == {"shown": 1, "accepted": 1, "rejected": 0}
    assert result["stats"]["telemetry"]["shown"] == 1
    assert result["stats"]["telemetry"]["accepted"] == 1
    assert "\n## Prompt\n" in result["explanation"]


@pytest.mark.parametrize("native", [True, False], ids=["native", "virtual-text"])
def test_fake_server_ghost_text_accepted(nvim_bin, editor_env, workspace, fake_server_cmd, native):
    env = editor_env | {"GLM5_FAKE_COMPLETION": "ea(w, h)\n        result -= 0", "GLM5_FAKE_DELAY_MS": "40"}
    result = run_nvim(nvim_bin, env, workspace / "main.py", fake_server_cmd, native=native)
    check_ghost_and_accept(result)
    assert result["item_text"] == "ea(w, h)\n        result -= 0"
    assert result["lines_after"][TYPE_LINE - 1 : TYPE_LINE + 1] == [
        "        result += area(w, h)",
        "        result -= 0",
    ]
    assert result["init_options"]["streaming"] is (not native)
    if not native:
        assert result["seen_texts"][0] != result["item_text"], "no streamed partial text was drawn"
    explanation = result["explanation"].split("\n")
    assert "Completion kind: multi_line" in explanation
    assert "Budget: align_lines 8, header_share 0.3, max_tokens 1536, suffix_share 0.15" in explanation
    assert "1. file:///ws/geometry.py lines 1-2: imported definition, 8 tokens" in explanation


@pytest.mark.parametrize("native", [True, False], ids=["native", "virtual-text"])
def test_real_server_ghost_text_accepted(nvim_bin, editor_env, workspace, real_server_cmd, tiny_model, native):
    env = editor_env | {"GLM5_MODEL": str(tiny_model), "GLM5_TYPE_MORE": TYPE_MORE, "GLM5_HEAT": "1"}
    result = run_nvim(nvim_bin, env, workspace / "main.py", real_server_cmd, native=native, timeout_s=120)
    check_ghost_and_accept(result)
    check_heat(result)


def check_heat(result: dict) -> None:
    """`:Glm5 heat` highlighted lines of the file (the hottest at level 5) and opened the report."""
    marks = result["heat_marks"]
    assert marks, "no line was highlighted"
    assert all(0 <= m["row"] < len(result["lines_after"]) for m in marks)
    assert {m["hl"] for m in marks} <= {f"Glm5Heat{level}" for level in range(1, 6)}
    assert "Glm5Heat5" in {m["hl"] for m in marks}
    assert all(m["text"].strip().endswith("%") for m in marks)
    report = result["heat_report"].split("\n")
    assert "## Expert load (tokens routed to each expert, per layer)" in report
    assert "| 0 (dense) | · | · | · | · | · | · | · | · |" in report  # the tiny model: 8 experts, layer 0 dense
    assert any(line.startswith("| 1 | `ws/geometry.py:1-") for line in report)
