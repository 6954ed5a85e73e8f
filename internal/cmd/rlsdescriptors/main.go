// Command rlsdescriptors writes a FileDescriptorSet of the gRPC services
// ratelimitd serves, envoy.service.ratelimit.v3 (Envoy's RLS) and
// ratelimit.v1 (the native API), with every file they import, each after its
// imports. The Go module of Envoy's types ships no .proto files, so the set
// is built from the descriptors its Go packages register; protoc
// (--descriptor_set_in) and @grpc/proto-loader read it to generate or load
// clients in other languages (see examples/python and examples/node).
// Each -root names one more file to start from, such as Envoy's Rate Limit
// Quota Service (envoy/service/rate_limit_quota/v3/rlqs.proto, which the
// Python package's quota mode speaks); without one, the set is the same
// as before such files were registered.
//
//	go run ./internal/cmd/rlsdescriptors -o rls.binpb
//	go run ./internal/cmd/rlsdescriptors -root envoy/service/rate_limit_quota/v3/rlqs.proto -o set.binpb
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
}

func main() {
	out := flag.String("o", "", "write the set to `file` (default standard output)")
	var more []string
	flag.Func("root", "also start from the registered `file` (repeatable)", func(s string) error {
		more = append(more, s)
		return nil
	})
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: rlsdescriptors [-o file] [-root file]...")
		os.Exit(2)
	}
	if err := run(*out, os.Stdout, more...); err != nil {
		fmt.Fprintln(os.Stderr, "rlsdescriptors:", err)
		os.Exit(1)
	}
}

func run(out string, stdout io.Writer, more ...string) error {
	set, err := build(protoregistry.GlobalFiles, append(roots[:len(roots):len(roots)], more...))
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
