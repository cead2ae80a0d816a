package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// load is what wrk sends.
type load int

const (
	// uniqueJSON: Stripe-style events, the ID in the body, new on every request.
	uniqueJSON load = iota
	// duplicateJSON: the same Stripe-style event over and over.
	duplicateJSON
	// uniqueHeader: GitHub-style events, the ID in X-GitHub-Delivery, new
	// on every request; the body is never looked at.
	uniqueHeader
	// thriceJSON: Stripe-style events, each sent three times, copySpread
	// requests apart, as a sender that retries (or delivers twice) does.
	thriceJSON
)

func (l load) String() string {
	return [...]string{"unique JSON", "duplicate JSON", "unique header", "unique JSON, each sent 3×"}[l]
}

// copySpread is how many requests apart thriceJSON sends the copies of an
// event: twice the 32 connections, so that a copy is nearly always sent
// after the previous one was answered (wrk keeps at most 32 in flight), yet
// within milliseconds, while an async proxy still holds it queued. The
// last blocks of a run send their events fewer times: at most copySpread
// events a run.
const copySpread = 64

// stripeHead and stripeTail surround the event ID: together about 1 KB,
// the size of a typical Stripe payment_intent event.
const (
	stripeHead = `{"id":"`
	stripeTail = `","object":"event","api_version":"2024-06-20","created":1724160000,` +
		`"data":{"object":{"id":"pi_3PqRstUvWxYz0123456789ab","object":"payment_intent","amount":2000,` +
		`"amount_capturable":0,"amount_received":2000,"capture_method":"automatic",` +
		`"client_secret":"pi_3PqRstUvWxYz0123456789ab_secret_abcdefghijklmnop","confirmation_method":"automatic",` +
		`"created":1724159990,"currency":"usd","customer":"cus_QabcdefGhijkl","description":"Order #1234",` +
		`"latest_charge":"ch_3PqRstUvWxYz0123456789ab","livemode":false,"metadata":{"order_id":"1234"},` +
		`"payment_method":"pm_1PqRstUvWxYz0123456789ab","payment_method_types":["card"],` +
		`"receipt_email":"jenny.rosen@example.com","shipping":{"address":{"city":"San Francisco","country":"US",` +
		`"line1":"510 Townsend St","postal_code":"94103","state":"CA"},"name":"Jenny Rosen"},"status":"succeeded"}},` +
		`"livemode":false,"pending_webhooks":1,"request":{"id":"req_abcdefGhijkl",` +
		`"idempotency_key":"6b3f2a1e-2c4d-4e5f-8a9b-0c1d2e3f4a5b"},"type":"payment_intent.succeeded"}`
)

// githubBody is a trimmed push event of about 1 KB.
const githubBody = `{"ref":"refs/heads/main","before":"6113728f27ae82c7b1a177c8d03f9e96e0adf246",` +
	`"after":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","repository":{"id":186853002,"node_id":"MDEwOlJlcG9zaXRvcnkxODY4NTMwMDI=",` +
	`"name":"Hello-World","full_name":"Codertocat/Hello-World","private":false,"owner":{"name":"Codertocat",` +
	`"email":"21031067+Codertocat@users.noreply.github.com","login":"Codertocat","id":21031067,` +
	`"type":"User","site_admin":false},"html_url":"https://github.com/Codertocat/Hello-World",` +
	`"description":null,"fork":false,"default_branch":"main"},"pusher":{"name":"Codertocat",` +
	`"email":"21031067+Codertocat@users.noreply.github.com"},"sender":{"login":"Codertocat","id":21031067,` +
	`"type":"User","site_admin":false},"created":false,"deleted":false,"forced":false,"base_ref":null,` +
	`"compare":"https://github.com/Codertocat/Hello-World/compare/6113728f27ae...59b20b8d5c6f",` +
	`"commits":[{"id":"59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5","tree_id":"f9d2a07e9488b91af2641b26b9407fe22a451433",` +
	`"distinct":true,"message":"Update README.md","timestamp":"2024-08-20T12:00:00-04:00",` +
	`"author":{"name":"Codertocat","email":"21031067+Codertocat@users.noreply.github.com","username":"Codertocat"},` +
	`"added":[],"removed":[],"modified":["README.md"]}],"head_commit":null}`

// stripeCustomer is the customer stripeTail names: keyed loads name
// another of the same length in its place.
const stripeCustomer = "cus_QabcdefGhijkl"

