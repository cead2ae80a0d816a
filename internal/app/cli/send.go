package cli

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/webhook-dedup/webhook-dedup/config"
	"github.com/webhook-dedup/webhook-dedup/internal/app/serve"
	"github.com/webhook-dedup/webhook-dedup/providers"
)

func newSendCmd(e *env) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "send ROUTE",
		Short: "Sign and post a sample event to a route, as its sender would",
		Long: "Post a sample event to ROUTE (a path of ROUTES), made as the route's preset sends its webhooks and signed with\n" +
			"the secret the environment configures, with a new event ID each time: for trying a deployment end to end.\n" +
			"Run it with the proxy's environment. It prints the event, the proxy's answer and its X-Webhook-Dedup header,\n" +
			"and exits 1 unless the answer is a 2xx. A generic route gets a fresh value in each header and JSON field its\n" +
			"ID is made of; an auto route, the first preset whose secret is set.",
		Example: "  webhook-dedup send /webhooks/stripe\n" +
			"  webhook-dedup send /webhooks/github --to https://hooks.example.com",
		Args: exactArgs("ROUTE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return send(cmd, args[0], to, e)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the proxy's base `URL`, the route's path appended (default: LISTEN_ADDR on this host)")
	return cmd
}

// send posts a sample event to route and prints the answer.
func send(cmd *cobra.Command, route, to string, e *env) error {
	cfg, _, err := serve.Check(e.environ)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(cfg.RouteSpecs, func(s config.RouteSpec) bool { return s.Path == route })
	if i < 0 {
		paths := make([]string, len(cfg.RouteSpecs))
		for i, s := range cfg.RouteSpecs {
			paths[i] = s.Path
		}
		return flagError(cmd, fmt.Errorf("route %q is not in ROUTES (%s)", route, strings.Join(paths, ", ")))
	}
	spec := cfg.RouteSpecs[i]
	if to == "" {
		if to, err = loopbackURL("LISTEN_ADDR", cfg.ListenAddr); err != nil {
			return usageError(err)
		}
	}
	target, err := url.Parse(strings.TrimSuffix(to, "/") + spec.Path)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return flagError(cmd, fmt.Errorf("--to %q: not an http or https URL", to))
	}
	src, err := providers.ParseSource(spec.Path, spec.Source, cfg.SourceOptions(spec))
	if err != nil {
		return err // serve.Check parsed it already
	}
	now := time.Now()
	preset := samplePreset(src.PresetNames(), cfg.Secrets)
	s, err := newSample(preset, spec.Source, cfg, now)
	if err != nil {
		return err
	}
	// The proxy's own check, before the proxy: a sample it would refuse
	// is this command's fault, said here rather than as a 401.
	ext := src.Resolve(s.header)
	if ext == nil {
		return fmt.Errorf("send: the sample %s event is not one the route %s recognises", preset, spec.Path)
	}
	if ext.Verifier != nil {
		if err := ext.Verifier.Verify(s.header, s.body, now); err != nil {
			return fmt.Errorf("send: the sample %s event fails the route's signature check: %w", ext.Namespace, err)
		}
	}
	id, err := ext.EventID(s.header, s.body)
	if err != nil {
		return fmt.Errorf("send: the sample %s event has no event ID the route reads: %w", ext.Namespace, err)
	}

	// The proxy waits for the app on a sync route, UPSTREAM_TIMEOUT at most.
	ctx, cancel := context.WithTimeout(cmd.Context(), cfg.UpstreamTimeout+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(s.body))
	if err != nil {
		return err
	}
	req.Header = s.header
	fmt.Fprintf(e.stdout, "POST %s (%s event %s)\n", target, ext.Namespace, id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	fmt.Fprintln(e.stdout, resp.Status)
	if v := resp.Header.Get("X-Webhook-Dedup"); v != "" {
		fmt.Fprintln(e.stdout, "X-Webhook-Dedup: "+v)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("send: the proxy answered %s: %s", resp.Status, oneLine(strings.TrimSpace(string(answer))))
	}
	return nil
}

// samplePreset is the preset a sample is made as: a preset route's one,
// on an auto route the first whose secret is set (the ones an async auto
// route recognises) or else the first; "" on a generic route.
func samplePreset(names []string, secrets map[string][]string) string {
	for _, n := range names {
		if len(secrets[n]) > 0 {
			return n
		}
	}
	if len(names) > 0 {
		return names[0]
	}
	return ""
}

