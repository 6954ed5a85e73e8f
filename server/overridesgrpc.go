package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	ratelimitv1 "github.com/ratelimitd/ratelimitd/gen/ratelimit/v1"
	"github.com/ratelimitd/ratelimitd/server/admin"
	"github.com/ratelimitd/ratelimitd/server/overrides"
)

// overridesService is ratelimit.v1.OverridesService, the gRPC face of
// the runtime overrides (the HTTP one is package admin's). It is served
// on the callers' gRPC port, so that every method, listing included,
// needs a token of Options.AdminTokens there.
type overridesService struct {
	ratelimitv1.UnimplementedOverridesServiceServer
	s *Server
}

// OverridesService returns the server's ratelimit.v1.OverridesService.
func (s *Server) OverridesService() ratelimitv1.OverridesServiceServer {
	return overridesService{s: s}
}

// registerOverrides registers the OverridesService on g.
func (s *Server) registerOverrides(g *grpc.Server) {
	ratelimitv1.RegisterOverridesServiceServer(g, s.OverridesService())
}

// authorize checks the bearer token of ctx's metadata "authorization":
// it returns the token's name, or Unauthenticated, or PermissionDenied
// without a token file.
func (o overridesService) authorize(ctx context.Context) (string, error) {
	var auth string
	if md, ok := grpcmd.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			auth = v[0]
		}
	}
	name, err := o.s.opts.AdminTokens.Authorize(auth, true)
	switch {
	case errors.Is(err, admin.ErrNoTokens):
		return "", status.Error(codes.PermissionDenied, err.Error())
	case err != nil:
		return "", status.Error(codes.Unauthenticated, err.Error())
	}
	return name, nil
}

// ListOverrides implements ratelimitv1.OverridesServiceServer.
func (o overridesService) ListOverrides(ctx context.Context, req *ratelimitv1.ListOverridesRequest) (*ratelimitv1.ListOverridesResponse, error) {
	if _, err := o.authorize(ctx); err != nil {
		return nil, err
	}
	list, err := o.s.overrides.List(ctx, req.GetDomain())
	if err != nil {
		return nil, o.s.overridesError(err)
	}
	resp := &ratelimitv1.ListOverridesResponse{Overrides: make([]*ratelimitv1.Override, len(list))}
	for i := range list {
		resp.Overrides[i] = overrideToProto(&list[i])
	}
	return resp, nil
}

// SetOverride implements ratelimitv1.OverridesServiceServer.
func (o overridesService) SetOverride(ctx context.Context, req *ratelimitv1.SetOverrideRequest) (*ratelimitv1.SetOverrideResponse, error) {
	by, err := o.authorize(ctx)
	if err != nil {
		return nil, err
	}
	ov, err := overrideFromProto(req.GetOverride())
	if err == nil {
		ov, err = o.s.overrides.Set(ctx, ov, by)
	}
	if err != nil {
		return nil, o.s.overridesError(err)
	}
	return &ratelimitv1.SetOverrideResponse{Override: overrideToProto(&ov)}, nil
}

// DeleteOverride implements ratelimitv1.OverridesServiceServer.
func (o overridesService) DeleteOverride(ctx context.Context, req *ratelimitv1.DeleteOverrideRequest) (*ratelimitv1.DeleteOverrideResponse, error) {
	by, err := o.authorize(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := entriesFromProto(req.GetEntries())
	if err == nil {
		err = o.s.overrides.Delete(ctx, req.GetDomain(), entries, req.GetReason(), by)
	}
	if err != nil {
		return nil, o.s.overridesError(err)
	}
	return &ratelimitv1.DeleteOverrideResponse{}, nil
}

// ResetCounters implements ratelimitv1.OverridesServiceServer.
func (o overridesService) ResetCounters(ctx context.Context, req *ratelimitv1.ResetCountersRequest) (*ratelimitv1.ResetCountersResponse, error) {
	by, err := o.authorize(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := entriesFromProto(req.GetEntries())
	var n int
	if err == nil {
		n, err = o.s.overrides.Reset(ctx, req.GetDomain(), entries, req.GetReason(), by)
	}
	if err != nil {
		return nil, o.s.overridesError(err)
	}
	return &ratelimitv1.ResetCountersResponse{Counters: uint32(n)}, nil //nolint:gosec // at most a rule's limits plus an override's
}

// overridesError maps an error of the overrides to a gRPC status. A
// store's error, which may name internal addresses, goes to the log.
func (s *Server) overridesError(err error) error {
	if _, ok := status.FromError(err); ok { // this face's own refusals
		return err
	}
	switch {
	case overrides.IsInvalid(err):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, overrides.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, overrides.ErrFull):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, overrides.ErrUnsupported):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	s.log.Warn("overrides: the counter store failed", "err", err)
	return status.Error(codes.Unavailable, "the counter store failed; see the daemon's log")
}

// entriesFromProto converts entries; a raw_value is refused, for
// overrides name UTF-8 values only.
func entriesFromProto(es []*ratelimitv1.Entry) ([]overrides.Entry, error) {
	out := make([]overrides.Entry, len(es))
	for i, e := range es {
		if len(e.GetRawValue()) > 0 {
			return nil, status.Errorf(codes.InvalidArgument, "entry %d: raw_value is not taken: an override's values are UTF-8", i)
		}
		out[i] = overrides.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	return out, nil
}

// overrideFromProto converts what an operator sends.
func overrideFromProto(p *ratelimitv1.Override) (overrides.Override, error) {
	entries, err := entriesFromProto(p.GetEntries())
	if err != nil {
		return overrides.Override{}, err
	}
	o := overrides.Override{Domain: p.GetDomain(), Entries: entries, Reason: p.GetReason()}
	for _, l := range p.GetLimits() {
		o.Limits = append(o.Limits, overrides.Limit{
			RequestsPerUnit: l.GetRequestsPerUnit(), Unit: l.GetUnit(), Window: l.GetWindow(),
			Algorithm: l.GetAlgorithm(), Burst: l.GetBurst(), Name: l.GetName(),
		})
	}
	if p.GetExpiresAt() != nil {
		if err := p.GetExpiresAt().CheckValid(); err != nil {
			return overrides.Override{}, status.Errorf(codes.InvalidArgument, "expires_at: %v", err)
		}
		t := p.GetExpiresAt().AsTime()
		o.ExpiresAt = &t
	}
	return o, nil
}

// overrideToProto converts an override stored or listed.
func overrideToProto(o *overrides.Override) *ratelimitv1.Override {
	p := &ratelimitv1.Override{
		Domain: o.Domain, Reason: o.Reason, Version: o.Version, SetBy: o.SetBy,
		SetAt: timestamppb.New(o.SetAt), Unmatched: o.Unmatched,
	}
	for _, e := range o.Entries {
		p.Entries = append(p.Entries, &ratelimitv1.Entry{Key: e.Key, Value: e.Value})
	}
	for _, l := range o.Limits {
		p.Limits = append(p.Limits, &ratelimitv1.OverrideLimit{
			RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Window: l.Window,
			Algorithm: l.Algorithm, Burst: l.Burst, Name: l.Name,
		})
	}
	if o.ExpiresAt != nil {
		p.ExpiresAt = timestamppb.New(*o.ExpiresAt)
	}
	return p
}
