package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rlqsv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/wire/rlqs/v1"
)

// TestTokensArithmetic: a token bucket fills perFill tokens per fill
// interval, never past max, and tells when its next fill comes.
func TestTokensArithmetic(t *testing.T) {
	s := int64(time.Second)
	tb := newTokens(action{maxTokens: 5, perFill: 2, fillInterval: time.Second}, 5, 0, new(atomic.Uint64))
	steps := []struct {
		at    int64
		n     uint64
		ok    bool
		retry time.Duration
	}{
		{0, 5, true, 0},
		{0, 1, false, time.Second},
		{s / 2, 1, false, time.Second / 2},
		{s, 2, true, 0},
		{s, 1, false, time.Second},
		{2*s + s/2, 3, false, time.Second / 2}, // 2 tokens at 2 s
		{2*s + s/2, 2, true, 0},
		{100 * s, 6, false, time.Second}, // full at 5, never 6
		{100 * s, 5, true, 0},
		{103 * s, 5, true, 0}, // 3 fills of 2, capped at 5
	}
	for i, st := range steps {
		ok, retry, stale := tb.take(st.n, st.at)
		if ok != st.ok || retry != st.retry || stale {
			t.Errorf("step %d: take(%d) at %v = %v, %v, stale %v; want %v, %v", i, st.n, time.Duration(st.at), ok, retry, stale, st.ok, st.retry)
		}
	}
	tb.refund(9)
	if got := tb.level(); got != 5 {
		t.Errorf("level after a refund past max = %d, want 5", got)
	}
}

// TestTokensStaleTakeAfterReplacement: a take that began on a token
// bucket whose assignment a new one with other parameters then replaced
// changes nothing of the new token bucket's state (sharing its word):
// the new one holds no more than its own max, and refills on its own
// schedule from its replacement on.
func TestTokensStaleTakeAfterReplacement(t *testing.T) {
	s := int64(time.Second)
	var state atomic.Uint64
	old := newTokens(action{maxTokens: 100, perFill: 10, fillInterval: time.Second}, 100, 0, &state)
	if ok, _, _ := old.take(1, 300*s); !ok { // the old fill number is now 300
		t.Fatal("the old token bucket refused a token it held")
	}
	a := action{kind: tokenBucket, maxTokens: 10, perFill: 1, fillInterval: time.Second}
	tb := nextTokens(&assigned{kind: tokenBucket, tb: old}, a, 300*s, &state)
	if tb == old {
		t.Fatal("new parameters kept the old token bucket")
	}
	if ok, _, stale := old.take(1, 300*s); ok || !stale { // a call under way on the old assignment
		t.Errorf("take on the replaced token bucket = %v, stale %v; want false, stale", ok, stale)
	}
	old.refund(50)
	if got := tb.level(); got > 10 {
		t.Fatalf("new token bucket holds %d tokens after a take on the old one, over its max 10", got)
	}
	if ok, _, _ := tb.take(tb.level(), 300*s); !ok {
		t.Fatal("the new token bucket refused the tokens it holds")
	}
	for i := int64(1); i <= 12; i++ {
		if ok, _, _ := tb.take(1, 300*s+i*s); !ok {
			t.Fatalf("emptied new token bucket refused its fill %d, %d s after the replacement", i, i)
		}
		if got := tb.level(); got > 10 {
			t.Fatalf("new token bucket holds %d tokens, over its max 10", got)
		}
	}
	if ok, _, _ := tb.take(11, 400*s); ok {
		t.Error("new token bucket gave 11 tokens, over its max 10")
	}
}

// TestTokensWideMax: a token bucket whose max needs all 32 bits of tokens
// keeps 24 for fill numbers, and counts right the fills of calls up to
// 2^23-1 fills apart.
func TestTokensWideMax(t *testing.T) {
	tb := newTokens(action{maxTokens: math.MaxUint32, perFill: 1, fillInterval: time.Nanosecond}, 0, 0, new(atomic.Uint64))
	const far = 1<<23 - 1
	for i, st := range []struct {
		at int64
		n  uint64
		ok bool
	}{
		{0, 1, false},
		{far, far + 1, false},
		{far, far, true},
		{2 * far, far, true},
		{3 * far, far + 1, false},
		{3 * far, far, true},
	} {
		if ok, _, stale := tb.take(st.n, st.at); ok != st.ok || stale {
			t.Errorf("step %d: take(%d) at %d ns = %v, stale %v; want %v", i, st.n, st.at, ok, stale, st.ok)
		}
	}
}

