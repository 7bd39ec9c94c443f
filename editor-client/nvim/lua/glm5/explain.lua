--- Readable rendering of `glm5.explainContext`: what the model sees for a completion.
---
--- Role: turn the command's result `{prompt, kind, tokens, budget, snippets}` into Markdown lines for
--- a scratch buffer, so a user can check which cross-file snippets were used and why.
---
--- Invariants: pure; every field is optional, a missing one is left out (vim.NIL counts as missing); the prompt is
--- shown verbatim inside a fence long enough not to be closed by backticks in the prompt.

local M = {}

local function fence_for(text)
  local longest = 0
  for run in text:gmatch('`+') do
    longest = math.max(longest, #run)
  end
  return string.rep('`', math.max(3, longest + 1))
end

local function range_text(range)
  if type(range) ~= 'table' or type(range.start) ~= 'table' then
    return ''
  end
  return (' lines %d-%d'):format(range.start.line + 1, range['end'].line + 1)
end

local function text_or(value, default)
  return type(value) == 'string' and value or default
end

local function snippet_lines(snippets)
  local lines = { '', ('## Snippets (%d)'):format(#snippets) }
  for i, s in ipairs(snippets) do
    local tokens = type(s.tokens) == 'number' and (', %d tokens'):format(s.tokens) or ''
    local uri, reason = text_or(s.uri, '?'), text_or(s.reason, 'no reason given')
    lines[#lines + 1] = ('%d. %s%s: %s%s'):format(i, uri, range_text(s.range), reason, tokens)
    if text_or(s.detail, '') ~= '' then
      lines[#lines + 1] = '   ' .. s.detail
    end
  end
  return lines
end

local function pairs_text(values)
  local parts = {}
  local names = vim.tbl_keys(values)
  table.sort(names)
  for _, name in ipairs(names) do
    parts[#parts + 1] = ('%s %s'):format(name, tostring(values[name]))
  end
  return table.concat(parts, ', ')
end

local function summary_lines(result)
  local lines = {}
  if type(result.kind) == 'string' then
    lines[#lines + 1] = 'Completion kind: ' .. result.kind
  end
  local tokens = type(result.tokens) == 'table' and pairs_text(result.tokens) or ''
  lines[#lines + 1] = 'Tokens: ' .. (tokens ~= '' and tokens or 'unknown')
  if type(result.budget) == 'table' then
    lines[#lines + 1] = 'Budget: ' .. pairs_text(result.budget)
  elseif type(result.budget) == 'number' then
    lines[#lines + 1] = 'Budget: ' .. tostring(result.budget)
  end
  return lines
end

--- Markdown lines describing an explainContext result.
---@param result table
---@return string[]
function M.render(result)
  local lines = { '# GLM-5 completion context', '' }
  vim.list_extend(lines, summary_lines(result))
  vim.list_extend(lines, snippet_lines(type(result.snippets) == 'table' and result.snippets or {}))
  local prompt = text_or(result.prompt, '')
  local fence = fence_for(prompt)
  vim.list_extend(lines, { '', '## Prompt', fence })
  vim.list_extend(lines, vim.split(prompt, '\n', { plain = true }))
  lines[#lines + 1] = fence
  return lines
end

return M
