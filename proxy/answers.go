package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/policy"
)

// HeaderOutcome is the response header naming what the proxy did.
const HeaderOutcome = "X-Webhook-Dedup"

// storeErrorRetryAfter is the Retry-After, in seconds, of a 503 answered
// while the store is unreachable.
const storeErrorRetryAfter = "5"

// answer writes a response of the proxy's own, a small JSON document, and
// returns it as the webhook's result, with err as its reason.
func (h *Handler) answer(w http.ResponseWriter, id string, status int, outcome, message string, err error) result {
	b := appendAnswer(make([]byte, 0, 64+len(id)+len(message)), outcome, id, message)
	// The four values in one allocation, where a Set each makes one
	// each; every one capped, so that adding to one cannot write over the
	// next. The names are in canonical form, as Set would make them.
	v := [...]string{outcome, "application/json", "no-store", strconv.Itoa(len(b))}
	vals := v[:]
	hdr := w.Header()
	hdr[HeaderOutcome] = vals[0:1:1]
	hdr["Content-Type"] = vals[1:2:2]
	hdr["Cache-Control"] = vals[2:3:3]
	hdr["Content-Length"] = vals[3:4:4]
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return result{status: status, outcome: outcome, err: err}
}

// duplicate answers a duplicate of a completed event: the original answer
// when it was kept for replay, else the proxy's own.
func (h *Handler) duplicate(w http.ResponseWriter, wh *webhook, rec dedup.Record) result {
	mismatch := h.mismatch(wh, rec)
	if h.cfg.ReplayResponse && rec.Result.Status != 0 && (len(rec.Result.Body) > 0 || rec.Result.ContentType != "") {
		w.Header().Set(HeaderOutcome, outcomeDuplicate)
		if rec.Result.ContentType != "" {
			w.Header().Set("Content-Type", rec.Result.ContentType)
		}
		w.WriteHeader(rec.Result.Status)
		_, _ = w.Write(rec.Result.Body)
		return result{status: rec.Result.Status, outcome: outcomeDuplicate, mismatch: mismatch}
	}
	res := h.answer(w, wh.id, http.StatusOK, outcomeDuplicate, "", nil)
	res.mismatch = mismatch
	return res
}

// mismatch reports, and counts, a duplicate of a completed event whose body
// differs from the original's (in shadow mode too, where it is forwarded).
func (h *Handler) mismatch(wh *webhook, rec dedup.Record) bool {
	if wh.body == nil || !rec.Result.KnownBody() || rec.Result.SameBody(wh.bodySum()) {
		return false
	}
	h.m.payloadMismatch.WithLabelValues(wh.route.Path).Inc()
	return true
}

// inFlight answers a duplicate whose first copy is still with the upstream.
func (h *Handler) inFlight(w http.ResponseWriter, wh *webhook, rec dedup.Record) result {
	status := h.cfg.InflightStatus
	if wh.ext.InflightStatus != 0 {
		status = wh.ext.InflightStatus
	}
	secs := int64((rec.TTL + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	return h.answer(w, wh.id, status, outcomeInFlight, "the first delivery of this event is still being processed", nil)
}

// storeUnavailable answers a webhook whose store call failed: 503, or with
// ForwardOnStoreError, the upstream's answer, unchecked.
func (h *Handler) storeUnavailable(w http.ResponseWriter, r *http.Request, wh *webhook, err error) result {
	if h.cfg.OnStoreError == policy.ForwardOnStoreError {
		return h.forward(w, r, wh, outcomeForwardedUnchecked, nil).because(err)
	}
	w.Header().Set("Retry-After", storeErrorRetryAfter)
	return h.answer(w, wh.id, http.StatusServiceUnavailable, outcomeStoreUnavailable, "dedup store unavailable, retry later", err)
}

// senderGone ends a webhook whose sender hung up before it was forwarded
// (while its event was claimed, or while it waited for the first copy):
// nothing was forwarded and no claim is kept. The answer is for a sender
// that only half-closed its connection, if any: retry later.
func (h *Handler) senderGone(w http.ResponseWriter, wh *webhook, err error) result {
	w.Header().Set("Retry-After", storeErrorRetryAfter)
	return h.answer(w, wh.id, http.StatusServiceUnavailable, outcomeClientGone, "the sender went away", err)
}

// answerBody is the JSON document of the proxy's own answers.
type answerBody struct {
	Status  string `json:"status"`
	EventID string `json:"event_id,omitempty"`
	Message string `json:"message,omitempty"`
}

// appendAnswer appends answerBody{status, id, message} as encoding/json
// writes it, and a newline, without its reflection: this is every
// duplicate's answer. Strings it would escape (quotes, controls, <, >, &,
// non-ASCII) are rare in IDs and never in the proxy's own words; they go
// through encoding/json.
func appendAnswer(b []byte, status, id, message string) []byte {
	if !plainJSON(status) || !plainJSON(id) || !plainJSON(message) {
		enc, _ := json.Marshal(answerBody{Status: status, EventID: id, Message: message})
		return append(append(b, enc...), '\n')
	}
	b = append(b, `{"status":"`...)
	b = append(b, status...)
	if id != "" {
		b = append(b, `","event_id":"`...)
		b = append(b, id...)
	}
	if message != "" {
		b = append(b, `","message":"`...)
		b = append(b, message...)
	}
	return append(b, "\"}\n"...)
}

// plainJSON reports whether encoding/json writes s between quotes as it is.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