// sample is one request as a sender makes it.
type sample struct {
	header http.Header
	body   []byte
}

// presetSample makes one preset's sample events. Each field's function
// gets the new event ID and the time.
type presetSample struct {
	// body is the JSON (or form) body, which carries the ID when the
	// preset reads it from the body. If nil, a small JSON object.
	body func(id string, now time.Time) []byte
	// header sets the headers that carry the ID or name the event. If
	// nil, none.
	header func(h http.Header, id string, now time.Time)
	// sign sets the signature headers, made with secret (and the public
	// URL for the schemes that sign it). If nil, the preset's sender
	// signs nothing the proxy checks.
	sign func(h http.Header, body []byte, secret, url string, now time.Time) error
}

// presetSamples are the presets' samples, by preset name: what each
// sender sends, signed as signature's verifiers check it (send runs the
// route's verifier on each before posting it, and the tests run every
// preset's).
func presetSamples() map[string]presetSample {
	return map[string]presetSample{
		"stripe": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"id": "evt_" + id, "object": "event", "type": "webhook_dedup.test", "created": now.Unix(), "data": map[string]any{"object": map[string]any{}}})
			},
			sign: func(h http.Header, body []byte, secret, _ string, now time.Time) error {
				t := strconv.FormatInt(now.Unix(), 10)
				h.Set("Stripe-Signature", "t="+t+",v1="+hexMAC(sha256.New, []byte(secret), t+".", body))
				return nil
			},
		},
		"github": {
			header: func(h http.Header, id string, _ time.Time) {
				h.Set("X-GitHub-Delivery", id)
				h.Set("X-GitHub-Event", "ping")
			},
			sign: bodySignature(sha256.New, "X-Hub-Signature-256", "sha256=", hexMAC),
		},
		"shopify": {
			header: func(h http.Header, id string, _ time.Time) {
				h.Set("X-Shopify-Webhook-Id", id)
				h.Set("X-Shopify-Topic", "app/uninstalled")
			},
			sign: bodySignature(sha256.New, "X-Shopify-Hmac-Sha256", "", b64MAC),
		},
		"gitlab": {
			header: func(h http.Header, id string, _ time.Time) {
				h.Set("Idempotency-Key", id)
				h.Set("X-Gitlab-Event", "System Hook")
			},
			sign: func(h http.Header, body []byte, secret, url string, now time.Time) error {
				if !strings.HasPrefix(secret, "whsec_") {
					h.Set("X-Gitlab-Token", secret) // a legacy secret token, sent as it is
					return nil
				}
				h.Set("Webhook-Id", h.Get("Idempotency-Key"))
				return signStandard(h, body, secret, now)
			},
		},
		"standardwebhooks": {
			header: func(h http.Header, id string, _ time.Time) { h.Set("Webhook-Id", "msg_"+id) },
			sign: func(h http.Header, body []byte, secret, _ string, now time.Time) error {
				return signStandard(h, body, secret, now)
			},
		},
		"slack": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"type": "event_callback", "event_id": "Ev" + id, "event_time": now.Unix(), "event": map[string]any{"type": "app_mention"}})
			},
			sign: timestampedSignature("X-Slack-Request-Timestamp", unixTime, "X-Slack-Signature", "v0=", hexMAC, "v0:", ":"),
		},
		"square": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"event_id": id, "type": "webhook_dedup.test", "created_at": now.UTC().Format(time.RFC3339)})
			},
			sign: func(h http.Header, body []byte, secret, url string, _ time.Time) error {
				h.Set("X-Square-Hmacsha256-Signature", b64MAC(sha256.New, []byte(secret), url, body))
				return nil
			},
		},
		"paypal": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"id": "WH-" + id, "event_type": "WEBHOOK_DEDUP.TEST", "create_time": now.UTC().Format(time.RFC3339)})
			},
			header: func(h http.Header, id string, _ time.Time) { h.Set("Paypal-Transmission-Id", id) },
		},
		"paddle": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"event_id": "evt_" + id, "event_type": "webhook_dedup.test", "occurred_at": now.UTC().Format(time.RFC3339)})
			},
			sign: func(h http.Header, body []byte, secret, _ string, now time.Time) error {
				ts := strconv.FormatInt(now.Unix(), 10)
				h.Set("Paddle-Signature", "ts="+ts+";h1="+hexMAC(sha256.New, []byte(secret), ts+":", body))
				return nil
			},
		},
		"bitbucket": {
			header: func(h http.Header, id string, _ time.Time) {
				h.Set("X-Request-UUID", id)
				h.Set("X-Event-Key", "repo:push")
			},
			sign: bodySignature(sha256.New, "X-Hub-Signature", "sha256=", hexMAC),
		},
		"jira": {
			header: func(h http.Header, id string, _ time.Time) { h.Set("X-Atlassian-Webhook-Identifier", id) },
			sign:   bodySignature(sha256.New, "X-Hub-Signature", "sha256=", hexMAC),
		},
		"linear": {
			body: func(_ string, now time.Time) []byte {
				return jsonBody(map[string]any{"action": "create", "type": "Issue", "webhookTimestamp": now.UnixMilli()})
			},
			header: func(h http.Header, id string, _ time.Time) { h.Set("Linear-Delivery", id) },
			sign:   bodySignature(sha256.New, "Linear-Signature", "", hexMAC),
		},
		"twitch": {
			header: func(h http.Header, id string, _ time.Time) {
				h.Set("Twitch-Eventsub-Message-Id", id)
				h.Set("Twitch-Eventsub-Message-Type", "notification")
			},
			sign: func(h http.Header, body []byte, secret, _ string, now time.Time) error {
				ts := now.UTC().Format(time.RFC3339Nano)
				h.Set("Twitch-Eventsub-Message-Timestamp", ts)
				h.Set("Twitch-Eventsub-Message-Signature", "sha256="+hexMAC(sha256.New, []byte(secret), h.Get("Twitch-Eventsub-Message-Id")+ts, body))
				return nil
			},
		},
		"twilio": {
			body: func(id string, _ time.Time) []byte {
				return []byte(url.Values{"AccountSid": {"AC" + id}, "CallSid": {"CA" + id}, "CallStatus": {"completed"}}.Encode())
			},
			header: func(h http.Header, id string, _ time.Time) {
				h.Set("Content-Type", "application/x-www-form-urlencoded")
				h.Set("I-Twilio-Idempotency-Token", id)
			},
			sign: func(h http.Header, body []byte, secret, rawURL string, _ time.Time) error {
				params, err := url.ParseQuery(string(body))
				if err != nil {
					return err
				}
				// The URL as Twilio signs it (without a fragment, which never
				// reaches a server), then each parameter's name and value in
				// the names' order.
				signed, _, _ := strings.Cut(rawURL, "#")
				for _, n := range slices.Sorted(maps.Keys(params)) {
					for _, v := range slices.Sorted(slices.Values(params[n])) {
						signed += n + v
					}
				}
				h.Set("X-Twilio-Signature", b64MAC(sha1.New, []byte(secret), signed, nil))
				return nil
			},
		},
		"zoom": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"event": "webhook_dedup.test", "event_ts": now.UnixMilli(), "payload": map[string]any{"object": map[string]any{"id": id}}})
			},
			sign: timestampedSignature("X-Zm-Request-Timestamp", unixTime, "X-Zm-Signature", "v0=", hexMAC, "v0:", ":"),
		},
		"zendesk": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"id": id, "type": "zen:event-type:webhook_dedup.test", "time": now.UTC().Format(time.RFC3339)})
			},
			sign: timestampedSignature("X-Zendesk-Webhook-Signature-Timestamp", func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
				"X-Zendesk-Webhook-Signature", "", b64MAC, "", ""),
		},
		"adyen": {
			body: func(id string, _ time.Time) []byte {
				item := map[string]any{"pspReference": id, "eventCode": "AUTHORISATION", "success": "true", "merchantReference": "webhook-dedup send"}
				return jsonBody(map[string]any{"live": "false", "notificationItems": []any{map[string]any{"NotificationRequestItem": item}}})
			},
		},
		"mailgun": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"event-data": map[string]any{"id": id, "event": "delivered", "timestamp": now.Unix()}})
			},
		},
		"intercom": {
			body: func(id string, now time.Time) []byte {
				return jsonBody(map[string]any{"type": "notification_event", "id": "notif_" + id, "topic": "ping", "created_at": now.Unix()})
			},
			sign: bodySignature(sha1.New, "X-Hub-Signature", "sha1=", hexMAC),
		},
	}
}

