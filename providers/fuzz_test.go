package providers

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// checkID asserts what every answer of EventID must satisfy.
func checkID(t *testing.T, id string, err error) {
	t.Helper()
	if err != nil {
		if id != "" {
			t.Fatalf("ID %q returned with error %v", id, err)
		}
		if !errors.Is(err, ErrNoID) && !errors.Is(err, ErrInvalidID) && !errors.Is(err, ErrNotEvent) {
			t.Fatalf("error %v is none of ErrNoID, ErrInvalidID, ErrNotEvent", err)
		}
		return
	}
	if id == "" {
		t.Fatal("empty ID without an error")
	}
	if len(id) > MaxIDLen {
		t.Fatalf("ID of %d bytes, longer than %d", len(id), MaxIDLen)
	}
	if strings.ContainsFunc(id, unicode.IsControl) {
		t.Fatalf("ID %q holds a control character", id)
	}
	if strings.TrimSpace(id) != id {
		t.Fatalf("ID %q is not trimmed", id)
	}
}

// expectID is an independent statement of the ID rules: trim spaces;
// empty is missing; too long or holding a control character is invalid.
func expectID(v string) (string, error) {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return "", ErrNoID
	case len(v) > MaxIDLen || strings.ContainsFunc(v, unicode.IsControl):
		return "", ErrInvalidID
	}
	return v, nil
}

func sameAnswer(t *testing.T, id string, err error, wantID string, wantErr error) {
	t.Helper()
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Fatalf("EventID = %q, %v; want error %v", id, err, wantErr)
		}
		return
	}
	if err != nil || id != wantID {
		t.Fatalf("EventID = %q, %v; want %q", id, err, wantID)
	}
}

func FuzzParseSource(f *testing.F) {
	for _, seed := range []struct {
		spec, value, body string
	}{
		{"stripe", "", `{"id":"evt_1"}`},
		{"svix", "msg_1", ``},
		{"auto", "t=1,v1=00", `{"id":"evt_1"}`},
		{"auto", "", `{"type":"url_verification"}`},
		{"header:X-Acme-Event-Id", "evt_1", ``},
		{"header:X-Id+json:a.b", "x+y", `{"a":{"b":"c+d"}}`},
		{"json:notificationItems.0.NotificationRequestItem.pspReference", "", `{"notificationItems":[{"NotificationRequestItem":{"pspReference":"p"}}]}`},
		{"json:a.#.b|@this", "", `{"a":[{"b":1}]}`},
		{"json:..a", "", `{"a":1}`},
		{"woocommerce", "", ``},
		{"zoom", "", `{"event":"e","event_ts":1}`},
		{"header:X-Id+", "", ``},
		{"+", "", ``},
		{"header:\x00", "", ``},
	} {
		f.Add(seed.spec, seed.value, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, spec, value string, body []byte) {
		src, err := ParseSource("/fuzz", spec, Options{})
		if err != nil {
			if src != nil || !strings.HasPrefix(err.Error(), "providers: ") {
				t.Fatalf("ParseSource = %v, %v; want nil and a providers: error", src, err)
			}
			return
		}
		// Send the value in every header the source may read, and in the
		// headers auto looks for.
		h := headers("Stripe-Signature", value, "X-GitHub-Delivery", value, "Webhook-Id", value, "X-Gitlab-Event", value)
		for _, p := range strings.Split(spec, "+") {
			if name, ok := strings.CutPrefix(strings.TrimSpace(p), headerPrefix); ok {
				h.Add(strings.TrimSpace(name), value)
			}
		}
		e := src.Resolve(h)
		if e == nil {
			if len(src.PresetNames()) == 0 {
				t.Fatal("Resolve = nil for a source that is not auto")
			}
			return
		}
		if !e.NeedsBody {
			body = nil
		}
		id, err := e.EventID(h, body)
		checkID(t, id, err)
	})
}

