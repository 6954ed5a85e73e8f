// Command rlsdescriptors writes a FileDescriptorSet of the gRPC services
// ratelimitd serves, envoy.service.ratelimit.v3 (Envoy's RLS) and
// ratelimit.v1 (the native API), with every file they import, each after its
// imports. The Go module of Envoy's types ships no .proto files, so the set
// is built from the descriptors its Go packages register; protoc
// (--descriptor_set_in) and @grpc/proto-loader read it to generate or load
// clients in other languages (see examples/python and examples/node).
//
//	go run ./tools/rlsdescriptors -o rls.binpb
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	// Registered for their descriptors.
	_ "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	_ "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
)

// roots are the files whose services the set is for.
var roots = []string{
	"envoy/service/ratelimit/v3/rls.proto",
	"ratelimit/v1/ratelimit.proto",
	"ratelimit/v1/overrides.proto",
}

// rlqsRoot is the file of the Rate Limit Quota Service, which -rlqs adds.
const rlqsRoot = "envoy/service/rate_limit_quota/v3/rlqs.proto"

func main() {
	out := flag.String("o", "", "write the set to `file` (default standard output)")
	rlqs := flag.Bool("rlqs", false, "add the Rate Limit Quota Service ("+rlqsRoot+") to the set")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: rlsdescriptors [-rlqs] [-o file]")
		os.Exit(2)
	}
	rs := roots
	if *rlqs {
		rs = append(rs[:len(rs):len(rs)], rlqsRoot)
	}
	if err := run(*out, rs, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rlsdescriptors:", err)
		os.Exit(1)
	}
}

func run(out string, roots []string, stdout io.Writer) error {
	set, err := build(protoregistry.GlobalFiles, roots)
	if err != nil {
		return err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		return err
	}
	if out == "" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

// build returns the files named by roots and everything they import,
// transitively, from files, each file after its imports.
func build(files *protoregistry.Files, roots []string) (*descriptorpb.FileDescriptorSet, error) {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var visit func(fd protoreflect.FileDescriptor)
	visit = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			visit(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, path := range roots {
		fd, err := files.FindFileByPath(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		visit(fd)
	}
	return set, nil
}
