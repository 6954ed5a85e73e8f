package overrides_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
	"github.com/ratelimitd/ratelimitd/server/overrides"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rulesYAML = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true}
`

func rules(t testing.TB) *config.Rules {
	t.Helper()
	ds, err := config.Parse("rules.yaml", []byte(rulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	r, err := config.Compile(ds)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A replica is one daemon's engine and Manager.
type replica struct {
	eng *engine.Engine
	m   *overrides.Manager
	reg *prometheus.Registry
	log *bytes.Buffer
}

func newReplica(t testing.TB, store backend.Store, opts overrides.Options) *replica {
	t.Helper()
	r := &replica{reg: prometheus.NewRegistry(), log: new(bytes.Buffer)}
	r.eng = engine.New(store, rules(t), engine.Options{Now: opts.Now})
	opts.Registry = r.reg
	opts.Logger = slog.New(slog.NewJSONHandler(r.log, nil))
	os, _ := store.(backend.OverrideStore)
	r.m = overrides.New(os, r.eng, opts)
	return r
}

// over decides one request of one hit for the descriptor of kv (key,
// value, ...) in domain edge and reports whether it is refused.
func (r *replica) over(t testing.TB, kv ...string) bool {
	t.Helper()
	var d engine.Decision
	err := r.eng.DecideRequest(t.Context(), func(req *engine.Request) error {
		req.Domain = "edge"
		for i := 0; i < len(kv); i += 2 {
			req.Entries = append(req.Entries, engine.Entry{Key: kv[i], Value: kv[i+1]})
		}
		req.Add(0, 1)
		return nil
	}, &d)
	if err != nil {
		t.Fatal(err)
	}
	return d.Over
}

// admitted counts how many of n requests for kv are admitted.
func (r *replica) admitted(t testing.TB, n int, kv ...string) int {
	t.Helper()
	ok := 0
	for range n {
		if !r.over(t, kv...) {
			ok++
		}
	}
	return ok
}

func newStore(t testing.TB) *memory.Store {
	s := memory.New(memory.Options{})
	t.Cleanup(func() { s.Close() })
	return s
}

func raise(value string, n uint32) overrides.Override {
	return overrides.Override{
		Domain:  "edge",
		Entries: []overrides.Entry{{Key: "api_key", Value: value}},
		Limits:  []overrides.Limit{{RequestsPerUnit: n, Unit: "minute"}},
		Reason:  "incident 42",
	}
}

func TestSetReplacesTheLimitsOfOneDescriptor(t *testing.T) {
	store := newStore(t)
	a := newReplica(t, store, overrides.Options{})
	got, err := a.m.Set(t.Context(), raise("k-123", 5), "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || got.SetBy != "alice" || got.SetAt.IsZero() {
		t.Errorf("Set = version %d by %q at %v, want version 1 by alice, with a time", got.Version, got.SetBy, got.SetAt)
	}
	// Applied on this replica before Set returns.
	if n := a.admitted(t, 8, "api_key", "k-123"); n != 5 {
		t.Errorf("k-123 admitted %d of 8, want 5 (the override's limit)", n)
	}
	// Other values of the rule, and longer descriptors, keep the rule's.
	if n := a.admitted(t, 4, "api_key", "other"); n != 2 {
		t.Errorf("other admitted %d of 4, want 2 (the rule's limit)", n)
	}
	if n := a.admitted(t, 4, "api_key", "k-123", "path", "/x"); n != 2 {
		t.Errorf("k-123 /x admitted %d of 4, want 2 (the child rule's limit)", n)
	}
	again, err := a.m.Set(t.Context(), raise("k-123", 7), "bob")
	if err != nil || again.Version != 2 {
		t.Fatalf("second Set = version %d, %v; want version 2", again.Version, err)
	}
}

func TestOverrideOfUnlimitedRule(t *testing.T) {
	a := newReplica(t, newStore(t), overrides.Options{})
	o := raise("", 1)
	o.Entries = []overrides.Entry{{Key: "free", Value: "x"}}
	if _, err := a.m.Set(t.Context(), o, "alice"); err != nil {
		t.Fatal(err)
	}
	if n := a.admitted(t, 3, "free", "x"); n != 1 {
		t.Errorf("free=x admitted %d of 3, want 1: the override replaces unlimited", n)
	}
	if n := a.admitted(t, 3, "free", "y"); n != 3 {
		t.Errorf("free=y admitted %d of 3, want 3 (unlimited)", n)
	}
}

func TestAnotherReplicaAppliesAtItsNextSync(t *testing.T) {
	store := newStore(t)
	a := newReplica(t, store, overrides.Options{})
	b := newReplica(t, store, overrides.Options{})
	if err := b.m.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.m.Set(t.Context(), raise("k-1", 4), "alice"); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := b.admitted(t, 6, "api_key", "k-1"); n != 4 {
		t.Errorf("replica b admitted %d of 6, want 4", n)
	}
	// A changed record is read again: 6 a minute on the same counter.
	if _, err := a.m.Set(t.Context(), raise("k-1", 6), "alice"); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := b.admitted(t, 4, "api_key", "k-1"); n != 2 {
		t.Errorf("after the change, replica b admitted %d more of 4, want 2", n)
	}
	if err := a.m.Delete(t.Context(), "edge", raise("k-1", 0).Entries, "over", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := b.m.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.eng.Overrides().Len(); got != 0 {
		t.Errorf("replica b holds %d overrides after the delete, want 0", got)
	}
	if err := a.m.Delete(t.Context(), "edge", raise("k-1", 0).Entries, "", "alice"); !errors.Is(err, overrides.ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
}

// TestRunPolls runs the sync loop on its own ticker, in a bubble whose
// clock moves only when every goroutine waits.
func TestRunPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New(memory.Options{})
		defer store.Close()
		a := newReplica(t, store, overrides.Options{})
		b := newReplica(t, store, overrides.Options{Interval: 300 * time.Millisecond})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- b.m.Run(ctx) }()
		synctest.Wait()
		if _, err := a.m.Set(ctx, raise("k-1", 4), "alice"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(299 * time.Millisecond)
		synctest.Wait()
		if got := b.eng.Overrides().Len(); got != 0 {
			t.Errorf("before the interval, b holds %d overrides, want 0", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := b.eng.Overrides().Len(); got != 1 {
			t.Errorf("after one interval, b holds %d overrides, want 1", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// failing is an OverrideStore whose reads fail while fail is set.
type failing struct {
	*memory.Store
	fail atomic.Bool
}

func (f *failing) Overrides(ctx context.Context, since uint64) (map[string][]byte, uint64, error) {
	if f.fail.Load() {
		return nil, 0, errors.New("connection refused")
	}
	return f.Store.Overrides(ctx, since)
}

func TestStoreOutageKeepsTheLastOverrides(t *testing.T) {
	store := &failing{Store: newStore(t)}
	a := newReplica(t, store, overrides.Options{})
	if _, err := a.m.Set(t.Context(), raise("k-1", 4), "alice"); err != nil {
		t.Fatal(err)
	}
	if got := a.m.State(); !strings.HasPrefix(got, "ok") {
		t.Errorf("State() = %q, want ok", got)
	}
	store.fail.Store(true)
	if err := a.m.Sync(t.Context()); err == nil {
		t.Fatal("Sync with the store down = nil, want an error")
	}
	if n := a.admitted(t, 6, "api_key", "k-1"); n != 4 {
		t.Errorf("store down: admitted %d of 6, want 4 (the override kept)", n)
	}
	if got := a.m.State(); !strings.Contains(got, "stale since") || !strings.Contains(got, "keeping 1 overrides") {
		t.Errorf("State() = %q, want stale, keeping 1", got)
	}
	if got := testutil.ToFloat64(gauge(t, a.reg, "ratelimitd_overrides_stale")); got != 1 {
		t.Errorf("ratelimitd_overrides_stale = %v, want 1", got)
	}
	store.fail.Store(false)
	if err := a.m.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(gauge(t, a.reg, "ratelimitd_overrides_stale")); got != 0 {
		t.Errorf("ratelimitd_overrides_stale after recovery = %v, want 0", got)
	}
}

// gauge returns the collector of the metric named name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "", nil, nil), prometheus.GaugeValue, mf.GetMetric()[0].GetGauge().GetValue())
			}
		}
	})
}

type collectorFunc func(chan<- prometheus.Metric)

func (collectorFunc) Describe(chan<- *prometheus.Desc)      {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

func TestExpiry(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	nowFn := func() time.Time { return *clock.Load() }
	store := newStore(t)
	a := newReplica(t, store, overrides.Options{Now: nowFn})
	o := raise("k-1", 4)
	exp := now.Add(time.Minute)
	o.ExpiresAt = &exp
	if _, err := a.m.Set(t.Context(), o, "alice"); err != nil {
		t.Fatal(err)
	}
	if got := a.eng.Overrides().Len(); got != 1 {
		t.Fatalf("in force: %d, want 1", got)
	}
	later := exp
	clock.Store(&later)
	if err := a.m.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := a.eng.Overrides().Len(); got != 0 {
		t.Errorf("after expiry, in force: %d, want 0", got)
	}
	if recs, _, _ := store.Overrides(t.Context(), 0); len(recs) != 0 {
		t.Errorf("after expiry, the store holds %d records, want 0 (deleted)", len(recs))
	}
	if got := testutil.ToFloat64(a.counter(t, "ratelimitd_override_changes_total", "op", "expire")); got != 1 {
		t.Errorf("changes{op=expire} = %v, want 1", got)
	}
	past := now
	o.ExpiresAt = &past
	if _, err := a.m.Set(t.Context(), o, "alice"); !overrides.IsInvalid(err) {
		t.Errorf("Set expiring in the past = %v, want an InvalidError", err)
	}
}

func (r *replica) counter(t *testing.T, name, label, value string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, err := r.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == label && lp.GetValue() == value {
						ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, "", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
					}
				}
			}
		}
	})
}

func TestMaxOverrides(t *testing.T) {
	store := newStore(t)
	a := newReplica(t, store, overrides.Options{Max: 2})
	for _, v := range []string{"k-1", "k-2"} {
		if _, err := a.m.Set(t.Context(), raise(v, 4), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.m.Set(t.Context(), raise("k-3", 4), "alice"); !errors.Is(err, overrides.ErrFull) {
		t.Fatalf("third Set = %v, want ErrFull", err)
	}
	if _, err := a.m.Set(t.Context(), raise("k-2", 9), "alice"); err != nil {
		t.Errorf("replacing at the bound = %v, want nil", err)
	}
	if got := testutil.ToFloat64(a.counter(t, "ratelimitd_override_refusals_total", "reason", "full")); got != 1 {
		t.Errorf("refusals{reason=full} = %v, want 1", got)
	}
	list, err := a.m.List(t.Context(), "")
	if err != nil || len(list) != 2 {
		t.Errorf("List = %d overrides, %v; want 2", len(list), err)
	}
	// A replica with a smaller bound applies the first ones only.
	b := newReplica(t, store, overrides.Options{Max: 1})
	if err := b.m.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.eng.Overrides().Len(); got != 1 {
		t.Errorf("replica with --max-overrides 1 applies %d, want 1", got)
	}
	if got := testutil.ToFloat64(gauge(t, b.reg, "ratelimitd_overrides_skipped")); got != 1 {
		t.Errorf("ratelimitd_overrides_skipped = %v, want 1", got)
	}
}

func TestInvalidChangesNothing(t *testing.T) {
	long := strings.Repeat("x", overrides.MaxValueBytes+1)
	many := make([]overrides.Entry, engine.MaxEntries+1)
	for i := range many {
		many[i] = overrides.Entry{Key: "k", Value: "v"}
	}
	for _, tc := range []struct {
		name string
		edit func(*overrides.Override)
		want string
	}{
		{"no reason", func(o *overrides.Override) { o.Reason = "" }, "reason is required"},
		{"unknown unit", func(o *overrides.Override) { o.Limits[0].Unit = "fortnight" }, `unknown unit "fortnight"`},
		{"unit and window", func(o *overrides.Override) { o.Limits[0].Window = "90s" }, "unit and window exclude each other"},
		{"bad window", func(o *overrides.Override) { o.Limits[0].Unit, o.Limits[0].Window = "", "soon" }, `window "soon" is not a duration`},
		{"bad algorithm", func(o *overrides.Override) { o.Limits[0].Algorithm = "leaky" }, "leaky"},
		{"burst", func(o *overrides.Override) { o.Limits[0].Burst = 3 }, "burst applies to token_bucket and gcra only"},
		{"no limits", func(o *overrides.Override) { o.Limits = nil }, "limits is empty"},
		{"no domain", func(o *overrides.Override) { o.Domain = "" }, "domain is empty"},
		{"no entries", func(o *overrides.Override) { o.Entries = nil }, "has no entries"},
		{"too many entries", func(o *overrides.Override) { o.Entries = many }, "over the maximum 32"},
		{"empty key", func(o *overrides.Override) { o.Entries[0].Key = "" }, "empty key"},
		{"key not UTF-8", func(o *overrides.Override) { o.Entries[0].Key = "a\xff" }, "key is not UTF-8"},
		{"value not UTF-8", func(o *overrides.Override) { o.Entries[0].Value = "a\xff" }, "value is not UTF-8"},
		{"long value", func(o *overrides.Override) { o.Entries[0].Value = long }, "value is 4097 bytes"},
		{"long reason", func(o *overrides.Override) { o.Reason = long }, "reason is 4097 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			a := newReplica(t, store, overrides.Options{})
			o := raise("k-1", 4)
			tc.edit(&o)
			_, err := a.m.Set(t.Context(), o, "alice")
			if !overrides.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Set = %v, want an InvalidError with %q", err, tc.want)
			}
			if _, v, _ := store.Overrides(t.Context(), 0); v != 0 {
				t.Errorf("the store's version is %d after a refused Set, want 0", v)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"domain":"edge","bogus":1}`, `unknown field "bogus"`},
		{"{\"domain\":\"e\xffdge\"}", "not UTF-8"},
		{`{"domain":"edge"} {}`, "more than one JSON value"},
		{`{"limits":[{"requests_per_unit":5000000000}]}`, "requests_per_unit"},
		{strings.Repeat(" ", overrides.MaxBodyBytes+1), "over the maximum"},
	} {
		_, err := overrides.Decode[overrides.Override](strings.NewReader(tc.body))
		if !overrides.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%.40q) = %v, want an InvalidError with %q", tc.body, err, tc.want)
		}
	}
}

