module github.com/webhook-dedup/webhook-dedup/test/sdk

go 1.26.8

require (
	github.com/slack-go/slack v0.36.0
	github.com/standard-webhooks/standard-webhooks/libraries v0.0.1
	github.com/stripe/stripe-go/v82 v82.5.1
	github.com/webhook-dedup/webhook-dedup v0.0.0
)

require (
	github.com/gorilla/websocket v1.5.3 // indirect
	github.com/tidwall/gjson v1.20.2 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.3.0 // indirect
)

// The product as it is in this repository, not a published version.
replace github.com/webhook-dedup/webhook-dedup => ../..