func FuzzJSONEventID(f *testing.F) {
	for _, seed := range []struct {
		path, value, body string
	}{
		{"id", "evt_1", `{"id":"evt_1"}`},
		{"data.object.id", " ch_1 ", `{"data":{"object":{"id":12.5e3}}}`},
		{"items.0.id", "x", `{"items":[{"id":"a"}]}`},
		{"a*", "star", `{"ab":"x","a*":"y"}`},
		{"#", "hash", `[1,2]`},
		{"@this", "at", `"x"`},
		{"!true", "bang", `{}`},
		{"a|b", "pipe", `{"a":{"b":1}}`},
		{`a\b`, "bs", `{"a\\b":1}`},
		{"a.b", "\u0000", `{"a":{"b":"\u0000"}}`},
		{"k", "", `{"k":""}`},
		{"k", strings.Repeat("é", 300), `{"k":true}`},
		{"k", "v", `{"k":"v"`},
		{`"`, "q", `{"\"":"q"}`},
		{"é", "u", `{"\u00e9":"u"}`},
	} {
		f.Add(seed.path, seed.value, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, path, value string, body []byte) {
		if strings.Contains(path, "+") {
			return // a composite, not one path
		}
		src, err := ParseSource("/fuzz", jsonPrefix+path, Options{})
		if err != nil {
			return
		}
		e := src.Resolve(nil)
		id, err := e.EventID(nil, body)
		checkID(t, id, err)

		// The path is literal: a body holding value at exactly that path
		// gives value as the ID, whatever characters the keys hold.
		if !utf8.ValidString(path) || !utf8.ValidString(value) {
			return // encoding/json would replace the invalid bytes
		}
		var doc any = value
		segs := strings.Split(strings.TrimSpace(path), ".")
		for i := len(segs) - 1; i >= 0; i-- {
			doc = map[string]any{segs[i]: doc}
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		id, err = e.EventID(nil, b)
		checkID(t, id, err)
		wantID, wantErr := expectID(value)
		sameAnswer(t, id, err, wantID, wantErr)

		// The same document with one key of the path written twice, at
		// a depth the value picks, is refused whatever the values.
		dup := repeatedAt(t, segs, value, len(value)%len(segs))
		id, err = e.EventID(nil, dup)
		checkID(t, id, err)
		sameAnswer(t, id, err, "", ErrInvalidID)
	})
}

// repeatedAt is the JSON document holding value at segs whose object at
// depth writes its key twice (the second time with another value).
func repeatedAt(t *testing.T, segs []string, value string, depth int) []byte {
	t.Helper()
	quote := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	doc := quote(value)
	for i := len(segs) - 1; i >= 0; i-- {
		k := quote(segs[i])
		if i == depth {
			doc = "{" + k + ":" + doc + "," + k + ":" + quote("other") + "}"
		} else {
			doc = "{" + k + ":" + doc + "}"
		}
	}
	return []byte(doc)
}

func FuzzHeaderEventID(f *testing.F) {
	for _, seed := range []struct {
		name, v1, v2 string
		twice        bool
	}{
		{"X-Acme-Event-Id", "evt_1", "", false},
		{"x-acme-event-id", " evt_1 ", "evt_1", true},
		{"X-Id", "a", "b", true},
		{"X-Id", "", "b", true},
		{"X-Id", "a\x00", "", false},
		{"X-Id", "a\u0085", "", false},
		{"X-Id", strings.Repeat("x", 513), "", false},
		{"X-Id", "\xff\xfe", "", false},
	} {
		f.Add(seed.name, seed.v1, seed.v2, seed.twice)
	}
	f.Fuzz(func(t *testing.T, name, v1, v2 string, twice bool) {
		src, err := ParseSource("/fuzz", headerPrefix+name, Options{})
		if err != nil {
			return
		}
		e := src.Resolve(nil)
		if e.NeedsBody {
			t.Fatal("a header source reads the body")
		}
		name = strings.TrimSpace(name) // as ParseSource reads it
		h := http.Header{}
		h.Add(name, v1)
		if twice {
			h.Add(name, v2)
		}
		id, err := e.EventID(h, nil)
		checkID(t, id, err)
		wantID, wantErr := expectID(v1)
		if twice && strings.TrimSpace(v1) != strings.TrimSpace(v2) {
			wantID, wantErr = "", ErrInvalidID
		}
		sameAnswer(t, id, err, wantID, wantErr)
	})
}

func FuzzComposite(f *testing.F) {
	for _, seed := range [][2]string{
		{"a", "b"},
		{"a+b", "c"},
		{"a", "b+c"},
		{`a\`, `+b`},
		{" a ", " b "},
		{"", "b"},
		{"a", ""},
		{"a\x01", "b"},
		{strings.Repeat("+", 300), "b"},
	} {
		f.Add(seed[0], seed[1])
	}
	src, err := ParseSource("/fuzz", "header:X-A+json:b", Options{})
	if err != nil {
		f.Fatal(err)
	}
	e := src.Resolve(nil)
	f.Fuzz(func(t *testing.T, a, b string) {
		body, err := json.Marshal(map[string]string{"b": b})
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.EventID(headers("X-A", a), body)
		checkID(t, id, err)
		if !utf8.ValidString(b) {
			return // encoding/json replaced the invalid bytes
		}
		ta, errA := expectID(a)
		tb, errB := expectID(b)
		switch {
		case errA != nil:
			sameAnswer(t, id, err, "", errA)
		case errB != nil:
			sameAnswer(t, id, err, "", errB)
		default:
			want := escapePart(ta) + "+" + escapePart(tb)
			if len(want) > MaxIDLen {
				sameAnswer(t, id, err, "", ErrInvalidID)
				return
			}
			sameAnswer(t, id, err, want, nil)
			if parts := splitComposite(id); len(parts) != 2 || parts[0] != ta || parts[1] != tb {
				t.Fatalf("ID %q splits into %q; want [%q %q]", id, parts, ta, tb)
			}
		}
	})
}

func escapePart(s string) string {
	return strings.NewReplacer(`\`, `\\`, "+", `\+`).Replace(s)
}

// splitComposite undoes the composite join, proving it is unambiguous.
func splitComposite(id string) []string {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c == '\\' && i+1 < len(id):
			i++
			cur.WriteByte(id[i])
		case c == '+':
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, cur.String())
}
