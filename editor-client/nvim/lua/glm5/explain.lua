--- Readable rendering of `glm5.explainContext`: what the model sees for a completion.
---
--- Role: turn the command's result `{prompt, tokens, budget, snippets}` into Markdown lines for
--- a scratch buffer, so a user can check which cross-file snippets were used and why.
---
--- Invariants: pure; every field is optional, a missing one is simply left out; the prompt is
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
  if type(range) ~= 'table' or not range.start then
    return ''
  end
  return (' lines %d-%d'):format(range.start.line + 1, range['end'].line + 1)
end

local function snippet_lines(snippets)
  local lines = { '', ('## Snippets (%d)'):format(#snippets) }
  for i, s in ipairs(snippets) do
    local tokens = s.tokens and (', %d tokens'):format(s.tokens) or ''
    lines[#lines + 1] = ('%d. %s%s: %s%s'):format(i, s.uri or '?', range_text(s.range), s.reason or 'no reason given', tokens)
    if s.detail and s.detail ~= '' then
      lines[#lines + 1] = '   ' .. s.detail
    end
  end
  return lines
end

local function token_lines(tokens, budget)
  local parts = {}
  local names = vim.tbl_keys(tokens or {})
  table.sort(names)
  for _, name in ipairs(names) do
    parts[#parts + 1] = ('%s %s'):format(name, tostring(tokens[name]))
  end
  local line = 'Tokens: ' .. (#parts > 0 and table.concat(parts, ', ') or 'unknown')
  if budget then
    line = line .. (' (budget %s)'):format(tostring(budget))
  end
  return { line }
end

--- Markdown lines describing an explainContext result.
---@param result table
---@return string[]
function M.render(result)
  local lines = { '# GLM-5 completion context', '' }
  vim.list_extend(lines, token_lines(result.tokens, result.budget))
  vim.list_extend(lines, snippet_lines(result.snippets or {}))
  local prompt = result.prompt or ''
  local fence = fence_for(prompt)
  vim.list_extend(lines, { '', '## Prompt', fence })
  vim.list_extend(lines, vim.split(prompt, '\n', { plain = true }))
  lines[#lines + 1] = fence
  return lines
end

return M
