package providers

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// headers builds a header from name, value pairs, adding (not setting), so
// a name given twice has two values.
func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func mustParse(t testing.TB, path, spec string, opts Options) *Source {
	t.Helper()
	s, err := ParseSource(path, spec, opts)
	if err != nil {
		t.Fatalf("ParseSource(%q, %q): %v", path, spec, err)
	}
	return s
}

// idCase is one request and the answer expected from an extractor.
type idCase struct {
	name    string
	h       http.Header
	body    string
	want    string
	wantErr error
}

func (c idCase) check(t *testing.T, e *Extractor) {
	t.Helper()
	var body []byte
	if e.NeedsBody {
		body = []byte(c.body)
	}
	got, err := e.EventID(c.h, body)
	if c.wantErr != nil {
		if !errors.Is(err, c.wantErr) {
			t.Fatalf("EventID = %q, %v; want error %v", got, err, c.wantErr)
		}
		if got != "" {
			t.Fatalf("EventID returned ID %q with error %v", got, err)
		}
		return
	}
	if err != nil || got != c.want {
		t.Fatalf("EventID = %q, %v; want %q", got, err, c.want)
	}
}

var (
	long512 = strings.Repeat("a", MaxIDLen)
	long513 = strings.Repeat("a", MaxIDLen+1)
)

func TestHeaderSource(t *testing.T) {
	src := mustParse(t, "/hooks/acme", "header:x-acme-event-id", Options{})
	e := src.Resolve(http.Header{})
	if e == nil {
		t.Fatal("Resolve = nil for a header source")
	}
	if e.Namespace != "/hooks/acme" || e.TTL != DefaultTTL || e.NeedsBody || e.Verifier != nil || e.InflightStatus != 0 {
		t.Fatalf("extractor = %+v; want namespace /hooks/acme, DefaultTTL, no body, no verifier, no inflight status", e)
	}
	for _, c := range []idCase{
		{name: "found", h: headers("X-Acme-Event-Id", "evt_1"), want: "evt_1"},
		{name: "spaces trimmed", h: headers("X-Acme-Event-Id", "  evt_1 \t"), want: "evt_1"},
		{name: "inner spaces kept", h: headers("X-Acme-Event-Id", "a b"), want: "a b"},
		{name: "missing", h: headers("X-Other", "evt_1"), wantErr: ErrNoID},
		{name: "empty", h: headers("X-Acme-Event-Id", ""), wantErr: ErrNoID},
		{name: "only spaces", h: headers("X-Acme-Event-Id", "   "), wantErr: ErrNoID},
		{name: "512 bytes", h: headers("X-Acme-Event-Id", long512), want: long512},
		{name: "513 bytes", h: headers("X-Acme-Event-Id", long513), wantErr: ErrInvalidID},
		{name: "NUL", h: headers("X-Acme-Event-Id", "a\x00b"), wantErr: ErrInvalidID},
		{name: "newline inside", h: headers("X-Acme-Event-Id", "a\nb"), wantErr: ErrInvalidID},
		{name: "tab inside", h: headers("X-Acme-Event-Id", "a\tb"), wantErr: ErrInvalidID},
		{name: "DEL", h: headers("X-Acme-Event-Id", "a\x7fb"), wantErr: ErrInvalidID},
		{name: "C1 control", h: headers("X-Acme-Event-Id", "a\u0085b"), wantErr: ErrInvalidID},
		{name: "non-ASCII letters", h: headers("X-Acme-Event-Id", "événement-1"), want: "événement-1"},
		{name: "same value repeated", h: headers("X-Acme-Event-Id", "evt_1", "X-Acme-Event-Id", " evt_1"), want: "evt_1"},
		{name: "different values", h: headers("X-Acme-Event-Id", "evt_1", "X-Acme-Event-Id", "evt_2"), wantErr: ErrInvalidID},
		{name: "empty and a value", h: headers("X-Acme-Event-Id", "", "X-Acme-Event-Id", "evt_2"), wantErr: ErrInvalidID},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t, e) })
	}
}