// TestQuotaReplacementsUnderLoad: while goroutines call Allow on one
// bucket, its assignment alternates between two token buckets of other
// parameters, the clock a second on between replacements. No token bucket
// ever holds more than its max, and the calls allowed are no more than
// the first token bucket's max and each second's fills: a call under way
// on a replaced token bucket never fills the new one. Run with -race.
func TestQuotaReplacementsUnderLoad(t *testing.T) {
	clk := newClock()
	q := newQuota(t, serveFake(t, &fakeRLQS{}), WithReportingInterval(time.Hour), WithClock(clk.Now))
	d := D("tenant", "acme")
	allow(t, q, d) // the failure policy's: no assignment yet
	b := q.find(hashEntries(q.seed, d.Entries), d.Entries)
	params := []action{
		{entries: d.Entries, kind: tokenBucket, maxTokens: 100, perFill: 10, fillInterval: time.Second},
		{entries: d.Entries, kind: tokenBucket, maxTokens: 5, perFill: 1, fillInterval: 100 * time.Millisecond},
	}
	const rounds, perSecond = 200, 10 // the most either fills in a second
	q.apply(params[0], q.nanos())
	var allowed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ok, err := q.Allow(d)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					allowed.Add(1)
				}
			}
		})
	}
	checkLevel := func(round int) {
		t.Helper()
		if tb := b.a.Load().tb; tb.level() > tb.max {
			t.Errorf("round %d: token bucket holds %d tokens, over its max %d", round, tb.level(), tb.max)
		}
	}
	for r := 1; r <= rounds; r++ {
		clk.Add(time.Second)
		runtime.Gosched()
		checkLevel(r)
		q.apply(params[r%2], q.nanos())
		runtime.Gosched()
		checkLevel(r)
	}
	close(stop)
	wg.Wait()
	if got, most := allowed.Load(), int64(100+rounds*perSecond); got > most {
		t.Errorf("%d calls allowed; want at most %d", got, most)
	}
}

// clock is a manual clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Unix(1_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// report is a RateLimitQuotaUsageReports received by a fakeRLQS.
type report struct {
	stream int // the stream's number, from 1
	domain string
	usages []usage
}

// fakeRLQS is an RLQS server: it passes the reports it receives to
// reports, answers each with answer's actions (when answer is set), and
// sends what is written to push on the latest stream. Its first fail
// streams fail at once.
type fakeRLQS struct {
	reports chan report
	push    chan []byte
	answer  func(u usage) []byte // one encoded BucketAction; nil: none
	mu      sync.Mutex
	streams int
	fail    int
	ended   chan int // the numbers of the streams that ended
}

func (f *fakeRLQS) handle(_ any, ss grpc.ServerStream) error {
	f.mu.Lock()
	f.streams++
	n := f.streams
	failing := n <= f.fail
	f.mu.Unlock()
	defer func() { f.ended <- n }()
	if failing {
		return status.Error(codes.Unavailable, "failing on purpose")
	}
	recvd := make(chan []byte)
	errc := make(chan error, 1)
	go func() {
		for {
			var b []byte
			if err := ss.RecvMsg(&b); err != nil {
				errc <- err
				return
			}
			select {
			case recvd <- b:
			case <-ss.Context().Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ss.Context().Done():
			return nil
		case err := <-errc:
			return err
		case b := <-f.push:
			if err := ss.SendMsg(&b); err != nil {
				return err
			}
		case b := <-recvd:
			r, err := parseReports(b)
			if err != nil {
				return err
			}
			r.stream = n
			f.reports <- r
			if f.answer == nil {
				continue
			}
			var resp []byte
			for _, u := range r.usages {
				if a := f.answer(u); a != nil {
					resp = protowire.AppendTag(resp, 1, protowire.BytesType)
					resp = protowire.AppendBytes(resp, a)
				}
			}
			if err := ss.SendMsg(&resp); err != nil {
				return err
			}
		}
	}
}

// parseReports reads a RateLimitQuotaUsageReports.
func parseReports(b []byte) (report, error) {
	var m rlqsv1.RateLimitQuotaUsageReports
	if err := proto.Unmarshal(b, &m); err != nil {
		return report{}, err
	}
	r := report{domain: string(m.GetDomain())}
	for _, x := range m.GetBucketQuotaUsages() {
		u := usage{elapsed: x.GetTimeElapsed().AsDuration(), allowed: x.GetNumRequestsAllowed(), denied: x.GetNumRequestsDenied()}
		for _, e := range x.GetBucketId().GetBucket() {
			u.entries = append(u.entries, Entry{Key: string(e.GetKey()), Value: string(e.GetValue())})
		}
		r.usages = append(r.usages, u)
	}
	return r, nil
}

// appendTestBucketID appends field 1, a BucketId of entries (its map, one
// entry message per pair), to b, written field by field with Envoy's
// numbers, apart from the generated types the Quota reads it with.
func appendTestBucketID(b []byte, entries []Entry) []byte {
	var body []byte
	for _, e := range entries {
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendVarint(body, uint64(2*protowire.SizeTag(1)+protowire.SizeBytes(len(e.Key))+protowire.SizeBytes(len(e.Value))))
		body = protowire.AppendTag(body, 1, protowire.BytesType)
		body = protowire.AppendString(body, e.Key)
		body = protowire.AppendTag(body, 2, protowire.BytesType)
		body = protowire.AppendString(body, e.Value)
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

// appendTestDuration appends the fields of a google.protobuf.Duration of
// d to b.
func appendTestDuration(b []byte, d time.Duration) []byte {
	if s := int64(d / time.Second); s != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s))
	}
	if n := int64(d % time.Second); n != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n))
	}
	return b
}

