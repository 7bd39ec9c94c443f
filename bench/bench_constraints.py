"""Cost of steering on the engine side: constrained decode steps, n-best, batched scoring, side by side.

For each prompt (a cursor at a line start in one of this repository's Python files, as an SPM
fill-in-the-middle prompt) the same engine runs, in turn:
- plain: greedy, no constraint (today's path);
- constrained: greedy under a ConstraintSpec built the way `context/` would (names defined in the
  prefix plus builtins, member scopes of the stdlib modules the prefix imports);
- healed: the same, single-line, with the cursor moved inside the line's first word (token healing);
- n-best 4: the constrained request with num_candidates=4 (one batch of 4 sequences per step);
and scores 4 candidate lines in one batched call against 4 separate calls.

Decode steps are timed one by one around `Engine.step` (prefill steps excluded). What this leaves
out: the language server, the prompt building and the network of an editor; the constraint specs
are built here by regex, not by `context/`.

Usage: python bench/bench_constraints.py [--model DIR] [--prompts 8] [--new 24] [--threads 2]
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import keyword
import re
import statistics
import time
from pathlib import Path

import torch

from model_runtime import load_model
from model_runtime.api import ConstraintSpec, GenerationRequest, MemberScope, SamplingParams, ScoreRequest
from model_runtime.config import EngineConfig
from model_runtime.constraint.monitor import compile_constraint
from model_runtime.constraint.vocab import Vocab
from model_runtime.engine import Engine
from model_runtime.healing import heal

ROOT = Path(__file__).resolve().parent.parent
FILES = ("context/fim.py", "context/prompt.py", "lsp_server/completions.py", "lsp_server/pipeline.py",
         "model_runtime/loader.py", "model_runtime/scheduler.py", "context/symbols.py", "lsp_server/fixer.py")
IDENT = re.compile(r"[A-Za-z_]\w*")


def cursors(count: int) -> list[tuple[str, str, str]]:
    """(prefix, suffix, the line's first word) at a line in the middle of each file that starts with a word."""
    out = []
    for name in FILES[:count]:
        lines = (ROOT / name).read_text().splitlines(keepends=True)
        for i in range(len(lines) // 2, len(lines)):
            word = IDENT.match(lines[i].lstrip())
            if word and len(word.group()) >= 4:
                indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
                out.append(("".join(lines[:i]) + indent, "".join(lines[i + 1 :]), word.group()))
                break
    return out


def spec_for(prefix: str, **extra) -> ConstraintSpec:
    names = (set(IDENT.findall(prefix)) | set(dir(builtins))) - set(keyword.kwlist) - set(keyword.softkwlist)
    scopes = []
    for module in re.findall(r"^import (\w+)$", prefix, re.M):
        try:
            scopes.append(MemberScope(module, tuple(dir(importlib.import_module(module)))))
        except ImportError:
            continue
    return ConstraintSpec(defined_names=tuple(sorted(names)), member_scopes=tuple(scopes), **extra)


def fim(tok, prefix: str, suffix: str) -> list[int]:
    sp = tok.special
    return [sp.require("gmask"), sp.require("sop"), sp.require("code_suffix"), *tok.encode(suffix[:600]),
            sp.require("code_prefix"), *tok.encode(prefix[-1800:]), sp.require("code_middle")]


def timed(engine: Engine, request: GenerationRequest) -> tuple[list[float], object]:
    out, steps = [], []
    engine.add(request, None, out.append)
    while engine.scheduler.has_work:
        start = time.perf_counter()
        step = engine.step()
        if step is not None and not step.is_prefill:
            steps.append((time.perf_counter() - start) * 1000)
    return steps, out[0]


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else (values or [0.0])[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    loaded = load_model(args.model)
    tok = loaded.tokenizer
    engine = Engine(loaded, EngineConfig())
    Vocab.of(tok).trie  # built once per tokenizer; not part of a request
    rows: dict[str, list[float]] = {k: [] for k in ("plain", "constrained", "healed", "n-best 4")}
    mask_ms, compile_ms, score_ms, fired = [], [], {"batched": [], "separate": []}, {}
    released = 0
    sampling = SamplingParams(max_tokens=args.new)
    for n, (prefix, suffix, word) in enumerate(cursors(args.prompts)):
        ids, spec = fim(tok, prefix, suffix), spec_for(prefix)
        start = time.perf_counter()
        compile_constraint(spec, Vocab.of(tok), frozenset(tok.special.eos_ids), prefix[-1800:])
        compile_ms.append((time.perf_counter() - start) * 1000)
        healed_ids, heal_prefix = heal(tok, fim(tok, prefix + word[:3], suffix), word[:3])
        requests = {
            "plain": GenerationRequest(f"p{n}", tuple(ids), sampling),
            "constrained": GenerationRequest(f"c{n}", tuple(ids), sampling, constraint=spec),
            "healed": GenerationRequest(f"h{n}", tuple(healed_ids), sampling, constraint=spec_for(prefix, single_line=True, heal_prefix=heal_prefix)),
            "n-best 4": GenerationRequest(f"n{n}", tuple(ids), sampling, constraint=spec, num_candidates=4),
        }
        for name, request in requests.items():
            steps, result = timed(engine, request)
            rows[name].extend(steps)
            if result.constraint is not None and name != "n-best 4":
                mask_ms.append(result.constraint.mask_ms / max(1, result.constraint.steps))
                released += result.constraint.released
                for rule in result.constraint.fired:
                    fired[rule] = fired.get(rule, 0) + 1
            if name == "n-best 4":
                cands = tuple(c.token_ids for c in result.candidates)
        for kind in ("batched", "separate"):
            start = time.perf_counter()
            if kind == "batched":
                engine.score(ScoreRequest(f"s{n}", tuple(ids), cands))
            else:
                for i, c in enumerate(cands):
                    engine.score(ScoreRequest(f"s{n}.{i}", tuple(ids), (c,)))
            score_ms[kind].append((time.perf_counter() - start) * 1000)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"{len(compile_ms)} prompts, up to {args.new} new tokens, {args.threads} torch threads, loadavg {' '.join(load)}")
    print(f"\n{'decode step (ms)':<22}{'steps':>7}{'p50':>9}{'p95':>9}{'p50 / plain':>13}")
    base = pct(rows["plain"], 50)
    for name, values in rows.items():
        print(f"{name:<22}{len(values):>7}{pct(values, 50):>9.2f}{pct(values, 95):>9.2f}{pct(values, 50) / base:>13.2f}")
    print(f"\n{'monitor (ms)':<22}{'n':>7}{'p50':>9}{'p95':>9}")
    print(f"{'compile per request':<22}{len(compile_ms):>7}{pct(compile_ms, 50):>9.2f}{pct(compile_ms, 95):>9.2f}")
    print(f"{'mask per step':<22}{len(mask_ms):>7}{pct(mask_ms, 50):>9.2f}{pct(mask_ms, 95):>9.2f}")
    print(f"\n{'score 4 candidates':<22}{'n':>7}{'p50':>9}{'p95':>9}")
    for kind, values in score_ms.items():
        print(f"{kind:<22}{len(values):>7}{pct(values, 50):>9.2f}{pct(values, 95):>9.2f}")
    print(f"\nconstrained requests that released: {released}; rules that removed a top choice (requests): {fired}")


if __name__ == "__main__":
    main()
