"""KV cache benchmarks: restart latency with the persisted cache, tokens prefilled per keystroke,
and device memory against context length. Random weights of a realistic shape (`bench_runtime`'s
sizes) with the test tokenizer; the prompts are this repository's own source.

Prints three markdown tables:
1. restart: the first completion after a restart with the workspace's cache on disk (page cache
   warm, and with the store's files dropped from it) against a cold start and a device hit;
2. typing: a replay of typing lines of `model_runtime/engine.py`, one request per keystroke with
   the prompt the language server builds (`lsp_server.pipeline.prepare`: cross-file snippets,
   recent edits, SPM order), through the Engine: tokens prefilled per keystroke;
3. memory: device memory and speed against context length, fully resident against sparse
   residency (latents of all but the newest `--resident` tokens spilled to host RAM), and
   whether both give the same greedy tokens.

Usage: python bench/bench_kv_cache.py [--size mid] [--tables restart,typing,memory]
       [--restart-tokens 3000] [--keystrokes 60] [--contexts 1024,2048,4096] [--resident 1024]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: see model_runtime/__init__

import torch
from bench_runtime import SIZES

from context.document import Document
from context.edits import RecentEdits
from context.fim import fim_prompt_ids, render_snippet
from context.index import WorkspaceIndex
from context.positions import Range
from lsp_server.pipeline import prepare
from lsp_server.settings import ServerSettings
from model_runtime import load_model
from model_runtime.api import GenerationRequest, GenerationResult, SamplingParams
from model_runtime.config import EngineConfig
from model_runtime.engine import Engine
from model_runtime.testing import make_tiny_checkpoint

REPO = Path(__file__).resolve().parent.parent
NEW_TOKENS = 16
MAX_POSITIONS = 65536  # the sizes' configs allow 4096; RoPE works at any length, and memory wants more


def run(engine: Engine, ids: list[int], max_tokens: int = NEW_TOKENS, name: str = "r") -> GenerationResult:
    out: list[GenerationResult] = []
    engine.add(GenerationRequest(name, tuple(ids), SamplingParams(max_tokens=max_tokens)), None, out.append)
    engine.run_until_idle()
    if out[0].error:
        raise RuntimeError(out[0].error)
    return out[0]


# ---- 1. restart -------------------------------------------------------------------------------
def source_prompt(tok, tokens: int) -> list[int]:
    """An SPM prompt of about `tokens` tokens: repository files as header snippets, then a file."""
    files = sorted((REPO / "model_runtime").glob("*.py"))
    header, prefix = "", files[-1].read_text()
    for path in files[:-1]:
        if len(tok.encode(header)) > tokens * 0.7:
            break
        header += render_snippet(f"model_runtime/{path.name}", path.read_text(), "python")
    ids = fim_prompt_ids(tok, header, prefix, "")
    cut = len(ids) - tokens
    return ids if cut <= 0 else fim_prompt_ids(tok, header, prefix[: max(0, len(prefix) - 2 * cut)], "")[-tokens:]


def drop_page_cache(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def restart_table(loaded, tokens: int) -> None:
    tok = loaded.tokenizer
    ids = source_prompt(tok, tokens)
    typed = ids[:-1] + tok.encode("    x = ") + ids[-1:]  # the user typed on after the restart
    work = Path(tempfile.mkdtemp(prefix="bench-kv-"))
    roots, cache_dir = [str(work / "workspace")], str(work / "cache")
    config = EngineConfig(max_cache_tokens=max(8192, 2 * len(typed)))
    session = Engine(loaded, config)
    session.open_workspace(roots, cache_dir)
    run(session, ids)
    device_hit = run(session, typed)
    session.shutdown()
    rows = [("cold start (empty cache)", None, run(Engine(loaded, config), typed))]
    for label, drop in (("restart, cache on disk", False), ("restart, cache on disk, files not in page cache", True)):
        engine = Engine(loaded, config)
        start = time.perf_counter()
        directory = Path(engine.open_workspace(roots, cache_dir))
        opened = time.perf_counter() - start
        if drop:
            drop_page_cache(directory)
        rows.append((label, opened, run(engine, typed)))
    rows.append(("same session (device hit)", None, device_hit))
    cold = rows[0][2].first_token_s
    print(f"\n### First completion after a restart ({len(typed)}-token prompt, {NEW_TOKENS} new tokens)\n")
    print("| run | cached tokens | prefilled | open_workspace ms | first token s | completion s | first token vs cold |")
    print("|---|---|---|---|---|---|---|")
    for label, opened, r in rows:
        open_ms = "-" if opened is None else f"{opened * 1000:.1f}"
        print(f"| {label} | {r.cached_tokens} | {r.prefilled_tokens} | {open_ms} | {r.first_token_s:.3f} | {r.total_s:.3f} | {cold / r.first_token_s:.1f}x |")


# ---- 2. typing replay ---------------------------------------------------------------------------
def typing_table(loaded, keystrokes: int) -> None:
    path = REPO / "model_runtime" / "engine.py"
    text = path.read_text()
    start = text.index("    def _seal(self, seq: Sequence) -> None:")
    typed = text[start : start + keystrokes]
    index = WorkspaceIndex([str(REPO / "model_runtime")])
    index.build()
    settings = ServerSettings()
    print(f"\n### Typing replay: {len(typed)} keystrokes into model_runtime/engine.py (server-built prompts, {settings.prompt_tokens}-token budget)\n")
    print("| engine | keystrokes | prompt tokens (mean) | prefilled per keystroke: mean | mean after the first | median | p90 | max "
          "| cached from partial blocks (mean) | first token ms (median) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, config in (
        ("no prefix cache", EngineConfig(prefix_caching=False)),
        ("prefix cache, block 64", EngineConfig(block_size=64)),
        ("prefix cache, block 16", EngineConfig(block_size=16)),
    ):
        engine = Engine(loaded, config)
        results = replay(engine, loaded, index, settings, path, text[:start] + text[start + len(typed) :], start, typed)
        prefilled = sorted(r.prefilled_tokens for r in results)
        later = statistics.mean(r.prefilled_tokens for r in results[1:])
        partial = [r.cached_tokens % config.block_size if config.prefix_caching else 0 for r in results]
        print(
            f"| {label} | {len(results)} | {statistics.mean(r.prompt_tokens for r in results):.0f} | "
            f"{statistics.mean(prefilled):.1f} | {later:.1f} | {statistics.median(prefilled):.0f} | {prefilled[int(0.9 * (len(prefilled) - 1))]} | "
            f"{prefilled[-1]} | {statistics.mean(partial):.1f} | {1000 * statistics.median(r.first_token_s for r in results):.0f} |"
        )


def replay(engine, loaded, index, settings, path: Path, base: str, offset: int, typed: str) -> list[GenerationResult]:
    """One request per keystroke, as the server would build it (a typist at about 7 keys/s)."""
    doc = Document(path.as_uri(), "python", 1, base)
    clock = [0.0]
    edits = RecentEdits(clock=lambda: clock[0])
    results = []
    for i, char in enumerate(typed):
        clock[0] += 0.15
        at = doc.snapshot().position_at(offset + i)
        edits.record(str(path), doc.apply_change(Range(at, at), char, i + 2))
        snapshot = doc.snapshot()
        prepared = prepare(snapshot, snapshot.position_at(offset + i + 1), loaded.tokenizer, loaded.config.max_position_embeddings,
                           settings, index, [], edits, force=True, roots=[str(REPO)])  # fmt: skip
        results.append(run(engine, list(prepared.prompt.ids), max_tokens=4, name=f"k{i}"))
    return results


# ---- 3. memory against context length ---------------------------------------------------------------
def memory_table(loaded, contexts: list[int], resident: int) -> None:
    bs, new, chunk = 64, 32, 512
    print(f"\n### Device memory and speed against context length (sparse: latents of the newest {resident} tokens on the device)\n")
    print("| context | residency | device MiB (allocated) | latents on device, MiB (peak in use) | host spill MiB | prefill tok/s | decode tok/s | same tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for ctx in contexts:
        ids = torch.randint(3, loaded.config.vocab_size, (ctx,), generator=torch.Generator().manual_seed(ctx)).tolist()
        room = -(-(ctx + new + bs) // bs) * bs
        configs = {
            "full": EngineConfig(block_size=bs, max_cache_tokens=room, max_prefill_tokens=chunk),
            "sparse": EngineConfig(block_size=bs, max_cache_tokens=resident + 2 * chunk, max_prefill_tokens=chunk,
                                   latent_spill_tokens=room, resident_latent_tokens=resident),  # fmt: skip
        }
        outputs = {}
        for label, config in configs.items():
            engine = Engine(loaded, config)
            out: list[GenerationResult] = []
            seq = engine.add(GenerationRequest(label, tuple(ids), SamplingParams(max_tokens=new)), None, out.append)
            peak = 0
            while engine.scheduler.has_work:
                engine.step()
                peak = max(peak, sum(1 for b in seq.block_table if not engine.cache.is_spilled(b)))
            r = outputs[label] = out[0]
            if r.error:
                raise RuntimeError(r.error)
            kv_block = engine.cache.kv[0][0].numel() * engine.cache.kv[0].element_size() * len(engine.cache.kv)
            mib = 1 << 20
            same = "" if label == "full" else str(r.token_ids == outputs["full"].token_ids)
            print(
                f"| {ctx} | {label} | {engine.cache.device_bytes() / mib:.1f} | {peak * kv_block / mib:.1f} | "
                f"{engine.cache.host_bytes() / mib:.1f} | {ctx / r.first_token_s:.0f} | "
                f"{(len(r.token_ids) - 1) / (r.total_s - r.first_token_s):.1f} | {same} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="mid", choices=sorted(SIZES))
    parser.add_argument("--tables", default="restart,typing,memory")
    parser.add_argument("--restart-tokens", type=int, default=3000)
    parser.add_argument("--keystrokes", type=int, default=60)
    parser.add_argument("--contexts", default="1024,2048,4096")
    parser.add_argument("--resident", type=int, default=1024, help="latent tokens per sequence kept on the device")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = SIZES[args.size].replace(max_position_embeddings=MAX_POSITIONS)
    loaded = load_model(make_tiny_checkpoint(Path(tempfile.mkdtemp(prefix=f"bench-kv-{args.size}-")), cfg))
    tables = args.tables.split(",")
    print(f"model: {args.size} (random weights), {loaded.config.num_hidden_layers} layers, index_topk {loaded.config.index_topk}; "
          f"torch {torch.__version__}, {args.threads} threads")  # fmt: skip
    if "restart" in tables:
        restart_table(loaded, args.restart_tokens)
    if "typing" in tables:
        typing_table(loaded, args.keystrokes)
    if "memory" in tables:
        memory_table(loaded, [int(c) for c in args.contexts.split(",")], args.resident)


if __name__ == "__main__":
    main()
