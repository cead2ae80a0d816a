package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// topology is what differs between the two shapes of Redis the store
// reaches, decided once, when Open builds the client: one server (named by
// a URL, or found through Sentinels) or a Redis Cluster. The rest of the
// store asks it, never the client's type.
type topology interface {
	Client
	// scripter is what runs the scripts. wait says each write needs a
	// connection of its own (WAIT counts the writes of the connection it
	// is sent on), which calls sharing round trips would not have.
	scripter(wait bool) (Client, error)
	// masters are the clients of every master: the one server, or each of
	// a cluster's masters, as the cluster is known now.
	masters(ctx context.Context) ([]*redis.Client, error)
	// master is the client of the master that serves key.
	master(ctx context.Context, key string) (*redis.Client, error)
	// failed is told that a call to a master failed: the master may be
	// down, or no longer serve the slot it was asked for.
	failed(ctx context.Context)
	// oneNode reports whether one node holds every key, so that one
	// script may touch keys of different hash slots (Enqueue's marker and
	// the queue's keys): true for one server, false for a cluster.
	oneNode() bool
	Close() error
}

// server is one Redis server: a *redis.Client, which follows Sentinels'
// failovers itself when it was made by redis.NewFailoverClient.
type server struct {
	*redis.Client
	// direct is set when the server is named by a URL, not found through
	// Sentinels.
	direct bool
}

// scripter shares round trips between the scripts of concurrent calls
// (pipelined) on a server reached directly without WAIT; through
// Sentinels each call takes its own.
func (s server) scripter(wait bool) (Client, error) {
	if s.direct && !wait {
		return newPipelined(s.Client)
	}
	return s.Client, nil
}

func (s server) masters(context.Context) ([]*redis.Client, error) {
	return []*redis.Client{s.Client}, nil
}

func (s server) master(context.Context, string) (*redis.Client, error) { return s.Client, nil }

// failed does nothing: the client reconnects on its next call.
func (server) failed(context.Context) {}

func (server) oneNode() bool { return true }

// cluster is a Redis Cluster. Every script touches keys of one slot, so
// scripts run on it unchanged, routed by their first key.
type cluster struct {
	*redis.ClusterClient
}

func (c cluster) scripter(bool) (Client, error) { return c.ClusterClient, nil }

func (c cluster) masters(ctx context.Context) ([]*redis.Client, error) {
	var mu sync.Mutex // ForEachMaster calls at once
	var out []*redis.Client
	err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, m)
		return nil
	})
	return out, err
}

func (c cluster) master(ctx context.Context, key string) (*redis.Client, error) {
	return c.MasterForKey(ctx, key)
}

// failed has the client look at the cluster's slots again (in the
// background) before its next call.
func (c cluster) failed(ctx context.Context) { c.ReloadState(ctx) }

func (cluster) oneNode() bool { return false }
