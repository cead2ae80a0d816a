package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Listing bounds: rows a page shows by default and at most, and how many
// store pages one console page may read looking for rows of the last
// status asked (the store filters on the rest; past that, the page shows
// what it found and a link to go on).
const (
	defaultRows = 50
	maxRows     = 500
	maxReads    = 20
	// maxForm bounds a posted form: a page's worth of selected events.
	maxForm = 1 << 20
)

// bulkBudget bounds one "Retry all matching", within the admin port's
// 30 s write timeout (internal/server.Admin); past it the page says how
// many were queued again and that more remain.
const bulkBudget = 20 * time.Second

// filter is what the dead-letter page's form chooses. The zero value
// chooses every dead letter.
type filter struct {
	// Namespace, if not empty, keeps this namespace's dead letters.
	Namespace string
	// After and Before, if not zero, keep those dead-lettered at or after
	// After and before Before.
	After, Before time.Time
	// Status, if not empty, keeps those whose last attempt got this
	// status: "404", a class "5xx", or "none" (no answer).
	Status string
}

// timeLayouts are what the time fields take: datetime-local's (read as
// UTC, as the page labels it; a fraction of a second after the seconds
// is read too) and RFC 3339.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

// formTime is t as the time fields and the page's links write it: in
// UTC, to the nanosecond asked for (a second's fraction only if any), so
// that the next page and "Retry all matching" keep the same bounds;
// empty if zero.
func formTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.999999999")
}

func parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: not a time (2026-12-01T08:00, UTC)", name)
}

func parseFilter(q url.Values) (filter, error) {
	f := filter{Namespace: strings.TrimSpace(q.Get("namespace")), Status: strings.ToLower(strings.TrimSpace(q.Get("status")))}
	var err error
	if f.After, err = parseTime("failed after", q.Get("failed_after")); err != nil {
		return f, err
	}
	if f.Before, err = parseTime("failed before", q.Get("failed_before")); err != nil {
		return f, err
	}
	if _, ok := statusMatcher(f.Status); !ok {
		return f, errors.New("last status: a status (503), a class (5xx) or none")
	}
	return f, nil
}

// statusMatcher turns the status field into a test; false if it is not
// one the field takes.
func statusMatcher(s string) (func(int) bool, bool) {
	switch {
	case s == "":
		return func(int) bool { return true }, true
	case s == "none":
		return func(st int) bool { return st == 0 }, true
	case len(s) == 3 && s[1:] == "xx" && s[0] >= '1' && s[0] <= '5':
		class := int(s[0]-'0') * 100
		return func(st int) bool { return st >= class && st < class+100 }, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return nil, false
	}
	return func(st int) bool { return st == n }, true
}

// query is f as the page's URL writes it.
func (f filter) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("namespace", f.Namespace)
	set("status", f.Status)
	set("failed_after", formTime(f.After))
	set("failed_before", formTime(f.Before))
	return q
}

// byStatus is the queue with only the dead letters of one last status,
// so that admin.RetryDeadLetters (the API's own code) retries what the
// page shows: the store's listing filters on namespace and time, not on
// status. Asked for limit, it reads limit from the store and returns those
// that match, with the store's cursor: a short page is not the last, an
// empty cursor is.
type byStatus struct {
	Queue
	status func(int) bool
}

func (q byStatus) DeadLetters(ctx context.Context, cursor string, limit int) ([]dedup.DeadLetter, string, error) {
	dls, next, err := q.Queue.DeadLetters(ctx, cursor, limit)
	kept := dls[:0:0]
	for _, dl := range dls {
		if q.status(dl.LastStatus) {
			kept = append(kept, dl)
		}
	}
	return kept, next, err
}

// eventQuery is f as the store's listing of dead letters takes it.
func (f filter) eventQuery(prefix, cursor string, limit int) dedup.EventQuery {
	q := dedup.EventQuery{State: dedup.Failed, Since: f.After, Until: f.Before, Cursor: cursor, Limit: limit}
	if f.Namespace != "" {
		q.KeyPrefix = dedup.EventKey(prefix, f.Namespace, "")
	}
	return q
}

type deadLettersData struct {
	Async      bool
	Filter     filter
	FilterErr  string
	Namespaces []string
	Rows       []admin.DeadLetter
	// Next is the URL of the next page; empty on the last.
	Next string
	// First is the URL of the first page, when this is not it.
	First string
	// Stopped is set when the page stopped reading at maxReads store
	// pages, short of its rows.
	Stopped bool
	// Here is this page's URL, where an action returns to.
	Here string
}

