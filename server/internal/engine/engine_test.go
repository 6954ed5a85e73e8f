package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

const testRules = `
domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 10
`

func compile(t *testing.T, yaml string) *config.Rules {
	t.Helper()
	domains, err := config.Parse("rules.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := config.Compile(domains)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// user fills a request for domain of one descriptor, user=value, of hits.
func user(domain, value string, hits uint64) func(*engine.Request) error {
	return func(r *engine.Request) error {
		r.Domain = domain
		r.Entries = append(r.Entries, engine.Entry{Key: "user", Value: value})
		r.Add(0, hits)
		return nil
	}
}

// TestDecideRequest decides as replay does, through the engine alone: the
// limit admits 10 hits a minute, the request's rule is reported, and a
// request the engine refuses to decide is an invalid one.
func TestDecideRequest(t *testing.T) {
	rules := compile(t, testRules)
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	e := engine.New(store, rules, engine.Options{Headers: engine.HeadersOff})
	ctx := context.Background()
	var d engine.Decision
	if err := e.DecideRequest(ctx, user("shop", "ann", 10), &d); err != nil {
		t.Fatal(err)
	}
	if d.Over || len(d.Descriptors) != 1 || d.Descriptors[0].Over || d.Descriptors[0].Rule == nil || d.Descriptors[0].Rule.Path != "user" {
		t.Fatalf("10 hits of 10: %+v, want admitted by rule user", d)
	}
	if err := e.DecideRequest(ctx, user("shop", "ann", 1), &d); err != nil {
		t.Fatal(err)
	}
	if !d.Over || len(d.Descriptors) != 1 || !d.Descriptors[0].Over {
		t.Fatalf("the 11th hit: %+v, want refused", d)
	}
	err := e.DecideRequest(ctx, user("", "ann", 1), &d)
	if !engine.IsInvalid(err) {
		t.Fatalf("empty domain: %v, want an invalid request", err)
	}
	if engine.IsInvalid(engine.ErrStoreUnavailable) {
		t.Error("IsInvalid(ErrStoreUnavailable) = true")
	}
}

// recorder is an engine.Metrics that keeps what the engine hands it.
type recorder struct {
	mu     sync.Mutex
	rules  []engine.RuleCount
	shadow int
	took   int
}

func (r *recorder) StoreTook(time.Duration) { r.mu.Lock(); r.took++; r.mu.Unlock() }

func (r *recorder) StoreFailed(string, engine.FailureMode) {}

func (r *recorder) Rule(domain string, c engine.RuleCount) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rules = append(r.rules, c)
}

func (r *recorder) GlobalShadowMode() { r.mu.Lock(); r.shadow++; r.mu.Unlock() }

// TestMetrics checks what the engine counts through Metrics: the hits
// within the limit, those past the near-limit ratio (8 of 10), those over
// it, and in the daemon's shadow mode the request it let through.
func TestMetrics(t *testing.T) {
	rules := compile(t, testRules)
	for _, shadow := range []bool{false, true} {
		store := memory.New(memory.Options{})
		t.Cleanup(func() { store.Close() })
		rec := new(recorder)
		e := engine.New(store, rules, engine.Options{Metrics: rec, ShadowMode: shadow})
		var d engine.Decision
		for _, hits := range []uint64{7, 2, 2} {
			if err := e.DecideRequest(context.Background(), user("shop", "bob", hits), &d); err != nil {
				t.Fatal(err)
			}
		}
		if rec.took != 3 || len(rec.rules) != 3 {
			t.Fatalf("shadow %v: %d store calls and %d rule counts, want 3 and 3", shadow, rec.took, len(rec.rules))
		}
		want := []engine.RuleCount{
			{Hits: 7},
			{Hits: 2, Near: 1}, // 9 of 10 used: 1 hit past 8
			{Hits: 2, Over: true, Shadow: shadow},
		}
		for i, c := range rec.rules {
			if c.Rule == nil || c.Rule.Path != "user" {
				t.Errorf("shadow %v: count %d of rule %v, want user", shadow, i, c.Rule)
			}
			c.Rule = nil
			if c != want[i] {
				t.Errorf("shadow %v: count %d = %+v, want %+v", shadow, i, c, want[i])
			}
		}
		if wantShadow := map[bool]int{false: 0, true: 1}[shadow]; rec.shadow != wantShadow {
			t.Errorf("shadow %v: GlobalShadowMode called %d times, want %d", shadow, rec.shadow, wantShadow)
		}
	}
}
