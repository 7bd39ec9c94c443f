"""Completion quality, side by side: baselines, today's model, each steering component, all together.

Every neural row is a real `lsp_server --stdio` (`quality_client.RowServer`) with its settings
in `initializationOptions`; the items (`quality_sets`) are asked of every row in turn, so load
changes hit all rows alike. The non-neural baselines run in-process on the same items:
- previous line: the nearest non-blank line above the hole;
- line after the most similar line: `context.retrieval.similar_lines` (this file and the files
  it imports, is imported by, or shares a directory with), re-indented to the hole;
- most similar context: the line of the file whose neighbours best match the hole's
  (`training.baselines.similar_line`, the README's earlier baseline).

Metrics per set and row: exact match (trailing whitespace ignored, indentation counted),
first-identifier match, edit similarity (1 - Levenshtein / longer length), pass@1 (HumanEval,
running the tests with the line as completed; an abstention leaves the line blank), show rate
(non-empty answers), precision when shown (exact among shown), p50/p95 latency of the LSP
request (ms; baselines: none). An abstention counts as a miss in every accuracy column. A row that abstains is asked
as an automatic trigger (the ghost text while typing, which may show nothing), the others as an
explicit one (which always shows its best). The
"all" row is asked through `textDocument/inlineCompletion` (timed, as every row: the user's path,
which skips the model where no candidate can be shown) and then through `glm5.explainContext`
(untimed: the full pipeline, every candidate scored), which gives two more rows: "all, full
pipeline (explain)", which should show exactly what "all" shows, "all, no abstaining": the
best-scored candidate, shown always (what an explicit request shows), and "ceiling: a right one among all's candidates": the right
text wherever some candidate is right (what a perfect reranker would reach).
One more row bounds retrieval itself: "ceiling: the line elsewhere in the workspace" is right
wherever the hole's line appears verbatim (indentation aside) on another line of a Python file
of the workspace, the hole's own file included: no candidate that copies a line can do better.
Ceiling rows are upper bounds, not completers; they show nothing where they miss.
`--rerank-weights FILE` adds the "all" row once more with those reranker weights (the server's
`rerankWeights` setting), side by side with the shipped ones; `--unskipped` adds it with
`skipUnreachable` off.

Usage: python -m bench.bench_quality [--model DIR] [--humaneval 32] [--heldout-files 8 --per-file 4]
                                    [--repo 10] [--rows plain,constraints,...] [--out runs/quality.json]
                                    [--rerank-weights FILE] [--unskipped]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.quality_client import RowServer
from bench.quality_sets import EVAL_PACKAGES, Item, heldout_items, humaneval_items, package_items, package_typed_items
from context.classify import CompletionKind
from context.constraints import build_site
from context.document import Document
from context.index import WorkspaceIndex
from context.members import disk_reader
from context.positions import Position
from context.rerank import WEIGHTS_PATH, load_reranker
from context.retrieval import previous_line, similar_lines
from training import baselines, humaneval
from training.holes import Hole

REPO = Path(__file__).resolve().parents[1]
OFF = {"constraints": False, "numCandidates": 1, "retrieval": False, "rerank": False, "abstain": False}
ROWS: dict[str, dict[str, object]] = {
    "plain model (today)": OFF,
    "constraints": {**OFF, "constraints": True},
    "candidates": {**OFF, "numCandidates": 4, "retrieval": True},
    "reranking": {**OFF, "numCandidates": 4, "rerank": True, "abstain": True},
    "all": {"constraints": True, "numCandidates": 4, "retrieval": True, "rerank": True, "abstain": True},
}


def full_pipeline(row: str) -> str:
    """The row derived from an "all" row's explainContext: the full pipeline's answer, with no
    skipping (it should equal the row's own)."""
    return row.replace("all", "all, full pipeline (explain)", 1)


def no_abstaining(row: str) -> str:
    """The row derived from an "all" row's explainContext: its best-scored candidate, always shown."""
    return f"{row}, no abstaining"


def candidates_ceiling(row: str) -> str:
    """The row derived from an "all" row's explainContext: a right candidate, wherever one exists."""
    return f"ceiling: a right one among {row}'s candidates"


BASELINE_ROWS = ("baseline: previous line", "baseline: line after most similar", "baseline: most similar context")
WORKSPACE_CEILING = "ceiling: the line elsewhere in the workspace"
_IDENT = re.compile(r"[A-Za-z_]\w*")


def first_identifier(text: str) -> str:
    match = _IDENT.search(text)
    return match.group() if match else ""


def edit_similarity(a: str, b: str) -> float:
    if not a and not b:
        return 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return 1 - previous[-1] / max(len(a), len(b))


def baseline_answers(item: Item, indexes: dict[Path, WorkspaceIndex]) -> dict[str, str]:
    if item.root not in indexes:
        indexes[item.root] = WorkspaceIndex([item.root])
        indexes[item.root].build()
    index = indexes[item.root]
    snapshot = Document(item.path.resolve().as_uri(), "python", 1, item.text).snapshot()
    site = build_site(snapshot, Position(item.line, item.column), CompletionKind.SINGLE_LINE, index)
    similar = similar_lines(site, index, disk_reader({}), 1)
    hole = hole_of(item)
    return {  # each an insertion at the cursor, as the server's answers are
        BASELINE_ROWS[0]: previous_line(site) or "",
        BASELINE_ROWS[1]: similar[0].text if similar else "",
        BASELINE_ROWS[2]: after_typed(baselines.similar_line(hole.prefix, hole.suffix, hole.path), item.typed),
        WORKSPACE_CEILING: item.expected if item.target.strip() in workspace_lines(item, index) else "",
    }


def workspace_lines(item: Item, index: WorkspaceIndex) -> set[str]:
    """Every line of the workspace's Python files, stripped, the hole's file as the server sees it
    (its line blanked)."""
    lines = set(item.text.split("\n"))
    for path in index.files():
        if path.endswith(".py") and Path(path).resolve() != item.path.resolve():
            lines.update(Path(path).read_text(encoding="utf-8", errors="replace").split("\n"))
    return {line.strip() for line in lines}


def right(item: Item, text: str) -> bool:
    """`text`, inserted at the item's cursor, completes its line exactly (trailing whitespace aside)."""
    return (item.typed + text.split("\n", 1)[0]).rstrip() == item.target.rstrip() and bool(text.strip())


def after_typed(line: str, typed: str) -> str:
    """`line` as an insertion after `typed` (the cursor line's typed part): its rest when it
    starts with it (indentation aside), else nothing."""
    if not typed.strip():
        return line[len(typed) :] if line.startswith(typed) else line.lstrip()
    body, head = line.lstrip(), typed.lstrip()
    return body[len(head) :] if body.startswith(head) else ""


def hole_of(item: Item) -> Hole:
    prefix = "".join(line + "\n" for line in item.text.split("\n")[: item.line])
    return Hole(str(item.path), prefix, item.text[len(prefix) + item.column :], item.target, item.task_id)


def summarise(items: list[Item], answers: dict[str, list[str]], latency: dict[str, list[float]],
              problems: dict[str, humaneval.Problem], jobs: int) -> dict[str, dict[str, float | None]]:
    table = {}
    for row, texts in answers.items():
        texts = [t.split("\n", 1)[0] for t in texts]
        exact = [right(i, t) for t, i in zip(texts, items)]
        shown = [bool(t.strip()) for t in texts]
        metrics: dict[str, float | None] = {
            "exact": _mean(exact),
            "first_ident": _mean([bool(t.strip()) and first_identifier(t) == first_identifier(i.expected) for t, i in zip(texts, items)]),
            "edit_sim": _mean([edit_similarity(t.strip(), i.expected.strip()) if t.strip() else 0.0 for t, i in zip(texts, items)]),
            "show": _mean(shown),
            "precision": sum(exact) / sum(shown) if any(shown) else None,
            "pass1": None,
            "p50_ms": _percentile(latency.get(row), 50),
            "p95_ms": _percentile(latency.get(row), 95),
        }
        if items and items[0].set == "humaneval":
            programs = [humaneval.program(problems[i.task_id], hole_of(i), t) for t, i in zip(texts, items)]
            metrics["pass1"] = _mean(humaneval.execute_all(programs, jobs))
        table[row] = metrics
    return table


def _mean(values: list[bool] | list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _percentile(values: list[float] | None, q: int) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def print_table(name: str, count: int, table: dict[str, dict[str, float | None]]) -> None:
    print(f"\n{name} ({count} lines)")
    name_width = max(34, *(len(row) for row in table))
    print(f"{'completer':{name_width}} {'exact':>6} {'1st id':>6} {'edit':>6} {'pass@1':>6} {'shown':>6} {'prec.':>6} {'p50 ms':>7} {'p95 ms':>7}")
    for row, m in table.items():
        def cell(key: str, scale: float = 100, width: int = 6) -> str:
            value = m[key]
            return f"{'-':>{width}}" if value is None else f"{value * scale:>{width}.1f}"
        print(f"{row:{name_width}} {cell('exact')} {cell('first_ident')} {cell('edit_sim')} {cell('pass1')} {cell('show')} "
              f"{cell('precision')} {cell('p50_ms', 1, 7)} {cell('p95_ms', 1, 7)}")


async def run_rows(items: list[Item], model: str, rows: dict[str, dict[str, object]], log_dir: Path,
                   progress: Callable[[str], None]) -> tuple[dict, dict, dict]:
    """Every row's answers and request latencies, and for each "all" row the reranker's score of
    its best candidate per item (for `print_curve`). A row that abstains is asked as an automatic
    trigger (the ghost text while typing: it may show nothing); the others as an explicit one."""
    servers = [await RowServer.start(row, model, options, log_dir) for row, options in rows.items()]
    try:
        for server in servers:
            await server.wait_ready()
        answers: dict[str, list[str]] = {row: [] for row in rows}
        latency: dict[str, list[float]] = {row: [] for row in rows}
        curves: dict[str, list[float | None]] = {}
        for n, item in enumerate(items, 1):
            original = item.path.read_text(encoding="utf-8") if item.path.exists() else None
            item.path.write_text(item.text, encoding="utf-8")  # no row may read the target from disk
            try:
                for server in servers:
                    text, seconds = await server.complete(item, automatic=bool(rows[server.name].get("abstain")))
                    if server.name.startswith("all") and rows[server.name].get("skipUnreachable", True):
                        full, best, score, texts = await _explained(server, item)
                        curves.setdefault(server.name, []).append(score)
                        answers.setdefault(no_abstaining(server.name), []).append(best)
                        answers.setdefault(full_pipeline(server.name), []).append(full)
                        answers.setdefault(candidates_ceiling(server.name), []).append(next((t for t in texts if right(item, t)), ""))
                    answers[server.name].append(text)
                    latency[server.name].append(seconds)
            finally:
                if original is not None:
                    item.path.write_text(original, encoding="utf-8")
            if n % 10 == 0:
                progress(f"{n}/{len(items)} lines")
        return answers, latency, curves
    finally:
        for server in servers:
            await server.stop()


async def _explained(server: RowServer, item: Item) -> tuple[str, str, float | None, list[str]]:
    """(shown text, best-scored candidate, its score, every candidate's text) of the "all" row's
    full pipeline, through glm5.explainContext (untimed, as an automatic request), which scores
    every candidate even where inlineCompletion skips the model."""
    explained = await server.explain(item)
    candidates = explained.get("candidates", [])
    scored = [c for c in candidates if c.get("score") is not None and c.get("text", "").strip()]
    top = max(scored, key=lambda c: c["score"]) if scored else None
    best = top["text"] if top is not None else explained.get("completion", "")
    return explained.get("completion", ""), best, None if top is None else top["score"], [c.get("text", "") for c in candidates]


def print_curve(row: str, items: list[Item], best: list[str], scores: list[float | None], chosen: float) -> None:
    """Coverage and precision when shown of `row` over the reranker's threshold: at each, the
    items whose best candidate scores at least that are shown (an abstention is a miss)."""
    right_best = [right(i, t) for i, t in zip(items, best)]
    points = sorted({*(round(0.05 * k, 2) for k in range(1, 20)), round(chosen, 4)})
    print(f"\n{row}: coverage / precision when shown over the threshold (* the shipped one)")
    print(f"{'threshold':>10} {'shown':>6} {'prec.':>6} {'exact':>6}")
    for t in points:
        shown = [r for s, r in zip(scores, right_best) if s is not None and s >= t]
        precision = f"{100 * sum(shown) / len(shown):6.1f}" if shown else f"{'-':>6}"
        mark = " *" if t == round(chosen, 4) else ""
        print(f"{t:>10.3f} {100 * len(shown) / max(1, len(items)):6.1f} {precision} {100 * sum(shown) / max(1, len(items)):6.1f}{mark}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--humaneval", type=int, default=32, help="HumanEval holes (every k-th of 1,033)")
    parser.add_argument("--heldout-files", type=int, default=8)
    parser.add_argument("--per-file", type=int, default=4)
    parser.add_argument("--repo", type=int, default=10, help="holes per package")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "quality")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated neural rows")
    parser.add_argument("--sets", default="repo,heldout,humaneval")
    parser.add_argument("--jobs", type=int, default=1, help="parallel HumanEval test runs")
    parser.add_argument("--out", type=Path, help="write every answer as JSON here")
    parser.add_argument("--unskipped", action="store_true",
                        help='also the "all" row with skipUnreachable off (the model always run), side by side')
    parser.add_argument("--rerank-weights", type=Path,
                        help="also run the \"all\" row with these reranker weights (rerankWeights), side by side")
    args = parser.parse_args(argv)
    from lsp_server.engine_client import embedded_model_path

    model = args.model or embedded_model_path()
    if model is None:
        raise SystemExit("no model: give --model DIR")
    names = [r for r in args.rows.split(",") if r]
    unknown = [r for r in names if r not in ROWS]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; choose from {list(ROWS)}")
    rows = {name: ROWS[name] for name in names}
    if args.rerank_weights:
        rows[f"all, weights {args.rerank_weights.name}"] = {**ROWS["all"], "rerankWeights": str(args.rerank_weights.resolve())}
    if args.unskipped:
        rows["all, skipUnreachable off"] = {**ROWS["all"], "skipUnreachable": False}
    work = Path(tempfile.mkdtemp(prefix="glm5-quality-"))
    started = time.perf_counter()
    dump: dict[str, object] = {"rows": rows, "model": model, "packages": list(EVAL_PACKAGES)}
    print(f"load average at start {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    for set_name in args.sets.split(","):
        problems: dict[str, humaneval.Problem] = {}
        if set_name == "humaneval":
            items, problems = humaneval_items(work, args.humaneval)
        elif set_name == "heldout":
            items = heldout_items(work, args.heldout_files, args.per_file)
        elif set_name == "repo":
            items = package_items(args.cache, EVAL_PACKAGES, args.repo, "repo")
        elif set_name == "repo-typed":
            items = package_typed_items(args.cache, EVAL_PACKAGES, args.repo, "repo-typed")
        else:
            raise SystemExit(f"unknown set {set_name!r}")
        indexes: dict[Path, WorkspaceIndex] = {}
        base = [baseline_answers(i, indexes) for i in items]
        answers = {row: [b[row] for b in base] for row in (*BASELINE_ROWS, WORKSPACE_CEILING)}
        neural, latency, curves = asyncio.run(run_rows(items, model, rows, work, lambda m: print(f"  {set_name}: {m}", flush=True)))
        answers.update(neural)
        table = summarise(items, answers, latency, problems, args.jobs)
        print_table(set_name, len(items), table)
        for row, scores in curves.items():
            weights = rows[row].get("rerankWeights")
            print_curve(row, items, answers[no_abstaining(row)], scores, load_reranker(Path(weights) if weights else WEIGHTS_PATH).threshold)
        for row in rows:
            if row.startswith("all") and full_pipeline(row) in answers:
                same = sum(a == b for a, b in zip(answers[row], answers[full_pipeline(row)]))
                print(f"  {row!r} answered as its full pipeline on {same} of {len(items)} lines")
        dump[set_name] = {
            "table": table,
            "items": [{"path": str(i.path), "line": i.line, "column": i.column, "target": i.target, "answers": {r: answers[r][n] for r in answers}}
                      for n, i in enumerate(items)],
        }
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(dump, indent=1))
    print(f"\n[{time.perf_counter() - started:.0f} s; load average {Path('/proc/loadavg').read_text().split()[:3]}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
