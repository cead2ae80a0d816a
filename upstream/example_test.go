package upstream_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/webhook-dedup/webhook-dedup/upstream"
)

// A completing answer is read for replay, handed on unchanged, and
// recorded: sync routes and async delivery both do exactly this.
func ExampleCompletion() {
	c := upstream.Completion{ReplayResponse: true, ReplayMaxBytes: 64}
	resp := &http.Response{
		StatusCode: http.StatusCreated,
		Header:     http.Header{"Content-Type": {"text/xml"}},
		Body:       io.NopCloser(strings.NewReader("<Response/>")),
	}
	if !upstream.Completes(resp.StatusCode) {
		return // released or retried, never recorded
	}
	replay := c.Capture(resp)
	res := c.Result(resp.StatusCode, resp.Header, sha256.Sum256([]byte(`{"id":"evt_1"}`)), replay)
	handedOn, _ := io.ReadAll(resp.Body)
	fmt.Println(res.Status, res.ContentType, string(res.Body))
	fmt.Println(string(handedOn))
	// Output:
	// 201 text/xml <Response/>
	// <Response/>
}
