package setting

import (
	"slices"
	"testing"
)

func TestList(t *testing.T) {
	for _, tc := range []struct {
		text string
		want List
	}{
		{"", nil},
		{" , ,", nil},
		{"a:1", List{"a:1"}},
		{" 10.0.0.1:7000, redis-1.redis:7000 ,", List{"10.0.0.1:7000", "redis-1.redis:7000"}},
	} {
		l := List{"left over"}
		if err := l.UnmarshalText([]byte(tc.text)); err != nil || !slices.Equal(l, tc.want) {
			t.Errorf("UnmarshalText(%q) = %q, %v; want %q", tc.text, l, err, tc.want)
		}
	}
}

func TestProblems(t *testing.T) {
	var ps Problems
	ps.Add("A_B", "got %d", 3)
	if len(ps) != 1 || ps[0].Error() != "A_B: got 3" {
		t.Errorf("Problems = %v", ps)
	}
}
