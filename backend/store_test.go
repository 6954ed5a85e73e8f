package backend

import (
	"testing"
	"time"
)

func TestRefusedAndConsumes(t *testing.T) {
	type req struct {
		group int
		mode  Mode
		cwo   bool
		over  bool
	}
	tests := []struct {
		name        string
		reqs        []req
		refused     bool
		wantConsume []bool
	}{
		{"all within", []req{{0, Enforce, false, false}, {1, Enforce, false, false}}, false, []bool{true, true}},
		{"one enforce over", []req{{0, Enforce, false, false}, {1, Enforce, false, true}}, true, []bool{false, false}},
		{"shadow over", []req{{0, Shadow, false, true}, {1, Enforce, false, false}}, false, []bool{false, true}},
		{"group stands together", []req{{0, Shadow, false, false}, {0, Shadow, false, true}, {1, Enforce, false, false}}, false, []bool{false, false, true}},
		{"one quota of two over", []req{{0, Quota, false, true}, {1, Quota, false, false}}, false, []bool{false, true}},
		{"every quota over", []req{{0, Quota, false, true}, {1, Quota, false, true}, {2, Enforce, false, false}}, true, []bool{false, false, false}},
		{"no quota groups", []req{{0, Shadow, false, true}}, false, []bool{false}},
		{"consume when over, refused", []req{{0, Enforce, true, true}, {1, Enforce, false, false}}, true, []bool{true, false}},
	}
	for _, tt := range tests {
		reqs := make([]Request, len(tt.reqs))
		res := make([]Result, len(tt.reqs))
		for i, r := range tt.reqs {
			reqs[i] = Request{Group: r.group, Mode: r.mode, ConsumeWhenOver: r.cwo}
			res[i] = Result{OverLimit: r.over}
		}
		refused := Refused(reqs, res)
		if refused != tt.refused {
			t.Errorf("%s: Refused() = %v, want %v", tt.name, refused, tt.refused)
		}
		for i, want := range tt.wantConsume {
			if got := Consumes(reqs, res, refused, i); got != want {
				t.Errorf("%s: Consumes(%d) = %v, want %v", tt.name, i, got, want)
			}
		}
	}
}

func TestKeysAreUnambiguous(t *testing.T) {
	l := Limit{Window: time.Minute}
	key := func(parts ...string) string {
		var b []byte
		for _, p := range parts {
			b = AppendKeyPart(b, p)
		}
		return string(AppendKeySuffix(b, l))
	}
	pairs := [][2][]string{
		{{"d", "a_b", "c"}, {"d", "a", "b_c"}},
		{{"d", "a", "1:b"}, {"d", "a1", ":b"}},
		{{"d", "k", ""}, {"d", "k"}},
		{{"d", "k", "v|fixed_window|1"}, {"d", "k", "v"}},
		{{"1:d"}, {"", "d"}},
	}
	for _, p := range pairs {
		if a, b := key(p[0]...), key(p[1]...); a == b {
			t.Errorf("key(%q) == key(%q) == %q", p[0], p[1], a)
		}
	}
	fw := string(AppendKeySuffix(nil, Limit{Algorithm: FixedWindow, Window: time.Minute}))
	sw := string(AppendKeySuffix(nil, Limit{Algorithm: SlidingWindow, Window: time.Minute}))
	sw2 := string(AppendKeySuffix(nil, Limit{Algorithm: SlidingWindow, Window: time.Hour}))
	same := string(AppendKeySuffix(nil, Limit{Algorithm: SlidingWindow, Window: time.Minute, Requests: 99}))
	if fw == sw || sw == sw2 || sw != same {
		t.Errorf("suffixes: fixed %q, sliding %q, sliding hour %q, sliding other count %q: want the algorithm and the window to tell, not the count", fw, sw, sw2, same)
	}
}
