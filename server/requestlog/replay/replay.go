// Package replay plays a request log (package requestlog) against two
// rule sets, each on a fresh memory store under a clock that follows the
// log's times, and reports the requests whose decision differs.
package replay

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/backend"
	"github.com/ratelimitd/ratelimitd/backend/memory"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/server/internal/engine"
	"github.com/ratelimitd/ratelimitd/server/overrides"
	"github.com/ratelimitd/ratelimitd/server/requestlog"
)

// maxLine is the longest log line read, its newline included: the
// longest the daemon writes. A longer line (from an older daemon, or not
// the daemon's) is skipped and counted, or under Options.Strict refused.
const maxLine = requestlog.MaxLine

// DefaultOrderTolerance is Options.OrderTolerance when zero.
const DefaultOrderTolerance = time.Second

// DefaultMaxDescriptors is Options.MaxDescriptors when zero.
const DefaultMaxDescriptors = 100_000

// Directions of a difference.
const (
	// NewlyRefused: the old rules admit the request, the new refuse it.
	NewlyRefused = "newly_refused"
	// NewlyAdmitted: the old rules refuse the request, the new admit it.
	NewlyAdmitted = "newly_admitted"
	// ErrorChanged: one rule set decides the request, the other refuses
	// to (an invalid request under its rules, such as a limit override
	// its algorithm cannot take).
	ErrorChanged = "error_changed"
)

// Options configures Run.
type Options struct {
	// Old and New are the rule sets compared.
	Old, New *config.Rules
	// Overrides, when set, are the runtime overrides in force under both
	// rule sets (an overrides file, see overrides.ReadFile), so that the
	// replay decides as production did.
	Overrides *overrides.Set
	// MaxKeys bounds each memory store's counters; zero means
	// memory.DefaultMaxKeys.
	MaxKeys int
	// Name names the log in errors, such as its path.
	Name string
	// Strict stops the replay at the first line that cannot be decoded
	// (or is longer than a log's lines, requestlog.MaxLine) and at the
	// first line out of order (see OrderTolerance), and decodes a last
	// line that does not end in a newline; otherwise such lines are
	// skipped and counted (Report.BadLines, Report.PartialLine), and
	// lines out of order counted (Report.OutOfOrder).
	Strict bool
	// OrderTolerance is how far a line's time may be before the latest
	// time of the lines above it and count as in order: a daemon's log is
	// a little out of order (requests are timed on many goroutines, and
	// written by one), and so is a merge of nearly ordered logs. A line
	// further behind (logs concatenated rather than merged) is out of
	// order. Either way it is decided at that latest time: the replay's
	// clock never goes back. Zero means DefaultOrderTolerance.
	OrderTolerance time.Duration
	// Warmup replays the requests of the log's first Warmup (from its
	// first line's time) to fill the counters, without comparing their
	// decisions: a log that starts in the middle of a window compares
	// from counters that hold that window.
	Warmup time.Duration
	// ByDescriptor also counts the differing requests by descriptor (see
	// Report.Descriptors), the TopDescriptors that differ most reported.
	ByDescriptor   bool
	TopDescriptors int
	// MaxDescriptors bounds the descriptors ByDescriptor counts; the
	// differences of others are counted apart
	// (Report.UntrackedDescriptors). Zero means DefaultMaxDescriptors.
	MaxDescriptors int
}

// maxBadLines is how many bad lines a Report names.
const maxBadLines = 10

