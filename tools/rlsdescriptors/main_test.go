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
	if err := run(out, append(roots, rlqsRoot), nil); err != nil {
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
	for name, method := range map[protoreflect.FullName]protoreflect.Name{
		"envoy.service.ratelimit.v3.RateLimitService":             "ShouldRateLimit",
		"ratelimit.v1.RateLimitService":                           "ShouldRateLimit",
		"envoy.service.rate_limit_quota.v3.RateLimitQuotaService": "StreamRateLimitQuotas",
	} {
		d, err := files.FindDescriptorByName(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if !ok || sd.Methods().ByName(method) == nil {
			t.Errorf("%s: not a service with %s", name, method)
		}
	}
}

func TestDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if err := run("", roots, &a); err != nil {
		t.Fatal(err)
	}
	if err := run("", roots, &b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two runs wrote different sets")
	}
}
