package xds

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

func TestNackCutsLongMessages(t *testing.T) {
	c := &Client{log: slog.New(slog.DiscardHandler)}
	long := errors.New("x" + strings.Repeat("é", maxDetail)) // 2 bytes a rune: cut mid-rune
	req := c.nack(&discoveryv3.DiscoveryResponse{Nonce: "n", VersionInfo: "3"}, "2", long)
	msg := req.GetErrorDetail().GetMessage()
	if len(msg) > maxDetail+len("\n... (cut)") || !strings.HasSuffix(msg, "(cut)") || !utf8.ValidString(msg) {
		t.Errorf("message of %d bytes, ending %q, valid UTF-8 %v", len(msg), msg[max(0, len(msg)-12):], utf8.ValidString(msg))
	}
	if req.GetVersionInfo() != "2" || req.GetResponseNonce() != "n" || req.GetTypeUrl() != TypeURL {
		t.Errorf("NACK = %v, want version 2, nonce n", req)
	}
}

// TestBackoff: the delays double from lo up to hi, each less up to a fifth
// at random, and start again from lo after Reset.
func TestBackoff(t *testing.T) {
	lo, hi := 100*time.Millisecond, time.Second
	wants := []time.Duration{lo, 2 * lo, 4 * lo, 8 * lo, hi, hi, hi}
	for range 20 {
		b := newBackoff(lo, hi)
		for round := range 2 {
			for n, want := range wants {
				if d := b.NextBackOff(); d > want || d < want-want/5 {
					t.Fatalf("backoff after %d failures (round %d) = %v, want in [%v, %v]", n, round, d, want-want/5, want)
				}
			}
			b.Reset()
		}
	}
	b := newBackoff(lo, hi)
	for n := range 1000 {
		if d := b.NextBackOff(); d > hi {
			t.Fatalf("backoff after %d failures = %v, over %v", n, d, hi)
		}
	}
	b = newBackoff(time.Duration(1<<62), time.Duration(1<<62+1))
	for n := range 6 {
		if d := b.NextBackOff(); d <= 0 {
			t.Fatalf("backoff after %d failures near the largest duration = %v, overflowed", n, d)
		}
	}
}

// TestMaxBackoffFollowsMinBackoff: without MaxBackoff, the backoff doubles
// up to DefaultMaxBackoff, or stays at a longer MinBackoff.
func TestMaxBackoffFollowsMinBackoff(t *testing.T) {
	for _, tt := range []struct{ min, wantMax time.Duration }{
		{0, DefaultMaxBackoff},
		{time.Second, DefaultMaxBackoff},
		{time.Minute, time.Minute},
	} {
		c, err := New(Options{Target: "127.0.0.1:1", MinBackoff: tt.min})
		if err != nil {
			t.Fatalf("New(MinBackoff %v) error: %v", tt.min, err)
		}
		c.Close()
		if c.o.MaxBackoff != tt.wantMax {
			t.Errorf("New(MinBackoff %v): MaxBackoff %v, want %v", tt.min, c.o.MaxBackoff, tt.wantMax)
		}
	}
}