// A Report is what Run found.
type Report struct {
	// Requests is how many requests were replayed and compared.
	Requests int `json:"requests"`
	// First is the time of the first request compared, Last the latest.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// WarmupRequests is how many requests of Options.Warmup were replayed
	// without being compared.
	WarmupRequests int `json:"warmup_requests,omitempty"`
	// Differ is how many requests were decided differently, the sum of
	// the three directions.
	Differ        int `json:"differ"`
	NewlyRefused  int `json:"newly_refused"`
	NewlyAdmitted int `json:"newly_admitted"`
	ErrorChanged  int `json:"error_changed"`
	// OldErrors and NewErrors are how many requests each rule set refused
	// to decide (invalid requests).
	OldErrors int `json:"old_errors"`
	NewErrors int `json:"new_errors"`
	// Rules are the differing requests grouped by direction and rule,
	// the most first. A request counts under every rule whose descriptor
	// changed its code, so that these may add up to more than Differ.
	Rules []RuleDiff `json:"rules"`
	// BadLines is how many lines could not be decoded and were skipped
	// (a line torn when the daemon stopped or its disk was full, or
	// glued to such a line); FirstBadLines are the numbers of the first
	// few, and FirstBadError why the first could not be decoded.
	BadLines      int    `json:"bad_lines"`
	FirstBadLines []int  `json:"first_bad_lines,omitempty"`
	FirstBadError string `json:"first_bad_error,omitempty"`
	// PartialLine is the number of the last line when it does not end in
	// a newline (the log was still being written) and was skipped; 0 when
	// none was.
	PartialLine int `json:"partial_line,omitempty"`
	// OutOfOrder is how many lines were out of order: further before the
	// latest time above them than Options.OrderTolerance. Each was
	// decided at that latest time, which changes its decision when a
	// window ended in between. FirstOutOfOrderLine is the first's number,
	// and MaxBehind the furthest any was behind.
	OutOfOrder          int           `json:"out_of_order"`
	FirstOutOfOrderLine int           `json:"first_out_of_order_line,omitempty"`
	MaxBehind           time.Duration `json:"max_behind_ns,omitempty"`
	// Omitted is how many requests the log holds only as a marker, their
	// record over the daemon's bound (--request-log-max-record): they
	// were not replayed, and the counters they would have used hold less
	// than the daemon's did.
	Omitted int `json:"omitted"`
	// Descriptors are, with Options.ByDescriptor, the descriptors of the
	// differing requests whose own decision changed, the most first;
	// UntrackedDescriptors counts the changes of descriptors past
	// Options.MaxDescriptors.
	Descriptors          []DescriptorDiff `json:"descriptors,omitempty"`
	UntrackedDescriptors int              `json:"untracked_descriptors,omitempty"`
}

// A DescriptorDiff counts the differing requests whose descriptor, one
// domain and entries, changed its own decision, in each direction.
type DescriptorDiff struct {
	Domain string `json:"domain"`
	// Entries are its keys and values; a key or value that is not plain
	// text is shown as "hex:" and its bytes in hex.
	Entries       []Entry `json:"entries"`
	Requests      int     `json:"requests"`
	NewlyRefused  int     `json:"newly_refused"`
	NewlyAdmitted int     `json:"newly_admitted"`
}

