package gateway

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// A panic in the host's lookup or in the audit callback ends only its query; an audit record
// keeps at most 16 of many addresses, and counts them all.
func TestResolverPanicsAndManyAnswers(t *testing.T) {
	var mu sync.Mutex
	var recs []Record
	r := &Resolver{
		Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == "boom.example.test" {
				panic("lookup exploded")
			}
			var as []netip.Addr
			for i := range 40 {
				as = append(as, netip.AddrFrom4([4]byte{93, 184, 0, byte(i + 1)}))
			}
			return as, nil
		},
		Audit: func(rec Record) {
			if rec.Host == "audit.example.test" {
				panic("audit exploded")
			}
			mu.Lock()
			recs = append(recs, rec)
			mu.Unlock()
		},
	}
	udp, _ := serve(t, r)
	c := dial(t, "udp", udp)
	c.send(queryMsg(t, 1, question("boom.example.test.", dnsmessage.TypeA), 0))
	c.exchange(2, question("audit.example.test.", dnsmessage.TypeA), 0)
	m := c.exchange(3, question("many.example.test.", dnsmessage.TypeA), 4096)
	if len(addrs(m)) != 40 {
		t.Fatalf("answered %d addresses, want 40", len(addrs(m)))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, rec := range recs {
		if rec.Host == "many.example.test" {
			if len(rec.Answers) != 16 || rec.AnswerCount != 40 {
				t.Fatalf("record keeps %d answers, count %d", len(rec.Answers), rec.AnswerCount)
			}
			return
		}
	}
	t.Fatalf("no record for many.example.test: %+v", recs)
}
