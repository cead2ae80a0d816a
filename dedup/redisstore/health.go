package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

var (
	//go:embed setnxget.lua
	setNXGetLua    string
	setNXGetScript = redis.NewScript(setNXGetLua)
)

// ErrOutOfMemory means Redis refuses writes: it is at maxmemory with the
// noeviction policy. Claims fail until memory is freed.
var ErrOutOfMemory = fmt.Errorf("%w: Redis is out of memory", dedup.ErrReadOnly)

// OwnerKey is the key under prefix that names the deployment (APP_NAME)
// whose records the prefix holds. It holds no ':' or '#', so no event or
// body key can be it.
func OwnerKey(prefix string) string { return prefix + "owner" }

// MarkerKey is the key under prefix whose disappearance tells that Redis
// lost its data (flushed, or restarted without persistence).
func MarkerKey(prefix string) string { return prefix + "marker" }

// ClockKey is the key under prefix that only ever counts up, once per
// monitor check: a count that goes back tells that Redis was rolled back
// (restored from an older snapshot).
func ClockKey(prefix string) string { return prefix + "clock" }

// CheckOwner makes the configured AppName the owner of the key prefix if
// it has none, and returns an error wrapping ErrPrefixOwned, naming the
// owner, if another app owns it. Without an AppName it does nothing.
// Claims and lookups wait for a successful check (each tries one until
// then).
func (s *Store) CheckOwner(ctx context.Context) error { return s.owner.Check(ctx) }

// readOwner makes appName the owner of the key prefix if it has none, and
// returns the owner.
func (s *Store) readOwner(ctx context.Context, appName, ownerKey string) (string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return setNXGetScript.Run(ctx, s.scripts, []string{ownerKey}, appName).Text()
}

// ServerInfo is what INFO says about one Redis server: the one server, or
// each master of a cluster.
type ServerInfo struct {
	// Addr is the address the client reaches the server at.
	Addr string
	// RunID changes with every restart of the server.
	RunID string
	// Policy is maxmemory_policy.
	Policy string
	// UsedMemory and MaxMemory are used_memory and maxmemory (0: no
	// limit); NotCounted is mem_not_counted_for_evict, what Redis leaves
	// out when it compares the two.
	UsedMemory, MaxMemory, NotCounted int64
	// EvictedKeys is evicted_keys since the server started.
	EvictedKeys int64
	// AOF is aof_enabled.
	AOF bool
	// Keys is the number of keys in all its databases.
	Keys int64
}

// CanEvict reports whether the policy lets Redis delete records to make
// room: every allkeys-* policy, and every volatile-* one too, as every
// record has a TTL.
func (i ServerInfo) CanEvict() bool {
	return strings.HasPrefix(i.Policy, "allkeys-") || strings.HasPrefix(i.Policy, "volatile-")
}

// OutOfMemory reports whether the server refuses writes: over maxmemory,
// counted as Redis counts it, with nothing it may evict.
func (i ServerInfo) OutOfMemory() bool {
	return i.MaxMemory > 0 && i.Policy == "noeviction" && i.UsedMemory-i.NotCounted > i.MaxMemory
}

// infoer is the one command Info needs of a server's client.
type infoer interface {
	Info(ctx context.Context, sections ...string) *redis.StringCmd
}

// Info reads INFO from the server, or from every master of a cluster. It
// uses INFO only, which works where CONFIG is renamed or forbidden.
func (s *Store) Info(ctx context.Context) ([]ServerInfo, error) {
	octx, cancel := s.bound(ctx)
	defer cancel()
	masters, err := s.client.masters(octx)
	if err != nil {
		return nil, fmt.Errorf("dedup: redis INFO: %w", err)
	}
	// Asked at once, as a cluster's masters are independent servers.
	infos := make([]ServerInfo, len(masters))
	errs := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, m := range masters {
		wg.Go(func() { infos[i], errs[i] = readInfo(octx, m, m.Options().Addr) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("dedup: redis INFO: %w", err)
	}
	return infos, nil
}

// readInfo sends INFO (the default sections: Redis before 7 takes one
// section name at most) and parses what ServerInfo holds.
func readInfo(ctx context.Context, c infoer, addr string) (ServerInfo, error) {
	text, err := c.Info(ctx).Result()
	if err != nil {
		return ServerInfo{Addr: addr}, err
	}
	return parseInfo(text, addr), nil
}

// parseInfo reads INFO's "name:value" lines; what is missing stays zero.
func parseInfo(text, addr string) ServerInfo {
	info := ServerInfo{Addr: addr}
	num := func(v string) int64 {
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	for _, line := range strings.Split(text, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "run_id":
			info.RunID = v
		case "maxmemory_policy":
			info.Policy = v
		case "used_memory":
			info.UsedMemory = num(v)
		case "maxmemory":
			info.MaxMemory = num(v)
		case "mem_not_counted_for_evict":
			info.NotCounted = num(v)
		case "evicted_keys":
			info.EvictedKeys = num(v)
		case "aof_enabled":
			info.AOF = v == "1"
		default:
			// db0:keys=12,expires=12,avg_ttl=0
			if strings.HasPrefix(name, "db") {
				keys, _, _ := strings.Cut(strings.TrimPrefix(v, "keys="), ",")
				info.Keys += num(keys)
			}
		}
	}
	return info
}

// writable checks that Redis accepts writes, from INFO: PING still answers
// on a Redis that refuses every write. A server that does not let this
// client read INFO (an ACL, a renamed command) passes: PING is all there is.
func (s *Store) writable(ctx context.Context) error {
	infos, err := s.Info(ctx)
	var answered redis.Error
	switch {
	case errors.As(err, &answered):
		return nil
	case err != nil:
		return err
	}
	for _, info := range infos {
		if info.OutOfMemory() {
			return fmt.Errorf("%w: %s uses %d bytes of its maxmemory %d", ErrOutOfMemory, info.Addr, info.UsedMemory-info.NotCounted, info.MaxMemory)
		}
	}
	return nil
}
