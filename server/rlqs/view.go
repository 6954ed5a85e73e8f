package rlqs

import (
	"cmp"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
)

// View is the JSON document of GET /rlqs: the buckets this replica's
// streams hold and what each stream was last sent.
type View struct {
	// Replica is this replica's name in the store, "" without one.
	Replica string `json:"replica,omitempty"`
	// Buckets are sorted by domain, rule and bucket id.
	Buckets []BucketView `json:"buckets"`
}

// BucketView is one bucket id of one domain, over the streams holding it.
type BucketView struct {
	Domain string `json:"domain"`
	// Rule is the key path of the rule that applies, "" for none.
	Rule string `json:"rule"`
	// BucketID is the bucket id; bytes that are not UTF-8 show as U+FFFD.
	BucketID map[string]string `json:"bucket_id"`
	// Limit is the rule's tightest limit, in requests per second; absent
	// when the rule does not limit.
	Limit *float64 `json:"limit_rate,omitempty"`
	// Granted is the rate the store granted this replica for its clients
	// on the bucket, and OtherClients the other replicas' clients counted
	// in the division; absent without a store or before a grant.
	Granted      *float64 `json:"granted_rate,omitempty"`
	OtherClients *int     `json:"other_replicas_clients,omitempty"`
	// Clients are the streams holding the bucket.
	Clients []ClientView `json:"clients"`
}

// ClientView is one stream's assignment of a bucket.
type ClientView struct {
	// Stream numbers the stream on this replica.
	Stream string `json:"stream"`
	// Assignment is token_bucket, allow_all, deny_all or none.
	Assignment string `json:"assignment"`
	// Rate, MaxTokens, TokensPerFill and FillInterval describe a
	// token_bucket.
	Rate          float64 `json:"rate,omitempty"`
	MaxTokens     uint32  `json:"max_tokens,omitempty"`
	TokensPerFill uint32  `json:"tokens_per_fill,omitempty"`
	FillInterval  string  `json:"fill_interval,omitempty"`
	// ReportingInterval is the client's, as last reported.
	ReportingInterval string `json:"reporting_interval"`
	// ExpiresIn is how long the assignment answering the client's last
	// report lives on.
	ExpiresIn string `json:"expires_in"`
}

// bucketView is what a stream shows of one of its buckets, kept under
// stream.mu by record and drop.
type bucketView struct {
	domain, rule string
	id           map[string]string
	limit        float64 // NaN: no limit
	sent         assignment
	interval     time.Duration
	expires      time.Time
}

// kindNames names the assignment kinds in the view.
var kindNames = [...]string{kindNone: "none", kindAllowAll: "allow_all", kindDenyAll: "deny_all", kindBucket: "token_bucket"}

// View returns the buckets held now.
func (s *Service) View() View {
	now := s.now()
	s.mu.Lock()
	streams := slices.Collect(maps.Keys(s.streams))
	s.mu.Unlock()
	byKey := make(map[string]*BucketView)
	for _, st := range streams {
		st.mu.Lock()
		for key, v := range st.views {
			bv := byKey[key]
			if bv == nil {
				bv = &BucketView{Domain: v.domain, Rule: v.rule, BucketID: validID(v.id)}
				if l := v.limit; !math.IsNaN(l) {
					bv.Limit = &l // a copy: v changes once st.mu is released
				}
				if s.shares.Shared() {
					if g, others, ok := s.shares.Grant(key); ok {
						bv.Granted, bv.OtherClients = &g, &others
					}
				}
				byKey[key] = bv
			}
			bv.Clients = append(bv.Clients, clientView(st.client, v, now))
		}
		st.mu.Unlock()
	}
	out := View{Buckets: make([]BucketView, 0, len(byKey))}
	if s.shares.Shared() {
		out.Replica = s.shares.Replica()
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		bv := byKey[key]
		slices.SortFunc(bv.Clients, func(a, b ClientView) int { return cmp.Compare(a.Stream, b.Stream) })
		out.Buckets = append(out.Buckets, *bv)
	}
	slices.SortStableFunc(out.Buckets, func(a, b BucketView) int {
		return cmp.Or(strings.Compare(a.Domain, b.Domain), strings.Compare(a.Rule, b.Rule))
	})
	return out
}

// clientView returns the view of v held by stream.
func clientView(stream string, v *bucketView, now time.Time) ClientView {
	c := ClientView{
		Stream:            stream,
		Assignment:        kindNames[v.sent.kind],
		ReportingInterval: v.interval.String(),
		ExpiresIn:         max(v.expires.Sub(now), 0).Round(time.Millisecond).String(),
	}
	if v.sent.kind == kindBucket {
		c.Rate = v.sent.rate()
		c.MaxTokens, c.TokensPerFill, c.FillInterval = v.sent.maxTokens, v.sent.perFill, v.sent.fill.String()
	}
	return c
}

// validID returns id with its keys and values made valid UTF-8, for JSON.
func validID(id map[string]string) map[string]string {
	out := make(map[string]string, len(id))
	for k, v := range id {
		out[strings.ToValidUTF8(k, "\uFFFD")] = strings.ToValidUTF8(v, "\uFFFD")
	}
	return out
}

// ServeHTTP serves View as JSON.
func (s *Service) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.View()) // a failed write has no one left to tell
}
