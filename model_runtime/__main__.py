"""`python -m model_runtime generate --model DIR --prompt TEXT`: stream a completion to stdout.
`python -m model_runtime serve ...`: the shared model daemon (`glm5-serve`, see `serve.cli`).

Role: a thin command line over `load_model` + `LoadedModel.generate` for trying a checkpoint.
Invariant: errors are one line on stderr and a non-zero exit status, never a bare traceback.
"""

from __future__ import annotations

import argparse
import sys
import time

from model_runtime.version import package_version

DTYPES = ("float32", "bfloat16", "float16")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        from model_runtime.serve.cli import main as serve

        return serve(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m model_runtime", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="the shared model daemon over an OpenAI-compatible API (see serve --help)", add_help=False)
    gen = sub.add_parser("generate", help="stream a completion of --prompt")
    gen.add_argument("--model", help="checkpoint directory (default: the embedded model)")
    gen.add_argument("--prompt", required=True, help="prompt text (use @FILE to read a file)")
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--mtp", action="store_true", help="speculative decoding with the MTP layer (greedy only)")
    gen.add_argument("--compile-decode", action="store_true", help="torch.compile the decode steps first (CPU; see model_runtime.compiled)")
    gen.add_argument("--device", default="cpu")
    gen.add_argument("--dtype", choices=DTYPES, default="float32")
    args = parser.parse_args(argv)
    try:
        return _generate(args)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _generate(args: argparse.Namespace) -> int:
    import torch

    from model_runtime.config import EngineConfig
    from model_runtime.kvstore.paths import inductor_dir
    from model_runtime.runtime import load_model

    prompt = open(args.prompt[1:]).read() if args.prompt.startswith("@") else args.prompt
    model = load_model(args.model, device=args.device, dtype=getattr(torch, args.dtype))
    if model.tokenizer is None:
        raise ValueError(f"{model.path}: no tokenizer.json, cannot encode a text prompt")
    ids = model.tokenizer.encode(prompt)
    if not ids:
        raise ValueError("the prompt encodes to no tokens")
    printed = 0

    def stream(event) -> None:
        nonlocal printed
        sys.stdout.write(event.text[printed:])
        sys.stdout.flush()
        printed = len(event.text)

    config = EngineConfig(use_mtp=args.mtp, compile_decode=args.compile_decode,
                          compile_cache_dir=str(inductor_dir()) if args.compile_decode else "")
    if args.compile_decode:
        status = model.compiled_decode(config.block_size, config.compile_cache_dir).wait()
        print(f"[compiled decoding {status.state} after {status.seconds:.1f}s{': ' + status.error if status.error else ''}]", file=sys.stderr)
    start = time.perf_counter()
    out = model.generate(
        ids, max_new_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, seed=args.seed, stop_strings=args.stop, callback=stream, engine_config=config,
    )
    elapsed = time.perf_counter() - start
    sys.stdout.write("\n")
    print(f"[{len(out)} tokens in {elapsed:.2f}s, {len(out) / max(elapsed, 1e-9):.1f} tok/s]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
