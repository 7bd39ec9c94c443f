--- Ghost text for Neovim without native inline completion (before 0.12, or `native = false`).
---
--- Role: request `textDocument/inlineCompletion` after a debounce on insert-mode edits, draw the
--- streamed text (`glm5/inlineCompletionProgress`) and then the final item as virtual text, and
--- accept or dismiss it on the user's keys.
---
--- Invariants:
--- - At most one request is pending per buffer; a newer one cancels the older (`$/cancelRequest`).
--- - Text is drawn only while the cursor and the buffer's changedtick are those the request was
---   made for, so a late answer never lands at the wrong place.
--- - Accepting inserts exactly the item's text over the item's range; nothing else is edited.

local edit = require('glm5.edit')
local lifecycle = require('glm5.lifecycle')

local M = {}

local ns = vim.api.nvim_create_namespace('glm5.ghost')
local has_011 = vim.fn.has('nvim-0.11') == 1
local has_010 = vim.fn.has('nvim-0.10') == 1

---@class glm5.Anchor
---@field row integer 0-based
---@field col integer 0-based byte column of the cursor
---@field tick integer buffer changedtick

---@class glm5.GhostBuffer
---@field client_id integer
---@field timer? uv.uv_timer_t
---@field pending? {request_id: integer, anchor: glm5.Anchor}
---@field shown? {item: table, text: string, row: integer, start_col: integer, end_col: integer, anchor: glm5.Anchor}

---@type table<integer, glm5.GhostBuffer>
local buffers = {}

---@type table<integer, {debounce_ms: integer, lifecycle: fun(client_id: integer): table, run_command: fun(client: vim.lsp.Client, command: table, bufnr: integer)}>
local options = {}

local function client_request(client, method, params, handler, bufnr)
  if has_011 then
    return client:request(method, params, handler, bufnr)
  end
  return client.request(method, params, handler, bufnr)
end

local function client_cancel(client, request_id)
  if has_011 then
    client:cancel_request(request_id)
  else
    client.cancel_request(request_id)
  end
end

local function anchor_here(bufnr)
  local cursor = vim.api.nvim_win_get_cursor(0)
  return { row = cursor[1] - 1, col = cursor[2], tick = vim.api.nvim_buf_get_changedtick(bufnr) }
end

local function still_at(bufnr, anchor)
  if vim.api.nvim_get_current_buf() ~= bufnr or not vim.api.nvim_get_mode().mode:match('^i') then
    return false
  end
  local now = anchor_here(bufnr)
  return now.row == anchor.row and now.col == anchor.col and now.tick == anchor.tick
end

local function hide(bufnr)
  vim.api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
end

--- Draw `text` as ghost text starting at the cursor (`anchor`).
local function draw(bufnr, anchor, text)
  hide(bufnr)
  if text == '' then
    return
  end
  local lines = vim.split(text, '\n', { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], 'Glm5Ghost' } }
  end
  vim.api.nvim_buf_set_extmark(bufnr, ns, anchor.row, anchor.col, {
    virt_text = { { lines[1], 'Glm5Ghost' } },
    virt_text_pos = has_010 and 'inline' or 'overlay',
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = 'combine',
  })
end

