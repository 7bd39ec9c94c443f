--- `:Glm5 heat`: what the model looked at (the server's `glm5.explainAttention`), as line
--- highlights over the current buffer and a Markdown report (snippets, hottest lines, expert load).
---
--- Role: `lines(result, uri, line_count)` maps the result onto one buffer's lines (its prefix and
--- suffix lines plus lines of snippets from the same file) with a level 1..LEVELS relative to the
--- hottest line; `apply` draws them as `Glm5Heat{level}` line highlights; `report` renders the rest.
---
--- Invariants: `lines` and `report` are pure; lines outside the buffer or without selections are
--- left out; the highlights live in one namespace and are cleared when the buffer changes.

local M = {}

M.LEVELS = 5
M.ns = vim.api.nvim_create_namespace('glm5_heat')

local function is_table(value)
  return type(value) == 'table'
end

local function percent(share)
  return ('%.1f%%'):format((tonumber(share) or 0) * 100)
end

---@return {line: integer, share: number, selections: integer, level: integer}[]
function M.lines(result, uri, line_count)
  local by_line = {}
  local function add(list)
    for _, item in ipairs(is_table(list) and list or {}) do
      local line, selections = item.line, tonumber(item.selections) or 0
      if type(line) == 'number' and line >= 0 and line < line_count and selections > 0 then
        local seen = by_line[line] or { selections = 0, share = 0 }
        by_line[line] = { selections = seen.selections + selections, share = seen.share + (tonumber(item.share) or 0) }
      end
    end
  end
  if result.uri == uri then
    add(result.lines)
  end
  for _, snippet in ipairs(is_table(result.snippets) and result.snippets or {}) do
    if snippet.uri == uri then
      add(snippet.lines)
    end
  end
  local hottest = 0
  for _, v in pairs(by_line) do
    hottest = math.max(hottest, v.share)
  end
  local out = {}
  for line, v in pairs(by_line) do
    local level = hottest > 0 and math.max(1, math.ceil(M.LEVELS * v.share / hottest)) or 1
    out[#out + 1] = { line = line, share = v.share, selections = v.selections, level = level }
  end
  table.sort(out, function(a, b)
    return a.line < b.line
  end)
  return out
end

--- Highlight `bufnr`'s lines with `result`'s heat; returns how many lines were highlighted.
function M.apply(bufnr, result)
  vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  local heat = M.lines(result, vim.uri_from_bufnr(bufnr), vim.api.nvim_buf_line_count(bufnr))
  for _, h in ipairs(heat) do
    vim.api.nvim_buf_set_extmark(bufnr, M.ns, h.line, 0, {
      line_hl_group = 'Glm5Heat' .. h.level,
      virt_text = { { ' ' .. percent(h.share), 'Glm5HeatText' } },
      virt_text_pos = 'eol',
    })
  end
  vim.api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI' }, {
    buffer = bufnr,
    once = true,
    callback = function()
      vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
    end,
  })
  return #heat
end

local function file_name(uri)
  local path = type(uri) == 'string' and vim.uri_to_fname(uri) or '?'
  return vim.fn.fnamemodify(path, ':h:t') .. '/' .. vim.fn.fnamemodify(path, ':t')
end

local function expert_table(load)
  local width = 0
  for _, row in ipairs(load) do
    width = math.max(width, #row)
  end
  if width == 0 then
    return { 'No MoE layer routed a token.' }
  end
  local head, rule = { '| layer |' }, { '|---|' }
  for e = 0, width - 1 do
    head[#head + 1] = (' e%d |'):format(e)
    rule[#rule + 1] = '---:|'
  end
  local out = { table.concat(head), table.concat(rule) }
  for layer, row in ipairs(load) do
    local cells = {}
    for e = 1, width do
      cells[e] = #row == 0 and '·' or tostring(row[e] or 0)
    end
    out[#out + 1] = ('| %d%s | %s |'):format(layer - 1, #row == 0 and ' (dense)' or '', table.concat(cells, ' | '))
  end
  return out
end

--- Markdown lines of the report.
function M.report(result)
  local out = { '# What the model looked at', '' }
  if type(result.completion) == 'string' then
    out[#out + 1] = 'Completion: `' .. result.completion:gsub('\n', '⏎') .. '`'
    out[#out + 1] = ''
  end
  out[#out + 1] = ("%d selections of prompt tokens by the sparse attention's top-%s: %d generating queries x %d layers."):format(
    tonumber(result.total) or 0, tostring(result.indexTopk or '?'), tonumber(result.queries) or 0, tonumber(result.layers) or 0)
  vim.list_extend(out, { '', '## Snippets', '', '| # | snippet | reason | tokens | share |', '|---:|---|---|---:|---:|' })
  for i, s in ipairs(is_table(result.snippets) and result.snippets or {}) do
    local range = is_table(s.range) and (':%d-%d'):format(s.range.start.line + 1, s.range['end'].line + 1) or ''
    out[#out + 1] = ('| %d | `%s%s` | %s | %s | %s |'):format(i, file_name(s.uri), range, tostring(s.reason or ''), tostring(s.tokens or '-'), percent(s.share))
  end
  out[#out + 1] = ('| | current file | | | %s |'):format(percent(is_table(result.currentFile) and result.currentFile.share))
  out[#out + 1] = ('| | special tokens and `# file:` lines | | | %s |'):format(percent(is_table(result.other) and result.other.share))
  vim.list_extend(out, { '', '## Expert load (tokens routed to each expert, per layer)', '' })
  vim.list_extend(out, expert_table(is_table(result.expertLoad) and result.expertLoad or {}))
  return out
end

for level = 1, M.LEVELS do
  local shade = math.floor(0x30 + (0xa0 - 0x30) * level / M.LEVELS)
  vim.api.nvim_set_hl(0, 'Glm5Heat' .. level, { bg = ('#%02x%02x20'):format(shade, math.floor(shade * 0.45)), default = true })
end
vim.api.nvim_set_hl(0, 'Glm5HeatText', { link = 'Comment', default = true })

return M
