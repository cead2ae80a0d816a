-- Lists up to ARGV[2] dead letters after the cursor (ARGV[3] score,
-- ARGV[4] key; both empty for the first page), in the order of the index
-- KEYS[1] (by expiry, then key). ARGV[1] is the hash tag. Returns
-- {{key, score, attempts, last status, last error, failed at}..., more}.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = tonumber(ARGV[2])
local out = {}
local min = ARGV[3] ~= '' and ARGV[3] or '-inf'
local offset = 0
while true do
  local page = redis.call('ZRANGEBYSCORE', KEYS[1], min, '+inf', 'WITHSCORES', 'LIMIT', offset, 100)
  if #page == 0 then
    return {out, 0}
  end
  offset = offset + #page / 2
  for i = 1, #page, 2 do
    local k, score = page[i], page[i + 1]
    if ARGV[3] == '' or score ~= ARGV[3] or k > ARGV[4] then
      if #out == limit then
        return {out, 1}
      end
      local f = redis.call('HMGET', ARGV[1] .. k, 'a', 'ls', 'le', 'n')
      table.insert(out, {k, score, f[1] or '0', f[2] or '0', f[3] or '', f[4] or '0'})
    end
  end
end