// bucketAction encodes a BucketAction for entries: a TokenBucket when
// maxTokens > 0, else the blanket rule rule (0 allow, 1 deny), for ttl;
// an AbandonAction when abandon is set.
func bucketAction(entries []Entry, abandon bool, rule uint64, maxTokens, perFill uint64, fill, ttl time.Duration) []byte {
	b := appendTestBucketID(nil, entries)
	if abandon {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		return protowire.AppendBytes(b, nil)
	}
	var strategy []byte
	if maxTokens > 0 {
		var tb []byte
		tb = protowire.AppendTag(tb, 1, protowire.VarintType)
		tb = protowire.AppendVarint(tb, maxTokens)
		tb = protowire.AppendTag(tb, 2, protowire.BytesType)
		tb = protowire.AppendBytes(tb, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), perFill))
		tb = protowire.AppendTag(tb, 3, protowire.BytesType)
		tb = protowire.AppendBytes(tb, appendTestDuration(nil, fill))
		strategy = protowire.AppendTag(strategy, 3, protowire.BytesType)
		strategy = protowire.AppendBytes(strategy, tb)
	} else {
		strategy = protowire.AppendTag(strategy, 1, protowire.VarintType)
		strategy = protowire.AppendVarint(strategy, rule)
	}
	var qa []byte
	qa = protowire.AppendTag(qa, 2, protowire.BytesType)
	qa = protowire.AppendBytes(qa, appendTestDuration(nil, ttl))
	qa = protowire.AppendTag(qa, 3, protowire.BytesType)
	qa = protowire.AppendBytes(qa, strategy)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, qa)
}

// serveFake serves f over bufconn and returns a connection to it; the
// test's cleanup stops both.
func serveFake(t testing.TB, f *fakeRLQS) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	return serveFakeOn(t, f, lis, "passthrough:///rlqs",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
}

// serveFakeOn serves f on lis and returns a connection to target, with
// dialOpts; the test's cleanup stops both.
func serveFakeOn(t testing.TB, f *fakeRLQS, lis net.Listener, target string, dialOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if f.reports == nil {
		f.reports = make(chan report, 100)
	}
	f.push = make(chan []byte)
	f.ended = make(chan int, 100)
	g := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(f.handle))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = g.Serve(lis)
	}()
	conn, err := grpc.NewClient(target,
		append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		<-done
	})
	return conn
}

