-- Returns the value of KEYS[1], first setting it to ARGV[1] (no expiry) if
-- there is none: one round trip, single-key, so it runs on a cluster. The
-- owner key (APP_NAME) and the data-loss marker are kept this way. SET
-- runs only when the key is missing, so on a full Redis a key that exists
-- is still read.
local v = redis.call('GET', KEYS[1])
if v then
  return v
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
