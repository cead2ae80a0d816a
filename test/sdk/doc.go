// Package sdk holds the tests that check webhook-dedup against the
// providers' own verification libraries (stripe-go, the Standard Webhooks
// reference library, slack-go), as an app uses them. It is a module of its
// own so that the product's go.mod does not carry those SDKs; `make test`
// runs it too.
package sdk
