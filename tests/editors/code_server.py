"""A real VS Code (code-server) with the built extension, driven by Playwright over Debian's chromium.

Role: `CodeServer` installs `editor-client/vscode/glm5-lsp.vsix` into a private extensions
folder, starts code-server on a free port with private user data and settings, and opens a
workspace in a headless chromium; `Workbench` holds the page and the few workbench actions the
tests need (open a file, go to a line, run a command, read the status bar and the ghost text).
`editor-client/install-test-deps.sh` installs code-server (`install-code-server.sh`) and
chromium; the Python test extra installs Playwright, which never downloads a browser here.

Invariants: nothing is written outside the test's temporary folder (code-server gets its own
HOME, XDG folders, user data and extensions folders); code-server, with every process it
started (its own process group), and the browser are always stopped, also when a test fails;
every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from editor_support import EDITOR_CLIENT, missing

VSIX = EDITOR_CLIENT / "vscode" / "glm5-lsp.vsix"
EXTENSION_ID = "glm5-lsp.glm5-lsp"

# The first line of ghost text is inline (`.ghost-text-decoration` spans); later lines are
# `.ghost-text` spans in the lines of a view zone, ordered by where they are drawn.
GHOST_JS = """() => {
  const first = [...document.querySelectorAll('.ghost-text-decoration')].map((e) => e.textContent).join('');
  const lines = new Map();
  for (const span of document.querySelectorAll('.ghost-text')) {
    const line = span.closest('.view-line') || span.parentElement;
    lines.set(line, (lines.get(line) || '') + span.textContent);
  }
  const top = (e) => e.getBoundingClientRect().top;
  const rest = [...lines.entries()].sort(([a], [b]) => top(a) - top(b)).map(([, t]) => t);
  if (!first && rest.length === 0) return '';
  return [first, ...rest].map((t) => t.replace(/\\u00a0/g, ' ').replace(/\\s+$/, '')).join('\\n');
}"""

# Records, in the page, every distinct text of the GLM-5 status bar item and of the ghost text, in order.
OBSERVER_JS = """() => {
  window.__glm5 = { status: [], ghost: [] };
  const push = (list, value) => { if (list[list.length - 1] !== value) list.push(value); };
  const look = () => {
    for (const item of document.querySelectorAll('.statusbar-item')) {
      const label = item.getAttribute('aria-label') || item.textContent || '';
      if (label.includes('GLM-5')) {
        const icon = item.querySelector('.codicon');
        push(window.__glm5.status, (icon ? icon.className.match(/codicon-([a-z-]+)/)[1] + ' ' : '') + item.textContent.trim());
      }
    }
    const ghost = (""" + GHOST_JS + """)();
    if (ghost) push(window.__glm5.ghost, ghost);
  };
  new MutationObserver(look).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  look();
}"""


# Whole-line decorations of an extension are drawn as `ced-*` overlays, one per decorated line.
HEAT_JS = """(name) => {
  for (const group of document.querySelectorAll('.editor-group-container')) {
    const tab = group.querySelector('.tab.active');
    if (tab && (tab.getAttribute('aria-label') || '').startsWith(name)) {
      return group.querySelectorAll('.view-overlays [class*="ced-"]').length;
    }
  }
  return 0;
}"""


def launcher() -> str:
    """The code-server launcher written by install-code-server.sh (or GLM5_CODE_SERVER)."""
    explicit = os.environ.get("GLM5_CODE_SERVER")
    if explicit:
        return explicit
    cache = os.environ.get("GLM5_EDITOR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "glm5-lsp"
    )
    path = Path(cache) / "bin" / "glm5-code-server"
    if not path.is_file():
        missing(f"code-server is not installed ({path}; run editor-client/install-test-deps.sh)")
    return str(path)


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        missing("chromium is not installed (apt-get install chromium)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CodeServer:
    def __init__(self, root: Path, env: dict[str, str], settings: dict) -> None:
        self.binary = launcher()
        self.root = root
        self.env = env
        self.port = _free_port()
        self.user_data = root / "user-data"
        self.extensions = root / "extensions"
        (self.user_data / "User").mkdir(parents=True)
        (self.user_data / "User" / "settings.json").write_text(json.dumps(settings, indent=1))
        self.log = root / "code-server.log"
        self.process: subprocess.Popen | None = None

    def _args(self) -> list[str]:
        return [self.binary, "--user-data-dir", str(self.user_data), "--extensions-dir", str(self.extensions)]

    def install_extension(self) -> str:
        if not VSIX.is_file():
            missing(f"{VSIX} is not built (run editor-client/install-test-deps.sh)")
        done = subprocess.run(
            [*self._args(), "--install-extension", str(VSIX)], env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        listed = subprocess.run([*self._args(), "--list-extensions"], env=self.env, capture_output=True, text=True, timeout=60)
        return listed.stdout

    def start(self, timeout_s: float = 60) -> None:
        args = [
            *self._args(), "--auth", "none", "--bind-addr", f"127.0.0.1:{self.port}",
            "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override",
        ]
        self.process = subprocess.Popen(
            args, env=self.env, stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"code-server exited: {self.log.read_text()[-3000:]}"
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2)
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"code-server did not answer within {timeout_s} s: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """Stop code-server and everything it started (extension host, language server): its
        own process group, so no extension host outlives a failed test."""
        if self.process is None:
            return
        self._signal_group(signal.SIGTERM)
        try:
            self.process.wait(10)
            time.sleep(0.5)  # the extension host and the server end with it
        except subprocess.TimeoutExpired:
            pass
        self._signal_group(signal.SIGKILL)
        self.process.wait(10)

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def extension_logs(self) -> str:
        """The extension's output channel (the server's stderr and the client's messages)."""
        logs = sorted(self.user_data.glob("logs/**/*GLM-5*.log"))
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in logs)


