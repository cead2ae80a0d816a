package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// pipelined runs the scripts of a store OpenRedis opens on one server
// (not a cluster, not through Sentinels, not with WaitReplicas). While other
// script calls (claims, completions, releases, lookups) are in flight, a
// call goes through go-redis's autopipeliner, which sends the calls of
// concurrent requests together: one write and one read for a batch, where a
// plain client makes a pool health check, a write and a read for each call.
// A call alone goes straight through the plain client: batching has nothing
// to gain then, and the autopipeliner's hand-offs between goroutines would
// only add latency. Either way a call is one round trip and one atomic
// script.
//
// The autopipeliner is EXPERIMENTAL in go-redis v9.23; go.mod pins the
// version, and a store from NewRedis never uses it.
type pipelined struct {
	*redis.Client
	ap       *redis.AutoPipeliner // the deferred face: Submit, then WaitContext
	inFlight *atomic.Int64        // script calls under way
}

// newPipelined wraps c. Closing c closes the autopipeliner too.
func newPipelined(c *redis.Client) (pipelined, error) {
	// The blocking face's batch size, on the deferred face: the only one
	// whose wait honours a context.
	ap, err := c.AsyncAutoPipelineWithOptions(redis.DefaultBlockingAutoPipelineOptions())
	if err != nil {
		return pipelined{}, fmt.Errorf("dedup: redis autopipeline: %w", err)
	}
	return pipelined{Client: c, ap: ap, inFlight: new(atomic.Int64)}, nil
}

func (p pipelined) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	if p.inFlight.Add(1) == 1 {
		defer p.inFlight.Add(-1)
		return p.Client.EvalSha(ctx, sha1, keys, args...)
	}
	defer p.inFlight.Add(-1)
	return p.eval(ctx, "evalsha", sha1, keys, args)
}

func (p pipelined) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	if p.inFlight.Add(1) == 1 {
		defer p.inFlight.Add(-1)
		return p.Client.Eval(ctx, script, keys, args...)
	}
	defer p.inFlight.Add(-1)
	return p.eval(ctx, "eval", script, keys, args)
}

// eval queues one script call, built as go-redis builds it, and waits for
// its answer as long as ctx lets it: a request's deadline still bounds its
// Redis call. A call already queued when ctx ends may still run, as one
// already sent may; its caller only stops waiting, and gets ctx's error.
func (p pipelined) eval(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, name, payload, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	if err := p.ap.Submit(ctx, cmd).WaitContext(ctx); err != nil && err == ctx.Err() {
		// cmd may still be written to by its batch: answer with another.
		abandoned := redis.NewCmd(ctx, cmdArgs...)
		abandoned.SetErr(err)
		return abandoned
	}
	return cmd
}
