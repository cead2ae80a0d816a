package signature_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/webhook-dedup/webhook-dedup/signature"
)

// A verifier is built once per route and checks every request before its
// event ID reaches the store. This is GitHub's published test vector.
func ExampleGitHub() {
	v, err := signature.GitHub(signature.Options{Secrets: []string{"It's a Secret to Everybody"}})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")

	fmt.Println(v.Verify(h, []byte("Hello, World!"), time.Now()))
	err = v.Verify(h, []byte("Hello, forged world!"), time.Now())
	fmt.Println(errors.Is(err, signature.ErrMismatch), err)
	// Output:
	// <nil>
	// true signature: no match: X-Hub-Signature-256 matches no secret
}

// During a rotation both secrets are configured; a delivery signed with
// either passes. Standard Webhooks also bounds the signed timestamp.
func ExampleStandardWebhooks() {
	v, err := signature.StandardWebhooks(signature.Options{
		Secrets:   []string{"whsec_bmV3IGtleSBhZnRlciByb3RhdGlvbg==", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		Tolerance: 5 * time.Minute,
	})
	if err != nil {
		panic(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)

	fmt.Println(v.Verify(h, body, time.Unix(1614265330, 0)))
	fmt.Println(v.Verify(h, body, time.Unix(1614265330, 0).Add(time.Hour)))
	// Output:
	// <nil>
	// signature: timestamp outside tolerance: timestamp too old
}