// newSample makes a sample event for preset, or for the generic source
// spec when preset is empty, with a new event ID, signed with the
// preset's first configured secret (if any).
func newSample(preset, spec string, cfg *config.Config, now time.Time) (sample, error) {
	id := newEventID()
	s := sample{header: http.Header{"Content-Type": {"application/json"}, "User-Agent": {"webhook-dedup-send"}}}
	if preset == "" {
		return genericSample(s, spec, id)
	}
	p, ok := presetSamples()[preset]
	if !ok {
		return sample{}, fmt.Errorf("send: no sample event for the %s preset", preset)
	}
	s.body = []byte(`{"type":"webhook_dedup.test"}`)
	if p.body != nil {
		s.body = p.body(id, now)
	}
	if p.header != nil {
		p.header(s.header, id, now)
	}
	if secrets := cfg.Secrets[preset]; p.sign != nil && len(secrets) > 0 {
		if err := p.sign(s.header, s.body, secrets[0], cfg.URLs[preset], now); err != nil {
			return sample{}, fmt.Errorf("send: signing the %s sample: %w", preset, err)
		}
	}
	return s, nil
}

// genericSample fills each part of a header:/json: source, joined with
// '+', with a new value: the header, or the JSON field at its dotted path.
func genericSample(s sample, spec, id string) (sample, error) {
	doc := map[string]any{"type": "webhook_dedup.test"}
	for i, part := range strings.Split(spec, "+") {
		part = strings.TrimSpace(part)
		value := id
		if i > 0 {
			value = newEventID()
		}
		switch {
		case strings.HasPrefix(part, "header:"):
			s.header.Set(strings.TrimPrefix(part, "header:"), value)
		case strings.HasPrefix(part, "json:"):
			node := doc
			segs := strings.Split(strings.TrimPrefix(part, "json:"), ".")
			for _, seg := range segs[:len(segs)-1] {
				child, ok := node[seg].(map[string]any)
				if !ok {
					child = map[string]any{}
					node[seg] = child
				}
				node = child
			}
			node[segs[len(segs)-1]] = value
		default:
			return sample{}, fmt.Errorf("send: source %q: no sample for %q", spec, part)
		}
	}
	s.body = jsonBody(doc)
	return s, nil
}

