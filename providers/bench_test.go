package providers

import (
	"net/http"
	"testing"
)

// stripeBody is a typical Stripe event, about 1.5 KB.
const stripeBody = `{
  "id": "evt_3PqRstUvWxYz0123456789ab",
  "object": "event",
  "api_version": "2024-06-20",
  "created": 1724160000,
  "data": {
    "object": {
      "id": "pi_3PqRstUvWxYz0123456789ab",
      "object": "payment_intent",
      "amount": 2000,
      "amount_capturable": 0,
      "amount_received": 2000,
      "capture_method": "automatic",
      "client_secret": "pi_3PqRstUvWxYz0123456789ab_secret_abcdefghijklmnop",
      "confirmation_method": "automatic",
      "created": 1724159990,
      "currency": "usd",
      "customer": "cus_QabcdefGhijkl",
      "description": "Order #1234",
      "latest_charge": "ch_3PqRstUvWxYz0123456789ab",
      "livemode": false,
      "metadata": {"order_id": "1234", "note": "a \"quoted\" note"},
      "payment_method": "pm_1PqRstUvWxYz0123456789ab",
      "payment_method_types": ["card"],
      "receipt_email": "jenny.rosen@example.com",
      "shipping": {
        "address": {"city": "San Francisco", "country": "US", "line1": "510 Townsend St", "postal_code": "94103", "state": "CA"},
        "name": "Jenny Rosen"
      },
      "status": "succeeded"
    }
  },
  "livemode": false,
  "pending_webhooks": 1,
  "request": {"id": "req_abcdefGhijkl", "idempotency_key": "6b3f2a1e-2c4d-4e5f-8a9b-0c1d2e3f4a5b"},
  "type": "payment_intent.succeeded"
}`

// adyenBody is a typical Adyen notification.
const adyenBody = `{
  "live": "false",
  "notificationItems": [{
    "NotificationRequestItem": {
      "additionalData": {"hmacSignature": "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="},
      "amount": {"currency": "EUR", "value": 1130},
      "eventCode": "AUTHORISATION",
      "eventDate": "2024-08-20T12:00:00+02:00",
      "merchantAccountCode": "TestMerchant",
      "merchantReference": "TestPayment-1407325143704",
      "operations": ["CANCEL", "CAPTURE", "REFUND"],
      "paymentMethod": "visa",
      "pspReference": "7914073381342284",
      "success": "true"
    }
  }]
}`

func BenchmarkEventID(b *testing.B) {
	githubHeaders := headers(
		"Content-Type", "application/json",
		"User-Agent", "GitHub-Hookshot/044aadd",
		"X-GitHub-Event", "push",
		"X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958",
		"X-GitHub-Hook-Id", "292430182",
		"X-Hub-Signature-256", "sha256=d57c68ca6f92289e6987922ff26938930f6e66a2d161ef06abdf1859230aa23c",
	)
	stripeHeaders := headers(
		"Content-Type", "application/json; charset=utf-8",
		"User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
		"Stripe-Signature", "t=1724160000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
	)
	for _, c := range []struct {
		name, spec string
		h          http.Header
		body       string
	}{
		{"stripe", "stripe", stripeHeaders, stripeBody},
		{"github", "github", githubHeaders, ""},
		{"json-path", "json:data.object.id", stripeHeaders, stripeBody},
		{"composite", "json:notificationItems.0.NotificationRequestItem.pspReference+json:notificationItems.0.NotificationRequestItem.eventCode+header:Content-Type", stripeHeaders, adyenBody},
		{"auto", "auto", githubHeaders, ""},
		{"auto-stripe", "auto", stripeHeaders, stripeBody},
	} {
		b.Run(c.name, func(b *testing.B) {
			src, err := ParseSource("/bench", c.spec, Options{})
			if err != nil {
				b.Fatal(err)
			}
			body := []byte(c.body)
			if e := src.Resolve(c.h); e == nil || !e.NeedsBody {
				body = nil
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				e := src.Resolve(c.h)
				if _, err := e.EventID(c.h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
