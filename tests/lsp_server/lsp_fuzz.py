"""An LSP fuzzer: malformed and adversarial messages to one `lsp_server --stdio` process.

`messages()` is a hypothesis strategy of `Message`s (raw bytes to write, and the request ids the
server must answer): broken JSON, wrong param types for every method (random JSON, or a valid
template with one leaf replaced), out-of-range and reversed ranges, huge strings, invalid UTF-8,
Content-Length mismatches, duplicate ids, unknown methods, cancellations. `Fuzzer` runs the
server (its own cache directory; `--model` a tiny random checkpoint), sends requests before
`initialize`, initializes, writes each message, waits (bounded) for every answer it must get,
checks the process is alive, probes health with a valid completion every `probe_every`
messages (timing each probe's answer), and at the end sends requests after `shutdown` and checks
the process exits. After every run of document sync notifications it compares the server's copy
of each document it named (`glm5.documentState`: version and SHA-256) with the client's
(`lsp_sync_model.ClientDocuments`), and it counts every error response by code (InternalError
responses are kept as samples).

Used by tests/lsp_server/test_lsp_fuzz.py (fixed seed, a few thousand cases) and
bench/bench_fuzz.py (>= 10,000 cases, a report of crashes and hangs).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from lsp_sync_model import ClientDocuments

REPO = Path(__file__).resolve().parents[2]
ANSWER_S = 30.0  # longest wait for one answer before it counts as a hang
PROBE_S = 120.0
PROBE_TEXT = "def add(a, b):\n    return a + b\n\n\ndef total(xs):\n    return "

REQUESTS = [
    "textDocument/inlineCompletion", "textDocument/completion", "textDocument/definition", "textDocument/references",
    "textDocument/codeAction", "codeAction/resolve", "workspace/executeCommand", "textDocument/hover", "initialize",
    "glm5/unknown", "",
]
NOTIFICATIONS = [
    "textDocument/didOpen", "textDocument/didChange", "textDocument/didClose", "textDocument/didSave",
    "glm5/didChangeCursor", "glm5/didShowCompletion", "glm5/didAcceptCompletion", "glm5/didRejectCompletion",
    "workspace/didChangeConfiguration", "$/cancelRequest", "$/setTrace", "initialized",
]
SYNC = ("textDocument/didOpen", "textDocument/didChange", "textDocument/didClose")
INTERNAL_ERROR = -32603
COMMANDS = ["glm5.stats", "glm5.explainContext", "glm5.clearCache", "glm5.applyFix", "glm5.didAcceptCompletion", "nope"]


@dataclass
class Message:
    kind: str
    data: bytes  # exactly what is written to the server's stdin
    must_answer: list[Any] = field(default_factory=list)  # request ids that must get a response
    sync: tuple[str, Any] | None = None  # (method, params) of a document sync notification


def frame(body: bytes, declared: int | None = None) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body) if declared is None else declared, body)


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")


# ---- strategies ---------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
ints = st.one_of(st.integers(-3, 40), st.integers(-(2**31), 2**31), st.sampled_from([2**53, -(2**63), 10**12]))
HUGE = (10_000, 100_000, 1_000_000)  # characters of the huge strings (the test suite stops at 100,000)


def huge_texts(sizes: tuple[int, ...] = HUGE) -> st.SearchStrategy[str]:
    return st.sampled_from(sizes).flatmap(
        lambda n: st.sampled_from(["x", "é", "😀", "\n", "def f():\n    pass\n", "\r\n"]).map(lambda unit: unit * (n // len(unit)))
    )


def _position(line, character) -> dict[str, Any]:
    return {"line": line, "character": character}


@st.composite
def _range(draw) -> dict[str, Any]:
    return {"start": _position(draw(ints), draw(ints)), "end": _position(draw(ints), draw(ints))}


def templates(uri: str, version: int) -> dict[str, dict[str, Any]]:
    """Valid params of each method, on `uri`."""
    doc = {"uri": uri}
    at = _position(1, 4)
    rng = {"start": _position(0, 0), "end": _position(1, 2)}
    return {
        "textDocument/inlineCompletion": {"textDocument": doc, "position": at, "context": {"triggerKind": 1}},
        "textDocument/completion": {"textDocument": doc, "position": at, "context": {"triggerKind": 1}},
        "textDocument/definition": {"textDocument": doc, "position": at},
        "textDocument/references": {"textDocument": doc, "position": at, "context": {"includeDeclaration": True}},
        "textDocument/codeAction": {"textDocument": doc, "range": rng, "context": {"diagnostics": []}},
        "codeAction/resolve": {"title": "t", "data": {"action": "declare", "uri": uri, "version": version, "range": rng, "name": "x"}},
        "workspace/executeCommand": {"command": "glm5.stats", "arguments": [{"recent": 2}]},
        "textDocument/hover": {"textDocument": doc, "position": at},
        "initialize": {"processId": None, "rootUri": None, "capabilities": {}},
        "textDocument/didOpen": {"textDocument": {**doc, "languageId": "python", "version": version, "text": "x = 1\n"}},
        "textDocument/didChange": {"textDocument": {**doc, "version": version}, "contentChanges": [{"range": rng, "text": "y"}]},
        "textDocument/didClose": {"textDocument": doc},
        "textDocument/didSave": {"textDocument": doc},
        "glm5/didChangeCursor": {"textDocument": doc, "position": at},
        "glm5/didShowCompletion": {"completionId": "c1"},
        "glm5/didAcceptCompletion": {"completionId": "c1"},
        "glm5/didRejectCompletion": {"completionId": "c1"},
        "workspace/didChangeConfiguration": {"settings": {"glm5": {"maxTokens": 8}}},
        "$/cancelRequest": {"id": 1},
        "$/setTrace": {"value": "off"},
        "initialized": {},
    }


def _leaves(value: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(copy[path[0]], path[1:], new)
    return copy


class Ids:
    """Request ids: mostly fresh integers, sometimes strings."""

    def __init__(self) -> None:
        self._next = itertools.count(10_000)

    def fresh(self) -> int:
        return next(self._next)


@st.composite
def messages(draw, uris: list[str], ids: Ids, versions: dict[str, int], huge: tuple[int, ...] = HUGE) -> Message:
    """One fuzz message against documents `uris` (versions tracked in `versions`)."""
    uri = draw(st.sampled_from([*uris, "untitled:Untitled-1", "file:///nonexistent/x.py", "not a uri", ""]))
    versions[uri] = version = versions.get(uri, 0) + 1
    kind = draw(st.sampled_from(["broken_json", "invalid_utf8", "random_params", "mutated", "ranges", "huge", "length", "duplicate", "valid"]))
    if kind == "broken_json":
        body = draw(st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode), st.just(b"{"), st.just(b"[]"), st.just(b"null")))
        return Message(kind, frame(body))
    if kind == "invalid_utf8":
        head = encode({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"x": "PLACEHOLDER"}})
        return Message(kind, frame(head.replace(b"PLACEHOLDER", draw(st.sampled_from([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x80abc"])))))
    if kind in ("random_params", "mutated", "valid"):
        method = draw(st.sampled_from(REQUESTS + NOTIFICATIONS))
        params = templates(uri, version).get(method, {})
        if kind == "random_params":
            params = draw(json_values)
        elif kind == "mutated" and params:
            params = _replace(params, draw(st.sampled_from(_leaves(params))), draw(json_values))
        if method == "workspace/executeCommand" and kind == "valid":
            params = {"command": draw(st.sampled_from(COMMANDS)), "arguments": draw(st.lists(json_values, max_size=2))}
        if method == "initialize" and kind == "valid":
            params = {"processId": "not a pid"}  # a second, broken initialize only
        return _call(method, params, ids, method in NOTIFICATIONS)
    if kind == "ranges":
        change = {"range": draw(_range()), "text": draw(st.text(max_size=8))}
        stamp = draw(st.sampled_from([version, version, -1, 0, 2**31]))
        return _call("textDocument/didChange", {"textDocument": {"uri": uri, "version": stamp}, "contentChanges": [change]}, ids, True)
    if kind == "huge":
        text = draw(huge_texts(huge))
        where = draw(st.sampled_from(["open", "change", "command"]))
        if where == "open":
            return _call("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}}, ids, True)
        if where == "change":
            return _call("textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}, ids, True)
        return _call("workspace/executeCommand", {"command": text[:200_000], "arguments": [text]}, ids, False)
    if kind == "length":
        body = encode({"jsonrpc": "2.0", "id": ids.fresh(), "method": "workspace/executeCommand", "params": {"command": "glm5.stats"}})
        delta = draw(st.integers(1, 40))
        if draw(st.booleans()):  # declared longer: the rest of the declared body is filler
            return Message(kind, frame(body, len(body) + delta) + draw(st.sampled_from([b" ", b"x", b"\n"])) * delta)
        return Message(kind, frame(body, max(1, len(body) - delta)))  # declared shorter: the tail spills over
    rid = draw(st.one_of(st.integers(0, 5), st.text(max_size=3)))  # duplicate: the same id twice at once
    params = templates(uris[0], version)["textDocument/inlineCompletion"]
    one = encode({"jsonrpc": "2.0", "id": rid, "method": "textDocument/inlineCompletion", "params": params})
    two = encode({"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand", "params": {"command": "glm5.stats"}})
    return Message("duplicate", frame(one) + frame(two), [rid])


def _call(method: str, params: Any, ids: Ids, notification: bool) -> Message:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if notification:
        return Message(method, frame(encode(message)), sync=(method, params) if method in SYNC else None)
    message["id"] = rid = ids.fresh()
    return Message(method, frame(encode(message)), [rid])


# ---- the server under test ----------------------------------------------------------------------
class WireClient:
    """Raw JSON-RPC over a server's stdio; a reader thread files responses by id and answers the
    server's own requests with null."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self._log = open(log, "ab")
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=REPO)
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self.responses: dict[str, list[dict[str, Any]]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.error_codes: dict[int, int] = {}
        self.internal_errors: list[str] = []  # the first few InternalError responses
        self._reader = threading.Thread(target=self._read, name="fuzz-reader", daemon=True)
        self._reader.start()

    def write(self, data: bytes) -> bool:
        try:
            with self._write_lock:
                self.process.stdin.write(data)
                self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def request(self, method: str, params: Any, rid: Any) -> None:
        self.write(frame(encode({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})))

    def notify(self, method: str, params: Any) -> None:
        self.write(frame(encode({"jsonrpc": "2.0", "method": method, "params": params})))

    def wait(self, rid: Any, timeout: float = ANSWER_S) -> dict[str, Any] | None:
        key = json.dumps(rid)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self.responses.get(key):
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    return None
                self._cond.wait(min(left, 0.5))
            return self.responses[key].pop(0)

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait(10)
        self._log.close()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif line in (b"\r\n", b"\n") and length is not None:
                    break
            message = json.loads(stream.read(length))
            if "method" in message and "id" in message:  # a request from the server
                self.write(frame(encode({"jsonrpc": "2.0", "id": message["id"], "result": None})))
            elif "id" in message:
                self._count_error(message)
                with self._cond:
                    self.responses.setdefault(json.dumps(message["id"]), []).append(message)
                    self._cond.notify_all()
            else:
                self.notifications.append(message)

    def _count_error(self, message: dict[str, Any]) -> None:
        error = message.get("error")
        if not isinstance(error, dict):
            return
        code = error.get("code")
        self.error_codes[code] = self.error_codes.get(code, 0) + 1
        if code == INTERNAL_ERROR and len(self.internal_errors) < 20:
            self.internal_errors.append(f"id={message.get('id')!r}: {str(error.get('message'))[:300]}")


@dataclass
class Report:
    messages: int = 0
    crashes: int = 0
    hangs: list[str] = field(default_factory=list)
    probes: int = 0
    probe_failures: list[str] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # time spent per kind (writing and answers)
    probe_waits: list[float] = field(default_factory=list)  # seconds from each probe to its answer
    sync_checks: int = 0
    desyncs: list[str] = field(default_factory=list)

    def probe_wait(self, quantile: float) -> float:
        waits = sorted(self.probe_waits)
        return waits[min(len(waits) - 1, int(quantile * len(waits)))] if waits else float("nan")


class Fuzzer:
    def __init__(self, model: Path, workspace: Path, log: Path, probe_every: int = 100, progress=None) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
        env["GLM5_LSP_CACHE_DIR"] = str(workspace.parent / f"{workspace.name}-kv-cache")
        argv = [sys.executable, "-m", "lsp_server", "--stdio", "--model", str(model), "--log-file", str(log)]
        self.workspace, self.probe_every, self.progress = workspace, probe_every, progress
        self.client = WireClient(argv, env, log.with_suffix(".stderr"))
        self.report = Report()
        self.ids = Ids()
        self.versions: dict[str, int] = {}
        self.documents = ClientDocuments()
        self.unchecked: set[str] = set()  # documents named by sync notifications since the last check
        self.probe_uri = (workspace / "probe.py").as_uri()
        self.uris = [(workspace / "fuzz.py").as_uri(), (workspace / "other.py").as_uri()]

    def start(self) -> None:
        """Requests before `initialize` (each must be answered), then a valid initialization."""
        for method in ("textDocument/inlineCompletion", "workspace/executeCommand", "shutdown"):
            self._must_answer(f"before initialize: {method}", method, templates(self.uris[0], 1).get(method, {"command": "glm5.stats"}))
        init = {"processId": os.getpid(), "rootUri": self.workspace.as_uri(), "capabilities": {},
                "workspaceFolders": [{"uri": self.workspace.as_uri(), "name": "ws"}], "initializationOptions": {"maxTokens": 8}}
        self._must_answer("initialize", "initialize", init)
        self.client.notify("initialized", {})
        for uri in self.uris:
            self._notify_sync("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 0, "text": "import os\n"}})
        self._notify_sync("textDocument/didOpen", {"textDocument": {"uri": self.probe_uri, "languageId": "python", "version": 1, "text": PROBE_TEXT}})
        self.check_sync()
        self.probe(timed=False)  # waits for the model to load

    def send(self, message: Message) -> None:
        report = self.report
        report.messages += 1
        report.kinds[message.kind] = report.kinds.get(message.kind, 0) + 1
        if message.sync is None:
            self.check_sync()
        start = time.perf_counter()
        self.client.write(message.data)
        if message.sync is not None and (uri := self.documents.notify(*message.sync)) is not None:
            self.unchecked.add(uri)
        for rid in message.must_answer:
            if self.client.wait(rid) is None and self.client.alive():
                report.hangs.append(f"{message.kind} id={rid!r}: no answer within {ANSWER_S:g} s")
        report.seconds[message.kind] = report.seconds.get(message.kind, 0.0) + time.perf_counter() - start
        if not self.client.alive():
            report.crashes += 1
            raise AssertionError(f"the server exited after a {message.kind} message (code {self.client.process.returncode})")
        if report.messages % self.probe_every == 0:
            self.probe()
            if self.progress is not None:
                self.progress(report)

    def probe(self, timed: bool = True) -> None:
        """A valid completion at the end of the probe document must be answered with a list."""
        start = time.perf_counter()
        self.report.probes += 1
        rid = f"probe-{self.report.probes}"
        lines = PROBE_TEXT.split("\n")
        params = {"textDocument": {"uri": self.probe_uri}, "position": _position(len(lines) - 1, len(lines[-1])), "context": {"triggerKind": 1}}
        self.client.request("textDocument/inlineCompletion", params, rid)
        answer = self.client.wait(rid, PROBE_S)
        if timed:
            self.report.probe_waits.append(time.perf_counter() - start)
        if answer is None or "result" not in answer or not isinstance(answer["result"].get("items"), list):
            self.report.probe_failures.append(f"probe {self.report.probes} after {self.report.messages} messages: {answer!r}")
        self.report.seconds["probe"] = self.report.seconds.get("probe", 0.0) + time.perf_counter() - start

    def check_sync(self) -> None:
        """Compare the server's copy of each document named since the last check with the client's."""
        for uri in sorted(self.unchecked):
            self.report.sync_checks += 1
            rid = self.ids.fresh()
            self.client.request("workspace/executeCommand", {"command": "glm5.documentState", "arguments": [{"uri": uri}]}, rid)
            answer = self.client.wait(rid)
            version, text = self.documents.open.get(uri, (None, None))
            expected = {"open": text is not None, "version": version,
                        "sha256": None if text is None else hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()}
            got = answer.get("result") if isinstance(answer, dict) else None
            if not isinstance(got, dict) or {k: got.get(k) for k in expected} != expected:
                seen = got if isinstance(got, dict) else answer
                self.report.desyncs.append(f"after {self.report.messages} messages, {uri[:80]!r}: client {expected}, server {str(seen)[:300]}")
        self.unchecked.clear()

    def _notify_sync(self, method: str, params: Any) -> None:
        self.client.notify(method, params)
        if (uri := self.documents.notify(method, params)) is not None:
            self.unchecked.add(uri)

    def finish(self) -> int | None:
        """shutdown, requests after it (each answered), exit; the exit code (None: it did not exit)."""
        self.check_sync()
        self._must_answer("shutdown", "shutdown", None)
        for method in ("textDocument/inlineCompletion", "workspace/executeCommand"):
            self._must_answer(f"after shutdown: {method}", method, templates(self.uris[0], 1).get(method))
        self.client.notify("exit", None)
        try:
            return self.client.process.wait(30)
        except subprocess.TimeoutExpired:
            self.report.hangs.append("exit: the process did not end within 30 s")
            return None
        finally:
            self.client.close()

    def _must_answer(self, what: str, method: str, params: Any) -> None:
        rid = self.ids.fresh()
        self.client.request(method, params, rid)
        if self.client.wait(rid) is None:
            self.report.hangs.append(f"{what}: no answer")


def run_fuzz(fuzzer: Fuzzer, cases: int, seed: int | None = None, huge: tuple[int, ...] = HUGE) -> None:
    """Send `cases` generated messages (a fixed seed: the same messages every run)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fixed_seed

    @settings(max_examples=cases, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=seed is None)
    @given(st.data())
    def one(data) -> None:
        fuzzer.send(data.draw(messages(fuzzer.uris, fuzzer.ids, fuzzer.versions, huge)))

    (fixed_seed(seed)(one) if seed is not None else one)()
