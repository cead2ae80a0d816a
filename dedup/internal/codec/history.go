package codec

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// An async event's history of attempts is kept as lines of JSON, oldest
// first, one attempt a line, at most dedup.HistoryLen of them:
//
//	{"n":3,"at":1714557600123,"d":12,"s":500,"e":"the app answered 500"}
//
// (n the attempt's number, at when it began in unix ms, d its duration in
// ms, s the app's status, e the error; s and e omitted when empty). JSON
// lines because Redis's Lua appends to them as text (queue_settle.lua)
// and PostgreSQL keeps them as a jsonb array of the same objects; no
// line can hold a newline, which JSON escapes.
type attemptJSON struct {
	N  int    `json:"n"`
	At int64  `json:"at"`
	D  int64  `json:"d"`
	S  int    `json:"s,omitempty"`
	E  string `json:"e,omitempty"`
}

// EncodeAttempt is a's line, without its newline.
func EncodeAttempt(a dedup.Attempt) []byte {
	b, _ := json.Marshal(attemptJSON{N: a.Number, At: a.At.UnixMilli(), D: a.Duration.Milliseconds(), S: a.Status, E: a.Error})
	return b
}

// AppendAttempt is history with a's line after the others, and only the
// newest dedup.HistoryLen lines kept.
func AppendAttempt(history []byte, a dedup.Attempt) []byte {
	lines := bytes.Split(bytes.TrimSpace(history), []byte("\n"))
	if len(lines) == 1 && len(lines[0]) == 0 {
		lines = nil
	}
	lines = append(lines, EncodeAttempt(a))
	if len(lines) > dedup.HistoryLen {
		lines = lines[len(lines)-dedup.HistoryLen:]
	}
	return bytes.Join(lines, []byte("\n"))
}

// DecodeHistory reads the lines AppendAttempt (or queue_settle.lua)
// wrote; a line it cannot read is left out, not an error: the history is
// for reading, never for deciding.
func DecodeHistory(history []byte) []dedup.Attempt {
	var out []dedup.Attempt
	for line := range bytes.SplitSeq(history, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var j attemptJSON
		if json.Unmarshal(line, &j) != nil {
			continue
		}
		out = append(out, fromJSON(j))
	}
	return out
}

// DecodeHistoryArray reads the history as a JSON array of the same
// objects (PostgreSQL's jsonb).
func DecodeHistoryArray(history []byte) []dedup.Attempt {
	var js []attemptJSON
	if len(history) == 0 || json.Unmarshal(history, &js) != nil {
		return nil
	}
	out := make([]dedup.Attempt, 0, len(js))
	for _, j := range js {
		out = append(out, fromJSON(j))
	}
	return out
}

func fromJSON(j attemptJSON) dedup.Attempt {
	return dedup.Attempt{Number: j.N, At: time.UnixMilli(j.At), Duration: time.Duration(j.D) * time.Millisecond, Status: j.S, Error: j.E}
}

// EventCursor is where a page of the events listing ends: the state it
// lists, and the last event's time (unix ms, as its index orders it) and
// key. Its text form is opaque to the caller.
type EventCursor struct {
	State dedup.State
	At    int64
	Key   string
}

// String is c's opaque form.
func (c EventCursor) String() string {
	b := make([]byte, 0, 9+len(c.Key))
	b = append(b, byte(c.State))
	b = binary.BigEndian.AppendUint64(b, uint64(c.At))
	return base64.RawURLEncoding.EncodeToString(append(b, c.Key...))
}

// ParseEventCursor reads s, a cursor of a page of state; the zero cursor
// and false for the empty one (the first page); dedup.ErrBadCursor if it
// is not one String made for state.
func ParseEventCursor(s string, state dedup.State) (EventCursor, bool, error) {
	if s == "" {
		return EventCursor{}, false, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 9 || dedup.State(b[0]) != state {
		return EventCursor{}, false, fmt.Errorf("%w %q", dedup.ErrBadCursor, s)
	}
	return EventCursor{State: state, At: int64(binary.BigEndian.Uint64(b[1:9])), Key: string(b[9:])}, true, nil
}

// After reports whether an index entry at (at, key) comes after c.
func (c EventCursor) After(at int64, key string) bool {
	return at > c.At || (at == c.At && key > c.Key)
}
