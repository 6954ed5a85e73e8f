package config

import (
	"path/filepath"
	"testing"
	"time"
)

// TestSettler steps a settler through explicit instants, the debounce
// timer and polls reading the files (settle = 100ms).
func TestSettler(t *testing.T) {
	type step struct {
		at   time.Duration // since the start
		op   string        // "read", "event", "loaded" or "failed"
		d    string        // digest read, loaded or failed
		want verdict       // of a read
		news bool          // of a failed
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"unchanged", []step{
			{0, "read", "v1", unchanged, false},
		}},
		{"a change settles, then loads", []step{
			{0, "event", "", 0, false},
			{100 * time.Millisecond, "read", "v2", settling, false},
			{150 * time.Millisecond, "read", "v2", waiting, false}, // a poll
			{200 * time.Millisecond, "read", "v2", ready, false},
			{200 * time.Millisecond, "loaded", "v2", 0, false},
			{300 * time.Millisecond, "read", "v2", unchanged, false},
		}},
		// A poll reads a file half-written; the writer's event comes
		// after: what was read is forgotten, and only the complete file,
		// read twice, loads.
		{"half-written file", []step{
			{0, "read", "half", settling, false},
			{10 * time.Millisecond, "event", "", 0, false},
			{100 * time.Millisecond, "read", "half", settling, false}, // not ready: an event came between
			{110 * time.Millisecond, "event", "", 0, false},
			{210 * time.Millisecond, "read", "full", settling, false},
			{310 * time.Millisecond, "read", "full", ready, false},
		}},
		{"changed between two readings", []step{
			{0, "read", "v2", settling, false},
			{100 * time.Millisecond, "read", "v3", settling, false},
			{150 * time.Millisecond, "read", "v3", waiting, false},
			{200 * time.Millisecond, "read", "v3", ready, false},
		}},
		{"back to the rules in force", []step{
			{0, "read", "v2", settling, false},
			{100 * time.Millisecond, "read", "v1", unchanged, false},
			{200 * time.Millisecond, "read", "v2", settling, false},
		}},
		{"a bad change is reported once", []step{
			{0, "read", "bad", settling, false},
			{100 * time.Millisecond, "read", "bad", ready, false},
			{100 * time.Millisecond, "failed", "bad", 0, true},
			{5 * time.Second, "read", "bad", unchanged, false}, // a poll
			{6 * time.Second, "failed", "bad", 0, false},       // as after Reload
			{7 * time.Second, "read", "v1", settling, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
			s := settler{settle: 100 * time.Millisecond, last: "v1"}
			for i, st := range tc.steps {
				switch st.op {
				case "read":
					if got := s.read(st.d, t0.Add(st.at)); got != st.want {
						t.Fatalf("step %d: at %v, read(%q) = %v, want %v", i, st.at, st.d, got, st.want)
					}
				case "event":
					s.event()
				case "loaded":
					s.loaded(st.d)
				case "failed":
					if got := s.failed(st.d); got != st.news {
						t.Fatalf("step %d: failed(%q) = %v, want %v", i, st.d, got, st.news)
					}
				}
			}
		})
	}
}

func TestWatcherMatters(t *testing.T) {
	dir := filepath.Join("srv", "rules")
	file := filepath.Join(dir, "rules.yaml")
	for _, tc := range []struct {
		path, event string
		isDir, want bool
	}{
		{file, file, false, true},
		{file, filepath.Join(dir, "..data"), false, true},
		{file, filepath.Join(dir, "other.yaml"), false, false},
		{file, filepath.Join(dir, ".rules.yaml.swp"), false, false},
		{file, filepath.Join(dir, "..data_tmp"), false, false},
		{dir, filepath.Join(dir, "a.yaml"), true, true},
		{dir, filepath.Join(dir, "b.yml"), true, true},
		{dir, filepath.Join(dir, "..data"), true, true},
		{dir, dir, true, true}, // the directory itself: removed, say
		{dir, filepath.Join(dir, "notes.txt"), true, false},
		{dir, filepath.Join(dir, ".hidden.yaml"), true, false},
		{dir, filepath.Join(dir, "..2026_11_22_10_00_00.1"), true, false},
		{dir + "/", filepath.Join(dir, "a.yaml"), true, true},
	} {
		w := NewWatcher(tc.path, WatchOptions{})
		watched := tc.path
		if !tc.isDir {
			watched = filepath.Dir(tc.path)
		}
		if got := w.matters(tc.event, watched, tc.isDir); got != tc.want {
			t.Errorf("watching %s, matters(%s) = %v, want %v", tc.path, tc.event, got, tc.want)
		}
	}
}
