"""Write the model card of a trained model: data and licences, tokenizer, training, scores.

Role: gather what the other stages recorded (the corpus manifest, the shard index, the run's
`training.json`, the evaluation results written by `training.evaluate --out`) into one Markdown
file that ships next to the weights.

Invariants:
- Every number comes from those files or is measured here (token counts of the corpus with
  the shipped tokenizer); nothing is typed in by hand.
- Every source is listed with its version and licence, and every excluded distribution with
  the reason, so the card is the corpus's licence record.

Run: `python -m training.model_card --run-dir runs/NAME --eval runs/NAME/eval-*.json`
(writes `runs/NAME/export/MODEL_CARD.md`).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from training.corpus import DEFAULT_MANIFEST
from training.data import DEFAULT_SHARDS


def token_counts(manifest: dict, tokenizer_dir: Path) -> dict[str, int]:
    """Tokens per source id, encoding every kept file with the shipped tokenizer."""
    from training.corpus import Document
    from training.samples import LiteralEncoder

    enc = LiteralEncoder(tokenizer_dir)
    roots = {s["id"]: s["root"] for s in manifest["sources"]}
    counts: dict[str, int] = defaultdict(int)
    for f in manifest["files"]:
        doc = Document(f["source"], f["path"], f["sha256"], f["bytes"], f["split"], roots[f["source"]])
        counts[f["source"]] += len(enc.encode(doc.read()))
    return dict(counts)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def data_section(manifest: dict, tokens: dict[str, int] | None) -> str:
    sources = [s for s in manifest["sources"] if s["files"]]
    by_licence: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for s in sources:
        row = by_licence[s["licence"]]
        row[0] += 1
        row[1] += s["files"]
        row[2] += s["bytes"]
        row[3] += (tokens or {}).get(s["id"], 0)
    tok = (lambda n: f"{n / 1e6:.2f}M") if tokens else (lambda n: "-")
    licence_rows = [[lic, str(v[0]), str(v[1]), f"{v[2] / 1e6:.1f}", tok(v[3])]
                    for lic, v in sorted(by_licence.items(), key=lambda kv: -kv[1][2])]
    source_rows = [[s["name"], s["version"], s["licence"], str(s["files"]), f"{s['bytes'] / 1e6:.2f}", tok((tokens or {}).get(s["id"], 0))]
                   for s in sorted(sources, key=lambda s: -s["bytes"])]
    files = manifest["files"]
    held = [f for f in files if f["split"] == "heldout"]
    dropped: dict[str, int] = defaultdict(int)
    for s in manifest["sources"]:
        for reason, n in s["dropped"].items():
            dropped[reason] += n
    excluded = [[e["id"], e["licence"][:60], e["reason"]] for e in manifest["excluded"]]
    total_tokens = f", {sum(tokens.values()) / 1e6:.1f}M tokens" if tokens else ""
    return "\n\n".join([
        "## Training data",
        f"Python source found on the build machine: the CPython standard library and the installed "
        f"distributions whose metadata names a permissive licence. {len(files)} files, "
        f"{sum(f['bytes'] for f in files) / 1e6:.1f} MB{total_tokens}, from {len(sources)} sources. "
        f"Held out by file (hash of the relative path, {manifest['heldout_per_mille'] / 10:.1f}%): "
        f"{len(held)} files, {sum(f['bytes'] for f in held) / 1e6:.2f} MB.",
        "Files dropped: " + ", ".join(f"{reason} {n}" for reason, n in sorted(dropped.items(), key=lambda kv: -kv[1])) + ".",
        "### By licence",
        _table(["licence", "sources", "files", "MB", "tokens"], licence_rows),
        "### Excluded distributions",
        _table(["distribution", "licence metadata", "reason"], excluded) if excluded else "None.",
        "### Sources",
        _table(["source", "version", "licence", "files", "MB", "tokens"], source_rows),
    ])


def training_section(summary: dict, shards: dict, base_card: str | None = None) -> str:
    params = summary["parameters"]
    stats = shards["stats"]
    fim = stats.get("samples_spm", 0) + stats.get("samples_psm", 0)
    samples = fim + stats.get("samples_plain", 0)
    args = summary["args"]
    warm = args.get("init_from") not in (None, "None")
    return "\n\n".join([
        "## Training" if not warm else "## Continued training",
        *([f"Warm start: every weight starts from `{args['init_from']}`, the model described under "
           "\"Base model\" below; this section is the continued training only."] if warm else []),
        _table(["", ""], [
            ["preset", summary["preset"]],
            ["parameters", f"{params['total'] / 1e6:.1f}M total, {params['active'] / 1e6:.1f}M active per token"],
            ["context", str(summary["context"])],
            ["tokens seen", f"{summary['tokens'] / 1e6:.1f}M positions ({summary['target_tokens'] / 1e6:.1f}M with loss)"],
            ["optimizer steps", str(summary["steps"])],
            ["wall time", f"{summary['wall_time_s'] / 3600:.2f} h"],
            *([["CPU time", f"{summary['cpu_time_s'] / 3600:.2f} h (process CPU seconds of training steps)"]]
              if summary.get("cpu_time_s") else []),
            ["hardware", summary.get("hardware", "-")],
            ["held-out loss (training mix)", f"{summary['heldout'].get('heldout_loss', float('nan')):.3f} nats/token"],
        ]),
        f"Samples: {samples} in the training shards, {fim / max(1, samples):.0%} fill-in-the-middle "
        f"(SPM {stats.get('samples_spm', 0)}, PSM {stats.get('samples_psm', 0)}), the rest left-to-right; "
        f"{stats.get('snippet_samples', 0)} carry cross-file snippets; padding {stats['padding_fraction']:.1%}; "
        f"FIM middles: {shards['sample_config'].get('middle', 'mixed')}.",
        f"Schedule: {_optimizer_name(args)}, peak learning rate {args.get('lr', '-')}, linear warm-up then cosine decay; "
        "DSA dense warm-up (indexer trained by KL against the attention distribution) for the first "
        f"{float(args.get('dense_fraction', 0)):.0%}, then sparse attention with top-k; MoE routing "
        "balanced by auxiliary-loss-free bias updates; MTP loss weight "
        f"{args.get('mtp_weight', '-')}.",
        *([_base_section(base_card)] if warm and base_card else []),
    ])


def _optimizer_name(args: dict) -> str:
    return "Muon for the block matrices, AdamW for the rest" if args.get("optimizer") == "muon" else "AdamW"


def _base_section(card: str) -> str:
    """The base model's corpus summary, training and evaluation sections, quoted from its card.

    A base that was itself warm-started brings its own "Base model" quote along, one heading
    level down, so a chain of continued trainings reads back to the first stage.
    """
    corpus = _section(card, "## Training data").split("\n\n")[0]
    heading = "## Training" if "\n## Training\n" in card else "## Continued training"
    training = _demote(_section(card, heading))
    if heading != "## Training":
        training = "It was itself a warm start. " + training
    evaluation = f"\n\nIts own evaluation, from its card:\n\n{_section(card, '## Evaluation')}" if "\n## Evaluation\n" in card else ""
    return f"### Base model\n\nIts corpus: {corpus}\n\n{training}{evaluation}"


def _demote(text: str) -> str:
    """Level-3 and deeper Markdown headings one level down."""
    return "\n".join("#" + line if line.startswith("###") else line for line in text.splitlines())


def _section(card: str, heading: str) -> str:
    """The body of the level-2 section titled exactly `heading`."""
    start = card.index(f"\n{heading}\n") + len(heading) + 2
    end = card.find("\n## ", start)
    return card[start:end if end >= 0 else len(card)].strip()


def evaluation_section(results: list[dict]) -> str:
    rows = []
    for r in results:
        he, ho = r.get("humaneval", {}), r.get("heldout", {})
        loss = ho.get("loss", {})
        rows.append([
            f"model ({Path(r['completer']).name})" if _is_model(r) else f"baseline: {r['completer']}",
            f"{he['pass_at_1']:.1%}" if he else "-", f"{he['exact_match']:.1%}" if he else "-",
            f"{ho['exact_match']:.1%}" if ho else "-",
            f"{loss['nats_per_token']:.3f} / {loss['bits_per_byte']:.3f}" if loss else "-",
        ])
    holes = next((r["humaneval"]["holes"] for r in results if "humaneval" in r), 0)
    held = next((r["heldout"]["holes"] for r in results if "heldout" in r), 0)
    return "\n\n".join([
        "## Evaluation",
        f"HumanEval single-line infilling: {holes} holes (every non-blank line of every canonical "
        "solution), greedy, first line kept, pass@1 by running the problem's tests. Held-out: "
        f"{held} random single-line holes in held-out corpus files; loss over left-to-right windows.",
        _table(["completer", "HumanEval pass@1", "HumanEval exact", "held-out exact", "held-out nats/token / bits/byte"], rows),
        *comparison(results),
    ])


def _is_model(result: dict) -> bool:
    return "/" in result["completer"] or Path(result["completer"]).is_dir()


METRICS = (("humaneval", "pass_at_1", "HumanEval pass@1"), ("humaneval", "exact_match", "HumanEval exact match"),
           ("heldout", "exact_match", "held-out exact match"))


def comparison(results: list[dict]) -> list[str]:
    """Plain sentences: the first model against the best baseline per metric, then against any other model."""
    models = [r for r in results if _is_model(r)]
    baselines = [r for r in results if not _is_model(r)]
    if not models:
        return []
    mine, lines = models[0], []
    for task, key, label in METRICS:
        scored = [(r[task][key], r["completer"]) for r in baselines if task in r]
        if task not in mine or not scored:
            continue
        best, name = max(scored)
        value = mine[task][key]
        verdict = "above" if value > best else "below" if value < best else "equal to"
        lines.append(f"- {label}: the model scores {value:.1%}, {verdict} the best baseline ({name}, {best:.1%}).")
    lines += [_against_model(mine, other) for other in models[1:]]
    return ["\n".join(lines)] if lines else []


def _against_model(mine: dict, other: dict) -> str:
    """One sentence: `mine` against another model evaluated on the same holes and windows."""
    parts = [f"{label} {mine[task][key]:.1%} against {other[task][key]:.1%}"
             for task, key, label in METRICS if task in mine and task in other]
    loss, base = mine.get("heldout", {}).get("loss"), other.get("heldout", {}).get("loss")
    if loss and base:
        change = loss["nats_per_token"] / base["nats_per_token"] - 1
        parts.insert(0, f"held-out loss {loss['nats_per_token']:.3f} against {base['nats_per_token']:.3f} "
                        f"nats/token ({change:+.1%})")
    return f"- Against model ({Path(other['completer']).name}), on the same holes: " + "; ".join(parts) + "."


def render(manifest: dict, tokens: dict[str, int] | None, summary: dict, shards: dict, results: list[dict], config: dict,
           base_card: str | None = None) -> str:
    head = (
        "# glm5-lsp embedded model\n\n"
        "A small Python code-completion model with GLM-5's architecture (`model_type` "
        f"`{config.get('model_type')}`: MLA attention with DeepSeek Sparse Attention, sigmoid-routed MoE "
        "with a shared expert, an MTP layer), trained from scratch on this project's machines and "
        "stored in GLM-5's checkpoint format. It is the language server's default when no model is "
        "named: it completes lines and small blocks of Python in the fill-in-the-middle format "
        "(`[gMASK]<sop>{header}<|code_suffix|>{suffix}<|code_prefix|>{prefix}<|code_middle|>`). It is "
        "far smaller than GLM-5 and knows only what its corpus shows; point the server at real "
        "GLM-5 weights for anything beyond that.\n\n"
        f"Layers {config.get('num_hidden_layers')}, hidden {config.get('hidden_size')}, vocabulary "
        f"{config.get('vocab_size')} (byte-level BPE with GLM's special tokens), `index_topk` "
        f"{config.get('index_topk')} of a {summary['context']}-token context."
    )
    reproduce = (
        "## Reproduce\n\n```\npython -m training.prepare\n"
        f"python -m training.train --preset {summary['preset']} ...   # flags in training.json\n"
        "python -m training.evaluate --model runs/NAME/export --out runs/NAME/eval-model.json\n"
        "python -m training.model_card --run-dir runs/NAME --eval runs/NAME/eval-*.json\n```"
    )
    sections = [head, data_section(manifest, tokens), training_section(summary, shards, base_card)]
    if results:
        sections.append(evaluation_section(results))
    return "\n\n".join(sections + [reproduce]) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write MODEL_CARD.md for a trained run.")
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    p.add_argument("--shards", type=Path, default=DEFAULT_SHARDS / "train")
    p.add_argument("--eval", type=Path, nargs="*", default=[], help="results JSON files of training.evaluate")
    p.add_argument("--no-token-counts", action="store_true", help="skip tokenizing the corpus")
    p.add_argument("--out", type=Path, help="default: RUN_DIR/export/MODEL_CARD.md")
    p.add_argument("--base-card", type=Path, help="a warm-started run: its base model's MODEL_CARD.md (its training is quoted)")
    args = p.parse_args(argv)
    export = args.run_dir / "export"
    manifest = json.loads(args.manifest.read_text())
    tokens = None if args.no_token_counts else token_counts(manifest, export)
    summary = json.loads((args.run_dir / "training.json").read_text())
    shards = json.loads((args.shards / "index.json").read_text())
    results = [json.loads(f.read_text()) for f in args.eval]
    config = json.loads((export / "config.json").read_text())
    out = args.out or export / "MODEL_CARD.md"
    base_card = args.base_card.read_text() if args.base_card else None
    out.write_text(render(manifest, tokens, summary, shards, results, config, base_card))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
