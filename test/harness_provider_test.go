package test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Secrets the simulated providers sign with. The app (the counting
// upstream) holds all of them; the proxy is given Stripe's and GitHub's.
const (
	stripeSecret  = "whsec_e2e_stripe_signing_secret"
	githubSecret  = "It's a Secret to Everybody"
	shopifySecret = "shpss_e2e_shopify_client_secret"
	// standardSecret is "whsec_" + base64 of the HMAC key, as Svix prints it.
	standardSecret = "whsec_ZTJlIHN0YW5kYXJkIHdlYmhvb2tzIHNpZ25pbmcga2V5IQ=="
	acmeSecret     = "acme-e2e-secret"
)

// secrets lists every secret, so that tests can check none reaches the logs.
var secrets = []string{stripeSecret, githubSecret, shopifySecret, standardSecret, acmeSecret}

// bodyCanary is in every body the providers send, so that tests can check
// no body reaches the logs.
const bodyCanary = "e2e-body-canary-7f3a"

// tolerance is the allowed age (and skew) of a signed timestamp at the app.
const tolerance = 5 * time.Minute

// event is one webhook event as its provider would send it on every attempt.
type event struct {
	// ID is the event ID the app keys on (and the proxy should).
	ID string
	// Body is the same on every attempt.
	Body []byte
	// Extra are headers that are the same on every attempt.
	Extra http.Header
}

// provider simulates one webhook sender and knows how the app verifies it.
type provider struct {
	// Name names the provider in keys and logs.
	Name string
	// Path is the route the provider posts to.
	Path string
	// Source is the route's right-hand side in ROUTES.
	Source string
	// Event returns event n.
	Event func(n int) event
	// Sign sets one attempt's headers, with a fresh timestamp where the
	// provider signs one.
	Sign func(ev event, now time.Time, h http.Header)
	// Verify checks a received request as the app would and returns the
	// event ID it keys on ("" if the request carries none).
	Verify func(r *http.Request, body []byte, now time.Time) (string, error)
}

var (
	stripe = provider{
		Name: "stripe", Path: "/webhooks/stripe", Source: "stripe",
		Event: func(n int) event {
			id := fmt.Sprintf("evt_1E2e%06d", n)
			body := fmt.Sprintf(`{"id":%q,"object":"event","type":"invoice.paid","data":{"object":{"id":"in_%06d","amount_paid":%d,"note":%q}}}`, id, n, 100+n, bodyCanary)
			return event{ID: id, Body: []byte(body)}
		},
		Sign: func(ev event, now time.Time, h http.Header) {
			h.Set("Content-Type", "application/json; charset=utf-8")
			h.Set("Stripe-Signature", stripeSignature(stripeSecret, now, ev.Body))
		},
		Verify: func(r *http.Request, body []byte, now time.Time) (string, error) {
			if err := verifyStripe(stripeSecret, r.Header.Get("Stripe-Signature"), body, now); err != nil {
				return "", err
			}
			var ev struct{ ID string }
			if err := json.Unmarshal(body, &ev); err != nil {
				return "", fmt.Errorf("stripe body: %w", err)
			}
			return ev.ID, nil
		},
	}

	github = provider{
		Name: "github", Path: "/webhooks/github", Source: "github",
		Event: func(n int) event {
			id := fmt.Sprintf("%08x-e2e0-11ee-8000-%012x", n, n)
			body := fmt.Sprintf(`{"ref":"refs/heads/main","after":"%040x","repository":{"full_name":"e2e/repo"},"note":%q}`, n, bodyCanary)
			return event{ID: id, Body: []byte(body)}
		},
		Sign: func(ev event, _ time.Time, h http.Header) {
			h.Set("Content-Type", "application/json")
			h.Set("User-Agent", "GitHub-Hookshot/e2e")
			h.Set("X-GitHub-Event", "push")
			h.Set("X-GitHub-Hook-ID", "4242")
			h.Set("X-GitHub-Delivery", ev.ID)
			h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac(githubSecret, string(ev.Body))))
		},
		Verify: func(r *http.Request, body []byte, _ time.Time) (string, error) {
			got := strings.TrimPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256=")
			if !equalHex(got, mac(githubSecret, string(body))) {
				return "", errors.New("github: X-Hub-Signature-256 does not match the body")
			}
			return r.Header.Get("X-GitHub-Delivery"), nil
		},
	}

	// shopify gives each pair of deliveries one X-Shopify-Event-Id (one
	// merchant action, two topics) and each delivery its own
	// X-Shopify-Webhook-Id, the per-delivery key the proxy must use.
	shopify = provider{
		Name: "shopify", Path: "/webhooks/shopify", Source: "shopify",
		Event: func(n int) event {
			id := fmt.Sprintf("b54557e4-bdd9-4b37-8a5f-%012d", n)
			topic := [...]string{"orders/create", "orders/paid"}[n%2]
			body := fmt.Sprintf(`{"id":%d,"total_price":"%d.00","note":%q}`, 820982911946154500+n/2, n, bodyCanary)
			extra := http.Header{}
			extra.Set("X-Shopify-Topic", topic)
			extra.Set("X-Shopify-Event-Id", fmt.Sprintf("98880550-7158-44d4-b7cd-%012d", n/2))
			return event{ID: id, Body: []byte(body), Extra: extra}
		},
		Sign: func(ev event, now time.Time, h http.Header) {
			h.Set("Content-Type", "application/json")
			h.Set("X-Shopify-Shop-Domain", "e2e.myshopify.com")
			h.Set("X-Shopify-API-Version", "2025-07")
			h.Set("X-Shopify-Webhook-Id", ev.ID)
			h.Set("X-Shopify-Triggered-At", now.UTC().Format(time.RFC3339Nano))
			h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac(shopifySecret, string(ev.Body))))
		},
		Verify: func(r *http.Request, body []byte, _ time.Time) (string, error) {
			got, err := base64.StdEncoding.DecodeString(r.Header.Get("X-Shopify-Hmac-Sha256"))
			if err != nil || !hmac.Equal(got, mac(shopifySecret, string(body))) {
				return "", errors.New("shopify: X-Shopify-Hmac-Sha256 does not match the body")
			}
			return r.Header.Get("X-Shopify-Webhook-Id"), nil
		},
	}

	standardWebhooks = provider{
		Name: "standardwebhooks", Path: "/webhooks/sw", Source: "standardwebhooks",
		Event: func(n int) event {
			id := fmt.Sprintf("msg_2E2e%06dAbCdEf", n)
			body := fmt.Sprintf(`{"type":"user.created","timestamp":"2026-11-30T00:00:00Z","data":{"id":"user_%d","note":%q}}`, n, bodyCanary)
			return event{ID: id, Body: []byte(body)}
		},
		Sign: func(ev event, now time.Time, h http.Header) {
			ts := strconv.FormatInt(now.Unix(), 10)
			h.Set("Content-Type", "application/json")
			h.Set("webhook-id", ev.ID)
			h.Set("webhook-timestamp", ts)
			h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac(standardKey(), ev.ID+"."+ts+"."+string(ev.Body))))
		},
		Verify: func(r *http.Request, body []byte, now time.Time) (string, error) {
			id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
			sec, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				return "", fmt.Errorf("standard webhooks: webhook-timestamp %q: %w", ts, err)
			}
			if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
				return "", fmt.Errorf("standard webhooks: timestamp %s off", d)
			}
			want := mac(standardKey(), id+"."+ts+"."+string(body))
			for _, sig := range strings.Fields(r.Header.Get("webhook-signature")) {
				version, value, _ := strings.Cut(sig, ",")
				got, err := base64.StdEncoding.DecodeString(value)
				if version == "v1" && err == nil && hmac.Equal(got, want) {
					return id, nil
				}
			}
			return "", errors.New("standard webhooks: no webhook-signature matches")
		},
	}

	// acme is a home-grown sender keyed on a header; its body is not JSON
	// (and not even UTF-8), to show bodies pass byte for byte.
	acme = provider{
		Name: "acme", Path: "/hooks/acme", Source: "header:X-Acme-Event-Id",
		Event: func(n int) event {
			return event{ID: fmt.Sprintf("acme-%06d", n), Body: []byte(fmt.Sprintf("event %d\r\n%s\x00\xff\xfe\r\n", n, bodyCanary))}
		},
		Sign: func(ev event, _ time.Time, h http.Header) {
			h.Set("Content-Type", "application/octet-stream")
			if ev.ID != "" {
				h.Set("X-Acme-Event-Id", ev.ID)
			}
			h.Set("X-Acme-Signature", hex.EncodeToString(mac(acmeSecret, ev.ID+"."+string(ev.Body))))
		},
		Verify: func(r *http.Request, body []byte, _ time.Time) (string, error) {
			id := r.Header.Get("X-Acme-Event-Id")
			if !equalHex(r.Header.Get("X-Acme-Signature"), mac(acmeSecret, id+"."+string(body))) {
				return "", errors.New("acme: X-Acme-Signature does not match")
			}
			return id, nil
		},
	}

	// jsonPath keys on data.object.id; every third ID is a JSON number,
	// which the proxy must use as its literal text.
	jsonPath = provider{
		Name: "json", Path: "/hooks/json", Source: "json:data.object.id",
		Event: func(n int) event {
			id, literal := fmt.Sprintf("obj_%06d", n), ""
			if n%3 == 0 {
				id = strconv.Itoa(9000000 + n)
				literal = id
			} else {
				literal = strconv.Quote(id)
			}
			body := fmt.Sprintf(`{"type":"object.updated","data":{"object":{"id":%s,"n":%d,"note":%q}}}`, literal, n, bodyCanary)
			return event{ID: id, Body: []byte(body)}
		},
		Sign: func(ev event, _ time.Time, h http.Header) {
			h.Set("Content-Type", "application/json")
			h.Set("X-Json-Signature", hex.EncodeToString(mac(acmeSecret, string(ev.Body))))
		},
		Verify: func(r *http.Request, body []byte, _ time.Time) (string, error) {
			if !equalHex(r.Header.Get("X-Json-Signature"), mac(acmeSecret, string(body))) {
				return "", errors.New("json: X-Json-Signature does not match the body")
			}
			var ev struct {
				Data struct {
					Object struct {
						ID json.RawMessage `json:"id"`
					} `json:"object"`
				} `json:"data"`
			}
			if json.Unmarshal(body, &ev) != nil {
				return "", nil // not an event the app understands: it has no ID
			}
			raw := ev.Data.Object.ID
			var s string
			if json.Unmarshal(raw, &s) == nil {
				return s, nil
			}
			return string(raw), nil
		},
	}

	allProviders = []provider{stripe, github, shopify, standardWebhooks, acme, jsonPath}
)

