package signature

import (
	"bytes"
	"testing"
)

// BenchmarkVerify measures one accepted request per scheme with a 1 KiB
// body: the cost the proxy adds to every delivery.
func BenchmarkVerify(b *testing.B) {
	body := bytes.Repeat([]byte("a"), 1024)
	for _, s := range schemes() {
		b.Run(s.name, func(b *testing.B) {
			v := mustNew(b, s.new, Options{Secrets: s.secrets[:1], URL: s.url})
			h, signed := s.sign(b, s.secrets[0], testNow, body)
			if err := v.Verify(h, signed, testNow); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(signed)))
			b.ReportAllocs()
			for b.Loop() {
				if err := v.Verify(h, signed, testNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerifyRotation measures the worst accepted case with two
// secrets: the matching one is the second.
func BenchmarkVerifyRotation(b *testing.B) {
	body := bytes.Repeat([]byte("a"), 1024)
	for _, s := range schemes()[:2] {
		b.Run(s.name, func(b *testing.B) {
			v := mustNew(b, s.new, Options{Secrets: []string{s.secrets[1], s.secrets[0]}, URL: s.url})
			h, signed := s.sign(b, s.secrets[0], testNow, body)
			b.ReportAllocs()
			for b.Loop() {
				if err := v.Verify(h, signed, testNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