// newQuota returns a Quota on conn, on the domain "edge", closed by the
// test's cleanup; it logs nowhere unless opts set a logger.
func newQuota(t *testing.T, conn grpc.ClientConnInterface, opts ...QuotaOption) *Quota {
	t.Helper()
	q, err := NewQuota(conn, "edge", append([]QuotaOption{WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatalf("NewQuota: %v", err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// next returns the next report f receives, failing the test after a
// minute without one.
func (f *fakeRLQS) next(t testing.TB) report {
	t.Helper()
	select {
	case r := <-f.reports:
		return r
	case <-time.After(time.Minute):
		t.Fatal("no report received in a minute")
		return report{}
	}
}

// waitAssigned waits until q holds an assignment for entries.
func waitAssigned(t *testing.T, q *Quota, entries ...Entry) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if b := q.find(hashEntries(q.seed, entries), entries); b != nil && b.a.Load() != nil {
			return
		}
	}
	t.Fatalf("no assignment for %v in a minute", entries)
}

// waitGone waits until q no longer holds a bucket for entries.
func waitGone(t *testing.T, q *Quota, entries ...Entry) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if q.find(hashEntries(q.seed, entries), entries) == nil {
			return
		}
	}
	t.Fatalf("bucket %v still held after a minute", entries)
}

// allow calls q.Allow, failing the test on an error.
func allow(t *testing.T, q *Quota, ds ...Descriptor) bool {
	t.Helper()
	ok, err := q.Allow(ds...)
	if err != nil {
		t.Fatalf("Allow(%v): %v", ds, err)
	}
	return ok
}

// TestQuotaTokenBucketAndTTL: a bucket's first use is reported at once,
// naming the domain, and decided by the failure policy until its
// assignment comes; its token bucket then decides on the Quota's clock
// until the assignment's time to live ends, and the failure policy again
// after.
func TestQuotaTokenBucketAndTTL(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "closed"}[failClosed], func(t *testing.T) {
			clk := newClock()
			f := &fakeRLQS{answer: func(u usage) []byte {
				return bucketAction(u.entries, false, 0, 2, 1, time.Second, 10*time.Second)
			}}
			opts := []QuotaOption{WithReportingInterval(time.Hour), WithClock(clk.Now)}
			if failClosed {
				opts = append(opts, WithFailClosed())
			}
			q := newQuota(t, serveFake(t, f), opts...)
			d := D("k", "v\xff")
			got, err := q.ShouldRateLimit(context.Background(), "edge", d)
			if err != nil || got.Allowed == failClosed || !errors.Is(got.Err, ErrNoAssignment) {
				t.Fatalf("before any assignment: %+v, %v; want the failure policy", got, err)
			}
			r := f.next(t)
			if r.domain != "edge" {
				t.Errorf("first report's domain %q, want edge", r.domain)
			}
			for ; len(r.usages) == 0; r = f.next(t) {
			}
			waitAssigned(t, q, d.Entries...)
			want := []bool{true, true, false}
			var gotAllowed []bool
			for range want {
				gotAllowed = append(gotAllowed, allow(t, q, d))
			}
			clk.Add(time.Second)
			gotAllowed = append(gotAllowed, allow(t, q, d), allow(t, q, d))
			want = append(want, true, false)
			if diff := cmp.Diff(want, gotAllowed); diff != "" {
				t.Errorf("token bucket of 2, 1 per second (-want +got):\n%s", diff)
			}
			refused, _ := q.ShouldRateLimit(context.Background(), "edge", d)
			if refused.Allowed || refused.RetryAfter != time.Second || refused.Err != nil || !refused.Statuses[0].OverLimit {
				t.Errorf("refused decision %+v, want RetryAfter 1s and the status over limit", refused)
			}
			clk.Add(10 * time.Second)
			if got := allow(t, q, d); got == failClosed {
				t.Errorf("after the time to live: %v, want the failure policy", got)
			}
		})
	}
}

