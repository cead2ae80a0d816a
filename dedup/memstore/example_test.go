package memstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	"github.com/webhook-dedup/webhook-dedup/dedup/memstore"
)

// The first delivery of an event claims its ID; once the upstream has
// answered, a retry of the same event finds the completed record.
func ExampleNew() {
	store := memstore.New()
	defer store.Close()
	ctx := context.Background()
	body := []byte(`{"id":"evt_1"}`)

	claim, rec, err := store.Claim(ctx, "stripe:evt_1", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("first delivery finds:", rec.State)

	// ... forward the request; the upstream answers 200 ...
	res := dedup.Result{Status: 200, Fingerprint: sha256.Sum256(body)}
	if err := store.Complete(ctx, claim, res, 72*time.Hour); err != nil {
		panic(err)
	}

	_, rec, err = store.Claim(ctx, "stripe:evt_1", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("retry finds:", rec.State, rec.Result.Status)
	fmt.Println("same body:", rec.Result.SameBody(sha256.Sum256(body)))
	// Output:
	// first delivery finds: absent
	// retry finds: completed 200
	// same body: true
}