func TestAuditLog(t *testing.T) {
	a := newReplica(t, newStore(t), overrides.Options{})
	if _, err := a.m.Set(t.Context(), raise("k-1", 4), "alice"); err != nil {
		t.Fatal(err)
	}
	if err := a.m.Delete(t.Context(), "edge", raise("k-1", 0).Entries, "resolved", "bob"); err != nil {
		t.Fatal(err)
	}
	var lines []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(a.log.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "override set" || m["msg"] == "override delete" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("audit lines = %v, want one per change", lines)
	}
	for i, want := range []map[string]any{
		{"op": "set", "by": "alice", "reason": "incident 42", "version": 1.0, "domain": "edge", "entries": "api_key=k-1"},
		{"op": "delete", "by": "bob", "reason": "resolved", "version": 1.0},
	} {
		for k, v := range want {
			if lines[i][k] != v {
				t.Errorf("audit line %d: %s = %v, want %v", i, k, lines[i][k], v)
			}
		}
	}
	if got := testutil.ToFloat64(a.counter(t, "ratelimitd_override_changes_total", "op", "set")); got != 1 {
		t.Errorf("changes{op=set} = %v, want 1", got)
	}
}

func TestListMarksUnmatched(t *testing.T) {
	a := newReplica(t, newStore(t), overrides.Options{})
	o := raise("k-1", 4)
	o.Domain = "elsewhere"
	for _, o := range []overrides.Override{raise("k-1", 4), o} {
		if _, err := a.m.Set(t.Context(), o, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	list, err := a.m.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Domain != "edge" || list[0].Unmatched || list[1].Domain != "elsewhere" || !list[1].Unmatched {
		t.Errorf("List = %+v, want edge matched, elsewhere unmatched", list)
	}
	edge, err := a.m.List(t.Context(), "edge")
	if err != nil || len(edge) != 1 {
		t.Errorf("List(edge) = %d, %v; want 1", len(edge), err)
	}
}

func TestReset(t *testing.T) {
	a := newReplica(t, newStore(t), overrides.Options{})
	if n := a.admitted(t, 3, "api_key", "k-9"); n != 2 {
		t.Fatalf("admitted %d of 3, want 2", n)
	}
	n, err := a.m.Reset(t.Context(), "edge", raise("k-9", 0).Entries, "a bug consumed it", "alice")
	if err != nil || n != 1 {
		t.Fatalf("Reset = %d, %v; want 1 counter", n, err)
	}
	if n := a.admitted(t, 3, "api_key", "k-9"); n != 2 {
		t.Errorf("after Reset, admitted %d of 3, want 2", n)
	}
	if _, err := a.m.Reset(t.Context(), "edge", []overrides.Entry{{Key: "nope", Value: "x"}}, "", "alice"); !errors.Is(err, overrides.ErrNotFound) {
		t.Errorf("Reset without a rule = %v, want ErrNotFound", err)
	}
}

// hanging is an OverrideStore whose reads wait for release (or their
// context) once hang is set: a Redis that stopped answering.
type hanging struct {
	*memory.Store
	hang    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *hanging) Overrides(ctx context.Context, since uint64) (map[string][]byte, uint64, error) {
	if h.hang.Load() {
		h.entered <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	return h.Store.Overrides(ctx, since)
}

// TestStateDoesNotWaitForASync: /readyz reads State while a sync waits
// on a store that does not answer; it must answer at once, with what the
// last sync found.
func TestStateDoesNotWaitForASync(t *testing.T) {
	store := &hanging{Store: newStore(t), entered: make(chan struct{}), release: make(chan struct{})}
	a := newReplica(t, store, overrides.Options{})
	if _, err := a.m.Set(t.Context(), raise("k-1", 4), "alice"); err != nil {
		t.Fatal(err)
	}
	store.hang.Store(true)
	synced := make(chan error)
	go func() { synced <- a.m.Sync(t.Context()) }()
	<-store.entered
	state := make(chan string)
	go func() { state <- a.m.State() }()
	select {
	case got := <-state:
		if !strings.HasPrefix(got, "ok (1 in force") {
			t.Errorf("State() during a sync = %q, want the last sync's ok", got)
		}
	case <-time.After(10 * time.Second): // a guard, not a measure: State waited on the sync
		t.Error("State() waited for the sync in progress")
		close(store.release)
		<-state
		if err := <-synced; err != nil {
			t.Error(err)
		}
		return
	}
	close(store.release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
}

// TestUnreadableRecordsAreSkipped: records that do not decode, that fail
// the checks, or whose key is not their descriptor's, are skipped and
// counted, in one log line per read; the others apply.
func TestUnreadableRecordsAreSkipped(t *testing.T) {
	store := newStore(t)
	a := newReplica(t, store, overrides.Options{})
	if _, err := a.m.Set(t.Context(), raise("k-1", 4), "alice"); err != nil {
		t.Fatal(err)
	}
	other := raise("k-2", 4)
	elsewhere, err := json.Marshal(raise("k-3", 4))
	if err != nil {
		t.Fatal(err)
	}
	for k, rec := range map[string]string{
		"garbage":   "{not json",
		"no reason": `{"domain": "edge", "entries": [{"key": "api_key", "value": "k-2"}], "limits": [{"requests_per_unit": 1, "unit": "minute"}]}`,
		other.Key(): string(elsewhere), // k-3's record under k-2's key
	} {
		if _, err := store.PutOverride(t.Context(), k, []byte(rec), 10); err != nil {
			t.Fatal(err)
		}
	}
	a.log.Reset()
	if err := a.m.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := a.eng.Overrides().Len(); got != 1 {
		t.Errorf("%d overrides in force, want the one readable", got)
	}
	if got := testutil.ToFloat64(gauge(t, a.reg, "ratelimitd_overrides_skipped")); got != 3 {
		t.Errorf("ratelimitd_overrides_skipped = %v, want 3", got)
	}
	if n := strings.Count(a.log.String(), "skipping unreadable override records"); n != 1 {
		t.Errorf("%d warnings for the unreadable records, want 1: %s", n, a.log)
	}
}

func TestDeleteAndResetCheckTheirReason(t *testing.T) {
	a := newReplica(t, newStore(t), overrides.Options{})
	long := strings.Repeat("x", overrides.MaxReasonBytes+1)
	if err := a.m.Delete(t.Context(), "edge", raise("k-1", 0).Entries, long, "alice"); !overrides.IsInvalid(err) {
		t.Errorf("Delete with a long reason = %v, want an InvalidError", err)
	}
	if _, err := a.m.Reset(t.Context(), "edge", raise("k-1", 0).Entries, long, "alice"); !overrides.IsInvalid(err) {
		t.Errorf("Reset with a long reason = %v, want an InvalidError", err)
	}
}
