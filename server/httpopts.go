package server

import (
	"net/http"
	"time"
)

// The defaults of HTTPConnLimits, which the daemon's --http-* connection
// flags take.
const (
	// A decision request is a few hundred bytes: a client that needs 10 s
	// to send one is stalled or hostile.
	DefaultHTTPReadTimeout = 10 * time.Second
	// From the end of the headers to the last byte of the answer: ample
	// for a decision, a probe or a scrape.
	DefaultHTTPWriteTimeout = 30 * time.Second
	// Above Go's http.Transport's 90 s, so that a client usually closes
	// an idle connection first and never sends on one being closed.
	DefaultHTTPIdleTimeout = 2 * time.Minute
	// Above Envoy's default limit on request headers (60 KiB), so that
	// whatever Envoy forwards fits.
	DefaultHTTPMaxHeaderBytes = 64 << 10
)

// httpReadHeaderTimeout bounds the headers when HTTPConnLimits.ReadTimeout
// is 0: no connection may hold a listener with a header forever.
const httpReadHeaderTimeout = 10 * time.Second

// HTTPConnLimits bound what one client connection to an HTTP server may
// hold. Zero means no limit, as for net/http, except as each field says.
type HTTPConnLimits struct {
	// ReadTimeout bounds the reading of a whole request, headers and
	// body; at 0, the headers alone are still bounded, to 10 s.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer.
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait of a keep-alive connection for its next
	// request; 0 means ReadTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers; 0 means net/http's 1 MiB.
	MaxHeaderBytes int
}

// DefaultHTTPConnLimits returns the limits of the Default constants.
func DefaultHTTPConnLimits() HTTPConnLimits {
	return HTTPConnLimits{
		ReadTimeout:    DefaultHTTPReadTimeout,
		WriteTimeout:   DefaultHTTPWriteTimeout,
		IdleTimeout:    DefaultHTTPIdleTimeout,
		MaxHeaderBytes: DefaultHTTPMaxHeaderBytes,
	}
}

// Server returns an HTTP server of h bounded by l. On a debug listener
// too: net/http/pprof extends the write deadline by the ?seconds= a
// profile or trace asks for.
func (l HTTPConnLimits) Server(h http.Handler) *http.Server {
	s := &http.Server{
		Handler:        h,
		ReadTimeout:    l.ReadTimeout, // headers and body: net/http uses it for the headers too
		WriteTimeout:   l.WriteTimeout,
		IdleTimeout:    l.IdleTimeout, // 0: net/http uses ReadTimeout
		MaxHeaderBytes: l.MaxHeaderBytes,
	}
	if l.ReadTimeout == 0 {
		s.ReadHeaderTimeout = httpReadHeaderTimeout
	}
	return s
}
