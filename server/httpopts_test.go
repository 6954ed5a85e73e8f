package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ratelimitd/ratelimitd/server"
)

// TestHTTPConnLimits: the server of HTTPConnLimits carries its bounds,
// and bounds the headers even when ReadTimeout does not bound the request.
func TestHTTPConnLimits(t *testing.T) {
	h := http.NotFoundHandler()
	for _, tt := range []struct {
		name string
		l    server.HTTPConnLimits
		want *http.Server
	}{
		{"defaults", server.DefaultHTTPConnLimits(), &http.Server{
			ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		}},
		{"no read timeout", server.HTTPConnLimits{WriteTimeout: time.Second, MaxHeaderBytes: 1}, &http.Server{
			ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Second, MaxHeaderBytes: 1,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.l.Server(h)
			if got.Handler == nil {
				t.Error("Server has no handler")
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreUnexported(http.Server{}), cmpopts.IgnoreFields(http.Server{}, "Handler")); diff != "" {
				t.Errorf("Server (-want +got):\n%s", diff)
			}
		})
	}
}