// newEventID is a random ID in the form of a UUID (version 4): new on
// every call, so that the event is not a duplicate of an earlier one.
func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v) // maps of strings and numbers always encode
	return b
}

// macEncoding writes a MAC as the scheme does.
type macEncoding func(newHash func() hash.Hash, key []byte, prefix string, body []byte) string

// hexMAC is the hex HMAC of prefix then body.
func hexMAC(newHash func() hash.Hash, key []byte, prefix string, body []byte) string {
	return hex.EncodeToString(mac(newHash, key, prefix, body))
}

// b64MAC is the base64 HMAC of prefix then body.
func b64MAC(newHash func() hash.Hash, key []byte, prefix string, body []byte) string {
	return base64.StdEncoding.EncodeToString(mac(newHash, key, prefix, body))
}

func mac(newHash func() hash.Hash, key []byte, prefix string, body []byte) []byte {
	m := hmac.New(newHash, key)
	m.Write([]byte(prefix))
	m.Write(body)
	return m.Sum(nil)
}

// bodySignature signs the body alone into header, after label.
func bodySignature(newHash func() hash.Hash, header, label string, enc macEncoding) func(http.Header, []byte, string, string, time.Time) error {
	return func(h http.Header, body []byte, secret, _ string, _ time.Time) error {
		h.Set(header, label+enc(newHash, []byte(secret), "", body))
		return nil
	}
}

func unixTime(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// timestampedSignature signs version, the timestamp, sep and the body
// with HMAC-SHA256 (Slack, Zoom, Zendesk), setting the timestamp header
// too.
func timestampedSignature(tsHeader string, format func(time.Time) string, sigHeader, label string, enc macEncoding, version, sep string) func(http.Header, []byte, string, string, time.Time) error {
	return func(h http.Header, body []byte, secret, _ string, now time.Time) error {
		ts := format(now)
		h.Set(tsHeader, ts)
		h.Set(sigHeader, label+enc(sha256.New, []byte(secret), version+ts+sep, body))
		return nil
	}
}

// signStandard signs a Standard Webhooks request whose webhook-id is set:
// the key is the base64 after "whsec_".
func signStandard(h http.Header, body []byte, secret string, now time.Time) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return errors.New("the secret is not whsec_ followed by base64")
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	h.Set("Webhook-Timestamp", ts)
	h.Set("Webhook-Signature", "v1,"+b64MAC(sha256.New, key, h.Get("Webhook-Id")+"."+ts+".", body))
	return nil
}
