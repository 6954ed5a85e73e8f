package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func TestSet(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rls.binpb")
	if err := run(out, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(b, set); err != nil {
		t.Fatal(err)
	}

	// Each file comes after its imports: protoc needs no more than that.
	at := map[string]int{}
	for i, f := range set.GetFile() {
		if _, dup := at[f.GetName()]; dup {
			t.Errorf("%s: twice in the set", f.GetName())
		}
		for _, dep := range f.GetDependency() {
			if j, ok := at[dep]; !ok || j >= i {
				t.Errorf("%s: imports %s, which is not before it", f.GetName(), dep)
			}
		}
		at[f.GetName()] = i
	}

	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("protodesc.NewFiles: %v", err)
	}
	for _, name := range []protoreflect.FullName{
		"envoy.service.ratelimit.v3.RateLimitService",
		"ratelimit.v1.RateLimitService",
	} {
		d, err := files.FindDescriptorByName(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok || sd.Methods().ByName("ShouldRateLimit") == nil {
			t.Errorf("%s: not a service with ShouldRateLimit", name)
		}
	}
}

func TestDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if err := run("", &a); err != nil {
		t.Fatal(err)
	}
	if err := run("", &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two runs wrote different sets")
	}
}

// TestMoreRoots: -root adds a registered file and its imports (Envoy's
// RLQS, for the Python quota mode), while the default set stays without
// it, as the committed stubs of every language were made from it.
func TestMoreRoots(t *testing.T) {
	const rlqs = "envoy/service/rate_limit_quota/v3/rlqs.proto"
	names := func(more ...string) map[string]bool {
		t.Helper()
		var b bytes.Buffer
		if err := run("", &b, more...); err != nil {
			t.Fatal(err)
		}
		set := &descriptorpb.FileDescriptorSet{}
		if err := proto.Unmarshal(b.Bytes(), set); err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, f := range set.GetFile() {
			m[f.GetName()] = true
		}
		return m
	}
	plain, with := names(), names(rlqs, rlqs)
	if plain[rlqs] {
		t.Errorf("the default set holds %s", rlqs)
	}
	for _, f := range []string{rlqs, "envoy/type/v3/ratelimit_strategy.proto", "envoy/service/ratelimit/v3/rls.proto"} {
		if !with[f] {
			t.Errorf("with -root %s: no %s", rlqs, f)
		}
	}
	for f := range plain {
		if !with[f] {
			t.Errorf("with -root %s: %s dropped", rlqs, f)
		}
	}
	if err := run("", &bytes.Buffer{}, "no/such.proto"); err == nil {
		t.Error("an unregistered root: no error")
	}
}
