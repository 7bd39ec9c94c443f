--- `:Glm5 {subcommand}`: the user commands of the GLM-5 plugin.
---
--- Role: enable / disable / toggle completions, trigger one, show the context of a completion at
--- the cursor (`glm5.explainContext`, rendered into a scratch Markdown buffer), show what the
--- model looked at there as a heat map (`glm5.explainAttention`, see `glm5.heat`), show the counts
--- (`glm5.stats` plus this Neovim's own), show the status, and restart the server.
---
--- Invariants: every subcommand works on this plugin's clients only; a server error is shown as
--- a message, never raised into the user's editing.

local explain = require('glm5.explain')
local heat = require('glm5.heat')

local M = {}

local has_011 = vim.fn.has('nvim-0.11') == 1

local function execute(client, command, arguments, on_result)
  local params = { command = command, arguments = arguments }
  local function handler(err, result)
    if err then
      vim.notify(('glm5: %s failed: %s'):format(command, err.message or vim.inspect(err)), vim.log.levels.ERROR)
    else
      on_result(result)
    end
  end
  if has_011 then
    client:request('workspace/executeCommand', params, handler, 0)
  else
    client.request('workspace/executeCommand', params, handler, 0)
  end
end

local function buffer_client(glm5)
  local bufnr = vim.api.nvim_get_current_buf()
  for _, client in ipairs(glm5.clients()) do
    if client.attached_buffers[bufnr] then
      return client
    end
  end
  vim.notify('glm5: the server is not attached to this buffer', vim.log.levels.WARN)
  return nil
end

--- Open `lines` in a scratch Markdown buffer below the current window.
---@param lines string[]
function M.show_scratch(lines)
  vim.cmd('botright new')
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.bo[bufnr].buftype = 'nofile'
  vim.bo[bufnr].bufhidden = 'wipe'
  vim.bo[bufnr].swapfile = false
  vim.bo[bufnr].filetype = 'markdown'
  vim.bo[bufnr].modifiable = false
end

local function explain_here(glm5)
  local client = buffer_client(glm5)
  if not client then
    return
  end
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local argument = { uri = params.textDocument.uri, position = params.position }
  execute(client, 'glm5.explainContext', { argument }, function(result)
    M.show_scratch(explain.render(result or {}))
  end)
end

local function heat_here(glm5)
  local client = buffer_client(glm5)
  if not client then
    return
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local argument = { uri = params.textDocument.uri, position = params.position }
  execute(client, 'glm5.explainAttention', { argument }, function(result)
    result = result or {}
    local count = heat.apply(bufnr, result)
    M.show_scratch(heat.report(result))
    vim.notify(('glm5: %d lines highlighted'):format(count))
  end)
end

local function stats(glm5)
  local client = buffer_client(glm5) or glm5.clients()[1]
  if not client then
    return
  end
  execute(client, 'glm5.stats', {}, function(result)
    local mine = glm5.lifecycle(client.id).counts
    vim.notify(vim.inspect({ server = result, this_neovim = mine }))
  end)
end

local function restart(glm5, start)
  local ids = vim.tbl_map(function(client)
    return client.id
  end, glm5.clients())
  vim.lsp.stop_client(ids)
  vim.wait(5000, function()
    return #glm5.clients() == 0
  end, 50)
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) then
      start(bufnr)
    end
  end
end

---@param glm5 table the `glm5` module
---@param start fun(bufnr: integer)
function M.register(glm5, start)
  local subcommands = {
    enable = function()
      glm5.enable(true)
    end,
    disable = function()
      glm5.enable(false)
    end,
    toggle = function()
      glm5.enable(not glm5.state.enabled)
    end,
    trigger = glm5.trigger,
    explain = function()
      explain_here(glm5)
    end,
    heat = function()
      heat_here(glm5)
    end,
    stats = function()
      stats(glm5)
    end,
    status = function()
      vim.notify(glm5.status_text())
    end,
    restart = function()
      restart(glm5, start)
    end,
  }
  local names = vim.tbl_keys(subcommands)
  table.sort(names)
  vim.api.nvim_create_user_command('Glm5', function(args)
    local fn = subcommands[args.args]
    if not fn then
      vim.notify(('glm5: unknown subcommand %q (one of: %s)'):format(args.args, table.concat(names, ', ')), vim.log.levels.ERROR)
      return
    end
    fn()
  end, {
    nargs = 1,
    desc = 'GLM-5 completions',
    complete = function(lead)
      return vim.tbl_filter(function(name)
        return name:sub(1, #lead) == lead
      end, names)
    end,
  })
end

return M
