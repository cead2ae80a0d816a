package diskstore

import (
	"bytes"
	"encoding/binary"
	"time"
)

// diskSweepBatch bounds the records one sweep transaction deletes, so that
// the writes of requests are not held up for long.
const diskSweepBatch = 1000

// sweep deletes the expired records, diskSweepBatch per transaction.
func (d *Store) sweep() error {
	for {
		n := 0
		err := d.write(func(b diskBuckets) error {
			n = 0
			now := time.Now().UnixMilli()
			var keys [][]byte
			c := b.expiry.Cursor()
			for k, _ := c.First(); k != nil && len(keys) < diskSweepBatch; k, _ = c.Next() {
				if int64(binary.BigEndian.Uint64(k)) > now {
					break
				}
				keys = append(keys, bytes.Clone(k[8:]))
			}
			for _, key := range keys {
				if _, ok := b.get(key, now); !ok {
					if err := b.deleteAll(key); err != nil {
						return err
					}
					n++
				}
			}
			return nil
		})
		if err != nil || n < diskSweepBatch {
			return err
		}
	}
}