--- The part of `text` not yet in the buffer: the item replaces from `start_col`, and the
--- characters between it and the cursor were typed already.
local function unseen_part(bufnr, row, start_col, cursor_col, text)
  if cursor_col <= start_col then
    return text
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  local typed = line:sub(start_col + 1, cursor_col)
  if text:sub(1, #typed) == typed then
    return text:sub(#typed + 1)
  end
  return text
end

local function show(bufnr, client, item, anchor)
  local row, start_col, end_col =
    edit.replace_range(bufnr, { anchor.row + 1, anchor.col }, item.range, client.offset_encoding)
  local text = edit.plain_text(item.insertText)
  local state = buffers[bufnr]
  state.shown = { item = item, text = text, row = row, start_col = start_col, end_col = end_col, anchor = anchor }
  draw(bufnr, anchor, unseen_part(bufnr, row, start_col, anchor.col, text))
  options[bufnr].lifecycle(client.id):shown(lifecycle.completion_id(item))
end

local function on_result(bufnr, request_id, err, result)
  local state = buffers[bufnr]
  if not state or not state.pending or state.pending.request_id ~= request_id then
    return
  end
  local anchor = state.pending.anchor
  state.pending = nil
  hide(bufnr)
  if err then
    vim.notify(('glm5: completion failed: %s'):format(err.message or vim.inspect(err)), vim.log.levels.WARN)
    return
  end
  local items = result and (result.items or result) or {}
  local client = vim.lsp.get_client_by_id(state.client_id)
  if client and items[1] and still_at(bufnr, anchor) then
    show(bufnr, client, items[1], anchor)
  end
end

local function cancel_pending(bufnr)
  local state = buffers[bufnr]
  local client = state and vim.lsp.get_client_by_id(state.client_id)
  if state and state.pending and client then
    client_cancel(client, state.pending.request_id)
  end
  if state then
    state.pending = nil
  end
end

--- Send a request for the cursor position now.
---@param bufnr integer
---@param trigger_kind integer 1 = invoked, 2 = automatic
function M.request(bufnr, trigger_kind)
  local state = buffers[bufnr]
  local client = state and vim.lsp.get_client_by_id(state.client_id)
  if not client or vim.api.nvim_get_current_buf() ~= bufnr then
    return
  end
  cancel_pending(bufnr)
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = trigger_kind }
  local anchor = anchor_here(bufnr)
  local ok, request_id
  ok, request_id = client_request(client, 'textDocument/inlineCompletion', params, function(err, result)
    on_result(bufnr, request_id, err, result)
  end, bufnr)
  if ok then
    state.pending = { request_id = request_id, anchor = anchor }
  end
end

local function stop_timer(state)
  if state.timer then
    state.timer:stop()
    state.timer:close()
    state.timer = nil
  end
end

local function on_edit(bufnr)
  local state = buffers[bufnr]
  if state.shown and still_at(bufnr, state.shown.anchor) then
    return
  end
  state.shown = nil
  hide(bufnr)
  cancel_pending(bufnr)
  stop_timer(state)
  state.timer = vim.defer_fn(function()
    state.timer = nil
    if buffers[bufnr] == state and vim.api.nvim_get_mode().mode:match('^i') then
      M.request(bufnr, 2)
    end
  end, options[bufnr].debounce_ms)
end

--- Handler for `glm5/inlineCompletionProgress`: draw the text so far of a pending request.
---@param client_id integer
---@param params {requestId: integer|string, text: string}
function M.on_progress(client_id, params)
  for bufnr, state in pairs(buffers) do
    local pending = state.pending
    if state.client_id == client_id and pending and pending.request_id == params.requestId then
      if still_at(bufnr, pending.anchor) then
        draw(bufnr, pending.anchor, params.text or '')
      end
      return
    end
  end
end

--- Accept the shown completion; false when there is none (so a key mapping can fall through).
---@param bufnr integer
---@return boolean
function M.accept(bufnr)
  local state = buffers[bufnr]
  local shown = state and state.shown
  if not shown or not still_at(bufnr, shown.anchor) then
    return false
  end
  state.shown = nil
  hide(bufnr)
  edit.insert(bufnr, 0, shown.row, shown.start_col, math.max(shown.end_col, shown.anchor.col), shown.text)
  local client = vim.lsp.get_client_by_id(state.client_id)
  if client then
    options[bufnr].lifecycle(client.id):accepted(lifecycle.completion_id(shown.item))
    if shown.item.command then
      options[bufnr].run_command(client, shown.item.command, bufnr)
    end
  end
  return true
end

--- Hide the completion (reported as rejected) and cancel any pending request.
---@param bufnr integer
function M.dismiss(bufnr)
  local state = buffers[bufnr]
  if not state then
    return
  end
  cancel_pending(bufnr)
  stop_timer(state)
  hide(bufnr)
  if state.shown then
    state.shown = nil
    options[bufnr].lifecycle(state.client_id):rejected()
  end
end

--- The LSP range of the item shown in `bufnr`, or nil.
---@param bufnr integer
---@return table?
function M.shown_range(bufnr)
  local state = buffers[bufnr]
  return state and state.shown and state.shown.item.range or nil
end

--- Whether a completion is shown at the cursor of `bufnr`.
---@param bufnr integer
---@return boolean
function M.visible(bufnr)
  local state = buffers[bufnr]
  return state ~= nil and state.shown ~= nil and still_at(bufnr, state.shown.anchor)
end

--- The text shown as ghost text in `bufnr`, or nil.
---@param bufnr integer
---@return string?
function M.shown_text(bufnr)
  local state = buffers[bufnr]
  return state and state.shown and state.shown.text or nil
end

---@param bufnr integer
---@param client_id integer
---@param opts {debounce_ms: integer, lifecycle: fun(client_id: integer): table, run_command: fun(client: vim.lsp.Client, command: table, bufnr: integer)}
function M.attach(bufnr, client_id, opts)
  if buffers[bufnr] then
    return
  end
  buffers[bufnr] = { client_id = client_id }
  options[bufnr] = opts
  local group = vim.api.nvim_create_augroup('glm5.ghost.' .. bufnr, { clear = true })
  vim.api.nvim_create_autocmd({ 'TextChangedI', 'CursorMovedI' }, {
    group = group,
    buffer = bufnr,
    callback = function()
      on_edit(bufnr)
    end,
  })
  vim.api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.dismiss(bufnr)
    end,
  })
end

---@param bufnr integer
function M.detach(bufnr)
  if not buffers[bufnr] then
    return
  end
  M.dismiss(bufnr)
  pcall(vim.api.nvim_del_augroup_by_name, 'glm5.ghost.' .. bufnr)
  buffers[bufnr] = nil
  options[bufnr] = nil
end

vim.api.nvim_set_hl(0, 'Glm5Ghost', { link = 'Comment', default = true })

return M
