package signature

// One constructor per scheme. Each returns an error naming what is wrong
// with the options (no secret, undecodable secret, missing URL).

func Stripe(o Options) (Verifier, error)           { panic("unimplemented") }
func GitHub(o Options) (Verifier, error)           { panic("unimplemented") }
func Shopify(o Options) (Verifier, error)          { panic("unimplemented") }
func StandardWebhooks(o Options) (Verifier, error) { panic("unimplemented") }
func Slack(o Options) (Verifier, error)            { panic("unimplemented") }
func Paddle(o Options) (Verifier, error)           { panic("unimplemented") }
func Linear(o Options) (Verifier, error)           { panic("unimplemented") }
func Twitch(o Options) (Verifier, error)           { panic("unimplemented") }
func Zoom(o Options) (Verifier, error)             { panic("unimplemented") }
func GitLab(o Options) (Verifier, error)           { panic("unimplemented") }
func Bitbucket(o Options) (Verifier, error)        { panic("unimplemented") }
func Jira(o Options) (Verifier, error)             { panic("unimplemented") }
func Intercom(o Options) (Verifier, error)         { panic("unimplemented") }
func Zendesk(o Options) (Verifier, error)          { panic("unimplemented") }
func Square(o Options) (Verifier, error)           { panic("unimplemented") }
func Twilio(o Options) (Verifier, error)           { panic("unimplemented") }
