"""Command line of the daemon: `glm5-serve` / `python -m model_runtime serve`.

Role: parse arguments, load the model and its engine, bind the socket (127.0.0.1 by default),
print `glm5-serve: listening on URL` on stdout once connections are accepted, and serve until
SIGINT/SIGTERM; then stop the engine, which writes unsaved KV blocks to the workspace store.

Invariants:
- Closed by default: every route but /health needs a Bearer token. The key comes from the
  environment variable named by `--api-key-env` (never from the command line, where `ps` shows
  it), else a random token is made and written to this user's token file for the bound address
  (`model_runtime.remote.daemon_files`, mode 0600; removed at exit), where local clients find
  it. Only `--no-auth` serves without one. Keys are never logged.
- `--tls-cert`/`--tls-key` serve https (both or neither).
- Errors before serving are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from model_runtime.version import package_version

DTYPES = ("float32", "bfloat16", "float16")

log = logging.getLogger("glm5-serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="glm5-serve", description="Serve a GLM-5 checkpoint over an OpenAI-compatible HTTP API.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument("--model", metavar="DIR", help="checkpoint directory (default: the embedded model)")
    parser.add_argument("--served-model-name", metavar="NAME", help="the model's name in the API (default: the directory's name)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port; the URL is printed)")
    parser.add_argument("--api-key-env", metavar="VAR", help="require `Authorization: Bearer $VAR` on every route but /health")
    parser.add_argument("--no-auth", action="store_true", help="serve without a token (default: a random one in this user's token file)")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve https with this certificate (chain) file")
    parser.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", choices=(*DTYPES, "auto"), default="auto", help="weights' dtype (auto: float32 on the CPU, else bfloat16)")
    parser.add_argument("--mtp", action="store_true", help="speculative decoding of greedy requests with the MTP layer")
    parser.add_argument(
        "--compile-decode", action="store_true",
        help="torch.compile the decode steps (CPU) in the background after loading; cached under the cache root",
    )
    parser.add_argument("--workspace", action="append", default=[], metavar="ROOT", help="bind the persisted KV store of this workspace at start (repeatable)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        access = _access(args)
        service = _load(args)
        sock = _bind(args.host, args.port)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"glm5-serve: error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(service, access, sock))
    finally:
        service.engine.shutdown()
    return 0


@dataclass(frozen=True, slots=True)
class Access:
    key: str | None  # the Bearer token every route but /health needs; None with --no-auth
    token_file: bool  # the key was made here and goes to the token file
    tls: tuple[str, str] | None  # (certificate, key) files


def _access(args: argparse.Namespace) -> Access:
    if args.no_auth and args.api_key_env:
        raise ValueError("--no-auth and --api-key-env contradict each other")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    for path in (args.tls_cert, args.tls_key):
        if path and not os.path.isfile(path):
            raise ValueError(f"{path}: no such file")
    tls = (args.tls_cert, args.tls_key) if args.tls_cert else None
    if args.no_auth:
        return Access(None, False, tls)
    if args.api_key_env is None:
        return Access(secrets.token_urlsafe(32), True, tls)
    key = os.environ.get(args.api_key_env)
    if not key:
        raise ValueError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    return Access(key, False, tls)


def _load(args: argparse.Namespace):
    from model_runtime.config import EngineConfig
    from model_runtime.kvstore.paths import inductor_dir
    from model_runtime.runtime import load_model
    from model_runtime.serve.service import EngineService

    dtype = args.dtype if args.dtype != "auto" else ("float32" if args.device.split(":")[0] == "cpu" else "bfloat16")
    loaded = load_model(args.model, device=args.device, dtype=dtype)
    compile_cache = str(inductor_dir()) if args.compile_decode else ""
    engine = loaded.engine(EngineConfig(use_mtp=args.mtp, compile_decode=args.compile_decode, compile_cache_dir=compile_cache))
    try:
        service = EngineService(loaded, engine, args.served_model_name or loaded.path.name)
        if args.workspace:
            log.info("KV store: %s", engine.open_workspace(args.workspace))
    except BaseException:
        engine.shutdown()
        raise
    return service


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, except that SIGINT/SIGTERM end `serve` without re-raising the signal
        afterwards, so `main` still stops the engine and persists the KV cache."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server


async def _serve(service, access: Access, sock: socket.socket) -> None:
    import uvicorn

    from model_runtime.remote.daemon_files import write_token
    from model_runtime.serve.app import build_app

    certfile, keyfile = access.tls or (None, None)
    config = uvicorn.Config(
        build_app(service, access.key), log_level="warning", timeout_graceful_shutdown=3, lifespan="off",
        ssl_certfile=certfile, ssl_keyfile=keyfile,
    )
    server = _server_class()(config)
    host, port = sock.getsockname()[:2]
    url = f"{'https' if access.tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"
    token_path = write_token(host, port, url, access.key) if access.token_file and access.key else None
    auth = f"token in {token_path}" if token_path else ("no auth" if access.key is None else "key from the environment")
    for sig in (signal.SIGINT, signal.SIGTERM):  # a stop right after the line still ends cleanly
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    print(f"glm5-serve: listening on {url} (model {service.name}; {auth})", flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        if token_path is not None:
            token_path.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
