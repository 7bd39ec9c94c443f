-- Headless Neovim session for tests/editors/test_nvim.py: type, see ghost text, accept it.
--
-- Role: load the glm5 plugin from GLM5_PLUGIN, open GLM5_FILE, wait for the server to attach and
-- report ready, go to the end of line GLM5_LINE in insert mode, type GLM5_TYPE, wait for ghost
-- text (an extmark in the native or the plugin's namespace; while none comes, type the next
-- character of GLM5_TYPE_MORE every GLM5_RETRY_MS), press the accept key, run `:Glm5 explain`
-- (and with GLM5_HEAT=1, `:Glm5 heat` in the file's window), and write what it saw as JSON to GLM5_RESULT. Insert-mode steps run from timers (feedkeys with 'x!' blocks a
-- headless Neovim).
--
-- Invariant: the session always ends (a watchdog writes {"error": ...} and quits).

local env = vim.env
vim.opt.rtp:prepend(env.GLM5_PLUGIN)
vim.o.swapfile = false

local result = { steps = {}, seen_texts = {} }
local done = false

local function finish(err)
  if done then
    return
  end
  done = true
  result.error = err
  local file = assert(io.open(env.GLM5_RESULT, 'w'))
  file:write(vim.json.encode(result))
  file:close()
  vim.cmd('qa!')
end

local function step(name)
  result.steps[#result.steps + 1] = name
end

--- Poll `pred` every 20 ms; call `next` with its value once it is truthy.
local function wait_for(name, pred, next)
  local function poll()
    if done then
      return
    end
    local ok, value = pcall(pred)
    if not ok then
      return finish(name .. ': ' .. tostring(value))
    end
    if value then
      step(name)
      return next(value)
    end
    vim.defer_fn(poll, 20)
  end
  poll()
end

vim.defer_fn(function()
  finish('timeout after steps: ' .. table.concat(result.steps, ', '))
end, tonumber(env.GLM5_TIMEOUT_MS or '60000'))

local glm5 = require('glm5')
local ok, err = pcall(glm5.setup, {
  cmd = vim.json.decode(env.GLM5_CMD),
  model = env.GLM5_MODEL ~= '' and env.GLM5_MODEL or nil,
  native = env.GLM5_NATIVE == '1',
  temperature = 0,
  max_tokens = tonumber(env.GLM5_MAX_TOKENS or '16'),
  debounce_ms = 50,
})
if not ok then
  finish('setup: ' .. tostring(err))
end

vim.cmd.edit(env.GLM5_FILE)
local bufnr = vim.api.nvim_get_current_buf()
local namespaces = vim.api.nvim_get_namespaces()

local function ghost_marks()
  local found = {}
  for _, name in ipairs({ 'nvim.lsp.inline_completion', 'glm5.ghost' }) do
    local ns = namespaces[name] or vim.api.nvim_get_namespaces()[name]
    if ns then
      for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })) do
        found[#found + 1] = mark
      end
    end
  end
  return found
end

local function mark_text(mark)
  local details = mark[4]
  local parts = {}
  for _, chunk in ipairs(details.virt_text or {}) do
    parts[#parts + 1] = chunk[1]
  end
  local lines = { table.concat(parts) }
  for _, virt_line in ipairs(details.virt_lines or {}) do
    local line = {}
    for _, chunk in ipairs(virt_line) do
      line[#line + 1] = chunk[1]
    end
    lines[#lines + 1] = table.concat(line)
  end
  return table.concat(lines, '\n')
end

local function server_stats(client)
  local response = client:request_sync('workspace/executeCommand', { command = 'glm5.stats', arguments = {} }, 10000, bufnr)
  return response and response.result or { error = response and response.err }
end

local function show_heat()
  vim.api.nvim_set_current_win(vim.fn.bufwinid(bufnr))
  vim.cmd('Glm5 heat')
  wait_for('heat report', function()
    local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
    return vim.bo.filetype == 'markdown' and lines[1] == '# What the model looked at' and lines
  end, function(lines)
    result.heat_report = table.concat(lines, '\n')
    result.heat_marks = {}
    for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, require('glm5.heat').ns, 0, -1, { details = true })) do
      result.heat_marks[#result.heat_marks + 1] = { row = mark[2], hl = mark[4].line_hl_group, text = mark[4].virt_text[1][1] }
    end
    finish(nil)
  end)
end

local function after_accept(client, before)
  result.lines_after = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  result.cursor_after = vim.api.nvim_win_get_cursor(0)
  result.lines_before = before
  result.local_counts = glm5.lifecycle(client.id).counts
  vim.defer_fn(function()
    result.stats = server_stats(client)
    vim.cmd('Glm5 explain')
    wait_for('explanation', function()
      local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
      return vim.bo.filetype == 'markdown' and lines[1] == '# GLM-5 completion context' and lines
    end, function(lines)
      result.explanation = table.concat(lines, '\n')
      if env.GLM5_HEAT == '1' then
        show_heat()
      else
        finish(nil)
      end
    end)
  end, 100)
end

local function on_ghost(client, marks)
  result.ghost_text = mark_text(marks[1])
  result.ghost_mark = { row = marks[1][2], col = marks[1][3] }
  local last = glm5.state.last[bufnr]
  result.item_text = last and last.text or require('glm5.ghost').shown_text(bufnr)
  result.item_range = last and last.item.range or require('glm5.ghost').shown_range(bufnr)
  result.cursor_before = vim.api.nvim_win_get_cursor(0)
  local before = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  vim.api.nvim_input(env.GLM5_ACCEPT_KEY or '<Tab>')
  wait_for('accepted', function()
    return vim.api.nvim_buf_get_changedtick(bufnr) ~= tick and #ghost_marks() == 0
  end, function()
    -- Leave insert mode at once, so no further completion is requested before the counts are read.
    vim.cmd.stopinsert()
    vim.defer_fn(function()
      after_accept(client, before)
    end, 50)
  end)
end

wait_for('attached', function()
  return glm5.clients()[1]
end, function(client)
  result.init_options = glm5.init_options()
  wait_for('ready', function()
    return glm5.state.status.state == 'ready'
  end, function()
    result.status_text = glm5.status_text()
    vim.api.nvim_win_set_cursor(0, { tonumber(env.GLM5_LINE), 0 })
    vim.cmd('startinsert!')
    glm5.state.last[bufnr] = nil
    vim.defer_fn(function()
      vim.api.nvim_input(env.GLM5_TYPE or '')
      local more = env.GLM5_TYPE_MORE or ''
      local typed_at = vim.uv.now()
      wait_for('ghost text', function()
        local marks = ghost_marks()
        if #marks == 0 then
          if #more > 0 and vim.uv.now() - typed_at > tonumber(env.GLM5_RETRY_MS or '2000') then
            -- An empty completion (possible with a random model): type on, as a user would.
            vim.api.nvim_input(more:sub(1, 1))
            more = more:sub(2)
            typed_at = vim.uv.now()
            result.retries = (result.retries or 0) + 1
          end
          return false
        end
        local text = mark_text(marks[1])
        if result.seen_texts[#result.seen_texts] ~= text then
          result.seen_texts[#result.seen_texts + 1] = text
        end
        local settled = glm5.state.last[bufnr] or require('glm5.ghost').shown_text(bufnr)
        return settled and marks
      end, function(marks)
        on_ghost(client, marks)
      end)
    end, 50)
  end)
end)
