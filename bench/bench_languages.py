"""Completion quality in JavaScript, TypeScript, Go and Rust, side by side with the baselines.

The same machinery as `bench_quality.py` (one `lsp_server --stdio` per row, every item asked of
every row in turn, the same metrics and table), on the held-out sets of `language_sets.py`. Rows:
- "all": the default settings (the full candidate pipeline, abstaining when not confident), asked
  through `textDocument/inlineCompletion`; with it, from `glm5.explainContext`, "all, full pipeline
  (explain)", "all, no abstaining" (the best-scored candidate, always shown) and the ceiling of
  its candidates;
- "abstain off": the same pipeline with `abstain: false`;
- the baselines "previous line", "line after most similar" (this file and the files of its
  language around it) and "most similar context", in-process.
An abstention counts as a miss in every accuracy column; "shown" is the coverage and "prec." the
exact match among the shown answers.

Usage: python -m bench.bench_languages [--model DIR] [--holes 32] [--languages javascript,typescript,go,rust]
                                       [--cache .cache/quality] [--out runs/languages.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from bench.bench_quality import BASELINE_ROWS, ROWS, after_typed, hole_of, print_table, run_rows, summarise
from bench.language_sets import LANGUAGES, SOURCES, language_items
from bench.quality_sets import Item
from context.classify import CompletionKind
from context.constraints import build_site
from context.document import Document
from context.index import WorkspaceIndex
from context.members import disk_reader
from context.positions import Position
from context.retrieval import previous_line, similar_lines
from training import baselines

REPO = Path(__file__).resolve().parents[1]
NEURAL_ROWS = {"all": ROWS["all"], "abstain off": {**ROWS["all"], "abstain": False}}


def baseline_answers(item: Item, language: str, indexes: dict[Path, WorkspaceIndex]) -> dict[str, str]:
    """The three baselines' insertions at the item's cursor, the file read as `language`."""
    if item.root not in indexes:
        indexes[item.root] = WorkspaceIndex([item.root])
        indexes[item.root].build()
    index = indexes[item.root]
    snapshot = Document(item.path.resolve().as_uri(), language, 1, item.text).snapshot()
    site = build_site(snapshot, Position(item.line, item.column), CompletionKind.SINGLE_LINE, index)
    similar = similar_lines(site, index, disk_reader({}), 1)
    hole = hole_of(item)
    return {
        BASELINE_ROWS[0]: previous_line(site) or "",
        BASELINE_ROWS[1]: similar[0].text if similar else "",
        BASELINE_ROWS[2]: after_typed(baselines.similar_line(hole.prefix, hole.suffix, hole.path), item.typed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--holes", type=int, default=32, help="holes per language")
    parser.add_argument("--languages", default=",".join(LANGUAGES))
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "quality")
    parser.add_argument("--out", type=Path, help="write every answer as JSON here")
    args = parser.parse_args(argv)
    from lsp_server.engine_client import embedded_model_path

    model = args.model or embedded_model_path()
    if model is None:
        raise SystemExit("no model: give --model DIR")
    languages = [name for name in args.languages.split(",") if name]
    unknown = [name for name in languages if name not in LANGUAGES]
    if unknown:
        raise SystemExit(f"unknown languages {unknown}; choose from {list(LANGUAGES)}")
    work = Path(tempfile.mkdtemp(prefix="glm5-languages-"))
    started = time.perf_counter()
    dump: dict[str, object] = {
        "rows": NEURAL_ROWS, "model": str(model),
        "sources": [{"language": s.language, "package": s.spec, "licence": s.licence, "directories": list(s.directories)} for s in SOURCES],
    }
    print(f"load average at start {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)
    for language in languages:
        items = language_items(args.cache, work, language, args.holes)
        indexes: dict[Path, WorkspaceIndex] = {}
        base = [baseline_answers(item, language, indexes) for item in items]
        answers = {row: [b[row] for b in base] for row in BASELINE_ROWS}
        neural, latency = asyncio.run(run_rows(items, str(model), NEURAL_ROWS, work, lambda m: print(f"  {language}: {m}", flush=True)))
        answers.update(neural)
        table = summarise(items, answers, latency, {}, 1)
        print_table(language, len(items), table)
        dump[language] = {
            "table": table,
            "items": [{"path": str(i.path.relative_to(work)), "line": i.line, "target": i.target,
                       "answers": {row: answers[row][n] for row in answers}} for n, i in enumerate(items)],
        }
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(dump, indent=1))
    print(f"\n[{time.perf_counter() - started:.0f} s; load average {Path('/proc/loadavg').read_text().split()[:3]}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
