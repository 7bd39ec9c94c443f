"""Command line: `lsp_server [--stdio | --tcp HOST:PORT]` and `lsp_server complete FILE:LINE:COL`.

Role: parse arguments, set up logging (never on stdout in stdio mode: stdout is the protocol
channel), then run the language server or the headless completion.

Invariant: importing this module imports neither torch nor the runtime; the model is loaded
later, off the event loop.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from model_runtime.remote.config import RemoteConfig

from . import __version__
from .errors import BoundedRecordFilter, ExpectedOutcomeFilter
from .settings import DTYPES

EPILOG = """\
The model is the checkpoint directory given by --model, else initializationOptions.model,
else the embedded default model. With --engine-url (or initializationOptions.engine) the model
runs behind an OpenAI-compatible endpoint instead (glm5-serve, vLLM, SGLang); --model then
names the directory of its tokenizer (else the endpoint's /tokenize is used).

headless use:
  lsp_server complete FILE:LINE:COL [--workspace DIR] [--model DIR] [--max-tokens N] [--automatic [--no-abstain]]
  LINE and COL are 1-based, as editors show them; COL counts characters (code points).
"""


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (e.g. 127.0.0.1:2087), got {value!r}")
    return host or "127.0.0.1", int(port)


def _add_common(parser: argparse.ArgumentParser, inherit: bool = False) -> None:
    """Options accepted before and after the subcommand (`inherit`: keep the value given before)."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if inherit else value

    parser.add_argument("--model", metavar="DIR", default=default(None), help="checkpoint directory (config.json, safetensors, tokenizer.json)")
    parser.add_argument("--device", default=default(None), help="torch device for the runtime (default: cpu)")
    parser.add_argument(
        "--dtype", default=default(None), choices=DTYPES,
        help="weights' dtype in the runtime (default: auto = float32 on the CPU, bfloat16 on an accelerator)",
    )
    parser.add_argument(
        "--mtp", action="store_true", default=default(False),
        help="decode greedy requests speculatively with the model's MTP layer (identical output)",
    )
    parser.add_argument("--engine-url", metavar="URL", default=default(None), help="use the OpenAI-compatible engine at URL (glm5-serve, vLLM, SGLang)")
    parser.add_argument("--engine-api-key-env", metavar="VAR", default=default(None), help="environment variable holding the engine's API key")
    parser.add_argument("--log-file", metavar="PATH", default=default(None), help="write the log here (default: stderr)")
    parser.add_argument(
        "--log-level", default=default("WARNING"), choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default: WARNING"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lsp_server",
        description="glm5-lsp: AI completions and code actions from an in-process GLM-5 model.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="speak LSP on stdin/stdout (the default)")
    mode.add_argument("--tcp", type=_host_port, metavar="HOST:PORT", help="listen for one LSP client over TCP")
    _add_common(parser)
    commands = parser.add_subparsers(dest="command", metavar="{complete}")
    complete = commands.add_parser(
        "complete",
        help="complete at FILE:LINE:COL and stream the completion to stdout",
        description="Run the server's completion pipeline (index, context, runtime, post-processing) once "
        "and stream the completion to stdout. LINE and COL are 1-based; COL counts characters.",
    )
    complete.add_argument("location", metavar="FILE:LINE:COL")
    complete.add_argument("--workspace", metavar="DIR", type=Path, help="workspace root to index (default: the file's git root, else its folder)")
    complete.add_argument("--max-tokens", type=int, default=None, metavar="N", help="token cap of the completion")
    complete.add_argument(
        "--automatic", action="store_true",
        help="complete as a trigger while typing does: print nothing when the reranker is not confident "
        "(by default the request is explicit, as a manual-trigger key, and prints the best candidate)",
    )
    complete.add_argument(
        "--no-abstain", action="store_true",
        help="with --automatic, print the best candidate even when the reranker is not confident in it (the `abstain: false` setting)",
    )
    _add_common(complete, inherit=True)
    return parser


def setup_logging(log_file: str | None, level: str) -> None:
    handler: logging.Handler = logging.FileHandler(log_file, encoding="utf-8") if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ExpectedOutcomeFilter())
    handler.addFilter(BoundedRecordFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    if level != "DEBUG":  # pygls logs every message body at INFO
        logging.getLogger("pygls").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    logging.getLogger("watchdog").setLevel(logging.WARNING)  # one line per inotify event otherwise
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request to a remote engine otherwise


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_file, args.log_level)
    if args.command == "complete":
        from .headless import run_complete

        return run_complete(args)
    from .server import build_server

    try:
        engine = RemoteConfig(args.engine_url, api_key_env=args.engine_api_key_env) if args.engine_url else None
    except ValueError as exc:
        print(f"lsp_server: error: {exc}", file=sys.stderr)
        return 2
    server = build_server(model=args.model, device=args.device, dtype=args.dtype, mtp=args.mtp, engine_url=engine)
    if args.tcp:
        server.start_tcp(*args.tcp)
    else:
        server.start_io()
    return 0


if __name__ == "__main__":
    sys.exit(main())