// TestQuotaBlanketAndAllOrNothing: a call is allowed only when every
// bucket admits it, and a refused call takes no token.
func TestQuotaBlanketAndAllOrNothing(t *testing.T) {
	f := &fakeRLQS{answer: func(u usage) []byte {
		switch u.entries[0].Key {
		case "deny":
			return bucketAction(u.entries, false, 1, 0, 0, 0, time.Minute)
		case "allow":
			return bucketAction(u.entries, false, 0, 0, 0, 0, time.Minute)
		}
		return bucketAction(u.entries, false, 0, 1, 1, time.Hour, time.Minute)
	}}
	q := newQuota(t, serveFake(t, f), WithReportingInterval(time.Hour), WithFailClosed())
	one, deny, all := D("one", "x"), D("deny", "x"), D("allow", "x")
	_, _ = q.Allow(one, deny, all)
	waitAssigned(t, q, one.Entries...)
	waitAssigned(t, q, deny.Entries...)
	waitAssigned(t, q, all.Entries...)
	got := []bool{allow(t, q, one, deny), allow(t, q, all, one), allow(t, q, one), allow(t, q, all), allow(t, q, deny)}
	if diff := cmp.Diff([]bool{false, true, false, true, false}, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
}

// TestQuotaMalformed: malformed calls are InvalidArgument errors.
func TestQuotaMalformed(t *testing.T) {
	conn := serveFake(t, &fakeRLQS{})
	q := newQuota(t, conn)
	for name, ds := range map[string][]Descriptor{
		"none":          nil,
		"no entries":    {{}},
		"repeated key":  {D("a", "1", "b", "2", "a", "3")},
		"empty key":     {D("", "1")},
		"override":      {{Entries: []Entry{{"a", "1"}}, Limit: &LimitOverride{Requests: 1, Window: time.Second}}},
		"too many":      make([]Descriptor, maxDescriptors+1),
		"second is bad": {D("a", "1"), D("b", "1", "b", "1")},
	} {
		if ok, err := q.Allow(ds...); ok || status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: Allow = %v, %v; want false, InvalidArgument", name, ok, err)
		}
	}
	if _, err := q.ShouldRateLimit(context.Background(), "other", D("a", "1")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("another domain: %v, want InvalidArgument", err)
	}
	for name, c := range map[string]struct {
		domain string
		opt    QuotaOption
	}{
		"no domain":         {"", WithMaxBuckets(1)},
		"non-UTF-8 domain":  {"\xff", WithMaxBuckets(1)},
		"negative interval": {"d", WithReportingInterval(-1)},
		"negative bound":    {"d", WithMaxBuckets(-1)},
	} {
		if _, err := NewQuota(conn, c.domain, c.opt); err == nil {
			t.Errorf("NewQuota(%s): no error", name)
		}
	}
}

// TestQuotaOrderAndBounds: a bucket id is a map (the same bucket in any
// order of its entries); past MaxBuckets, the failure policy decides.
func TestQuotaOrderAndBounds(t *testing.T) {
	f := &fakeRLQS{answer: func(u usage) []byte { return bucketAction(u.entries, false, 0, 0, 0, 0, time.Minute) }}
	q := newQuota(t, serveFake(t, f), WithReportingInterval(time.Hour), WithFailClosed(), WithMaxBuckets(2))
	_, _ = q.Allow(D("a", "1", "b", "2"), D("a", "2", "b", "1"))
	waitAssigned(t, q, D("b", "2", "a", "1").Entries...)
	waitAssigned(t, q, D("a", "2", "b", "1").Entries...)
	if n := q.buckets.Load(); n != 2 {
		t.Errorf("%d buckets held, want 2", n)
	}
	got := []bool{allow(t, q, D("b", "2", "a", "1")), allow(t, q, D("c", "1")), allow(t, q, D("b", "1", "a", "2"))}
	if diff := cmp.Diff([]bool{true, false, true}, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
	if n := q.buckets.Load(); n != 2 {
		t.Errorf("%d buckets held past MaxBuckets 2", n)
	}
}

// TestQuotaAbandon: an abandoned bucket is forgotten, and reported afresh
// at its next use.
func TestQuotaAbandon(t *testing.T) {
	f := &fakeRLQS{}
	q := newQuota(t, serveFake(t, f), WithReportingInterval(time.Hour))
	d := D("k", "v")
	allow(t, q, d)
	for r := f.next(t); len(r.usages) == 0; r = f.next(t) {
	}
	f.push <- protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), bucketAction(d.Entries, false, 1, 0, 0, 0, time.Minute))
	waitAssigned(t, q, d.Entries...)
	if allow(t, q, d) {
		t.Error("DENY_ALL allowed")
	}
	f.push <- protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), bucketAction(d.Entries, true, 0, 0, 0, 0, 0))
	waitGone(t, q, d.Entries...)
	if !allow(t, q, d) {
		t.Error("an abandoned bucket refused: want the failure policy, open")
	}
	if r := f.next(t); len(r.usages) != 1 || !cmp.Equal(r.usages[0].entries, d.Entries) {
		t.Errorf("report after abandon: %+v, want one of %v", r, d.Entries)
	}
}

