package diskstore

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/webhook-dedup/webhook-dedup/dedup"
	bolt "go.etcd.io/bbolt"
)

// noteRefusal keeps refused in step with what the volume did with the
// last write.
func (d *Store) noteRefusal(err error) {
	switch {
	case err == nil:
		d.refused.Store(false)
	case volumeRefused(err):
		d.refused.Store(true)
	}
}

// volumeRefused reports whether err is the volume refusing a write, not
// the write's own logic.
func volumeRefused(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EROFS)
}

// Ping checks that the file answers within the store's timeout, that its
// volume has room, and, after the volume refused a write, that it takes
// one again.
func (d *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if err := d.view(func(*bolt.Tx) error { return nil }); err != nil {
		return fmt.Errorf("dedup: ping: %w", err)
	}
	if n := d.stalled.Load(); n > 0 {
		// Reads of the pages in memory still answer; the writes do not.
		return fmt.Errorf("dedup: ping: %w: %d operations still waiting on the file", ErrStalled, n)
	}
	var vol syscall.Statfs_t
	if err := syscall.Statfs(d.dir, &vol); err == nil && vol.Bavail*uint64(vol.Bsize) < minFree {
		return fmt.Errorf("dedup: ping: %w: the volume of %s has %d bytes free", dedup.ErrReadOnly, d.dir, vol.Bavail*uint64(vol.Bsize))
	}
	if d.refused.Load() {
		// Try a write of its own: the volume may have room again.
		err := d.bounded(d.timeout, func() error {
			return d.db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketRecords)
				if err := b.Put(probeKey, nil); err != nil {
					return err
				}
				return b.Delete(probeKey)
			})
		})
		d.noteRefusal(err)
		if err != nil {
			return fmt.Errorf("dedup: ping: %w: %w", dedup.ErrReadOnly, err)
		}
	}
	return nil
}

// minFree is the room the file's volume must have for the store to be
// ready: a nearly full volume refuses the writes that need the file to
// grow (a first-seen event, a completion) while the small ones still fit
// in its free pages, so it is taken as full before it is.
const minFree = 1 << 20

// probeKey is the record Ping writes, and deletes, to see whether a volume
// that refused writes takes them again. No store key is empty-prefixed
// like it.
var probeKey = []byte("\x00webhook-dedup:probe")
