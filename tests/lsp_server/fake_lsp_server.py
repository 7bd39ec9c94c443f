"""The real language server with the scripted fake engine, for protocol-level tests.

Run as a subprocess (PYTHONPATH = repo root + tests/lsp_server). Configuration comes from the
environment variable GLM5_FAKE, a JSON object:
    text     what every request generates unless a rule matches (default "fake_value")
    rules    [[substring, reply], ...]: the first rule whose substring occurs in the decoded
             prompt (special tokens included) gives the reply
    step_s   seconds per decode step (default 0.0)
    load_s   seconds the model takes to load (default 0.0)
    early_text  the tokenizer is known before the model loads (as `load_text` reads a checkpoint's)
    store_s  seconds binding the workspace's KV store takes (default 0.0)
    fail     make loading fail with this message
    no_model start without any model (no --model, no embedded default)
    scores   [[substring, logprob per token], ...]: the engine also scores continuations
             (`scoring_fakes.ScoringFakeEngine`; `score_default` for the rest, default -5.0;
             `score_s` seconds each scoring call takes, default 0.0)
    beside   with scores: the engine scores beside its decode steps, each continuation once
    refuse   with scores: the engine refuses to score requests whose id contains this text
    watcher_fails  the file watcher's start raises (as on a vanished root or the inotify limit)
    stats_gate     a path: the engine's cache_stats blocks until that file exists (at most 60 s)
    parse_gate     a path: a tree-sitter parse of over 500,000 bytes blocks until that file exists
                   (at most 60 s), on whichever thread runs it
    log      log file path
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from lsp_fakes import FakeEngine, byte_tokenizer
from scoring_fakes import ScoringFakeEngine

from context.languages import Language
from context.watcher import IndexWatcher
from lsp_server import startup
from lsp_server.engine_client import ModelHandle, RuntimeOptions, TextModel
from lsp_server.server import build_server


def main() -> None:
    config = json.loads(os.environ.get("GLM5_FAKE", "{}"))
    if config.get("log"):
        logging.basicConfig(filename=config["log"], level=logging.DEBUG, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("pygls").setLevel(logging.WARNING)
        logging.getLogger("watchdog").setLevel(logging.WARNING)
    tokenizer = byte_tokenizer()
    rules = [(needle, reply) for needle, reply in config.get("rules", [])]
    default = config.get("text", "fake_value")

    def script(request) -> str:
        prompt = tokenizer.decode(list(request.prompt_ids), skip_special=False)
        return next((reply for needle, reply in rules if needle in prompt), default)

    def loader(path: str, runtime: RuntimeOptions) -> ModelHandle:
        time.sleep(config.get("load_s", 0.0))
        if config.get("fail"):
            raise RuntimeError(config["fail"])
        step_s, store_s = config.get("step_s", 0.0), config.get("store_s", 0.0)
        if "scores" in config:
            rules = [(needle, float(lp)) for needle, lp in config["scores"]]
            engine = ScoringFakeEngine(
                tokenizer, script, rules, float(config.get("score_default", -5.0)), step_s, store_s, float(config.get("score_s", 0.0)),
                bool(config.get("beside")), config.get("refuse"),
            )
        else:
            engine = FakeEngine(tokenizer, script, step_s=step_s, store_s=store_s)
        if config.get("stats_gate"):
            engine.cache_stats = _gated(engine.cache_stats, Path(config["stats_gate"]))
        return ModelHandle(engine, tokenizer, path, 8192)

    if config.get("parse_gate"):
        Language.parse = _gated_parse(Language.parse, Path(config["parse_gate"]))
    if config.get("watcher_fails"):
        IndexWatcher.start = _raise_on_start

    if config.get("no_model"):
        startup.embedded_model_path = lambda: None  # as on an installation without the embedded model
    def text_loader(path: str, runtime: RuntimeOptions) -> TextModel | None:
        return TextModel(tokenizer, 8192, "scores" in config) if config.get("early_text") else None

    build_server(model=None if config.get("no_model") else "fake-model", loader=loader, text_loader=text_loader).start_io()


def _gated(fn, gate: Path):
    def wait_then_call():
        deadline = time.monotonic() + 60
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return fn()

    return wait_then_call


def _gated_parse(parse, gate: Path):
    def gated(self, data: bytes, old_tree=None):
        if len(data) > 500_000:
            _gated(lambda: None, gate)()
        return parse(self, data, old_tree)

    return gated


def _raise_on_start(self) -> None:
    raise OSError(28, "inotify watch limit reached")


if __name__ == "__main__":
    main()