// routes is the ROUTES value for providers.
func routes(providers ...provider) string {
	parts := make([]string, len(providers))
	for i, p := range providers {
		parts[i] = p.Path + "=" + p.Source
	}
	return strings.Join(parts, ",")
}

// signedSecrets is the proxy's signature configuration: the proxy checks
// Stripe's and GitHub's signatures (when it implements checking).
var signedSecrets = map[string]string{
	"STRIPE_WEBHOOK_SECRET": stripeSecret,
	"GITHUB_WEBHOOK_SECRET": githubSecret,
}

func mac(key, msg string) []byte {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func equalHex(got string, want []byte) bool {
	b, err := hex.DecodeString(got)
	return err == nil && hmac.Equal(b, want)
}

func standardKey() string {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(standardSecret, "whsec_"))
	if err != nil {
		panic("standardSecret is not base64: " + err.Error())
	}
	return string(key)
}

// stripeSignature is Stripe's header: t=<unix>,v1=hex(HMAC(secret, "t.body")).
func stripeSignature(secret string, now time.Time, body []byte) string {
	t := strconv.FormatInt(now.Unix(), 10)
	return "t=" + t + ",v1=" + hex.EncodeToString(mac(secret, t+"."+string(body)))
}

func verifyStripe(secret, header string, body []byte, now time.Time) error {
	var t string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			t = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return fmt.Errorf("stripe: Stripe-Signature %q has no timestamp", header)
	}
	if now.Sub(time.Unix(sec, 0)) > tolerance {
		return fmt.Errorf("stripe: timestamp %s is too old", t)
	}
	want := mac(secret, t+"."+string(body))
	for _, sig := range sigs {
		if equalHex(sig, want) {
			return nil
		}
	}
	return errors.New("stripe: no v1 signature matches the body")
}

// query is on every webhook URL, to show the query passes untouched.
const query = "?source=e2e&path=%2Fa%2Fb&empty="

// request builds one signed attempt of ev to the proxy at addr.
func (p provider) request(ctx context.Context, addr string, ev event) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+p.Path+query, bytes.NewReader(ev.Body))
	if err != nil {
		return nil, err
	}
	for k, vs := range ev.Extra {
		req.Header[k] = vs
	}
	p.Sign(ev, time.Now(), req.Header)
	markSent(req)
	return req, nil
}

// markSent records, in a header the app checks, the Host and request target
// the sender used, so the app can tell they reached it unchanged.
func markSent(req *http.Request) {
	req.Header.Set("X-Test-Sent", req.Host+" "+req.URL.RequestURI())
}

// send posts one signed attempt of ev through the proxy and reads the answer.
func (p provider) send(ctx context.Context, client *http.Client, addr string, ev event) (answer, error) {
	req, err := p.request(ctx, addr, ev)
	if err != nil {
		return answer{}, err
	}
	return do(client, req)
}

// key is how the app (and the tests) name one event: provider and ID.
func key(p provider, id string) string { return p.Name + ":" + id }
