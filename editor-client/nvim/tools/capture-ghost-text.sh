#!/usr/bin/env bash
# Capture Neovim showing GLM-5 ghost text, for the README: runs nvim with the glm5 plugin and the
# real server inside tmux, types, and saves the screen with colours (tmux capture-pane -p -e).
#
#   editor-client/nvim/tools/capture-ghost-text.sh MODEL_DIR OUT_PREFIX
#
# Writes OUT_PREFIX.ansi (with escape codes: `cat` it in a terminal) and OUT_PREFIX.txt (plain).
# Needs tmux, and nvim >= 0.12 on PATH or in the repository's .venv.
set -euo pipefail

model="$(realpath "$1")"
out="$(realpath -m "$2")"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
python="${GLM5_PYTHON:-$repo/.venv/bin/python}"
nvim="$(command -v nvim || echo "$repo/.venv/bin/nvim")"
work="$(mktemp -d)"
session="glm5-capture-$$"
trap 'tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$work"' EXIT

mkdir -p "$work/ws"
cat > "$work/ws/geometry.py" <<'PY'
def area(width, height):
    """The area of a width x height rectangle."""
    return width * height
PY
cat > "$work/ws/main.py" <<'PY'
from geometry import area


def total_area(rects):
    result = 0
    for w, h in rects:
        result += 
    return result
PY
cat > "$work/init.lua" <<LUA
vim.opt.rtp:prepend('$repo/editor-client/nvim')
vim.o.swapfile = false
vim.o.number = true
vim.o.laststatus = 2
vim.o.termguicolors = false
vim.api.nvim_set_hl(0, 'ComplHint', { ctermfg = 244, italic = true })
vim.api.nvim_set_hl(0, 'Glm5Ghost', { ctermfg = 244, italic = true })
vim.o.statusline = '%f %= %{v:lua.require("glm5").status_text()} '
require('glm5').setup({ python = '$python', model = '$model', temperature = 0, max_tokens = 24 })
LUA

screen() { tmux capture-pane -p -t "$session"; }
wait_for() {  # wait_for PATTERN SECONDS
  for _ in $(seq 1 $(( $2 * 10 ))); do
    if screen | grep -q -- "$1"; then return 0; fi
    sleep 0.1
  done
  echo "capture: timed out waiting for '$1'" >&2
  screen >&2
  return 1
}

cd "$work/ws"
tmux new-session -d -s "$session" -x 90 -y 14 \
  "env PYTHONPATH='$repo' XDG_STATE_HOME='$work/state' XDG_CONFIG_HOME='$work/config' TERM=xterm-256color '$nvim' -n -u '$work/init.lua' main.py"
wait_for 'GLM-5 ready' 120
tmux send-keys -t "$session" ':7' Enter 'A' 'ar'
typed='result += ar'
for next in e a '(' w ',' ' ' h ')'; do
  sleep 3
  # Ghost text shows as more text after what was typed on line 7.
  line="$(screen | grep -E '^ *7 ' || true)"
  if [[ $line == *"$typed"?* ]]; then break; fi
  tmux send-keys -t "$session" "$next"
  typed="$typed$next"
done
sleep 1
tmux capture-pane -p -e -t "$session" > "$out.ansi"
tmux capture-pane -p -t "$session" > "$out.txt"
echo "capture: wrote $out.ansi and $out.txt"
