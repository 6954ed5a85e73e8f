package overrides_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/server/overrides"
)

// FuzzDecode feeds the API's body decoder and the override checks any
// bytes: they never panic, refuse with an InvalidError, and what they
// accept encodes and decodes back to the same key and limits.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"domain": "edge", "entries": [{"key": "api_key", "value": "k-123"}], "limits": [{"requests_per_unit": 1000, "unit": "minute"}], "expires_at": "2099-12-01T00:00:00Z", "reason": "incident 42"}`))
	f.Add([]byte(`{"domain": "e", "entries": [{"key": "a", "value": ""}, {"key": "b", "value": "é"}], "limits": [{"requests_per_unit": 5, "window": "90s", "algorithm": "gcra", "burst": 9}], "reason": "r"}`))
	f.Add([]byte(`{"domain": "e", "entries": [], "limits": [{"requests_per_unit": 0, "unit": "Year"}], "reason": ""}`))
	f.Add([]byte("{\"domain\": \"\xff\"}"))
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := overrides.Decode[overrides.Override](bytes.NewReader(body))
		if err != nil {
			if !overrides.IsInvalid(err) {
				t.Fatalf("Decode = %v, not an InvalidError", err)
			}
			return
		}
		limits, err := o.Compile(now)
		if err != nil {
			if !overrides.IsInvalid(err) {
				t.Fatalf("Compile = %v, not an InvalidError", err)
			}
			return
		}
		rec, err := json.Marshal(&o)
		if err != nil {
			t.Fatal(err)
		}
		var back overrides.Override
		if err := json.Unmarshal(rec, &back); err != nil {
			t.Fatalf("the record %s does not decode: %v", rec, err)
		}
		again, err := back.Compile(time.Time{})
		if err != nil || back.Key() != o.Key() || len(again) != len(limits) {
			t.Fatalf("the record %s reads back as another override (%v)", rec, err)
		}
		for i := range limits {
			if again[i].Limit != limits[i].Limit {
				t.Fatalf("limit %d reads back as %+v, want %+v", i, again[i].Limit, limits[i].Limit)
			}
		}
	})
}
