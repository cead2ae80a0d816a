package proxy

import (
	"net/http"
	"testing"
)

// headerSink is a ResponseWriter that keeps only its header.
type headerSink struct{ h http.Header }

func (s *headerSink) Header() http.Header       { return s.h }
func (*headerSink) WriteHeader(int)             {}
func (*headerSink) Write(p []byte) (int, error) { return len(p), nil }

// TestForwardingMarksWithoutAllocating: the relayed answer is marked with
// its outcome, the one upstreamError set last, and marking it costs no
// allocation.
func TestForwardingMarksWithoutAllocating(t *testing.T) {
	for _, outcome := range []string{outcomeForwarded, outcomeUpstreamError} {
		t.Run(outcome, func(t *testing.T) {
			w := &headerSink{h: http.Header{}}
			f := &forwarding{ResponseWriter: w, outcome: outcome}
			if n := testing.AllocsPerRun(100, func() {
				f.status = 0
				f.WriteHeader(http.StatusOK)
			}); n != 0 {
				t.Errorf("WriteHeader allocates %v times", n)
			}
			if got := w.h.Values(HeaderOutcome); len(got) != 1 || got[0] != outcome {
				t.Errorf("%s: %q, want %q", HeaderOutcome, got, outcome)
			}
		})
	}
}
