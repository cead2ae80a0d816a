package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipelined runs the scripts of a store Open opens on one server (not a
// cluster, not through Sentinels, not with WaitReplicas): claims,
// completions, releases, lookups, the queue's. A call alone goes straight
// to Redis on the plain client. A call made while another is on its way
// to Redis waits for it, with every other call made meanwhile, and the
// first of them then sends them all as one pipeline (go-redis's plain
// Pipeline): one write and one read for the batch, where a plain client
// makes a pool health check, a write and a read for each call. The caller
// that sends a batch is one of its callers, so no goroutine of the
// client's own is woken to send it (as go-redis's autopipeliner does),
// and each caller is woken once, when its answer is in or its turn to
// send has come. Either way a call is one round trip and one atomic
// script.
type pipelined struct {
	*redis.Client
	b *batcher
}

// newPipelined wraps c. It starts nothing: closing c is all there is to
// close. (It cannot fail; the error is for its caller's sake.)
func newPipelined(c *redis.Client) (pipelined, error) {
	return pipelined{Client: c, b: &batcher{}}, nil
}

func (p pipelined) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return p.process(ctx, evalCmd(ctx, "evalsha", sha1, keys, args))
}

func (p pipelined) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.process(ctx, evalCmd(ctx, "eval", script, keys, args))
}

// evalCmd builds one script call as go-redis builds it.
func evalCmd(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
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
	return cmd
}

// batcher lets one call or one batch at a time be on its way to Redis,
// and gathers the calls made meanwhile into the next batch.
type batcher struct {
	mu sync.Mutex
	// busy: a call or a batch is on its way to Redis.
	busy bool
	// next gathers the calls made while busy; nil: none yet.
	next *batch
	// spare is the calls slice of a batch already sent, for the next
	// batch to reuse.
	spare []call
}

// batch is the calls one pipeline sends. Its first caller leads it: it
// waits for its turn, then sends it. Until then (under batcher.mu) later
// calls join it.
type batch struct {
	calls []call
	// turn is closed when the batch is to be sent, done once every cmd
	// has its answer.
	turn, done chan struct{}
	// Under batcher.mu: turned once turn is closed; orphaned when the
	// leader gave up waiting before its turn, for whoever finishes the
	// call on its way to send the batch instead.
	turned, orphaned bool
}

// call is one command in a batch, and its caller's context.
type call struct {
	cmd redis.Cmder
	ctx context.Context
}

// process sends cmd, alone or in a batch, and waits for its answer as long
// as ctx lets it: a request's deadline still bounds its Redis call. A call
// whose ctx ends before its batch is sent is left out of it; one already
// sent may still run, as a call sent alone may, and its caller only stops
// waiting, with ctx's error.
func (p pipelined) process(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	args := cmd.Args() // read before another goroutine may send cmd
	b := p.b
	b.mu.Lock()
	if !b.busy {
		b.busy = true
		b.mu.Unlock()
		defer p.finish()
		_ = p.Client.Process(ctx, cmd)
		return cmd
	}
	nb := b.next
	lead := nb == nil
	if lead {
		nb = &batch{calls: b.spare, turn: make(chan struct{}), done: make(chan struct{})}
		b.spare = nil
		b.next = nb
	}
	nb.calls = append(nb.calls, call{cmd, ctx})
	b.mu.Unlock()
	if lead {
		select {
		case <-nb.turn:
		case <-ctx.Done():
			b.mu.Lock()
			turned := nb.turned
			nb.orphaned = !turned
			b.mu.Unlock()
			if !turned {
				return abandoned(ctx, args)
			}
		}
		b.mu.Lock()
		b.next = nil // later calls wait for this batch
		b.mu.Unlock()
		defer p.finish()
		p.send(nb)
		return cmd
	}
	select {
	case <-nb.done:
		return cmd
	case <-ctx.Done():
		return abandoned(ctx, args)
	}
}

// finish passes the way to Redis on once a call or a batch is answered:
// to the leader of the batch gathered meanwhile, or, if its leader gave up
// waiting, by sending that batch here; with none, it frees the way.
func (p pipelined) finish() {
	b := p.b
	for {
		b.mu.Lock()
		nb := b.next
		switch {
		case nb == nil:
			b.busy = false
			b.mu.Unlock()
			return
		case !nb.orphaned:
			nb.turned = true
			b.mu.Unlock()
			close(nb.turn)
			return
		}
		b.next = nil
		b.mu.Unlock()
		p.send(nb)
	}
}

// send sends nb's calls as one pipeline. A call whose caller stopped
// waiting is left out, answered with its ctx's error. The pipeline's
// context keeps the latest of the callers' deadlines (none if one has
// none), so that no call is cut short by another's, and no caller's
// cancellation: each caller stops waiting on its own.
func (p pipelined) send(nb *batch) {
	defer func() {
		close(nb.done)
		clear(nb.calls)
		p.b.mu.Lock()
		p.b.spare = nb.calls[:0]
		p.b.mu.Unlock()
	}()
	cmds := make([]redis.Cmder, 0, len(nb.calls))
	var first context.Context
	var latest time.Time
	bounded := true
	for _, c := range nb.calls {
		if err := c.ctx.Err(); err != nil {
			c.cmd.SetErr(err)
			continue
		}
		cmds = append(cmds, c.cmd)
		if first == nil {
			first = c.ctx
		}
		if d, ok := c.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(latest) {
			latest = d
		}
	}
	switch len(cmds) {
	case 0:
	case 1:
		_ = p.Client.Process(first, cmds[0])
	default:
		ctx := context.WithoutCancel(first)
		cancel := context.CancelFunc(func() {})
		if bounded {
			ctx, cancel = context.WithDeadline(ctx, latest)
		}
		pipe := p.Client.Pipeline()
		_ = pipe.BatchProcess(ctx, cmds...)
		_, _ = pipe.Exec(ctx)
		cancel()
	}
}

// abandoned is the answer to a caller that stopped waiting for its call,
// which its batch may still write to: another Cmd, holding ctx's error.
func abandoned(ctx context.Context, args []any) *redis.Cmd {
	a := redis.NewCmd(ctx, args...)
	a.SetErr(ctx.Err())
	return a
}
