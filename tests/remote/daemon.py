"""`Daemon`: `python -m model_runtime serve` as a subprocess on 127.0.0.1, for tests and benchmarks.

`Daemon.start(model)` waits (bounded) for the `listening on URL` line; `stop()` sends SIGTERM
and waits; `kill()` is SIGKILL (a crash); `stats()` reads `/glm5/stats` (engine counters).
Without `api_key` the daemon makes its own token and writes it to this user's token file
(`model_runtime.remote.daemon_files`), which `key` then holds, as a local client would find it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from model_runtime.remote.daemon_files import read_token

REPO = Path(__file__).resolve().parents[2]


class Daemon:
    def __init__(self, process: subprocess.Popen[str], url: str, log: Path, key: str | None) -> None:
        self.process, self.url, self.log, self.key = process, url, log, key

    @classmethod
    def start(
        cls, model: Path, log: Path, port: int = 0, api_key: str | None = None, timeout: float = 120.0,
        extra: list[str] | None = None, env: dict[str, str] | None = None,
    ) -> Daemon:
        env = {**os.environ, **(env or {})}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
        argv = [sys.executable, "-m", "model_runtime", "serve", "--model", str(model), "--port", str(port), *(extra or [])]
        if api_key is not None:
            env["GLM5_TEST_SERVE_KEY"] = api_key
            argv += ["--api-key-env", "GLM5_TEST_SERVE_KEY"]
        process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log.open("a"), text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.5)
            if ready:
                line = process.stdout.readline()
                if "listening on" in line:
                    url = line.split("listening on ")[1].split()[0]
                    return cls(process, url, log, api_key if api_key is not None else read_token(url))
            if process.poll() is not None:
                break
        process.kill()
        raise AssertionError(f"glm5-serve did not start within {timeout} s:\n{log.read_text()[-3000:]}")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def get(self, path: str) -> Any:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.key}"} if self.key else {})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if path != "/metrics" else body.decode()

    def stats(self) -> dict[str, int]:
        return self.get("/glm5/stats")["engine"]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(30)

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        return self.process.returncode
