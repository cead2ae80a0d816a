package pgname

import (
	"errors"
	"strings"
	"testing"
)

// FuzzCheckPrefix: a prefix CheckPrefix accepts is written into
// SQL unquoted, so it must be a plain lower-case identifier start that
// leaves every table and index name within PostgreSQL's 63 bytes.
func FuzzCheckPrefix(f *testing.F) {
	for _, seed := range []string{"webhook_dedup_", "_", "a1_", "", "1a", "A_", `x"; DROP TABLE y; --`, "é_", strings.Repeat("a", 41)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, prefix string) {
		if err := CheckPrefix(prefix); err != nil {
			if !errors.Is(err, ErrBadPrefix) {
				t.Errorf("CheckPrefix(%q) = %v, want ErrBadPrefix", prefix, err)
			}
			return
		}
		if prefix == "" || len(prefix)+len("records_expires_at") > 63 || (prefix[0] >= '0' && prefix[0] <= '9') {
			t.Fatalf("accepted %q", prefix)
		}
		for _, c := range []byte(prefix) {
			if !(c == '_' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
				t.Fatalf("accepted %q, with %q", prefix, c)
			}
		}
	})
}
