"""Evaluation: HumanEval holes and execution, held-out holes, baselines, context trimming (training.evaluate)."""

from __future__ import annotations

import json
import random

import pytest

from training import humaneval
from training.baselines import blank, previous_line, similar_line
from training.corpus import load_documents
from training.evaluate import evaluate_humaneval, heldout_holes, main, trim_context
from training.holes import complete_all, exact_match, first_line, line_holes

PROBLEMS = ["HumanEval/0", "HumanEval/2", "HumanEval/12"]


def oracle_for(problems):
    answers = {(h.prefix, h.suffix): h.target for p in problems for h in humaneval.line_holes(p)}
    return lambda prefix, suffix, path: answers[(prefix, suffix)] + "\n    # trailing lines are cut"


def test_holes_cover_every_solution_line_and_rebuild_the_program():
    problems = humaneval.load_problems()
    total = 0
    for p in problems:
        holes = humaneval.line_holes(p)
        assert len(holes) == sum(1 for line in p.solution.splitlines() if line.strip())
        for h in holes:
            assert h.prefix + h.target + h.suffix == p.prompt + p.solution
            assert h.prefix.endswith("\n") and h.suffix.startswith("\n") and h.target.strip()
        total += len(holes)
    assert len(problems) == 164 and total == 1033


def test_oracle_scores_everything_and_a_blank_completer_less():
    problems = humaneval.load_problems(PROBLEMS)
    perfect = evaluate_humaneval(oracle_for(problems), problems, jobs=2)
    assert perfect["pass_at_1"] == perfect["exact_match"] == 1.0 and perfect["problems"] == 3
    empty = evaluate_humaneval(blank, problems, jobs=2)
    assert empty["exact_match"] == 0.0 and empty["pass_at_1"] < 0.5
    assert empty["holes"] == perfect["holes"] > 10


def test_execution_fails_on_wrong_code_timeouts_and_memory_bombs():
    assert humaneval.run_program("assert 1 + 1 == 2\n")
    assert not humaneval.run_program("assert 1 + 1 == 3\n")
    assert not humaneval.run_program("while True:\n    pass\n", timeout=1.0)
    assert not humaneval.run_program("x = bytearray(8 << 30)\n")
    assert humaneval.execute_all(["pass\n", "raise SystemExit(1)\n", "pass\n"], jobs=2) == [True, False, True]


def test_unknown_task_ids_are_refused():
    with pytest.raises(ValueError, match="HumanEval/999"):
        humaneval.load_problems(["HumanEval/999"])


REPETITIVE = """\
def configure(cfg):
    cfg.host = read("host")
    check(cfg.host)
    cfg.port = read("port")
    check(cfg.port)
    cfg.user = read("user")
    check(cfg.user)
"""


def test_similar_line_finds_the_parallel_line_and_beats_previous_line():
    lines = REPETITIVE.splitlines(keepends=True)
    at = sum(map(len, lines[:5]))  # the hole is `    cfg.user = read("user")`
    prefix, target, suffix = REPETITIVE[:at], lines[5].rstrip("\n"), REPETITIVE[at + len(lines[5]) - 1 :]
    assert prefix + target + suffix == REPETITIVE
    # the line between two check(...) lines is an assignment, like the hole
    assert similar_line(prefix, suffix, "m.py") == '    cfg.port = read("port")'
    assert previous_line(prefix, suffix, "m.py") == "    check(cfg.port)"
    assert similar_line(prefix + "    cfg.p", suffix, "m.py") == 'ort = read("port")'  # completes a partial line
    assert similar_line("", "", "m.py") == "" and previous_line("", "\n", "m.py") == ""


def test_heldout_holes_are_deterministic_lines(manifest_path):
    docs = load_documents(manifest_path, "heldout")
    a = heldout_holes(docs, None, 3, seed=1)
    assert a == heldout_holes(docs, None, 3, seed=1) != heldout_holes(docs, None, 3, seed=2)
    for h in a:
        assert h.prefix.endswith("\n") or h.prefix == ""
        assert "\n" not in h.target and h.target.strip()
    rng = random.Random(0)
    assert len(line_holes("x.py", "a\n\nb\n", rng, per_file=5)) == 2


def test_completions_are_judged_on_their_first_line():
    holes = line_holes("x.py", "a = 1\nb = 2\n", random.Random(0), per_file=2)
    answers = complete_all(lambda p, s, path: "a = 1\nextra", holes)
    assert answers == ["a = 1", "a = 1"] and exact_match(answers, holes) == 0.5
    assert first_line("x\r\ny") == "x"


def test_trim_context_keeps_the_nearest_lines_within_budget():
    prefix = "".join(f"p{i}\n" for i in range(100))
    suffix = "\n" + "".join(f"s{i}\n" for i in range(100))
    count = len  # one token per character
    pre, suf = trim_context(count, prefix, suffix, budget=40)
    assert len(pre) + len(suf) <= 40
    assert prefix.endswith(pre) and suffix.startswith(suf)
    assert len(suf) <= 10 and len(pre) >= 28
    pre, suf = trim_context(count, "p\n", suffix, budget=40)
    assert pre == "p\n" and len(suf) > 10  # a short prefix leaves the room to the suffix


def test_cli_writes_results(tmp_path, manifest_path, capsys):
    out = tmp_path / "r.json"
    assert main(["--completer", "similar-line", "--problems", "HumanEval/2", "--manifest", str(manifest_path), "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["completer"] == "similar-line"
    assert results["humaneval"]["holes"] == 1 and results["heldout"]["holes"] > 0
    assert json.loads(capsys.readouterr().out) == results
    heldout = results["heldout"]
    assert len(heldout["matched"]) == round(heldout["exact_match"] * heldout["holes"])
    assert all(0 <= i < heldout["holes"] for i in heldout["matched"])
