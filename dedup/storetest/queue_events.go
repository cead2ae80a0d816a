package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// eventCases: the events listing (Operator.Events) and each event's
// history of attempts: states, filters, paging under concurrent changes,
// the history's bound, and its survival of a restart.
var eventCases = []queueCase{
	{"events by state", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		for _, k := range []string{"queued", "delivering", "failed", "completed", "retrying"} {
			MustEnqueue(t, s, k)
		}
		ds := byKey(Take(t, s, 4, Lease)) // the oldest four: all but retrying
		if len(ds) != 4 {
			t.Fatalf("Take(4) = %d deliveries", len(ds))
		}
		// Give "queued" back without a timed attempt: no history.
		if err := s.Retry(ctx, ds["queued"], time.Now(), 0, ""); err != nil {
			t.Fatal(err)
		}
		settleTimed(t, "fail", s, ds["failed"], time.Time{}, 500, "the app answered 500")
		settleTimed(t, "succeed", s, ds["completed"], time.Time{}, 201, "")
		r := TakeOne(t, s, Lease)
		if r.Claim.Key != "queued" && r.Claim.Key != "retrying" {
			t.Fatalf("took %s", r.Claim.Key)
		}
		// Whichever came: due in an hour, queued with its history.
		settleTimed(t, "retry", s, r, time.Now().Add(time.Hour), 0, "connection refused")

		want := map[dedup.State][]string{
			dedup.Queued:     {"queued", "retrying"},
			dedup.Delivering: {"delivering"},
			dedup.Failed:     {"failed"},
			dedup.Completed:  {"completed"},
		}
		for state, keys := range want {
			evs := listAll(t, s, dedup.EventQuery{State: state}, 100)
			if got := eventKeys(evs); !slices.Equal(got, keys) {
				t.Errorf("Events(%s) = %v, want %v", state, got, keys)
			}
			for _, ev := range evs {
				if ev.Record.State != state {
					t.Errorf("Events(%s): %s is %s", state, ev.Key, ev.Record.State)
				}
				if ev.AcceptedAt.IsZero() || time.Since(ev.AcceptedAt) > time.Minute {
					t.Errorf("Events(%s): %s accepted at %s", state, ev.Key, ev.AcceptedAt)
				}
			}
		}
		failed := listAll(t, s, dedup.EventQuery{State: dedup.Failed}, 10)[0]
		if h := failed.Record.Delivery.History; len(h) != 1 || h[0].Number != 1 || h[0].Status != 500 || h[0].Error != "the app answered 500" ||
			h[0].Duration != 7*time.Millisecond || time.Since(h[0].At) > time.Minute {
			t.Errorf("failed event's history: %+v", h)
		}
		if d := failed.Record.Delivery; d.Attempts != 1 || d.LastStatus != 500 || failed.Record.Since.IsZero() {
			t.Errorf("failed event: %+v since %s", d, failed.Record.Since)
		}
		done := listAll(t, s, dedup.EventQuery{State: dedup.Completed}, 10)[0]
		if h := done.Record.Delivery.History; len(h) != 1 || h[0].Status != 201 || h[0].Error != "" {
			t.Errorf("completed event's history: %+v", h)
		}
		if done.Record.Result.Status != 201 {
			t.Errorf("completed event's status %d", done.Record.Result.Status)
		}
		for _, ev := range listAll(t, s, dedup.EventQuery{State: dedup.Queued}, 10) {
			h := ev.Record.Delivery.History
			if ev.Key == r.Claim.Key {
				if len(h) != 1 || h[0].Status != 0 || h[0].Error != "connection refused" || ev.Record.Delivery.NextAttemptAt.IsZero() {
					t.Errorf("retried event: %+v", ev.Record.Delivery)
				}
			} else if len(h) != 0 {
				t.Errorf("an event settled without a timed attempt has history %+v", h)
			}
		}
		// Lookup shows the same history.
		if h := MustLookup(t, s, "failed").Delivery.History; len(h) != 1 || h[0].Status != 500 {
			t.Errorf("Lookup(failed).History = %+v", h)
		}
		if err := s.Extend(ctx, ds["delivering"], Lease); err != nil {
			t.Fatal(err)
		}
	}},

	{"events filtered", func(t *testing.T, s queueStore, _ func() queueStore) {
		// Two batches, apart by at least a millisecond: since and until
		// split them at that mark, for the open events (accepted time)
		// and the dead letters (failed time).
		first, second := []string{"a:1", "b:1", "a:2"}, []string{"a:3", "b:2"}
		for _, k := range first {
			MustEnqueue(t, s, k)
		}
		accepted := nextMilli(t)
		for _, k := range second {
			MustEnqueue(t, s, k)
		}
		check := func(state dedup.State, q dedup.EventQuery, want ...string) {
			t.Helper()
			q.State = state
			if got := eventKeys(listAll(t, s, q, 2)); !slices.Equal(got, want) {
				t.Errorf("Events(%s, prefix %q, since %s, until %s) = %v, want %v", state, q.KeyPrefix, q.Since, q.Until, got, want)
			}
		}
		check(dedup.Queued, dedup.EventQuery{}, "a:1", "a:2", "a:3", "b:1", "b:2")
		check(dedup.Queued, dedup.EventQuery{KeyPrefix: "a:"}, "a:1", "a:2", "a:3")
		check(dedup.Queued, dedup.EventQuery{Since: accepted}, "a:3", "b:2")
		check(dedup.Queued, dedup.EventQuery{Until: accepted}, "a:1", "a:2", "b:1")
		check(dedup.Queued, dedup.EventQuery{KeyPrefix: "b:", Until: accepted}, "b:1")
		check(dedup.Queued, dedup.EventQuery{Since: accepted.Add(time.Hour)})

		// Dead-letter them in the same two batches: by failed time now.
		failBatch(t, s, first)
		failed := nextMilli(t)
		failBatch(t, s, second)
		check(dedup.Queued, dedup.EventQuery{})
		check(dedup.Failed, dedup.EventQuery{Since: failed}, "a:3", "b:2")
		check(dedup.Failed, dedup.EventQuery{Until: failed}, "a:1", "a:2", "b:1")
		check(dedup.Failed, dedup.EventQuery{KeyPrefix: "a:", Since: failed}, "a:3")
		check(dedup.Failed, dedup.EventQuery{Since: failed.Add(-time.Hour), Until: failed.Add(time.Hour)}, "a:1", "a:2", "a:3", "b:1", "b:2")
	}},

	{"events paged under changes", func(t *testing.T, s queueStore, _ func() queueStore) {
		// Between pages, events come and go: new ones queued, some of
		// those listed or not yet listed taken and dead-lettered. Every
		// event that stays queued throughout is listed exactly once.
		ctx := context.Background()
		var stay []string
		for i := range 30 {
			k := fmt.Sprintf("p:%02d", i)
			MustEnqueue(t, s, k)
			stay = append(stay, k)
		}
		seen := map[string]int{}
		cursor, pages := "", 0
		for {
			page, err := s.Events(ctx, dedup.EventQuery{State: dedup.Queued, Cursor: cursor, Limit: 4})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range page.Events {
				seen[ev.Key]++
			}
			pages++
			// Changes: two new events, and the oldest two queued leave.
			MustEnqueue(t, s, fmt.Sprintf("new:%02d:a", pages))
			MustEnqueue(t, s, fmt.Sprintf("new:%02d:b", pages))
			for _, d := range Take(t, s, 2, Lease) {
				stay = slices.DeleteFunc(stay, func(k string) bool { return k == d.Claim.Key })
				if err := s.Fail(ctx, d, 500, "x", Keep); err != nil {
					t.Fatal(err)
				}
			}
			if cursor = page.Next; cursor == "" {
				break
			}
			if pages > 100 {
				t.Fatal("no last page after 100")
			}
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("%s listed %d times", k, n)
			}
		}
		for _, k := range stay {
			if seen[k] != 1 {
				t.Errorf("%s stayed queued and was listed %d times", k, seen[k])
			}
		}
		// And the dead letters, now many, paged too: each once.
		all := listAll(t, s, dedup.EventQuery{State: dedup.Failed}, 3)
		keys := eventKeys(all)
		if len(slices.Compact(slices.Clone(keys))) != len(keys) || len(keys) != Stats(t, s).DeadLetters {
			t.Errorf("failed events paged: %v, want each of %d once", keys, Stats(t, s).DeadLetters)
		}
	}},

	{"events history bound and restart", func(t *testing.T, s queueStore, again func() queueStore) {
		MustEnqueue(t, s, "h")
		long := strings.Repeat("é", dedup.AttemptErrorMax) // two bytes each: cut on a character
		for n := 1; n <= 12; n++ {
			d := TakeOne(t, s, Lease)
			settleTimed(t, "retry", s, d, time.Now().Add(-time.Second), 503, long)
			// After each attempt: the newest ones, up to the bound.
			h := MustLookup(t, s, "h").Delivery.History
			if len(h) != min(n, dedup.HistoryLen) || h[len(h)-1].Number != n || h[0].Number != max(1, n-dedup.HistoryLen+1) {
				t.Fatalf("after %d attempts: history numbers %v, want the newest %d", n, numbers(h), min(n, dedup.HistoryLen))
			}
		}
		check := func(s queueStore, when string) {
			t.Helper()
			h := MustLookup(t, s, "h").Delivery.History
			if len(h) != dedup.HistoryLen || h[0].Number != 3 || h[len(h)-1].Number != 12 {
				t.Fatalf("%s: history of %d attempts, numbers %v..., want the newest %d (3 to 12)", when, len(h), numbers(h), dedup.HistoryLen)
			}
			for _, a := range h {
				if len(a.Error) > dedup.AttemptErrorMax || !strings.HasPrefix(long, a.Error) || len(a.Error) < dedup.AttemptErrorMax-1 || a.Status != 503 {
					t.Errorf("%s: attempt %d: status %d, error of %d bytes, want 503 and the error cut to %d bytes", when, a.Number, a.Status, len(a.Error), dedup.AttemptErrorMax)
				}
			}
			evs := listAll(t, s, dedup.EventQuery{State: dedup.Queued}, 10)
			if len(evs) != 1 || !slices.Equal(numbers(evs[0].Record.Delivery.History), numbers(h)) {
				t.Errorf("%s: Events shows %+v, want the history Lookup shows", when, evs)
			}
		}
		check(s, "before the restart")
		check(again(), "after the restart")
	}},

	{"events bad cursor", func(t *testing.T, s queueStore, _ func() queueStore) {
		ctx := context.Background()
		for i := range 3 {
			MustEnqueue(t, s, fmt.Sprint("c", i))
		}
		page, err := s.Events(ctx, dedup.EventQuery{State: dedup.Queued, Limit: 1})
		if err != nil || page.Next == "" {
			t.Fatalf("first page: %+v, %v", page, err)
		}
		for _, q := range []dedup.EventQuery{
			{State: dedup.Queued, Cursor: "!!not base64!!", Limit: 1},
			{State: dedup.Queued, Cursor: "AAAA", Limit: 1},
			{State: dedup.Failed, Cursor: page.Next, Limit: 1}, // another state's
		} {
			if _, err := s.Events(ctx, q); !errors.Is(err, dedup.ErrBadCursor) {
				t.Errorf("Events(%s, cursor %q) = %v, want ErrBadCursor", q.State, q.Cursor, err)
			}
		}
	}},
}

