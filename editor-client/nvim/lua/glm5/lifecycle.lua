--- Shown / accepted / rejected bookkeeping for GLM-5 completions.
---
--- Role: tell the server what happened to each completion it produced, with the
--- `glm5/didShowCompletion`, `glm5/didAcceptCompletion` and `glm5/didRejectCompletion`
--- notifications, and keep the same counts locally for `:Glm5 stats`. Nothing leaves the machine:
--- the notifications go to the local server only.
---
--- Invariants: at most one completion is "current" (shown, not yet settled); each completion id
--- is reported shown at most once while it stays current (type-through re-shows the same id);
--- a current completion ends exactly once, either accepted or rejected.

local M = {}
M.__index = M

--- The server's completion id of an inline completion item: the first argument of its command,
--- either the id itself or a table holding `completionId`.
---@param item {command?: {arguments?: any[]}}
---@return string?
function M.completion_id(item)
  local args = item.command and item.command.arguments
  local first = args and args[1]
  if type(first) == 'string' then
    return first
  end
  if type(first) == 'table' then
    return first.completionId
  end
  return nil
end

---@param notify fun(method: string, params: table)
function M.new(notify)
  return setmetatable({ notify = notify, current = nil, counts = { shown = 0, accepted = 0, rejected = 0 } }, M)
end

---@param id string?
function M:shown(id)
  if not id or id == self.current then
    return
  end
  self:rejected()
  self.current = id
  self.counts.shown = self.counts.shown + 1
  self.notify('glm5/didShowCompletion', { completionId = id })
end

---@param id string?
function M:accepted(id)
  id = id or self.current
  if not id then
    return
  end
  if self.current ~= id then
    self:rejected()
  end
  self.current = nil
  self.counts.accepted = self.counts.accepted + 1
  self.notify('glm5/didAcceptCompletion', { completionId = id })
end

--- The current completion, if any, was dismissed or superseded.
function M:rejected()
  local id = self.current
  if not id then
    return
  end
  self.current = nil
  self.counts.rejected = self.counts.rejected + 1
  self.notify('glm5/didRejectCompletion', { completionId = id })
end

return M