// script is a wrk Lua script. A fresh nonce per wrk run keeps unique IDs
// unique across runs against the same proxy; dupID is the one ID of the
// duplicate load, the same for every run of one configuration. With keys
// (uniqueJSON only), request n names customer n mod keys.
func script(l load, path, nonce, dupID string, keys int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "local path = %q\nlocal nonce = %q\n", path, nonce)
	fmt.Fprintf(&b, "local head = %q\nlocal tail = %q\nlocal github = %q\n", stripeHead, stripeTail, githubBody)
	switch {
	case keys > 0 && l == uniqueJSON:
		before, after, _ := strings.Cut(stripeTail, stripeCustomer)
		fmt.Fprintf(&b, `local n = 0
local headers = {["Content-Type"] = "application/json", ["User-Agent"] = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}
local before, after, keys = %q, %q, %d
request = function()
  n = n + 1
  return wrk.format("POST", path, headers, head .. "evt_" .. nonce .. "_" .. n .. before .. string.format("cus_K%%012d", n %% keys) .. after)
end
`, before, after, keys)
	case l == duplicateJSON:
		// A static request: wrk builds it once.
		fmt.Fprintf(&b, `wrk.method = "POST"
wrk.path = path
wrk.headers["Content-Type"] = "application/json"
wrk.headers["User-Agent"] = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
wrk.body = head .. %q .. tail
`, dupID)
	case l == uniqueJSON:
		b.WriteString(`local n = 0
local headers = {["Content-Type"] = "application/json", ["User-Agent"] = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}
request = function()
  n = n + 1
  return wrk.format("POST", path, headers, head .. "evt_" .. nonce .. "_" .. n .. tail)
end
`)
	case l == thriceJSON:
		// Request n (from 0) carries copy n/spread%3 of event
		// n/(3*spread)*spread + n%spread.
		fmt.Fprintf(&b, `local n = 0
local spread = %d
local headers = {["Content-Type"] = "application/json", ["User-Agent"] = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}
request = function()
  local id = math.floor(n / (3 * spread)) * spread + n %% spread
  n = n + 1
  return wrk.format("POST", path, headers, head .. "evt_" .. nonce .. "_" .. id .. tail)
end
`, copySpread)
	case l == uniqueHeader:
		b.WriteString(`local n = 0
local headers = {["Content-Type"] = "application/json", ["User-Agent"] = "GitHub-Hookshot/044aadd",
  ["X-GitHub-Event"] = "push", ["X-GitHub-Hook-ID"] = "292430182"}
request = function()
  n = n + 1
  headers["X-GitHub-Delivery"] = nonce .. "-" .. n
  return wrk.format("POST", path, headers, github)
end
`)
	}
	b.WriteString(`done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('BENCHRESULT {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p99":%d,"p999":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
`)
	return b.String()
}

// wrkResult is one wrk run. Latencies are in microseconds.
type wrkResult struct {
	Requests   int64 `json:"requests"`
	DurationUS int64 `json:"duration_us"`
	Connect    int64 `json:"connect"`
	Read       int64 `json:"read"`
	Write      int64 `json:"write"`
	Status     int64 `json:"status"` // answers outside 2xx and 3xx
	Timeout    int64 `json:"timeout"`
	P50        int64 `json:"p50"`
	P99        int64 `json:"p99"`
	P999       int64 `json:"p999"`
}

func (r wrkResult) rps() float64 {
	return float64(r.Requests) / (float64(r.DurationUS) / 1e6)
}

func (r wrkResult) errors() int64 { return r.Connect + r.Read + r.Write + r.Status + r.Timeout }

// accepted is how many answers were 2xx (or 3xx, which no server here
// sends): the events an async proxy took on.
func (r wrkResult) accepted() int64 { return r.Requests - r.Status }

// acceptedRate is accepted per second.
func (r wrkResult) acceptedRate() float64 {
	if r.DurationUS == 0 {
		return 0
	}
	return float64(r.accepted()) / (float64(r.DurationUS) / 1e6)
}

// runWrk runs wrk with one thread and conns connections for d, placed
// with place.
func runWrk(dir string, place func(...string) []string, url string, conns int, d time.Duration, lua string) (wrkResult, error) {
	f, err := os.CreateTemp(dir, "load-*.lua")
	if err != nil {
		return wrkResult{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(lua); err != nil {
		f.Close()
		return wrkResult{}, err
	}
	f.Close()
	argv := place("wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+durationArg(d), "--timeout", "5s", "-s", f.Name(), url)
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return wrkResult{}, fmt.Errorf("%s: %w\n%s%s", strings.Join(argv, " "), err, out, stderr.Bytes())
	}
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "BENCHRESULT "); ok {
			var r wrkResult
			if err := json.Unmarshal([]byte(v), &r); err != nil {
				return r, fmt.Errorf("wrk result %q: %w", v, err)
			}
			return r, nil
		}
	}
	return wrkResult{}, fmt.Errorf("wrk printed no result:\n%s", out)
}

// durationArg is d for wrk, which takes whole seconds.
func durationArg(d time.Duration) string {
	return strconv.Itoa(max(int(d.Round(time.Second)/time.Second), 1)) + "s"
}
