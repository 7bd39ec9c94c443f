--- Position conversions and text insertion for GLM-5 completions.
---
--- Role: turn LSP positions (counted in the client's negotiated encoding: UTF-16 code units by
--- default) into Neovim byte columns, and insert a completion's text into a buffer, leaving the
--- cursor after it.
---
--- Invariants: pure functions of their arguments plus the buffer they are given; columns past
--- the end of a line clamp to the end, as the server clamps out-of-range positions too.

local M = {}

--- Byte column (0-based) of the LSP `character` offset in `line`.
---@param line string
---@param character integer
---@param encoding 'utf-8'|'utf-16'|'utf-32'
---@return integer
function M.byte_col(line, character, encoding)
  if encoding == 'utf-8' then
    return math.min(character, #line)
  end
  local units, byte = 0, 1
  while byte <= #line and units < character do
    local lead = line:byte(byte)
    local width = lead >= 0xF0 and 4 or lead >= 0xE0 and 3 or lead >= 0xC0 and 2 or 1
    units = units + ((encoding == 'utf-16' and width == 4) and 2 or 1)
    byte = byte + width
  end
  return math.min(byte - 1, #line)
end

--- LSP `character` offset of the 0-based byte column `col` in `line`.
---@param line string
---@param col integer
---@param encoding 'utf-8'|'utf-16'|'utf-32'
---@return integer
function M.character(line, col, encoding)
  if encoding == 'utf-8' then
    return math.min(col, #line)
  end
  local units, byte = 0, 1
  while byte <= math.min(col, #line) do
    local lead = line:byte(byte)
    local width = lead >= 0xF0 and 4 or lead >= 0xE0 and 3 or lead >= 0xC0 and 2 or 1
    if byte + width - 1 > col then
      break
    end
    units = units + ((encoding == 'utf-16' and width == 4) and 2 or 1)
    byte = byte + width
  end
  return units
end

--- The plain text of an LSP `insertText` (a string, or a `StringValue` snippet).
---@param insert_text string|{kind: string, value: string}
---@return string
function M.plain_text(insert_text)
  if type(insert_text) == 'string' then
    return insert_text
  end
  return insert_text.value
end

--- Replace the byte range (row, start_col)-(row, end_col) of `bufnr` with `text` and put the
--- cursor of `winid` right after the inserted text.
---@param bufnr integer
---@param winid integer
---@param row integer 0-based
---@param start_col integer 0-based byte column
---@param end_col integer 0-based byte column
---@param text string
function M.insert(bufnr, winid, row, start_col, end_col, text)
  local lines = vim.split(text, '\n', { plain = true })
  vim.api.nvim_buf_set_text(bufnr, row, start_col, row, end_col, lines)
  local last_row = row + #lines - 1
  local last_col = (#lines == 1 and start_col or 0) + #lines[#lines]
  vim.api.nvim_win_set_cursor(winid, { last_row + 1, last_col })
end

--- Byte range on the cursor's line that an item replaces: its LSP range if it has one (the spec
--- keeps it on one line), else an empty range at the cursor.
---@param bufnr integer
---@param cursor {[1]: integer, [2]: integer} (1-based row, 0-based byte col)
---@param lsp_range? {start: {line: integer, character: integer}, ['end']: {line: integer, character: integer}}
---@param encoding 'utf-8'|'utf-16'|'utf-32'
---@return integer row, integer start_col, integer end_col
function M.replace_range(bufnr, cursor, lsp_range, encoding)
  local row = cursor[1] - 1
  if not lsp_range then
    return row, cursor[2], cursor[2]
  end
  row = lsp_range.start.line
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  local start_col = M.byte_col(line, lsp_range.start.character, encoding)
  local end_col = M.byte_col(line, lsp_range['end'].character, encoding)
  return row, start_col, math.max(start_col, end_col)
end

return M
