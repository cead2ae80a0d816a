package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/webhook-dedup/webhook-dedup/admin"
	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// maxShownBody is how much of a body the event page shows.
const maxShownBody = 64 << 10

// secretHeaderWords mark the headers whose values the event page masks:
// signatures (Stripe-Signature, X-Hub-Signature-256, webhook-signature,
// X-Shopify-Hmac-Sha256…), credentials and cookies.
var secretHeaderWords = []string{"signature", "authorization", "hmac", "token", "secret", "cookie", "api-key", "apikey", "password"}

// masked is what a secret header's value is shown as.
const masked = "•••••• (masked)"

type header struct{ Name, Value string }

type eventData struct {
	Namespace, ID string
	Namespaces    []string
	// Found is false when nothing was asked or the store has no record.
	Found bool
	Event admin.Event
	// Failed is whether it can be retried.
	Failed      bool
	NextAttempt string
	// Attempts are the last attempts, oldest first: the record's history
	// (dedup.HistoryLen kept), or its last attempt alone for a record
	// written before the history was kept (HistoryKept false).
	Attempts    []dedup.Attempt
	HistoryKept bool
	Headers     []header
	// RequestKept says whether the store gave the request (headers, body);
	// RequestNote says why not.
	RequestKept bool
	RequestNote string
	Body        string
	// BodyCut counts the bytes past maxShownBody not shown.
	BodyCut int
	// BodyNote says how the body is shown (JSON, text, binary).
	BodyNote string
	Here     string
}

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := eventData{Namespace: strings.TrimSpace(q.Get("namespace")), ID: strings.TrimSpace(q.Get("id")), Namespaces: c.namespaces(), Here: r.URL.RequestURI()}
	p := page{Title: "Event", Nav: "event", Notice: notice(q), Data: &d}
	if d.Namespace == "" || d.ID == "" {
		c.render(w, r, http.StatusOK, "event", p)
		return
	}
	p.Title = "Event " + d.ID
	rec, err := c.cfg.Records.Lookup(r.Context(), dedup.EventKey(c.cfg.KeyPrefix, d.Namespace, d.ID))
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		p.Error = "No record for " + d.ID + " in " + d.Namespace + ": never seen, expired or forgotten."
		c.render(w, r, http.StatusNotFound, "event", p)
		return
	case err != nil:
		c.fail(w, r, http.StatusServiceUnavailable, "The store did not answer: "+err.Error())
		return
	}
	now := c.cfg.Now()
	d.Found, d.Event, d.Failed = true, admin.NewEvent(d.Namespace, d.ID, rec, now), rec.State == dedup.Failed
	if d.Event.NextAttemptAt != "" {
		d.NextAttempt = d.Event.NextAttemptAt + " (in " + ago(rec.Delivery.NextAttemptAt.Sub(now)) + ")"
	}
	switch h := rec.Delivery.History; {
	case len(h) > 0:
		d.Attempts, d.HistoryKept = h, true
	case rec.Delivery.Attempts > 0:
		// Recorded before the history was kept: the outcome, not its time.
		d.Attempts = []dedup.Attempt{{Number: rec.Delivery.Attempts, Status: rec.Delivery.LastStatus, Error: rec.Delivery.LastError}}
	}
	d.RequestNote = c.request(r, &d, rec)
	c.render(w, r, http.StatusOK, "event", p)
}

// request fills in d's headers and body from the request the store keeps
// for the event, or says why there is none.
func (c *Console) request(r *http.Request, d *eventData, rec dedup.Record) string {
	if c.cfg.Queue == nil {
		return "No async route: requests are never kept, only forwarded."
	}
	req, err := c.cfg.Queue.Request(r.Context(), dedup.EventKey(c.cfg.KeyPrefix, d.Namespace, d.ID))
	switch {
	case errors.Is(err, dedup.ErrNoRequest) && rec.Delivery.Attempts > 0:
		// Only an async event's record counts attempts.
		return "Completed: its request is not kept once delivered."
	case errors.Is(err, dedup.ErrNoRequest):
		return "A sync route's record: its request is forwarded, never kept."
	case errors.Is(err, dedup.ErrNotFound):
		return "No longer kept: the event expired or was forgotten since."
	case err != nil:
		return "The request could not be read: " + err.Error()
	}
	d.RequestKept = true
	d.Headers = maskHeaders(req.Header)
	d.Body, d.BodyCut, d.BodyNote = showBody(req.Body)
	return ""
}

// maskHeaders lists h sorted by name, secret values masked.
func maskHeaders(h http.Header) []header {
	var out []header
	for name, values := range h {
		secret := slices.ContainsFunc(secretHeaderWords, func(w string) bool { return strings.Contains(strings.ToLower(name), w) })
		for _, v := range values {
			if secret {
				v = masked
			}
			out = append(out, header{name, v})
		}
	}
	slices.SortStableFunc(out, func(a, b header) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// showBody is body as the page shows it: JSON indented, text as is,
// binary as a note, cut at maxShownBody (on a character's boundary), with
// the count of bytes cut.
func showBody(body []byte) (text string, cut int, note string) {
	shown := body
	note = fmt.Sprintf("%d bytes", len(body))
	var pretty bytes.Buffer
	switch {
	case len(body) == 0:
		return "", 0, "empty"
	case json.Valid(body) && json.Indent(&pretty, body, "", "  ") == nil:
		shown, note = pretty.Bytes(), note+", JSON (indented)"
	case !utf8.Valid(body):
		return "", 0, note + ", not text: not shown"
	}
	if len(shown) > maxShownBody {
		end := maxShownBody
		for end > 0 && !utf8.RuneStart(shown[end]) {
			end--
		}
		cut, shown = len(shown)-end, shown[:end]
	}
	return string(shown), cut, note
}

// took is an attempt's duration as the stores keep it, to the
// millisecond: "<1ms" below.
func took(d time.Duration) string {
	if d < time.Millisecond {
		return "<1ms"
	}
	return d.Round(time.Millisecond).String()
}

// ago is d as a person reads it: 3s, 4m10s, 2h5m.
func ago(d time.Duration) string {
	switch {
	case d <= 0:
		return "now"
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}
