"""Evaluation of a completer: HumanEval single-line infilling, held-out line holes, held-out loss.

Role: the numbers in the model card and the README.
1. HumanEval single-line infilling (`training.humaneval`): execution-based pass@1 and exact match.
2. Held-out files of the corpus: exact match on random single-line holes (fixed seed; `matched`
   lists the holes answered exactly, so two models can be compared hole by hole) and, for the
   model, per-token loss (nats/token and bits/byte) of plain left-to-right windows.
3. The same hole metrics for the non-neural baselines (`training.baselines`).

The model plugs in through `ModelCompleter`, a `(prefix, suffix, path) -> str` callable over
`model_runtime.load_model(dir)`: SPM prompt in the serving format (`context.fim`), greedy, one line.

Invariants:
- Holes, their order and the loss windows depend only on the manifest, the flags and the seed.
- A prompt never exceeds the model's context: prefix and suffix are trimmed by whole lines, the
  prefix keeping its end and the suffix its start, the suffix getting at most a quarter.
- torch is imported only when a model is evaluated.

Run: `python -m training.evaluate --completer similar-line --limit 5` (CI subset), or
`python -m training.evaluate --model DIR` (the full benchmark).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from context.fim import FimMode, file_header, fim_prompt_ids
from training import humaneval
from training.baselines import BASELINES
from training.corpus import DEFAULT_MANIFEST, Document, load_documents
from training.holes import Completer, Hole, complete_all, exact_match, line_holes

DEFAULT_CONTEXT = 1024
MAX_NEW_TOKENS = 48
PROMPT_SCAFFOLD = 5  # [gMASK] <sop> and the three <|code_*|> tokens


def trim_context(count: Callable[[str], int], prefix: str, suffix: str, budget: int) -> tuple[str, str]:
    """The longest prefix tail and suffix head (whole lines) that fit `budget` tokens together,
    the suffix taking at most a quarter unless the prefix leaves room."""
    suffix_lines = suffix.splitlines(keepends=True)
    suffix_cap = budget // 4
    suffix_keep, used = _take(suffix_lines, count, suffix_cap)
    prefix_lines = prefix.splitlines(keepends=True)[::-1]
    prefix_keep, prefix_used = _take(prefix_lines, count, budget - used)
    if prefix_used + used < budget and suffix_keep < len(suffix_lines):
        suffix_keep, _ = _take(suffix_lines, count, budget - prefix_used)
    return "".join(prefix_lines[:prefix_keep][::-1]), "".join(suffix_lines[:suffix_keep])


def _take(lines: list[str], count: Callable[[str], int], budget: int) -> tuple[int, int]:
    """How many leading `lines` fit `budget` tokens, and the tokens they take."""
    used = 0
    for i, line in enumerate(lines):
        cost = count(line)
        if used + cost > budget:
            return i, used
        used += cost
    return len(lines), used


class ModelCompleter:
    """Greedy single-line FIM completion with a loaded model, in the serving prompt format."""

    def __init__(self, loaded, context: int = DEFAULT_CONTEXT, max_new_tokens: int = MAX_NEW_TOKENS, batch_size: int = 16) -> None:
        if loaded.tokenizer is None:
            raise ValueError(f"{loaded.path}: the checkpoint has no tokenizer")
        self.loaded, self.tok = loaded, loaded.tokenizer
        self.context, self.max_new_tokens, self.batch_size = context, max_new_tokens, batch_size

    def prompt_ids(self, prefix: str, suffix: str, path: str) -> list[int]:
        header = file_header(path, "python")
        budget = self.context - self.max_new_tokens - PROMPT_SCAFFOLD - self.tok.count(header)
        while True:
            pre, suf = trim_context(self.tok.count, prefix, suffix, budget)
            ids = fim_prompt_ids(self.tok, header, pre, suf, FimMode.SPM)
            if len(ids) + self.max_new_tokens <= self.context or budget <= 0:
                return ids
            budget -= len(ids) + self.max_new_tokens - self.context  # per-line counts undercounted

    def __call__(self, prefix: str, suffix: str, path: str) -> str:
        return self.complete_many([Hole(path, prefix, suffix, "")])[0]

    def complete_many(self, holes: list[Hole]) -> list[str]:
        from model_runtime.api import SamplingParams

        sampling = SamplingParams(max_tokens=self.max_new_tokens, temperature=0.0, stop_strings=("\n",))
        out: list[str] = []
        for i in range(0, len(holes), self.batch_size):
            prompts = [self.prompt_ids(h.prefix, h.suffix, h.path) for h in holes[i : i + self.batch_size]]
            out += [r.text for r in self.loaded.generate_batch(prompts, sampling)]
        return out


def evaluate_humaneval(completer: Completer, problems: list[humaneval.Problem], jobs: int) -> dict:
    holes = [h for p in problems for h in humaneval.line_holes(p)]
    answers = complete_all(completer, holes)
    by_task: dict[str, list[str]] = {}
    for hole, answer in zip(holes, answers):
        by_task.setdefault(hole.task_id, []).append(answer)
    return humaneval.evaluate(problems, by_task, jobs=jobs)


def heldout_holes(documents: list[Document], files: int | None, per_file: int, seed: int) -> list[Hole]:
    """`per_file` random line holes in each of the first `files` held-out files (path order)."""
    rng = random.Random(seed)
    chosen = sorted(documents, key=lambda d: (d.source, d.path))[:files]
    return [h for d in chosen for h in line_holes(d.path, d.read(), rng, per_file)]


def heldout_loss(loaded, documents: list[Document], context: int) -> dict:
    """Mean next-token loss of the model over plain left-to-right windows of `documents`."""
    import torch
    import torch.nn.functional as F

    from training.samples import LiteralEncoder, SampleConfig, document_samples

    enc = LiteralEncoder(loaded.path)
    cfg = SampleConfig(seq_len=context + 1, fim_rate=0.0, snippet_rate=0.0)
    nats, tokens, nbytes = 0.0, 0, 0
    with torch.inference_mode():
        for doc in documents:
            rng = random.Random(f"heldout:{doc.path}")
            for sample in document_samples(doc.read(), doc.path, lambda: [], lambda: cfg.seq_len, rng, enc, cfg):
                ids = torch.tensor(sample.ids, device=loaded.device)
                mask = torch.tensor(sample.mask[1:], dtype=torch.bool, device=loaded.device)
                logits = loaded.logits(ids[:-1]).float()
                nll = F.cross_entropy(logits, ids[1:], reduction="none")[mask]
                nats += float(nll.sum())
                targets = [t for t, m in zip(sample.ids[1:], sample.mask[1:]) if m]
                tokens += len(targets)
                nbytes += len(enc.decode(targets).encode())
    return {
        "files": len(documents),
        "tokens": tokens,
        "nats_per_token": nats / max(1, tokens),
        "bits_per_byte": nats / math.log(2) / max(1, nbytes),
    }


def _completer(args: argparse.Namespace) -> tuple[Completer, object | None]:
    if args.model is None:
        return BASELINES[args.completer], None
    from model_runtime.runtime import load_model

    loaded = load_model(args.model, device=args.device)
    args.context = args.context or loaded.config.max_position_embeddings
    return ModelCompleter(loaded, args.context, batch_size=args.batch_size), loaded


def run(args: argparse.Namespace) -> dict:
    completer, loaded = _completer(args)
    name = str(args.model) if args.model is not None else args.completer
    results: dict = {"completer": name}
    started = time.monotonic()
    if "humaneval" in args.tasks:
        problems = humaneval.load_problems(args.problems, args.limit)
        results["humaneval"] = evaluate_humaneval(completer, problems, args.jobs)
    if "heldout" in args.tasks:
        documents = load_documents(args.manifest, "heldout")
        holes = heldout_holes(documents, args.heldout_files, args.holes_per_file, args.seed)
        answers = complete_all(completer, holes)
        results["heldout"] = {"holes": len(holes), "exact_match": exact_match(answers, holes),
                              "matched": [i for i, (a, h) in enumerate(zip(answers, holes)) if exact_match([a], [h])]}
        if loaded is not None:
            chosen = sorted(documents, key=lambda d: (d.source, d.path))[: args.heldout_files]
            results["heldout"]["loss"] = heldout_loss(loaded, chosen, args.context)
    results["seconds"] = round(time.monotonic() - started, 1)
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Evaluate a completer (the model or a baseline).")
    parser.add_argument("--model", type=Path, help="checkpoint directory (default: a baseline, see --completer)")
    parser.add_argument("--completer", choices=sorted(BASELINES), default="similar-line")
    parser.add_argument("--tasks", default="humaneval,heldout", help="comma-separated: humaneval, heldout")
    parser.add_argument("--limit", type=int, help="first N HumanEval problems only")
    parser.add_argument("--problems", type=lambda s: s.split(","), help="HumanEval task ids, e.g. HumanEval/0,HumanEval/7")
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--heldout-files", type=int, help="first N held-out files only (default: all)")
    parser.add_argument("--holes-per-file", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context", type=int, help="model context (default: the checkpoint's max_position_embeddings)")
    parser.add_argument("--batch-size", type=int, default=16, help="prompts decoded together")
    parser.add_argument("--device", default="cpu", help="where the model runs (cpu or cuda)")
    parser.add_argument("--jobs", type=int, default=2, help="HumanEval programs run in parallel")
    parser.add_argument("--out", type=Path, help="also write the results JSON here")
    args = parser.parse_args(argv)
    args.tasks = {t.strip() for t in args.tasks.split(",") if t.strip()}
    unknown = args.tasks - {"humaneval", "heldout"}
    if unknown:
        parser.error(f"unknown tasks: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = run(args)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