// settleTimed settles d as a worker whose attempt began at began (zero:
// now) and took 7ms would: "succeed", "retry" (due at next) or "fail".
func settleTimed(t *testing.T, op string, s dedup.Queue, d dedup.Delivery, next time.Time, status int, reason string) {
	t.Helper()
	ctx := context.Background()
	d.Began, d.Took = time.Now(), 7*time.Millisecond
	var err error
	switch op {
	case "succeed":
		res := Replayed
		res.Status = status
		err = s.Succeed(ctx, d, res, Keep)
	case "retry":
		err = s.Retry(ctx, d, next, status, reason)
	case "fail":
		err = s.Fail(ctx, d, status, reason, Keep)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", op, d.Claim.Key, err)
	}
}

// failBatch takes and dead-letters the events keys (due, and nothing else is).
func failBatch(t *testing.T, s dedup.Queue, keys []string) {
	t.Helper()
	ds := Take(t, s, len(keys), Lease)
	if got, want := keysOf(ds), slices.Sorted(slices.Values(keys)); !slices.Equal(got, want) {
		t.Fatalf("took %v, want %v", got, want)
	}
	for _, d := range ds {
		if err := s.Fail(context.Background(), d, 500, "x", Keep); err != nil {
			t.Fatal(err)
		}
	}
}

