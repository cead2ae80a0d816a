package storeop

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/webhook-dedup/webhook-dedup/dedup"
)

// Owner is the check that a key prefix holds this deployment's records
// (APP_NAME), for the stores that keep an owner beside the records. Each
// store reads its owner record its own way (Read); Owner decides what the
// answer means, and remembers a check that passed, so that claims and
// lookups pay for it only until then: a sidecar that could not reach its
// store at start cannot serve another app's records once it can.
type Owner struct {
	// App is this deployment's identity. Empty: no check, every call
	// passes.
	App string
	// Where names the owner record in errors ("webhook-dedup:owner",
	// "webhook_dedup_owners").
	Where string
	// Read makes App the owner if there is none, and returns the owner.
	Read func(ctx context.Context) (string, error)

	ours atomic.Bool
}

// Check reads the owner and returns an error wrapping dedup.ErrPrefixOwned,
// naming the owner, if another app owns the prefix.
func (o *Owner) Check(ctx context.Context) error {
	if o.App == "" {
		return nil
	}
	owner, err := o.Read(ctx)
	if err != nil {
		return fmt.Errorf("dedup: read the owner of the key prefix (%s): %w", o.Where, err)
	}
	if owner != o.App {
		o.ours.Store(false)
		return fmt.Errorf("%w: %s says it belongs to %q, this app is %q", dedup.ErrPrefixOwned, o.Where, owner, o.App)
	}
	o.ours.Store(true)
	return nil
}

// Checked is Check, unless a check already passed.
func (o *Owner) Checked(ctx context.Context) error {
	if o.App == "" || o.ours.Load() {
		return nil
	}
	return o.Check(ctx)
}
