package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Durability is what Redis's configuration says about the async queue's
// promise: that an event answered 202 is delivered.
type Durability struct {
	// Readable is false when neither CONFIG GET nor INFO could be read
	// (managed Redis often forbids CONFIG, an ACL may forbid both): then
	// nothing below is known.
	Readable bool
	// FromInfo is set when CONFIG GET was refused and the settings come
	// from INFO, which does not tell appendfsync (AppendFsync is empty).
	FromInfo bool
	// AppendOnly, AppendFsync and MaxmemoryPolicy are the settings read
	// (on a cluster, from every master; the first that differs wins).
	AppendOnly, AppendFsync, MaxmemoryPolicy string
	// Problems says, for each setting that loses accepted events, what
	// they may not survive and what to change. Empty when the settings
	// keep them (or could not be read).
	Problems []string
	// Unread is why CONFIG GET (and INFO, when Readable is false) could
	// not be read.
	Unread string
}

// OK reports whether the settings were read and keep accepted events.
func (d Durability) OK() bool { return d.Readable && len(d.Problems) == 0 }

// String is the verdict, for a log line.
func (d Durability) String() string {
	switch {
	case !d.Readable:
		return "cannot read Redis's appendonly and maxmemory-policy (" + d.Unread + "): make sure appendonly is yes " +
			"(appendfsync everysec or always) and maxmemory-policy is noeviction, or a restart or a full memory can lose events already answered 202"
	case len(d.Problems) == 0 && d.FromInfo:
		return "appendonly yes, maxmemory-policy noeviction (read from INFO: CONFIG GET was refused, so appendfsync is unknown; " +
			"with everysec a kill of Redis while its disk is slow, or a crash of the machine, can lose the last 2 seconds of events, with no the last 30 seconds or so): accepted events survive a Redis restart"
	case len(d.Problems) == 0:
		v := "appendonly yes, appendfsync " + d.AppendFsync + ", maxmemory-policy noeviction: accepted events survive a Redis restart"
		if d.AppendFsync == "everysec" {
			// Redis answers a write before it is in the file while an
			// fsync is under way (for up to 2 s on a slow disk): a kill
			// of Redis loses those too, not only a crash of the machine.
			v += " (a kill of Redis while its disk is slow, or a crash of the machine, can lose the last 2 seconds of them; appendfsync always keeps them)"
		}
		return v
	default:
		return strings.Join(d.Problems, "; ")
	}
}

// CheckDurability reads appendonly, appendfsync and maxmemory-policy (on a
// cluster, of every master) and says whether an event the async queue
// accepted survives a restart of Redis and a full memory. An error means
// Redis could not be asked; a refused CONFIG GET is a verdict (Readable
// false), not an error.
func (s *Store) CheckDurability(ctx context.Context) (Durability, error) {
	nodes, err := s.client.masters(ctx)
	if err != nil {
		return Durability{}, fmt.Errorf("dedup: check durability: %w", err)
	}
	d := Durability{Readable: true}
	for _, n := range nodes {
		for _, setting := range []struct {
			name string
			into *string
		}{{"appendonly", &d.AppendOnly}, {"appendfsync", &d.AppendFsync}, {"maxmemory-policy", &d.MaxmemoryPolicy}} {
			v, err := configGet(ctx, n, setting.name)
			var answered redis.Error
			if errors.As(err, &answered) || (err != nil && strings.Contains(err.Error(), "no such setting")) {
				return s.durabilityFromInfo(ctx, err.Error())
			}
			if err != nil {
				return Durability{}, fmt.Errorf("dedup: check durability: %w", err)
			}
			if *setting.into == "" || (*setting.into != v && isWorse(setting.name, v)) {
				*setting.into = v
			}
		}
	}
	d.problems()
	return d, nil
}

// durabilityFromInfo is the verdict from INFO, for a server that refused
// CONFIG GET (why).
func (s *Store) durabilityFromInfo(ctx context.Context, why string) (Durability, error) {
	infos, err := s.Info(ctx)
	var answered redis.Error
	if errors.As(err, &answered) {
		return Durability{Unread: why + "; INFO: " + err.Error()}, nil
	}
	if err != nil {
		return Durability{}, fmt.Errorf("dedup: check durability: %w", err)
	}
	d := Durability{Readable: true, FromInfo: true, Unread: why, AppendOnly: "yes", MaxmemoryPolicy: "noeviction"}
	for _, i := range infos {
		if !i.AOF {
			d.AppendOnly = "no"
		}
		if i.Policy != "noeviction" {
			d.MaxmemoryPolicy = i.Policy
		}
	}
	d.problems()
	return d, nil
}

// problems fills in d.Problems from the settings read.
func (d *Durability) problems() {
	if d.AppendOnly != "yes" {
		d.Problems = append(d.Problems, "appendonly is "+d.AppendOnly+": a restart of Redis loses every event accepted since its last snapshot, and without snapshots all of them (set appendonly yes)")
	} else if d.AppendFsync == "no" {
		d.Problems = append(d.Problems, "appendfsync is no: a crash of the machine can lose the events of the last 30 seconds or so, whenever the system flushed last (set appendfsync everysec, or always)")
	}
	if d.MaxmemoryPolicy != "noeviction" {
		d.Problems = append(d.Problems, "maxmemory-policy is "+d.MaxmemoryPolicy+": once Redis is full it evicts keys, queued events and records among them (set maxmemory-policy noeviction, so a full Redis refuses new events with a 503 instead)")
	}
}

// isWorse reports whether v is a riskier value of setting than a good one,
// so that a cluster's verdict is its weakest master's.
func isWorse(setting, v string) bool {
	switch setting {
	case "appendonly":
		return v != "yes"
	case "appendfsync":
		return v == "no" || v == "everysec"
	default:
		return v != "noeviction"
	}
}
