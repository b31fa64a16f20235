package gateway

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkWriteCheck is the gateway's cost per write: Authenticate (a
// SHA-256 of the token and a map lookup), Authorize (prefix match) and
// Admit, without limits and under limits that are never reached.
func BenchmarkWriteCheck(b *testing.B) {
	for _, c := range []struct{ name, quota string }{
		{"unlimited", ""},
		{"limited", "ops_per_second = 1e9\nbytes_per_second = 1e12\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			g, _ := openGateway(b, fmt.Sprintf("[[producer]]\nname = \"bench-%s\"\ntokens = [%q]\nprefixes = [\"dns/\", \"config/\"]\n%s", c.name, hashA, c.quota))
			header := "Bearer " + tokA
			batch := ops("config/service/key")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				p, err := g.Authenticate(header)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Authorize("default", batch); err != nil {
					b.Fatal(err)
				}
				if err := p.Admit(ctx, len(batch), BatchBytes(batch)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
