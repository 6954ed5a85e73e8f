package server

import (
	"context"
	"errors"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelimitd/ratelimitd/server/internal/engine"
)

// serveJSON answers POST /json, Envoy's RateLimitService in JSON: the
// body is a RateLimitRequest as protojson, the answer its
// RateLimitResponse, with status 429 when the request is over a limit.
func (s *Server) serveJSON(w http.ResponseWriter, r *http.Request) {
	req, ok := readRateLimitRequest(w, r)
	if !ok {
		return
	}
	resp, err := s.decideEnvoy(r.Context(), apiJSON, func(sc *scratch) error { return envoyFromProto(sc, req) })
	if err != nil {
		http.Error(w, err.Error(), httpCode(err))
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, "encoding response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// readRateLimitRequest reads r's body, a protojson RateLimitRequest (of
// /json and /explain). When it cannot, it answers the error itself and
// returns false.
func readRateLimitRequest(w http.ResponseWriter, r *http.Request) (*rlsv3.RateLimitRequest, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRecvMsgSize))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "request body over 1 MiB", http.StatusRequestEntityTooLarge)
			return nil, false
		}
		http.Error(w, "reading request: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	req := new(rlsv3.RateLimitRequest)
	if err := protojson.Unmarshal(body, req); err != nil {
		http.Error(w, "invalid RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return req, true
}

// httpCode maps an engine error to an HTTP status code.
func httpCode(err error) int {
	switch {
	case engine.IsInvalid(err):
		return http.StatusBadRequest
	case errors.Is(err, engine.ErrStoreUnavailable), errors.Is(err, engine.ErrShuttingDown):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