class Workbench:
    """The VS Code workbench in a browser page."""

    def __init__(self, page) -> None:
        self.page = page

    def wait_ready(self, timeout_s: float = 60) -> None:
        self.page.wait_for_selector(".monaco-workbench .part.statusbar", timeout=timeout_s * 1000)
        self.page.evaluate(OBSERVER_JS)

    def run_command(self, title: str) -> None:
        """Run a palette command by its title (the palette's first match)."""
        self.page.keyboard.press("Control+Shift+P")
        box = self.page.locator(".quick-input-widget input")
        box.wait_for(state="visible", timeout=10_000)
        box.fill(f">{title}")
        self.page.wait_for_selector(".quick-input-list .monaco-list-row", timeout=10_000)
        box.press("Enter")

    def open_file(self, name: str) -> None:
        """Open a top-level file of the workspace from the Explorer."""
        row = self.page.locator(f".explorer-folders-view .monaco-list-row[aria-label^='{name}']")
        row.wait_for(state="visible", timeout=30_000)
        row.dblclick()
        self.page.wait_for_selector(f".tab.active[aria-label^='{name}']", timeout=15_000)
        self.page.locator(".editor-instance .view-lines").first.click()

    def go_to_line_end(self, line: int) -> None:
        self.page.keyboard.press("Control+G")
        box = self.page.locator(".quick-input-widget input")
        box.wait_for(state="visible", timeout=10_000)
        box.fill(f":{line}")
        box.press("Enter")
        self.page.keyboard.press("End")

    def wait_until(self, predicate, what: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting: {what}")
            time.sleep(0.1)

    def save_until(self, predicate, what: str, attempts: int = 3, timeout_s: float = 15) -> None:
        """Press Ctrl+S until `predicate` holds of the file on disk. A save keystroke that the
        browser drops on a loaded machine is pressed again; an edit the editor never made still
        fails, after every attempt."""
        for attempt in range(attempts):
            self.page.keyboard.press("Control+S")
            try:
                self.wait_until(predicate, what, timeout_s)
                return
            except AssertionError:
                if attempt == attempts - 1:
                    raise

    def wait_for_text(self, text: str, timeout_s: float = 30) -> None:
        """Wait until some editor shows a line containing `text`."""
        self.wait_until(
            lambda: self.page.evaluate(
                "(t) => [...document.querySelectorAll('.view-line')].some((e) => e.textContent.replace(/\\u00a0/g, ' ').includes(t))", text
            ),
            f"a line showing {text!r}",
            timeout_s,
        )

    def tabs(self) -> list[list[str]]:
        """The labels of the tabs of each editor group."""
        return self.page.evaluate(
            "() => [...document.querySelectorAll('.editor-group-container')]"
            ".map((g) => [...g.querySelectorAll('.tab')].map((t) => t.getAttribute('aria-label') || ''))"
        )

    def heat_lines(self, name: str) -> int:
        """How many lines the extension's decorations paint in the editor group showing `name`."""
        return self.page.evaluate(HEAT_JS, name)

    def observed(self) -> dict[str, list[str]]:
        return self.page.evaluate("() => window.__glm5")

    def wait_status(self, icon: str, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.observed()["status"]
            if status and status[-1].startswith(icon):
                return
            time.sleep(0.1)
        raise AssertionError(f"the status bar never showed {icon}: {self.observed()['status']}")

    def ghost_text(self) -> str:
        """The ghost text now shown, lines rebuilt from the DOM (trailing blanks of each line dropped)."""
        return self.page.evaluate(GHOST_JS)

    def wait_ghost(self, predicate, timeout_s: float = 60, poll_s: float = 0.05) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.ghost_text()
            if predicate(text):
                return text
            time.sleep(poll_s)
        raise AssertionError(f"ghost text never matched; seen: {self.observed()['ghost']}")

    def wait_ghost_settled(self, timeout_s: float = 10, quiet_s: float = 0.5) -> str:
        """The ghost text once it is non-empty and unchanged for `quiet_s` (the last streamed update drawn)."""
        deadline = time.monotonic() + timeout_s
        text, since = self.ghost_text(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = self.ghost_text()
            if now != text:
                text, since = now, time.monotonic()
            elif text and time.monotonic() - since >= quiet_s:
                return text
        raise AssertionError(f"ghost text never settled; seen: {self.observed()['ghost']}")



@contextmanager
def workbench(server: CodeServer, folder: Path) -> Iterator[Workbench]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium(), headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 660}, device_scale_factor=1)
            page.goto(f"http://127.0.0.1:{server.port}/?folder={folder}", wait_until="domcontentloaded")
            bench = Workbench(page)
            try:
                bench.wait_ready()
                yield bench
            except BaseException:
                page.screenshot(path=str(server.root / "failure.png"))
                raise
        finally:
            browser.close()
