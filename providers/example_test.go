package providers_test

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/webhook-dedup/webhook-dedup/providers"
)

func ExampleParseSource() {
	src, err := providers.ParseSource("/hooks/acme", "header:X-Acme-Event-Id", providers.Options{})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("X-Acme-Event-Id", "evt_42")
	e := src.Resolve(h)
	id, err := e.EventID(h, nil)
	fmt.Println(e.Namespace, id, err, e.TTL, e.NeedsBody)
	// Output: /hooks/acme evt_42 <nil> 72h0m0s false
}

func ExampleParseSource_composite() {
	src, err := providers.ParseSource("/hooks/adyen", "json:notificationItems.0.NotificationRequestItem.pspReference+json:notificationItems.0.NotificationRequestItem.eventCode", providers.Options{})
	if err != nil {
		panic(err)
	}
	body := []byte(`{"notificationItems":[{"NotificationRequestItem":{"pspReference":"7914073381342284","eventCode":"AUTHORISATION"}}]}`)
	id, err := src.Resolve(nil).EventID(nil, body)
	fmt.Println(id, err)
	// Output: 7914073381342284+AUTHORISATION <nil>
}

func ExampleSource_Resolve_auto() {
	src, err := providers.ParseSource("/", "auto", providers.Options{})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("X-Slack-Signature", "v0=…")
	e := src.Resolve(h)
	_, err = e.EventID(h, []byte(`{"type":"url_verification","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}`))
	fmt.Println(e.Namespace, e.TTL, errors.Is(err, providers.ErrNotEvent))

	h = http.Header{}
	h.Set("X-Acme-Event-Id", "evt_42")
	fmt.Println(src.Resolve(h) == nil)
	// Output:
	// slack 1h0m0s true
	// true
}

func ExamplePresets() {
	for _, p := range providers.Presets()[:3] {
		fmt.Println(p.Name, p.TTL, p.SecretVar)
	}
	// Output:
	// stripe 96h0m0s STRIPE_WEBHOOK_SECRET
	// github 96h0m0s GITHUB_WEBHOOK_SECRET
	// shopify 72h0m0s SHOPIFY_WEBHOOK_SECRET
}