func TestJSONSource(t *testing.T) {
	for _, c := range []struct {
		spec string
		idCase
	}{
		{"json:id", idCase{name: "string", body: `{"id":"evt_1"}`, want: "evt_1"}},
		{"json:data.object.id", idCase{name: "nested", body: `{"data":{"object":{"id":"ch_1"}},"id":"evt_1"}`, want: "ch_1"}},
		{"json:id", idCase{name: "escaped string", body: `{"id":"a\"b\u00e9"}`, want: `a"bé`}},
		{"json:id", idCase{name: "escaped control char", body: `{"id":"a\u0000b"}`, wantErr: ErrInvalidID}},
		{"json:id", idCase{name: "escaped newline", body: `{"id":"a\nb"}`, wantErr: ErrInvalidID}},
		{"json:id", idCase{name: "trimmed", body: `{"id":"  evt_1  "}`, want: "evt_1"}},
		{"json:id", idCase{name: "empty string", body: `{"id":""}`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "spaces only", body: `{"id":"   "}`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "512 bytes", body: `{"id":"` + long512 + `"}`, want: long512}},
		{"json:id", idCase{name: "513 bytes", body: `{"id":"` + long513 + `"}`, wantErr: ErrInvalidID}},
		{"json:id", idCase{name: "big integer kept exact", body: `{"id":12345678901234567890}`, want: "12345678901234567890"}},
		{"json:id", idCase{name: "negative number", body: `{"id":-42}`, want: "-42"}},
		{"json:id", idCase{name: "number literal text", body: `{"id":1.50e+3}`, want: "1.50e+3"}},
		{"json:ok", idCase{name: "true", body: `{"ok":true}`, want: "true"}},
		{"json:ok", idCase{name: "false", body: `{"ok":false}`, want: "false"}},
		{"json:id", idCase{name: "null", body: `{"id":null}`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "object", body: `{"id":{"a":1}}`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "array", body: `{"id":[1]}`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "absent", body: `{"ID":"evt_1"}`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "empty body", body: ``, wantErr: ErrNoID}},
		{"json:id", idCase{name: "not JSON", body: `id=evt_1`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "truncated", body: `{"id":"evt_1",`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "trailing garbage", body: `{"id":"evt_1"} x`, wantErr: ErrNoID}},
		{"json:id", idCase{name: "top-level array", body: `[{"id":"evt_1"}]`, wantErr: ErrNoID}},
		{"json:0.id", idCase{name: "index into top-level array", body: `[{"id":"evt_1"}]`, want: "evt_1"}},
		{"json:items.1.id", idCase{name: "array index", body: `{"items":[{"id":"a"},{"id":"b"}]}`, want: "b"}},
		{"json:items.2.id", idCase{name: "index out of range", body: `{"items":[{"id":"a"},{"id":"b"}]}`, wantErr: ErrNoID}},
		{"json:items.0", idCase{name: "numeric key of an object", body: `{"items":{"0":"zero"}}`, want: "zero"}},
		{"json:a*", idCase{name: "star is literal", body: `{"ab":"wild","a*":"star"}`, want: "star"}},
		{"json:a*", idCase{name: "star matches nothing else", body: `{"ab":"wild"}`, wantErr: ErrNoID}},
		{"json:a?", idCase{name: "question mark is literal", body: `{"ab":"wild"}`, wantErr: ErrNoID}},
		{"json:items.#", idCase{name: "hash is literal", body: `{"items":[1,2,3]}`, wantErr: ErrNoID}},
		{"json:items.#", idCase{name: "hash key", body: `{"items":{"#":"h"}}`, want: "h"}},
		{"json:a|b", idCase{name: "pipe is literal", body: `{"a":{"b":"piped"},"a|b":"lit"}`, want: "lit"}},
		{"json:@this", idCase{name: "modifier is literal", body: `"x"`, wantErr: ErrNoID}},
		{"json:@this", idCase{name: "at key", body: `{"@this":"at"}`, want: "at"}},
		{"json:!true", idCase{name: "literal is literal", body: `{}`, wantErr: ErrNoID}},
		{"json:!true", idCase{name: "bang key", body: `{"!true":"bang"}`, want: "bang"}},
		{"json:a\\b", idCase{name: "backslash key", body: `{"a\\b":"bs"}`, want: "bs"}},
		{"json:[id]", idCase{name: "multipath is literal", body: `{"id":"x","[id]":"br"}`, want: "br"}},
		{"json:{id}", idCase{name: "object multipath is literal", body: `{"id":"x"}`, wantErr: ErrNoID}},
		{"json:a=b", idCase{name: "equals key", body: `{"a=b":"eq"}`, want: "eq"}},
		{"json:event-data.id", idCase{name: "dash key", body: `{"event-data":{"id":"mg"}}`, want: "mg"}},
		{"json:id", idCase{name: "repeated ID key", body: `{"id":"a","id":"b"}`, wantErr: ErrInvalidID}},
		{"json:id", idCase{name: "repeated ID key, same value", body: `{"id":"a","id":"a"}`, wantErr: ErrInvalidID}},
		{"json:id", idCase{name: "repeated ID key in another case", body: `{"id":"a","ID":"b"}`, wantErr: ErrInvalidID}},
		{"json:id", idCase{name: "repeated ID key, escaped", body: `{"id":"a","\u0069d":"b"}`, wantErr: ErrInvalidID}},
		{"json:id", idCase{name: "repeated ID key, first null", body: `{"id":null,"id":"b"}`, wantErr: ErrInvalidID}},
		{"json:data.object.id", idCase{name: "repeated parent key", body: `{"data":{"object":{"id":"a"}},"data":{"object":{"id":"b"}}}`, wantErr: ErrInvalidID}},
		{"json:data.object.id", idCase{name: "repeated key inside the parent", body: `{"data":{"object":{"id":"a","id":"b"}}}`, wantErr: ErrInvalidID}},
		{"json:items.1.id", idCase{name: "repeated key in an array element", body: `{"items":[{"id":"a"},{"id":"b","id":"c"}]}`, wantErr: ErrInvalidID}},
		{"json:items.0.id", idCase{name: "repeated key in another array element", body: `{"items":[{"id":"a"},{"id":"b","id":"c"}]}`, want: "a"}},
		{"json:data.id", idCase{name: "repeated key off the path", body: `{"data":{"id":"a","x":1,"x":2},"other":{"id":1,"id":2},"y":1,"y":2}`, want: "a"}},
		{"json:data.id", idCase{name: "same key at other depths", body: `{"id":"top","data":{"id":"a","more":{"id":"deep"}}}`, want: "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := mustParse(t, "/hooks/json", c.spec, Options{})
			e := src.Resolve(nil)
			if !e.NeedsBody || e.Namespace != "/hooks/json" || e.TTL != DefaultTTL {
				t.Fatalf("extractor = %+v; want NeedsBody, namespace /hooks/json, DefaultTTL", e)
			}
			c.check(t, e)
		})
	}
}

