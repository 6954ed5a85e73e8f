package rlqs

import (
	"strings"
	"testing"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	rlqsv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/wire/rlqs/v1"
)

// TestMirrorMatchesEnvoy: every field of the wire mirror
// (gen/ratelimit/wire/rlqs/v1) is the field of Envoy's message with the
// same number, name and type, a string of Envoy's being bytes in the
// mirror; its enums have Envoy's numbers; BucketId's entries are the
// entries of Envoy's map. So the mirror reads and writes Envoy's bytes.
func TestMirrorMatchesEnvoy(t *testing.T) {
	pairs := []struct{ mirror, envoy proto.Message }{
		{&rlqsv1.RateLimitQuotaUsageReports{}, &rlqsv3.RateLimitQuotaUsageReports{}},
		{&rlqsv1.RateLimitQuotaResponse{}, &rlqsv3.RateLimitQuotaResponse{}},
		{&rlqsv1.RateLimitStrategy{}, &typev3.RateLimitStrategy{}},
	}
	for _, p := range pairs {
		compareMessages(t, p.mirror.ProtoReflect().Descriptor(), p.envoy.ProtoReflect().Descriptor())
	}
}

// compareMessages checks the fields of mirror against envoy's, and their
// messages and enums in turn.
func compareMessages(t *testing.T, mirror, envoy protoreflect.MessageDescriptor) {
	t.Helper()
	fields := mirror.Fields()
	if fields.Len() == 0 && envoy.Fields().Len() != 0 {
		t.Errorf("%s: no fields, while %s has %d", mirror.FullName(), envoy.FullName(), envoy.Fields().Len())
	}
	for i := range fields.Len() {
		m := fields.Get(i)
		e := envoy.Fields().ByNumber(m.Number())
		if e == nil {
			t.Errorf("%s: field %d (%s) is not in %s", mirror.FullName(), m.Number(), m.Name(), envoy.FullName())
			continue
		}
		if e.IsMap() {
			// A map is a repeated message of key 1 and value 2 on the wire.
			if !m.IsList() || m.Kind() != protoreflect.MessageKind {
				t.Errorf("%s: field %s is not the repeated entries of %s's map", mirror.FullName(), m.Name(), e.FullName())
				continue
			}
			compareMessages(t, m.Message(), e.Message())
			continue
		}
		kindOK := m.Kind() == e.Kind() || (m.Kind() == protoreflect.BytesKind && e.Kind() == protoreflect.StringKind)
		if m.Name() != e.Name() || !kindOK || m.Cardinality() != e.Cardinality() || m.ContainingOneof() == nil != (e.ContainingOneof() == nil) {
			t.Errorf("%s: field %d is %s %v %v, Envoy's %s is %s %v %v", mirror.FullName(), m.Number(),
				m.Name(), m.Cardinality(), m.Kind(), e.FullName(), e.Name(), e.Cardinality(), e.Kind())
			continue
		}
		switch m.Kind() {
		case protoreflect.MessageKind:
			if m.Message().FullName().Parent() == "google.protobuf" {
				if m.Message().FullName() != e.Message().FullName() {
					t.Errorf("%s: field %s is a %s, Envoy's a %s", mirror.FullName(), m.Name(), m.Message().FullName(), e.Message().FullName())
				}
				continue
			}
			compareMessages(t, m.Message(), e.Message())
		case protoreflect.EnumKind:
			mv, ev := m.Enum().Values(), e.Enum().Values()
			if mv.Len() != ev.Len() {
				t.Errorf("%s: enum %s has %d values, Envoy's %d", mirror.FullName(), m.Enum().FullName(), mv.Len(), ev.Len())
			}
			for j := range mv.Len() {
				v := mv.Get(j)
				if w := ev.ByNumber(v.Number()); w == nil || !strings.HasSuffix(string(v.Name()), string(w.Name())) {
					t.Errorf("%s: enum value %s = %d is not Envoy's", m.Enum().FullName(), v.Name(), v.Number())
				}
			}
		}
	}
}
