-- Gives the marker ARGV[1] at KEYS[1] the lifetime ARGV[2] ms of its
-- async record (0: none), if the key still holds the marker.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '0' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
