package dynamoconf

import (
	"strings"
	"testing"

	"github.com/webhook-dedup/webhook-dedup/setting"
)

func TestProblemsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		table  string
		replay int
		want   string // empty: no problem
	}{
		{"a name", "webhook-dedup", 65536, ""},
		{"an ARN", "arn:aws:dynamodb:eu-west-1:123456789012:table/webhook-dedup", 65536, ""},
		{"no table, any replay", "", 1 << 20, ""},
		{"bad name", "a b", 65536, `DYNAMODB_TABLE: "a b" is not a table name`},
		{"short name", "ab", 65536, "DYNAMODB_TABLE"},
		{"replay at the most", "t-1", ReplayMax, ""},
		{"replay larger than an item", "t-1", 400000, "REPLAY_MAX_BYTES: 400000 is more than DynamoDB's items hold"},
	} {
		s := Settings{Table: tc.table}
		problems := s.Complete(setting.Scope{Chosen: tc.table != "", ReplayMaxBytes: tc.replay})
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s: %v, want none", tc.name, problems)
		case tc.want != "" && (len(problems) != 1 || !strings.HasPrefix(problems[0].Error(), tc.want)):
			t.Errorf("%s: %v, want one problem starting %q", tc.name, problems, tc.want)
		}
	}
}
