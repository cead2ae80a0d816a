#!lua flags=allow-oom
-- Replaces the in-flight record of KEYS[1] with the completed record ARGV[2],
-- kept for ARGV[3] milliseconds, only if the key is still in flight under
-- the caller's token (the record starts with ARGV[1] = tag + token).
-- Returns 1 when done, 0 when the claim is no longer the caller's.
local v = redis.call('GET', KEYS[1])
-- The completed record holds the completion time in milliseconds, so
-- finding exactly it means this is the caller retrying a completion whose
-- first attempt wrote it but whose answer was lost: done.
if v == ARGV[2] then
  return 1
end
if not v or string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
-- allow-oom (the first line; Redis 7): a completion overwrites an in-flight
-- record with one about as small, and refusing it on a full Redis would
-- leave the event in flight, to be forwarded again once its lease ends,
-- after the app has acted on it.