// TestQuotaBackoff: the reporting stream waits between attempts from
// quotaBackoffMin, doubling up to quotaBackoffMax, each wait within 20% of
// its step; an answered stream starts the doubling again.
func TestQuotaBackoff(t *testing.T) {
	within := func(t *testing.T, step int, got, base time.Duration) {
		t.Helper()
		// cenkalti/backoff draws from [base-20%, base+20%+1ns).
		if lo, hi := base-base/5, base+base/5+1; got < lo || got > hi {
			t.Errorf("wait %d = %v, want %v ±20%% [%v, %v]", step, got, base, lo, hi)
		}
	}
	b := newQuotaBackoff()
	base := quotaBackoffMin
	for i := range 12 { // 100 ms to 10 s takes 8 doublings
		within(t, i, b.NextBackOff(), base)
		base = min(2*base, quotaBackoffMax)
	}
	if base != quotaBackoffMax {
		t.Fatalf("the test never reached the cap: %v", base)
	}
	b.Reset()
	within(t, 0, b.NextBackOff(), quotaBackoffMin)
	within(t, 1, b.NextBackOff(), 2*quotaBackoffMin)
}

// TestQuotaReportsAndReconnects: after failed streams, the Quota
// reconnects, names the domain again, and reports its buckets' counts
// each interval; idle buckets are forgotten.
func TestQuotaReportsAndReconnects(t *testing.T) {
	f := &fakeRLQS{fail: 2}
	q := newQuota(t, serveFake(t, f), WithReportingInterval(20*time.Millisecond))
	allow(t, q, D("k", "v"))
	r := f.next(t)
	if r.stream != 3 || r.domain != "edge" {
		t.Errorf("first report on stream %d naming %q, want stream 3 naming edge", r.stream, r.domain)
	}
	d := D("k", "w") // a bucket created once the stream is up
	for range 5 {
		allow(t, q, d)
	}
	var allowed uint64
	for allowed < 5 {
		for _, u := range f.next(t).usages {
			if cmp.Equal(u.entries, d.Entries) {
				allowed += u.allowed
			}
		}
	}
	if allowed != 5 {
		t.Errorf("reported %d allowed, want 5", allowed)
	}
	waitGone(t, q, d.Entries...)
}

// TestQuotaColdConnection: a Quota over a connection whose handshake is
// slow (here 200 ms) opens its reporting stream once connected, without
// failing meanwhile: the stream waits for the connection (WaitForReady),
// and no call waits for either, since a Quota decides locally. Until the
// first assignment arrives, a bucket is decided by the failure policy,
// however fast the connection.
func TestQuotaColdConnection(t *testing.T) {
	lis := listenGated(t, "127.0.0.1:0", 200*time.Millisecond)
	f := &fakeRLQS{answer: func(u usage) []byte {
		return bucketAction(u.entries, false, 0, 0, 0, 0, time.Hour) // allow all
	}}
	conn := serveFakeOn(t, f, lis, "passthrough:///"+lis.Addr().String())
	var logs warnings
	q := newQuota(t, conn, WithFailClosed(), WithLogger(slog.New(&logs)))
	d := D("k", "v")
	if allow(t, q, d) {
		t.Errorf("first use allowed, want the failure policy (closed) until the first assignment")
	}
	waitAssigned(t, q, d.Entries...)
	if !allow(t, q, d) {
		t.Errorf("refused once assigned ALLOW_ALL")
	}
	if n := logs.count.Load(); n != 0 {
		t.Errorf("%d warnings (stream failures) while connecting, want 0", n)
	}
}

// warnings is a slog.Handler counting the records at Warn and above.
type warnings struct{ count atomic.Int64 }

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *warnings) WithGroup(string) slog.Handler            { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.count.Add(1)
	}
	return nil
}

