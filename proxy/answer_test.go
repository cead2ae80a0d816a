package proxy

import (
	"encoding/json"
	"testing"
)

// appendAnswer must write what encoding/json writes: senders and tests
// parse these answers, and the fast path must not change a byte of them.
func TestAppendAnswerMatchesEncodingJSON(t *testing.T) {
	for _, tc := range []struct{ status, id, message string }{
		{outcomeDuplicate, "evt_1NqRstUvWxYz", ""},
		{outcomeInFlight, "72d3162e-cc78-11e3-81ab-4c9367dc0958", "the first delivery of this event is still being processed"},
		{outcomeMissingID, "", "no event ID found"},
		{outcomeStoreUnavailable, "", ""},
		{outcomeDuplicate, `a"quoted"\id`, ""},
		{outcomeDuplicate, "<script>&amp;</script>", ""},
		{outcomeDuplicate, "ünïcødé €", ""},
		{outcomeDuplicate, "line\u2028separator", ""},
		{outcomeDuplicate, "bad utf-8 \xff\xfe", ""},
		{outcomeDuplicate, "tab\there", ""},
	} {
		got := string(appendAnswer(nil, tc.status, tc.id, tc.message))
		if want := marshalAnswer(t, tc.status, tc.id, tc.message); got != want {
			t.Errorf("appendAnswer(%q, %q, %q) = %q, want %q", tc.status, tc.id, tc.message, got, want)
		}
	}
}

func FuzzAppendAnswer(f *testing.F) {
	f.Add(outcomeDuplicate, "evt_1", "")
	f.Add(outcomeInFlight, "d1", "the first delivery of this event is still being processed")
	f.Add("", "", "")
	f.Add(outcomeDuplicate, "<>&\"\\\x00\x7f\u2028\xff", "")
	f.Fuzz(func(t *testing.T, status, id, message string) {
		got := string(appendAnswer([]byte("prefix"), status, id, message))
		if want := "prefix" + marshalAnswer(t, status, id, message); got != want {
			t.Fatalf("appendAnswer(%q, %q, %q) = %q, want %q", status, id, message, got, want)
		}
	})
}

func marshalAnswer(t *testing.T, status, id, message string) string {
	t.Helper()
	b, err := json.Marshal(answerBody{Status: status, EventID: id, Message: message})
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}
