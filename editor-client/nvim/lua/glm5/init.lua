--- GLM-5 completions for Neovim: `require('glm5').setup{}`.
---
--- Role: start `lsp_server --stdio` for the configured filetypes with `vim.lsp.start`, show its
--- inline completions as ghost text, and give the user commands (`:Glm5 ...`), keys and a
--- statusline string.
---
--- - Neovim >= 0.12: the native `vim.lsp.inline_completion` draws and accepts completions.
--- - Older Neovim (or `native = false`): `glm5.ghost` requests completions itself, after a
---   debounce, and draws the streamed text as virtual text.
---
--- Invariants:
--- - Only this plugin's own client is touched; other language servers are left alone.
--- - Shown / accepted / rejected completions are reported to the local server only
---   (`glm5.lifecycle`); the counts also stay in this Neovim.
--- - Bad options raise a clear error from `setup` before anything starts.

local edit = require('glm5.edit')
local ghost = require('glm5.ghost')
local lifecycle = require('glm5.lifecycle')

local M = {}

local NAME = 'glm5'
local MULTILINE = { never = true, auto = true, always = true }

M.defaults = {
  python = 'python3',
  cmd = nil, -- default: { python, '-m', 'lsp_server', '--stdio' }
  model = nil, -- checkpoint directory; nil: the server's embedded model
  -- remote engine instead of the in-process model (glm5-serve, vLLM, SGLang): nil, a URL, or
  -- { url = 'http://127.0.0.1:8000', apiKeyEnv = 'VAR', model = 'served name', timeoutMs = 10000 }
  engine = nil,
  filetypes = { 'python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'go', 'rust' },
  root_markers = { '.git', 'pyproject.toml', 'setup.py', 'package.json', 'go.mod', 'Cargo.toml' },
  max_tokens = 64,
  temperature = 0.2,
  multiline = 'auto',
  debounce_ms = 150,
  native = nil, -- nil: native inline completion when this Neovim has it
  -- more server settings, sent as they are in initializationOptions (the server's names), e.g.
  -- { abstain = false } to show the best guess even when the reranker is not confident
  settings = {},
  keymaps = { accept = '<Tab>', dismiss = '<C-]>', trigger = '<M-\\>', next = '<M-]>', prev = '<M-[>' },
}

---@type table
M.config = vim.deepcopy(M.defaults)

--- Live state: the server's last `glm5/status`, whether completions are on, the bookkeeping of
--- each client, and per buffer the last completion the native path showed (`{text, item}`).
M.state = { status = { state = 'stopped' }, enabled = true, lifecycles = {}, last = {} }

local function use_native()
  if M.config.native == nil then
    return vim.lsp.inline_completion ~= nil
  end
  return M.config.native and vim.lsp.inline_completion ~= nil
end

--- The running GLM-5 clients.
---@return vim.lsp.Client[]
function M.clients()
  if vim.lsp.get_clients then
    return vim.lsp.get_clients({ name = NAME })
  end
  return vim.lsp.get_active_clients({ name = NAME })
end

local function notify_server(client_id, method, params)
  local client = vim.lsp.get_client_by_id(client_id)
  if not client then
    return
  end
  if vim.fn.has('nvim-0.11') == 1 then
    client:notify(method, params)
  else
    client.notify(method, params)
  end
end

--- The shown/accepted/rejected bookkeeping of one client.
---@param client_id integer
function M.lifecycle(client_id)
  local l = M.state.lifecycles[client_id]
  if not l then
    l = lifecycle.new(function(method, params)
      notify_server(client_id, method, params)
    end)
    M.state.lifecycles[client_id] = l
  end
  return l
end

--- Run an item's command after an accept, if the server (or this Neovim) knows it.
local function run_command(client, command, bufnr)
  local provider = client.server_capabilities.executeCommandProvider
  local known = type(provider) == 'table' and vim.tbl_contains(provider.commands or {}, command.command)
  if not (known or vim.lsp.commands[command.command]) then
    return
  end
  if client.exec_cmd then
    client:exec_cmd(command, { bufnr = bufnr })
  else
    client.request('workspace/executeCommand', { command = command.command, arguments = command.arguments }, nil, bufnr)
  end
end

--- Wrap the native completor's requests of our client to learn which item it shows.
local function observe_native_results(client)
  local request = client.request
  client.request = function(self, method, params, handler, bufnr)
    if method == 'textDocument/inlineCompletion' and handler then
      local inner = handler
      handler = function(err, result, ctx, cfg)
        inner(err, result, ctx, cfg)
        local items = not err and result and (result.items or result) or {}
        if items[1] and M.state.enabled then
          M.state.last[ctx.bufnr] = { text = edit.plain_text(items[1].insertText), item = items[1] }
          M.lifecycle(client.id):shown(lifecycle.completion_id(items[1]))
        end
      end
    end
    return request(self, method, params, handler, bufnr)
  end
end

local function accept_native_item(bufnr, item)
  local text = item.insert_text
  if type(text) ~= 'string' then
    vim.snippet.expand(text.value)
  else
    local row, col = unpack(vim.api.nvim_win_get_cursor(0))
    local start_row, start_col, end_col = row - 1, col, col
    if item.range then
      start_row, start_col, end_col = item.range.start.row, item.range.start.col, item.range.end_.col
    end
    edit.insert(bufnr, 0, start_row, start_col, end_col, text)
  end
  local client = vim.lsp.get_client_by_id(item.client_id)
  if client and client.name == NAME then
    M.lifecycle(client.id):accepted(lifecycle.completion_id(item))
    if item.command then
      run_command(client, item.command, bufnr)
    end
  elseif client and item.command then
    client:exec_cmd(item.command, { bufnr = bufnr })
  end
end

--- Accept the completion shown in the current buffer; false when there is none.
---@return boolean
function M.accept()
  local bufnr = vim.api.nvim_get_current_buf()
  if use_native() then
    return vim.lsp.inline_completion.get({
      bufnr = bufnr,
      on_accept = function(item)
        accept_native_item(bufnr, item)
      end,
    })
  end
  if not ghost.visible(bufnr) then
    return false
  end
  vim.schedule(function()
    ghost.accept(bufnr)
  end)
  return true
end

--- Hide the completion shown in the current buffer (reported as rejected).
function M.dismiss()
  local bufnr = vim.api.nvim_get_current_buf()
  if use_native() then
    if vim.lsp.inline_completion.is_enabled({ bufnr = bufnr }) then
      vim.lsp.inline_completion.enable(false, { bufnr = bufnr })
      vim.lsp.inline_completion.enable(M.state.enabled, { bufnr = bufnr })
    end
    for _, client in ipairs(M.clients()) do
      M.lifecycle(client.id):rejected()
    end
  else
    ghost.dismiss(bufnr)
  end
end

--- Ask for a completion at the cursor now.
function M.trigger()
  local bufnr = vim.api.nvim_get_current_buf()
  if use_native() then
    vim.api.nvim_exec_autocmds('CursorMovedI', { buffer = bufnr, modeline = false })
  else
    ghost.request(bufnr, 1)
  end
end

--- A short status for the statusline: "GLM-5 ready", "GLM-5 warming 40%", "GLM-5 ready, nothing
--- shown: ..." (why the last completion showed nothing, until one shows something), ...
---@return string
function M.status_text()
  local s = M.state.status
  if not M.state.enabled then
    return 'GLM-5 off'
  end
  if s.state == 'warming' and type(s.progress) == 'number' then
    return ('GLM-5 warming %d%%'):format(math.floor(s.progress * 100 + 0.5))
  end
  if s.state == 'error' then
    return 'GLM-5 error: ' .. (s.message or 'see :LspLog')
  end
  if s.state == 'ready' and type(s.message) == 'string' and s.message ~= '' then
    return 'GLM-5 ready, ' .. s.message -- why the last completion showed nothing
  end
  return 'GLM-5 ' .. s.state
end

local function set_keymaps(bufnr)
  local keys = M.config.keymaps or {}
  local function map(lhs, fn, desc, expr)
    if lhs then
      vim.keymap.set('i', lhs, fn, { buffer = bufnr, expr = expr, desc = desc })
    end
  end
  map(keys.accept, function()
    return M.accept() and '' or vim.api.nvim_replace_termcodes(keys.accept, true, false, true)
  end, 'GLM-5: accept completion', true)
  map(keys.dismiss, M.dismiss, 'GLM-5: dismiss completion')
  map(keys.trigger, M.trigger, 'GLM-5: request completion')
  if use_native() then
    map(keys.next, function()
      vim.lsp.inline_completion.select({ count = 1 })
    end, 'GLM-5: next completion')
    map(keys.prev, function()
      vim.lsp.inline_completion.select({ count = -1 })
    end, 'GLM-5: previous completion')
  end
end

--- Tell the server where the cursor is (debounced); it warms its cache for that spot.
local function track_cursor(client, bufnr)
  local timer
  vim.api.nvim_create_autocmd({ 'CursorMoved', 'CursorMovedI' }, {
    group = vim.api.nvim_create_augroup('glm5.cursor.' .. bufnr, { clear = true }),
    buffer = bufnr,
    callback = function()
      if timer then
        timer:stop()
        timer:close()
      end
      timer = vim.defer_fn(function()
        timer = nil
        if vim.api.nvim_get_current_buf() == bufnr then
          local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
          notify_server(client.id, 'glm5/didChangeCursor', params)
        end
      end, 250)
    end,
  })
end

local function on_attach(client, bufnr)
  if use_native() then
    vim.lsp.inline_completion.enable(M.state.enabled, { bufnr = bufnr })
    vim.api.nvim_create_autocmd('InsertLeave', {
      group = vim.api.nvim_create_augroup('glm5.native.' .. bufnr, { clear = true }),
      buffer = bufnr,
      callback = function()
        M.lifecycle(client.id):rejected()
      end,
    })
  elseif M.state.enabled then
    ghost.attach(bufnr, client.id, { debounce_ms = M.config.debounce_ms, lifecycle = M.lifecycle, run_command = run_command })
  end
  set_keymaps(bufnr)
  track_cursor(client, bufnr)
end

--- The server's `initializationOptions`, from the plugin options.
---@return table
function M.init_options()
  return vim.tbl_extend('keep', {
    model = M.config.model,
    engine = M.config.engine,
    maxTokens = M.config.max_tokens,
    temperature = M.config.temperature,
    multiline = M.config.multiline,
    streaming = not use_native(),
  }, M.config.settings or {})
end

local function root_dir(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  local found = vim.fs.find(M.config.root_markers, { upward = true, path = vim.fs.dirname(name) })[1]
  return found and vim.fs.dirname(found) or vim.fn.getcwd()
end

local function start(bufnr)
  if not vim.tbl_contains(M.config.filetypes, vim.bo[bufnr].filetype) or vim.bo[bufnr].buftype ~= '' then
    return
  end
  vim.lsp.start({
    name = NAME,
    cmd = M.config.cmd or { M.config.python, '-m', 'lsp_server', '--stdio' },
    root_dir = root_dir(bufnr),
    init_options = M.init_options(),
    handlers = {
      ['glm5/status'] = function(_, params)
        M.state.status = params
        vim.cmd.redrawstatus({ bang = true })
      end,
      ['glm5/inlineCompletionProgress'] = function(_, params, ctx)
        ghost.on_progress(ctx.client_id, params)
      end,
    },
    on_init = function(client)
      M.state.status = { state = 'starting' }
      if use_native() then
        observe_native_results(client)
      end
    end,
    on_attach = on_attach,
    on_exit = function(_, _, client_id)
      M.state.lifecycles[client_id] = nil
      M.state.status = { state = 'stopped' }
    end,
  }, { bufnr = bufnr })
end

local function check(name, value, kind, optional)
  if (value == nil and not optional) or (value ~= nil and type(value) ~= kind) then
    error(('glm5: option %s must be a %s, got %s'):format(name, kind, vim.inspect(value)), 3)
  end
end

local function validate(config)
  check('python', config.python, 'string')
  check('cmd', config.cmd, 'table', true)
  check('model', config.model, 'string', true)
  if config.engine ~= nil and type(config.engine) ~= 'string' and type(config.engine) ~= 'table' then
    error(('glm5: option engine must be a URL or a table {url = ..., apiKeyEnv = ...}, got %s'):format(vim.inspect(config.engine)), 2)
  end
  check('filetypes', config.filetypes, 'table')
  check('root_markers', config.root_markers, 'table')
  check('max_tokens', config.max_tokens, 'number')
  check('temperature', config.temperature, 'number')
  check('debounce_ms', config.debounce_ms, 'number')
  check('keymaps', config.keymaps, 'table')
  check('settings', config.settings, 'table')
  if not MULTILINE[config.multiline] then
    error(('glm5: option multiline must be "never", "auto" or "always", got %s'):format(vim.inspect(config.multiline)), 2)
  end
  if config.max_tokens < 1 or config.temperature < 0 or config.debounce_ms < 0 then
    error('glm5: max_tokens must be >= 1, temperature >= 0 and debounce_ms >= 0', 2)
  end
end

--- Turn completions on or off in every buffer (the server keeps running).
---@param enabled boolean
function M.enable(enabled)
  M.state.enabled = enabled
  for _, client in ipairs(M.clients()) do
    for bufnr in pairs(client.attached_buffers) do
      if use_native() then
        vim.lsp.inline_completion.enable(enabled, { bufnr = bufnr })
      elseif enabled then
        ghost.attach(bufnr, client.id, { debounce_ms = M.config.debounce_ms, lifecycle = M.lifecycle, run_command = run_command })
      else
        ghost.detach(bufnr)
      end
    end
  end
end

--- Configure the plugin and start the server for matching buffers (see `M.defaults`).
---@param opts? table
function M.setup(opts)
  local config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  validate(config)
  M.config = config
  require('glm5.commands').register(M, start)
  vim.api.nvim_create_autocmd('FileType', {
    group = vim.api.nvim_create_augroup('glm5.start', { clear = true }),
    pattern = config.filetypes,
    callback = function(args)
      start(args.buf)
    end,
  })
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) then
      start(bufnr)
    end
  end
end

return M