// nextMilli waits until the clock has passed the millisecond it was in,
// and returns the new one: what was written before it is earlier, what is
// written from now on is not.
func nextMilli(t *testing.T) time.Time {
	t.Helper()
	mark := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
	Eventually(t, "the clock to pass a millisecond", func() bool { return !time.Now().Before(mark.Add(time.Millisecond)) })
	return mark.Add(time.Millisecond)
}

// listAll follows the listing from its first page to its last, limit a
// page, failing the test on an error.
func listAll(t *testing.T, s dedup.Queue, q dedup.EventQuery, limit int) []dedup.Event {
	t.Helper()
	var out []dedup.Event
	q.Limit = limit
	for pages := 0; ; pages++ {
		page, err := s.Events(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) > limit {
			t.Fatalf("a page of %d events, limit %d", len(page.Events), limit)
		}
		out = append(out, page.Events...)
		if q.Cursor = page.Next; q.Cursor == "" || pages > 1000 {
			return out
		}
	}
}

func eventKeys(evs []dedup.Event) []string {
	keys := make([]string, len(evs))
	for i, ev := range evs {
		keys[i] = ev.Key
	}
	slices.Sort(keys)
	return keys
}

func byKey(ds []dedup.Delivery) map[string]dedup.Delivery {
	m := map[string]dedup.Delivery{}
	for _, d := range ds {
		m[d.Claim.Key] = d
	}
	return m
}

func numbers(h []dedup.Attempt) []int {
	n := make([]int, len(h))
	for i, a := range h {
		n[i] = a.Number
	}
	return n
}
