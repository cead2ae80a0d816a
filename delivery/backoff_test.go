package delivery

import (
	"testing"
	"time"
)

// TestSchedule: the default intervals with a cap of 25 attempts run out
// after about 1.3 h on average, 2.6 h at most (what the report measured);
// without a cap the retries run for the whole of RETRY_MAX_AGE.
func TestSchedule(t *testing.T) {
	longest, average := Schedule(time.Second, 10*time.Minute, 72*time.Hour, 25)
	if longest < 2*time.Hour+30*time.Minute || longest > 2*time.Hour+45*time.Minute || average != longest/2 {
		t.Errorf("25 attempts: longest %s, average %s; want about 2.6 h and half of it", longest, average)
	}
	if longest, average := Schedule(time.Second, 10*time.Minute, 72*time.Hour, 0); longest != 72*time.Hour || average != 72*time.Hour {
		t.Errorf("no cap: %s, %s; want RETRY_MAX_AGE both", longest, average)
	}
	if longest, _ := Schedule(time.Second, time.Hour, 2*time.Hour, 1000); longest != 2*time.Hour {
		t.Errorf("a cap past RETRY_MAX_AGE: longest %s, want RETRY_MAX_AGE", longest)
	}
}
