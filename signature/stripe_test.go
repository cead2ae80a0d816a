package signature

import (
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Behaviours of stripe-go's webhook/client_test.go (providers.md §2.4).
// stripe-go itself is the oracle in test/sdk.

const stripeSecret = "whsec_test_secret"

var stripeBody = []byte(`{"id":"evt_test_webhook","object":"event","type":"payment_intent.succeeded"}`)

func TestStripeBehaviours(t *testing.T) {
	now := time.Unix(1732960800, 0)
	signed := stripeHeader(stripeSecret, now, stripeBody)
	rolled := stripeHeader("whsec_test_secret_rolled_key", now, stripeBody)
	ts := strconv.FormatInt(now.Unix(), 10)
	v0 := "t=" + ts + ",v0=" + hexOf(sha256.New, stripeSecret, ts, ".", string(stripeBody))
	tests := []struct {
		name, header string
		secrets      []string
		tolerance    time.Duration
		at           time.Time
		want         error
	}{
		{"valid", signed, nil, 0, now, nil},
		{"extra undecodable v1", signed + ",v1=bad_signature", nil, 0, now, nil},
		{"valid v1 after a bad one", "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=bad_signature," + signed[strings.Index(signed, "v1="):], nil, 0, now, nil},
		{"v0 only", v0, nil, 0, now, ErrMismatch},
		{"v1,t=1", "v1,t=1", nil, 0, now, ErrMalformed},
		{"t=", "t=", nil, 0, now, ErrMalformed},
		{"trailing comma", signed + ",", nil, 0, now, ErrMalformed},
		{"no t", signed[strings.Index(signed, "v1="):], nil, 0, now, ErrMalformed},
		{"value with =", signed + ",v1=ab=cd", nil, 0, now, ErrMalformed},
		{"rolled header, original secret", signed + "," + rolled[strings.Index(rolled, "v1="):], nil, 0, now, nil},
		{"rolled header, rolled secret", signed + "," + rolled[strings.Index(rolled, "v1="):], []string{"whsec_test_secret_rolled_key"}, 0, now, nil},
		{"15 s old, 10 s tolerance", signed, nil, 10 * time.Second, now.Add(15 * time.Second), ErrStale},
		{"15 s old, 20 s tolerance", signed, nil, 20 * time.Second, now.Add(15 * time.Second), nil},
		{"15 s in the future, 10 s tolerance", signed, nil, 10 * time.Second, now.Add(-15 * time.Second), ErrStale},
		{"other secret", signed, []string{"whsec_other"}, 0, now, ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{stripeSecret}
			}
			v := mustNew(t, Stripe, Options{Secrets: secrets, Tolerance: tt.tolerance})
			wantErr(t, v.Verify(header("Stripe-Signature", tt.header), stripeBody, tt.at), tt.want)
		})
	}
}

func TestStripeUpperCaseHex(t *testing.T) {
	// stripe-go decodes with hex.DecodeString, which accepts upper case
	// (checked against stripe-go itself in test/sdk).
	now := time.Unix(1732960800, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	h := "t=" + ts + ",v1=" + strings.ToUpper(hexOf(sha256.New, stripeSecret, ts, ".", string(stripeBody)))
	wantErr(t, mustNew(t, Stripe, Options{Secrets: []string{stripeSecret}}).Verify(header("Stripe-Signature", h), stripeBody, now), nil)
}