func TestJSONSourceNilBody(t *testing.T) {
	e := mustParse(t, "/", "json:id", Options{}).Resolve(nil)
	if _, err := e.EventID(nil, nil); !errors.Is(err, ErrNoID) {
		t.Fatalf("EventID(nil body) error = %v; want ErrNoID", err)
	}
}

// TestJSONIDDoesNotAliasBody checks that an ID read from the body survives
// the body buffer being reused.
func TestJSONIDDoesNotAliasBody(t *testing.T) {
	for _, spec := range []string{"json:id", "json:id+json:n"} {
		e := mustParse(t, "/", spec, Options{}).Resolve(nil)
		body := []byte(`{"id":"evt_1","n":"x"}`)
		id, err := e.EventID(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.Clone(id)
		for i := range body {
			body[i] = 'z'
		}
		if id != want {
			t.Fatalf("%s: ID changed to %q after the body was overwritten; want %q", spec, id, want)
		}
	}
}

func TestCompositeSource(t *testing.T) {
	src := mustParse(t, "/hooks/adyen", "json:a.b + json:c+header:X-Topic", Options{})
	e := src.Resolve(nil)
	if !e.NeedsBody || e.Namespace != "/hooks/adyen" {
		t.Fatalf("extractor = %+v; want NeedsBody and namespace /hooks/adyen", e)
	}
	topic := headers("X-Topic", "orders/create")
	for _, c := range []idCase{
		{name: "joined", h: topic, body: `{"a":{"b":"psp1"},"c":"AUTHORISATION"}`, want: "psp1+AUTHORISATION+orders/create"},
		{name: "numbers and bools", h: topic, body: `{"a":{"b":7914073381342284},"c":true}`, want: "7914073381342284+true+orders/create"},
		{name: "parts trimmed", h: headers("X-Topic", " t "), body: `{"a":{"b":" x "},"c":"y "}`, want: "x+y+t"},
		{name: "joiner escaped", h: headers("X-Topic", "t"), body: `{"a":{"b":"x+y"},"c":"z"}`, want: `x\+y+z+t`},
		{name: "escape escaped", h: headers("X-Topic", `t\`), body: `{"a":{"b":"x\\"},"c":"+z"}`, want: `x\\+\+z+t\\`},
		{name: "missing json part", h: topic, body: `{"a":{"b":"psp1"}}`, wantErr: ErrNoID},
		{name: "empty json part", h: topic, body: `{"a":{"b":"psp1"},"c":" "}`, wantErr: ErrNoID},
		{name: "missing header part", h: http.Header{}, body: `{"a":{"b":"psp1"},"c":"x"}`, wantErr: ErrNoID},
		{name: "invalid part", h: topic, body: `{"a":{"b":"p\u0001"},"c":"x"}`, wantErr: ErrInvalidID},
		{name: "conflicting header part", h: headers("X-Topic", "a", "X-Topic", "b"), body: `{"a":{"b":"psp1"},"c":"x"}`, wantErr: ErrInvalidID},
		{name: "malformed body", h: topic, body: `{"a":{"b":"psp1"},"c":"x"`, wantErr: ErrNoID},
		{name: "too long together", h: topic, body: `{"a":{"b":"` + long512[:300] + `"},"c":"` + long512[:300] + `"}`, wantErr: ErrInvalidID},
		{name: "too long after escaping", h: headers("X-Topic", "t"), body: `{"a":{"b":"` + strings.Repeat("+", 300) + `"},"c":"c"}`, wantErr: ErrInvalidID},
	} {
		t.Run(c.name, func(t *testing.T) { c.check(t, e) })
	}
}

// TestCompositeUnambiguous checks that different tuples never share an ID.
func TestCompositeUnambiguous(t *testing.T) {
	e := mustParse(t, "/", "header:X-A+header:X-B", Options{})
	ext := e.Resolve(nil)
	tuples := [][2]string{{"a+b", "c"}, {"a", "b+c"}, {`a\`, "b"}, {"a", `\b`}, {`a\+`, "b"}, {"a", `+b`}, {`a\`, `+b`}}
	seen := map[string][2]string{}
	for _, tu := range tuples {
		id, err := ext.EventID(headers("X-A", tu[0], "X-B", tu[1]), nil)
		if err != nil {
			t.Fatalf("%q: %v", tu, err)
		}
		if prev, dup := seen[id]; dup {
			t.Fatalf("tuples %q and %q share the ID %q", prev, tu, id)
		}
		seen[id] = tu
	}
}

func TestHeaderOnlyCompositeNeedsNoBody(t *testing.T) {
	e := mustParse(t, "/", "header:X-A+header:X-B", Options{}).Resolve(nil)
	if e.NeedsBody {
		t.Fatal("a composite of headers needs no body")
	}
	if id, err := e.EventID(headers("X-A", "1", "X-B", "2"), nil); err != nil || id != "1+2" {
		t.Fatalf("EventID = %q, %v; want 1+2", id, err)
	}
}

func TestGenericTTLOverride(t *testing.T) {
	e := mustParse(t, "/", "header:X-Id", Options{TTL: 90 * time.Minute}).Resolve(nil)
	if e.TTL != 90*time.Minute {
		t.Fatalf("TTL = %v; want the override 1h30m", e.TTL)
	}
}

func TestGenericSourceHasNoPresets(t *testing.T) {
	for _, spec := range []string{"header:X-Id", "json:id", "json:a+header:X-B"} {
		if names := mustParse(t, "/", spec, Options{}).PresetNames(); len(names) != 0 {
			t.Errorf("%s: PresetNames = %v; want none", spec, names)
		}
	}
}

func TestParseSourceErrors(t *testing.T) {
	for _, c := range []struct {
		spec string
		// mention is a word the message must contain to help the operator.
		mention string
	}{
		{"", "unknown source"},
		{"  ", "unknown source"},
		{"stripee", "stripe"}, // the known presets are listed
		{"header", "unknown source"},
		{"header:", "header name"},
		{"header: ", "header name"},
		{"header:X Id", "header name"},
		{"header:X-Id:", "header name"},
		{"header:X-Ïd", "header name"},
		{"json:", "dotted path"},
		{"json:a..b", "dotted path"},
		{"json:.a", "dotted path"},
		{"json:a.", "dotted path"},
		{"JSON:a", "unknown source"},
		{"stripe+json:id", "only header: and json:"},
		{"json:id+auto", "only header: and json:"},
		{"json:id+", "only header: and json:"},
		{"+json:id", "only header: and json:"},
		{"json:id+json:", "part 2"},
		{"header:X-A+header:", "part 2"},
	} {
		t.Run(c.spec, func(t *testing.T) {
			s, err := ParseSource("/", c.spec, Options{})
			if err == nil {
				t.Fatalf("ParseSource(%q) = %+v; want an error", c.spec, s)
			}
			if !strings.HasPrefix(err.Error(), "providers: ") || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("error %q; want the package prefix and %q", err, c.mention)
			}
		})
	}
}

func TestSendersWithoutPreset(t *testing.T) {
	for _, c := range []struct {
		spec string
		// why and what: the reason and the advice the message must give.
		why, what string
	}{
		{"woocommerce", "X-WC-Webhook-Delivery-ID", "ROUTES"},
		{"WooCommerce", "generated anew", "header:X-WC-Webhook-Topic+json:id"},
		{"lemonsqueezy", "no event ID", "json:meta.event_name"},
		{"lemon-squeezy", "no event ID", "ROUTES"},
		{"sendgrid", "batches", "sg_event_id"},
		{"hubspot", "batches", "eventId"},
		{"discord", "never retries", "ROUTES"},
	} {
		t.Run(c.spec, func(t *testing.T) {
			_, err := ParseSource("/", c.spec, Options{})
			if !errors.Is(err, errNoPreset) {
				t.Fatalf("error = %v; want errNoPreset", err)
			}
			if msg := err.Error(); !strings.Contains(msg, c.why) || !strings.Contains(msg, c.what) {
				t.Fatalf("error %q; want it to explain %q and advise %q", msg, c.why, c.what)
			}
		})
	}
}

// TestSuggestedHeuristicsParse keeps the advice in the no-preset errors valid.
func TestSuggestedHeuristicsParse(t *testing.T) {
	for _, spec := range []string{
		"header:X-WC-Webhook-Topic+json:id+json:date_modified_gmt",
		"json:meta.event_name+json:data.id+json:data.attributes.updated_at",
	} {
		mustParse(t, "/", spec, Options{})
	}
}
