-- Returns the request KEYS[2] of the async record KEYS[1]: false when
-- there is no such record, 0 when it keeps no request (completed).
-- One script, so that a request is never read for a record gone.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
return redis.call('GET', KEYS[2]) or 0
