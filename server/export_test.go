package server

import "time"

// SampleRatesAt samples the rule counters as SampleRates does each
// second, as if at now.
func (s *Server) SampleRatesAt(now time.Time) { s.admin.Sample(now) }
