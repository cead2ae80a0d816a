package codec

import (
	"errors"
	"reflect"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// FuzzDecodeAsync feeds arbitrary bytes to the decoder of the async
// records the disk and Redis stores read back: it must never panic,
// and what it accepts must encode back to a value that decodes the same.
func FuzzDecodeAsync(f *testing.F) {
	f.Add(EncodeAsync(Async{State: dedup.Queued, Accepted: 1, At: 2}))
	f.Add(EncodeAsync(Async{State: dedup.Delivering, Token: NewToken(), Attempts: 3, LastStatus: 503, LastError: "x"}))
	f.Add(EncodeAsync(Async{State: dedup.Completed, Result: dedup.Result{Status: 201, ContentType: "application/json", Body: []byte(`{"ok":true}`)}, Completed: 1_700_000_000, Attempts: 1}))
	f.Add(EncodeAsync(Async{State: dedup.Failed, At: 5, LastError: "gave up"}))
	f.Fuzz(func(t *testing.T, v []byte) {
		a, err := DecodeAsync(v)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v is not errBadRecord", err)
			}
			return
		}
		again, err := DecodeAsync(EncodeAsync(a))
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", a, err)
		}
		if !reflect.DeepEqual(again, a) {
			t.Fatalf("re-encoded %+v, decoded %+v", a, again)
		}
	})
}
