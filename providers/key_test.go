package providers

import (
	"errors"
	"net/http"
	"testing"
)

func TestParseKey(t *testing.T) {
	h := http.Header{"X-Shop": {"s1"}}
	body := []byte(`{"customer":{"id":42}}`)
	for _, tc := range []struct {
		spec, want string
		wantErr    error
	}{
		{spec: "json:customer.id", want: "42"},
		{spec: "header:X-Shop", want: "s1"},
		{spec: "header:X-Shop+json:customer.id", want: "s1+42"},
		{spec: "json:missing", wantErr: ErrNoID},
	} {
		k, err := ParseKey(tc.spec)
		if err != nil {
			t.Fatalf("ParseKey(%q): %v", tc.spec, err)
		}
		got, err := k.Value(h, body)
		if !errors.Is(err, tc.wantErr) || got != tc.want {
			t.Errorf("%s: Value = %q, %v; want %q, %v", tc.spec, got, err, tc.want, tc.wantErr)
		}
		if k.String() != tc.spec {
			t.Errorf("String() = %q", k.String())
		}
	}
	for _, bad := range []string{"", "stripe", "auto", "json:", "json:a..b", "header:", "header:X Y", "json:a+stripe", "header:X+"} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}