// An Entry is a descriptor's key and value, as a report shows them.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// A RuleDiff counts the requests one rule decides differently in one
// direction: for NewlyRefused the new rule that refuses, for
// NewlyAdmitted the old rule that refused.
type RuleDiff struct {
	Direction string `json:"direction"`
	// Rule is the rule's key path; "" for a descriptor no rule matched
	// (a request's own limit override).
	Rule     string `json:"rule"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Requests int    `json:"requests"`
}

// side is one rule set's decision engine, the daemon's own, on a store of
// its own under a clock of its own.
type side struct {
	eng   *engine.Engine
	store *memory.Store
	clock atomic.Int64 // Unix nanoseconds of the request being decided
	dec   engine.Decision
	err   error
}

// newSide returns the side deciding under rules.
func newSide(rules *config.Rules, maxKeys int, ovs *overrides.Set) *side {
	sd := &side{}
	now := func() time.Time { return time.Unix(0, sd.clock.Load()) }
	sd.store = memory.New(memory.Options{MaxKeys: maxKeys, Now: now})
	sd.eng = engine.New(sd.store, rules, engine.Options{Now: now, Headers: engine.HeadersOff}) // headers never change a decision
	sd.eng.SetOverrides(ovs.Runtime())
	return sd
}

// decide decides rec at its time, never earlier than the request before
// (a log written by many goroutines may be a little out of order).
func (sd *side) decide(ctx context.Context, rec *requestlog.Record) {
	if t := rec.Time.UnixNano(); t > sd.clock.Load() {
		sd.clock.Store(t)
	}
	sd.err = sd.eng.DecideRequest(ctx, func(r *engine.Request) error { fillRequest(r, rec); return nil }, &sd.dec)
}

// fillRequest writes rec into r, an empty engine request: the request as
// the face that logged it had decoded it.
func fillRequest(r *engine.Request, rec *requestlog.Record) {
	r.Domain = rec.Domain
	for i := range rec.Descriptors {
		rd := &rec.Descriptors[i]
		from := len(r.Entries)
		for _, e := range rd.Entries {
			r.Entries = append(r.Entries, engine.Entry{Key: e.Key, Value: e.Value, Digest: e.Digest})
		}
		desc := r.Add(from, rd.Hits)
		if rd.GiveBack {
			desc.Op = backend.GiveBack
		}
		if rd.HasLimit {
			desc.HasLimit = true
			desc.Limit = engine.Override{Requests: rd.Limit.Requests, Window: rd.Limit.Window}
		}
	}
}

// groupKey identifies a RuleDiff.
type groupKey struct {
	direction, rule, file string
	line                  int
}

// Run replays the log read from r. Lines are read and decoded in
// batches by a goroutine per CPU, and decided in order. Run returns soon
// after ctx ends, but a Read on r that blocks (a pipe no one writes to)
// holds the goroutine reading r until it returns: close r to end it.
func Run(ctx context.Context, r io.Reader, opts Options) (*Report, error) {
	if opts.Old == nil || opts.New == nil {
		return nil, errors.New("replay: both rule sets are needed")
	}
	if opts.Warmup < 0 || opts.OrderTolerance < 0 || opts.TopDescriptors < 0 || opts.MaxDescriptors < 0 {
		return nil, errors.New("replay: warmup, order tolerance, top descriptors and max descriptors must not be negative")
	}
	name := cmp.Or(opts.Name, "log")
	old, neu := newSide(opts.Old, opts.MaxKeys, opts.Overrides), newSide(opts.New, opts.MaxKeys, opts.Overrides)
	defer old.store.Close()
	defer neu.store.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := decodeAll(ctx, r, name, opts.Strict)
	rp := replayer{opts: opts, name: name, tolerance: cmp.Or(opts.OrderTolerance, DefaultOrderTolerance), groups: map[groupKey]int{}}
	if opts.ByDescriptor {
		rp.descs = newDescriptorCounts(cmp.Or(opts.MaxDescriptors, DefaultMaxDescriptors))
	}
	for b := range batches {
		<-b.done
		if b.err != nil {
			return nil, b.err
		}
		rp.rep.addBad(b)
		for i := range b.recs {
			if err := rp.replay(ctx, &b.recs[i], b.recLines[i], b.omitted[i], old, neu); err != nil {
				return nil, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rp.rep.Rules = sortedGroups(rp.groups)
	if rp.descs != nil {
		rp.rep.Descriptors, rp.rep.UntrackedDescriptors = rp.descs.top(opts.TopDescriptors), rp.descs.untracked
	}
	return &rp.rep, nil
}

// A replayer is Run's state between lines.
type replayer struct {
	opts       Options
	name       string
	tolerance  time.Duration
	rep        Report
	groups     map[groupKey]int
	descs      *descriptorCounts // with Options.ByDescriptor
	lines      int               // lines replayed, markers included
	latest     time.Time         // the latest time of the lines so far
	latestLine int               // its line's number
	warmEnd    time.Time         // the end of Options.Warmup
}

// replay decides rec, from line n of the log, under both rule sets, and
// counts what it finds; an omitted request (a marker) is only counted.
func (rp *replayer) replay(ctx context.Context, rec *requestlog.Record, n int, omitted bool, old, neu *side) error {
	if rp.lines == 0 {
		rp.latest, rp.latestLine, rp.warmEnd = rec.Time, n, rec.Time.Add(rp.opts.Warmup)
	}
	rp.lines++
	if behind := rp.latest.Sub(rec.Time); behind > rp.tolerance {
		if rp.opts.Strict {
			return fmt.Errorf("%s:%d: out of order: %s before line %d's time (more than the tolerance, %s); merge logs by time (sort -m), do not concatenate them",
				rp.name, n, behind, rp.latestLine, rp.tolerance)
		}
		rp.rep.OutOfOrder++
		if rp.rep.FirstOutOfOrderLine == 0 {
			rp.rep.FirstOutOfOrderLine = n
		}
		rp.rep.MaxBehind = max(rp.rep.MaxBehind, behind)
	}
	if rec.Time.After(rp.latest) {
		rp.latest, rp.latestLine = rec.Time, n
	}
	if omitted {
		rp.rep.Omitted++
		return nil
	}
	old.decide(ctx, rec)
	neu.decide(ctx, rec)
	if err := cmp.Or(ctx.Err(), storeError(old.err), storeError(neu.err)); err != nil {
		return fmt.Errorf("%s:%d: %w", rp.name, n, err)
	}
	if rp.latest.Before(rp.warmEnd) { // decided, at the latest time, within the warmup
		rp.rep.WarmupRequests++
		return nil
	}
	rep := &rp.rep
	if rep.Requests == 0 {
		rep.First = rec.Time
	}
	rep.Requests++
	rep.Last = rp.latest
	if rp.rep.compare(old, neu, rp.groups) && rp.descs != nil {
		rp.descs.add(rec, &old.dec, &neu.dec)
	}
	return nil
}

// addBad counts the lines of b skipped.
func (rep *Report) addBad(b *batch) {
	rep.BadLines += len(b.bad)
	if rep.FirstBadError == "" && b.badErr != nil {
		rep.FirstBadError = b.badErr.Error()
	}
	for _, n := range b.bad {
		if len(rep.FirstBadLines) == maxBadLines {
			break
		}
		rep.FirstBadLines = append(rep.FirstBadLines, n)
	}
	if b.partial > 0 {
		rep.PartialLine = b.partial
	}
}

// batchSize is how many lines a batch holds.
const batchSize = 256

// A batch is consecutive lines of the log, decoded.
type batch struct {
	data     []byte              // the lines' bytes, back to back
	ends     []int               // where each line ends in data
	lines    []int               // each line's number
	long     []bool              // each line's length was over maxLine (its bytes are not in data)
	strict   bool                // a line that cannot be decoded is an error, not skipped
	recs     []requestlog.Record // the decoded records
	recLines []int               // each record's line number
	omitted  []bool              // each record is a marker, of a record over the daemon's bound
	bad      []int               // the numbers of the lines skipped
	badErr   error               // why the first of them could not be decoded
	partial  int                 // the number of the last line, skipped: it has no newline
	err      error               // the first line that could not be read, naming it
	done     chan struct{}       // closed once decoded
}

// decodeAll reads r's lines in batches, and decodes them on a goroutine
// per CPU. It returns the batches in order, each to be waited for (done);
// the channel closes after the last, or after the first batch that failed
// to read or (when strict) decode. Unless strict, a last line without a
// newline is skipped. The goroutines end once r is read and every batch
// is decoded, or once ctx ends and the Read on r under way, if any,
// returns: a Read that blocks is not interrupted.
func decodeAll(ctx context.Context, r io.Reader, name string, strict bool) <-chan *batch {
	ordered := make(chan *batch, 4*runtime.GOMAXPROCS(0))
	work := make(chan *batch, 4*runtime.GOMAXPROCS(0))
	for range runtime.GOMAXPROCS(0) {
		go func() {
			var dec requestlog.Decoder
			for b := range work {
				b.decode(&dec, name)
				close(b.done)
			}
		}()
	}
	go func() {
		defer close(ordered)
		defer close(work)
		b := newBatch(strict)
		send := func() bool {
			select {
			case work <- b:
			case <-ctx.Done():
				return false
			}
			select {
			case ordered <- b:
			case <-ctx.Done():
				return false
			}
			b = newBatch(strict)
			return true
		}
		lr := lineReader{r: bufio.NewReaderSize(r, 64<<10), max: maxLine}
		n := 1
		for ; ; n++ {
			line, newline, long, err := lr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.err = fmt.Errorf("%s:%d: %w", name, n, err)
				break
			}
			if !newline && !strict {
				b.partial = n // skipped: the log is being written
				break
			}
			if len(line) == 0 && !long {
				continue
			}
			b.data = append(b.data, line...)
			b.ends = append(b.ends, len(b.data))
			b.lines = append(b.lines, n)
			b.long = append(b.long, long)
			if len(b.ends) == batchSize && !send() {
				return
			}
		}
		if len(b.ends) > 0 || b.err != nil || b.partial > 0 {
			send()
		}
	}()
	return ordered
}

// A lineReader reads lines of at most max bytes, the newline included.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// next returns the next line, without its newline, and whether it had one
// (the last line may not); long reports a line longer than max, read to
// its end but returned empty. It returns io.EOF after the last line.
func (lr *lineReader) next() (line []byte, newline, long bool, err error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if !long && len(lr.buf)+len(chunk) > lr.max {
			long, lr.buf = true, lr.buf[:0]
		}
		if !long {
			lr.buf = append(lr.buf, chunk...)
		}
		switch {
		case err == nil:
			if long {
				return nil, true, true, nil
			}
			return lr.buf[:len(lr.buf)-1], true, false, nil
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF) && (long || len(lr.buf) > 0):
			return lr.buf, false, long, nil
		default:
			return nil, false, false, err
		}
	}
}

// newBatch returns an empty batch.
func newBatch(strict bool) *batch { return &batch{strict: strict, done: make(chan struct{})} }

// decode decodes b's lines, skipping those that fail, or when strict
// stopping at the first.
func (b *batch) decode(dec *requestlog.Decoder, name string) {
	if b.err != nil && len(b.ends) == 0 {
		return
	}
	b.recs = make([]requestlog.Record, len(b.ends))
	b.recLines, b.omitted = b.recLines[:0], b.omitted[:0]
	from := 0
	for i, end := range b.ends {
		line := b.data[from:end]
		from = end
		k := len(b.recLines)
		err := errTooLong
		if !b.long[i] {
			err = dec.Decode(line, &b.recs[k])
		}
		if o, ok := errors.AsType[*requestlog.OmittedError](err); ok {
			b.recs[k] = requestlog.Record{Time: o.Time}
			err = nil
			b.omitted = append(b.omitted, true)
		} else if err == nil {
			b.omitted = append(b.omitted, false)
		}
		if err != nil {
			err = fmt.Errorf("%s:%d: %w", name, b.lines[i], err)
			if b.strict {
				b.recs = b.recs[:k]
				b.err = err
				return
			}
			b.recs[k] = requestlog.Record{}
			if b.badErr == nil {
				b.badErr = err
			}
			b.bad = append(b.bad, b.lines[i])
			continue
		}
		b.recLines = append(b.recLines, b.lines[i])
	}
	b.recs = b.recs[:len(b.recLines)]
}

// errTooLong is the error of a line longer than maxLine.
var errTooLong = fmt.Errorf("longer than %d bytes, the longest line a request log holds", maxLine)

// storeError returns err when it is no invalid request, which the memory
// store never causes: a cancelled context, or a bug.
func storeError(err error) error {
	if err == nil || engine.IsInvalid(err) {
		return nil
	}
	return err
}

// compare counts the difference, if any, between the decisions of old and
// neu on one request, and reports whether both decided it, differently.
func (rep *Report) compare(old, neu *side, groups map[groupKey]int) bool {
	if old.err != nil {
		rep.OldErrors++
	}
	if neu.err != nil {
		rep.NewErrors++
	}
	switch {
	case (old.err != nil) != (neu.err != nil):
		rep.Differ++
		rep.ErrorChanged++
		groups[groupKey{direction: ErrorChanged}]++
	case old.err != nil, old.dec.Over == neu.dec.Over:
	case neu.dec.Over:
		rep.Differ++
		rep.NewlyRefused++
		attribute(groups, NewlyRefused, &neu.dec, &old.dec)
		return true
	default:
		rep.Differ++
		rep.NewlyAdmitted++
		attribute(groups, NewlyAdmitted, &old.dec, &neu.dec)
		return true
	}
	return false
}

// attribute counts a request refused by refusing and admitted by other
// under the rules of refusing's descriptors that are over there and not
// in other, or, if none is, under those over in refusing.
func attribute(groups map[groupKey]int, direction string, refusing, other *engine.Decision) {
	found := false
	for i, d := range refusing.Descriptors {
		if d.Over && (i >= len(other.Descriptors) || !other.Descriptors[i].Over) {
			groups[keyOf(direction, d.Rule)]++
			found = true
		}
	}
	if found {
		return
	}
	for _, d := range refusing.Descriptors {
		if d.Over {
			groups[keyOf(direction, d.Rule)]++
			found = true
		}
	}
	if !found {
		groups[groupKey{direction: direction}]++
	}
}

// keyOf returns the group of rule (nil: none) in direction.
func keyOf(direction string, rule *config.Rule) groupKey {
	if rule == nil {
		return groupKey{direction: direction}
	}
	return groupKey{direction: direction, rule: rule.Path, file: rule.File, line: rule.Line}
}

// sortedGroups returns groups as RuleDiffs, by direction, then the most
// requests first, then by rule.
func sortedGroups(groups map[groupKey]int) []RuleDiff {
	out := make([]RuleDiff, 0, len(groups))
	for k, n := range groups {
		out = append(out, RuleDiff{Direction: k.direction, Rule: k.rule, File: k.file, Line: k.line, Requests: n})
	}
	order := map[string]int{NewlyRefused: 0, NewlyAdmitted: 1, ErrorChanged: 2}
	slices.SortFunc(out, func(a, b RuleDiff) int {
		return cmp.Or(cmp.Compare(order[a.Direction], order[b.Direction]), cmp.Compare(b.Requests, a.Requests),
			cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	return out
}