// TestQuotaClose: Close ends the stream and returns once the goroutines
// have ended (TestMain's goleak check finds any left); it can be called
// again.
func TestQuotaClose(t *testing.T) {
	f := &fakeRLQS{}
	q := newQuota(t, serveFake(t, f))
	f.next(t)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.ended:
	case <-time.After(time.Minute):
		t.Fatal("the server's stream did not end in a minute after Close")
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaWireBytes: reports carry bucket ids with any bytes, and
// responses are read with them.
func TestQuotaWireBytes(t *testing.T) {
	entries := []Entry{{"k", "\xff\x00v"}, {"ключ", "\xc3"}}
	b, err := appendReports(nil, "edge", []usage{{entries: entries, elapsed: 1500 * time.Millisecond, allowed: 3, denied: 4}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseReports(b)
	if err != nil {
		t.Fatal(err)
	}
	want := report{domain: "edge", usages: []usage{{entries: entries, elapsed: 1500 * time.Millisecond, allowed: 3, denied: 4}}}
	if diff := cmp.Diff(want, r, cmp.AllowUnexported(report{}, usage{})); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	resp := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), bucketAction(entries, false, 0, 7, 3, 250*time.Millisecond, 2*time.Second))
	as, err := parseResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	wantA := []action{{entries: entries, kind: tokenBucket, maxTokens: 7, perFill: 3, fillInterval: 250 * time.Millisecond, lifetime: 2 * time.Second}}
	if diff := cmp.Diff(wantA, as, cmp.AllowUnexported(action{})); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if _, err := parseResponse([]byte{0x0a, 0x05}); err == nil {
		t.Error("a truncated response read without error")
	}
}

// BenchmarkQuotaAllow measures a call of one descriptor of two entries
// under a token bucket that always admits: serial, parallel on one bucket
// (every goroutine updates the same bucket), and parallel on a bucket per
// goroutine.
func BenchmarkQuotaAllow(b *testing.B) {
	f := &fakeRLQS{reports: make(chan report, 1<<16), answer: func(u usage) []byte {
		return bucketAction(u.entries, false, 0, 1<<31, 1<<31, time.Millisecond, time.Hour)
	}}
	q, err := NewQuota(serveFake(b, f), "edge", WithReportingInterval(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	ds := make([]Descriptor, 64)
	for i := range ds {
		ds[i] = D("tenant", fmt.Sprint("acme", i), "path", "/search")
		_, _ = q.Allow(ds[i])
	}
	for _, d := range ds {
		for q.find(hashEntries(q.seed, d.Entries), d.Entries).a.Load() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	d := ds[0]
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, err := q.Allow(d); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if ok, err := q.Allow(d); !ok || err != nil {
					b.Error(ok, err)
					return
				}
			}
		})
	})
	b.Run("parallel-distinct", func(b *testing.B) { // a bucket per goroutine
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			d := ds[n.Add(1)%int64(len(ds))]
			for pb.Next() {
				if ok, err := q.Allow(d); !ok || err != nil {
					b.Error(ok, err)
					return
				}
			}
		})
	})
}

// TestQuotaCoarseClock: on the real clock, a call wakes the coarse clock,
// which ticks while calls come and stops after clockIdleTicks without
// one; it never runs ahead of the monotonic clock.
func TestQuotaCoarseClock(t *testing.T) {
	q := newQuota(t, serveFake(t, &fakeRLQS{}), WithReportingInterval(time.Hour))
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not in a minute", what)
			}
		}
	}
	q.nanos()
	waitFor("the clock ticking after a call", q.clockOn.Load)
	if got, exact := q.nanos(), q.exactNanos(); got > exact {
		t.Errorf("coarse clock %d ahead of the clock %d", got, exact)
	}
	waitFor("the clock stopped when unused", func() bool { return !q.clockOn.Load() })
	q.nanos()
	waitFor("the clock ticking again after a call", q.clockOn.Load)
}

// TestHashEntries: a bucket id hashes the same whatever the order of its
// entries, short (hashed at once) or long (streamed), and differs when a
// value moves to another key.
func TestHashEntries(t *testing.T) {
	seed := maphash.MakeSeed()
	long := strings.Repeat("v", 200)
	for _, c := range [][2][]Entry{
		{{{"a", "1"}, {"b", "2"}, {"c", "3"}}, {{"c", "3"}, {"a", "1"}, {"b", "2"}}},
		{{{"a", long}, {"b", "2"}}, {{"b", "2"}, {"a", long}}},
	} {
		if x, y := hashEntries(seed, c[0]), hashEntries(seed, c[1]); x != y {
			t.Errorf("%v and %v hash apart: %x, %x", c[0], c[1], x, y)
		}
	}
	for _, c := range [][2][]Entry{
		{{{"a", "1"}, {"b", "2"}}, {{"a", "2"}, {"b", "1"}}},
		{{{"ab", "c"}}, {{"a", "bc"}}},
		{{{"a", long}, {"b", "2"}}, {{"a", long}, {"b", "3"}}},
	} {
		if x, y := hashEntries(seed, c[0]), hashEntries(seed, c[1]); x == y {
			t.Errorf("%v and %v hash alike: %x", c[0], c[1], x)
		}
	}
}