func (c *Console) namespaces() []string {
	var out []string
	for _, r := range c.cfg.Routes {
		out = append(out, r.Namespaces...)
	}
	return out
}

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := deadLettersData{Async: c.cfg.Queue != nil, Namespaces: c.namespaces(), Here: r.URL.RequestURI()}
	p := page{Title: "Dead letters", Nav: "dead-letters", Notice: notice(q), Data: &d}
	if !d.Async {
		c.render(w, r, http.StatusOK, "deadletters", p)
		return
	}
	f, err := parseFilter(q)
	d.Filter = f
	if err != nil {
		d.FilterErr = err.Error()
		c.render(w, r, http.StatusBadRequest, "deadletters", p)
		return
	}
	rows := defaultRows
	if v := q.Get("limit"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= maxRows {
			rows = n
		}
	}
	cursor := q.Get("cursor")
	status, _ := statusMatcher(f.Status)
	for reads := 0; ; reads++ {
		if reads == maxReads {
			d.Stopped = true
			break
		}
		pg, err := c.cfg.Queue.Events(r.Context(), f.eventQuery(c.cfg.KeyPrefix, cursor, rows-len(d.Rows)))
		switch {
		case errors.Is(err, dedup.ErrBadCursor):
			c.fail(w, r, http.StatusBadRequest, "This page's cursor is not one the store gave: start from the first page.")
			return
		case err != nil:
			c.fail(w, r, http.StatusServiceUnavailable, "The store did not answer: "+err.Error())
			return
		}
		for _, ev := range pg.Events {
			if dl := c.deadLetter(f.Namespace, ev); status(dl.LastStatus) {
				d.Rows = append(d.Rows, dl)
			}
		}
		if cursor = pg.Next; cursor == "" || len(d.Rows) >= rows {
			break
		}
	}
	if cursor != "" {
		nq := f.query()
		nq.Set("cursor", cursor)
		nq.Set("limit", strconv.Itoa(rows))
		d.Next = "/ui/dead-letters?" + nq.Encode()
	}
	if q.Get("cursor") != "" {
		d.First = "/ui/dead-letters?" + f.query().Encode()
	}
	c.render(w, r, http.StatusOK, "deadletters", p)
}

// deadLetter is ev as the dead-letter page lists it, its key split
// against the namespace asked for (a route path may hold a ':').
func (c *Console) deadLetter(namespace string, ev dedup.Event) admin.DeadLetter {
	ns, id := dedup.SplitEventKey(c.cfg.KeyPrefix, namespace, ev.Key)
	del := ev.Record.Delivery
	return admin.DeadLetter{Namespace: ns, ID: id, Attempts: del.Attempts, LastStatus: del.LastStatus, LastError: del.LastError,
		FailedAt: ev.Record.Since.UTC().Format(time.RFC3339)}
}

// notice is the message an action's redirect carries back to the page.
func notice(q url.Values) string {
	switch {
	case q.Has("retried"):
		return "Queued again for delivery: " + q.Get("retried") + "."
	case q.Has("forgotten"):
		return "Forgotten: " + q.Get("forgotten") + ". Its next delivery will be forwarded."
	case q.Has("requeued"):
		msg := q.Get("requeued") + " dead letters queued again."
		if q.Has("more") {
			msg += " More match and remain: press Retry all matching again."
		}
		return msg
	}
	return ""
}

// back redirects to the page the form came from (its "return" field),
// with the notice's parameters (key, value, key, value…).
func back(w http.ResponseWriter, r *http.Request, kv ...string) {
	to, err := url.Parse(localPath(r.PostFormValue("return")))
	if err != nil {
		to = &url.URL{Path: "/ui/"}
	}
	q := to.Query()
	for _, k := range []string{"retried", "forgotten", "requeued", "more"} {
		q.Del(k)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	to.RawQuery = q.Encode()
	http.Redirect(w, r, to.String(), http.StatusSeeOther)
}

func (c *Console) noQueue(w http.ResponseWriter, r *http.Request) bool {
	if c.cfg.Queue == nil {
		c.fail(w, r, http.StatusNotFound, "No async route: nothing is ever dead-lettered.")
		return true
	}
	return false
}

// requeue retries one dead letter, and says what went wrong in words.
func (c *Console) requeue(ctx context.Context, ns, id string) (int, string) {
	err := c.cfg.Queue.Requeue(ctx, dedup.EventKey(c.cfg.KeyPrefix, ns, id))
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		return http.StatusNotFound, "No record for " + id + " in " + ns + "."
	case errors.Is(err, dedup.ErrNotFailed):
		return http.StatusConflict, id + " is not dead-lettered: it is queued, being delivered or completed."
	case err != nil:
		return http.StatusServiceUnavailable, "The store did not answer: " + err.Error()
	}
	return 0, ""
}

func (c *Console) retryOne(w http.ResponseWriter, r *http.Request) {
	if c.noQueue(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	_ = r.ParseForm()
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	if status, msg := c.requeue(r.Context(), ns, id); status != 0 {
		c.fail(w, r, status, msg)
		return
	}
	c.cfg.Logger.Info("dead letter queued again from the console", zap.String("namespace", ns), zap.String("event_id", id))
	back(w, r, "retried", id)
}

// retrySelected retries the events whose boxes were ticked: each an
// "event" field, the namespace and the ID path-escaped and joined by '/'.
func (c *Console) retrySelected(w http.ResponseWriter, r *http.Request) {
	if c.noQueue(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return
	}
	n := 0
	for _, v := range r.PostForm["event"] {
		ns, id, ok := splitRef(v)
		if !ok {
			c.fail(w, r, http.StatusBadRequest, "Not an event reference: "+v)
			return
		}
		status, msg := c.requeue(r.Context(), ns, id)
		switch status {
		case 0:
			n++
		case http.StatusNotFound, http.StatusConflict:
			// Retried or forgotten meanwhile (another tab, the CLI).
		default:
			c.fail(w, r, status, msg)
			return
		}
	}
	c.cfg.Logger.Info("selected dead letters queued again from the console", zap.Int("requeued", n))
	back(w, r, "requeued", strconv.Itoa(n))
}

// retryAll retries every dead letter the filter chooses (the form's
// hidden fields), through the bulk retry the API runs, up to its budget.
func (c *Console) retryAll(w http.ResponseWriter, r *http.Request) {
	if c.noQueue(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return
	}
	f, err := parseFilter(r.PostForm)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	// The bulk retry selects by namespace and time, byStatus by status.
	// Before (zero: the moment it began) keeps a dead letter failing
	// again meanwhile from being retried twice by one press.
	sel := admin.RetrySelection{Namespace: f.Namespace, FailedAfter: f.After, FailedBefore: f.Before}
	status, _ := statusMatcher(f.Status)
	ctx, cancel := context.WithTimeout(r.Context(), bulkBudget)
	defer cancel()
	res, err := admin.RetryDeadLetters(ctx, byStatus{c.cfg.Queue, status}, c.cfg.KeyPrefix, sel, "", maxBulk)
	if res.Requeued > 0 {
		c.cfg.Logger.Info("dead letters queued again from the console", zap.Int("requeued", res.Requeued), zap.String("namespace", f.Namespace))
	}
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf("Stopped after %d queued again: %v", res.Requeued, err))
		return
	}
	if res.NextCursor != "" {
		back(w, r, "requeued", strconv.Itoa(res.Requeued), "more", "1")
		return
	}
	back(w, r, "requeued", strconv.Itoa(res.Requeued))
}

// maxBulk bounds one "Retry all matching": the API's own bound.
const maxBulk = 10000

func (c *Console) forgetOne(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	_ = r.ParseForm()
	ns, id := r.PathValue("namespace"), r.PathValue("id")
	existed, err := admin.Forget(r.Context(), c.cfg.Records, c.cfg.KeyPrefix, ns, id)
	switch {
	case err != nil:
		c.fail(w, r, http.StatusServiceUnavailable, "The store did not answer: "+err.Error())
		return
	case !existed:
		c.fail(w, r, http.StatusNotFound, "No record for "+id+" in "+ns+".")
		return
	}
	c.cfg.Logger.Info("event forgotten from the console", zap.String("namespace", ns), zap.String("event_id", id))
	back(w, r, "forgotten", id)
}

// ref is how a ticked box names its event: namespace/id, each
// path-escaped (a namespace may be a route path).
func ref(ns, id string) string { return url.PathEscape(ns) + "/" + url.PathEscape(id) }

func splitRef(v string) (ns, id string, ok bool) {
	a, b, found := strings.Cut(v, "/")
	if !found {
		return "", "", false
	}
	ns, err1 := url.PathUnescape(a)
	id, err2 := url.PathUnescape(b)
	return ns, id, err1 == nil && err2 == nil && ns != "" && id != ""
}

func pathEscape(s string) string { return url.PathEscape(s) }

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
