package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/config"
)

// Default backoff between two attempts to open the stream.
const (
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 30 * time.Second
)

// Options configure a Client. Target is required; the zero value of every
// other field means its default.
type Options struct {
	// Target is the management server's gRPC target, such as
	// "xds.example:18000" or "dns:///xds.example:18000".
	Target string
	// Credentials secure the connection; nil means plaintext. TLS.Credentials
	// builds them from files.
	Credentials credentials.TransportCredentials
	// InsecureHeaders lets Headers go out over a plaintext connection (nil
	// Credentials), where anyone on the path can read them: New refuses
	// Headers without Credentials unless it is set.
	InsecureHeaders bool
	// DialOptions are added to the Client's own when it creates its
	// connection: a larger grpc.MaxCallRecvMsgSize for rule sets over
	// gRPC's default 4 MiB, keepalive parameters so that a server lost
	// without a word is noticed (within what the server permits),
	// interceptors...
	DialOptions []grpc.DialOption
	// Headers are gRPC metadata sent when opening each stream, such as an
	// authorization token the management server requires; keys in any
	// case (gRPC sends them in lower case). They need Credentials, or
	// InsecureHeaders.
	Headers map[string]string
	// NodeID, NodeCluster and NodeMetadata describe this instance to the
	// management server, which picks the resources it serves by them.
	NodeID      string
	NodeCluster string
	// NodeMetadata is sent as is and must not be modified afterwards.
	NodeMetadata *structpb.Struct
	// ConfigOptions bound the compilation of the rules, as for config.Load.
	ConfigOptions []config.Option
	// OnRules receives each set of rules that the Client accepts, in order,
	// before the Client ACKs them, from the Client's goroutine: it must not
	// block for long, nor call Close. The Client logs each set accepted,
	// with its version and number of domains: OnRules need not.
	OnRules func(*config.Rules)
	// OnReject receives each set of rules that the Client refuses, with its
	// version_info and the error its NACK carries, from the Client's
	// goroutine, before the NACK is sent (or held back): it must not block
	// for long, nor call Close. The Client logs the refusal either way,
	// with its version and err: OnReject need not.
	OnReject func(version string, err error)
	// Logger receives connection errors and refused resource sets; nil
	// discards them.
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// attempts to open the stream, and that of the NACKs held back when
	// sets are refused in a row. A zero MinBackoff means
	// DefaultMinBackoff; a zero MaxBackoff means DefaultMaxBackoff, or
	// MinBackoff if longer.
	MinBackoff, MaxBackoff time.Duration
}

// Why not go-control-plane's own ADS client (pkg/client/sotw/v3 in the
// v0.14.0 that go.mod pins, whose server and cache the tests run): its
// Fetch holds the client's lock across the blocking Recv, so that no ACK
// or NACK can go out while a Fetch waits, and a NACK held back for a
// backoff while the stream is still read (see stream) cannot be built on
// it; its Response carries the resources only, without the version_info
// that OnReject and the logs report and without the type_url by which
// responses of other types are dropped unanswered (answering would
// subscribe); its NACK has no code and no bound on the message; and it
// leaves reconnecting, backoff and subscribing again with the last ACKed
// version to its caller. What it would take off this file is the
// building of three requests.

// A Client subscribes to RateLimitConfig resources over an ADS stream
// (State of the World) and hands the rules they define to Options.OnRules.
// It reconnects until closed. Its methods are safe for concurrent use.
type Client struct {
	o      Options
	log    *slog.Logger
	conn   *grpc.ClientConn
	node   *corev3.Node
	cancel context.CancelFunc
	done   chan struct{}            // closed when the run goroutine has returned
	ready  chan struct{}            // closed when the first good rules arrived
	rules  atomic.Pointer[accepted] // nil before the first rules
	closer sync.Once
}

// New validates o, creates the connection and starts the Client, which
// connects in the background. Call Close to stop it.
func New(o Options) (*Client, error) {
	if o.Target == "" {
		return nil, errors.New("xds: no target")
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.MaxBackoff < o.MinBackoff {
		return nil, fmt.Errorf("xds: max backoff %v is under min backoff %v", o.MaxBackoff, o.MinBackoff)
	}
	creds := o.Credentials
	if creds == nil && len(o.Headers) > 0 && !o.InsecureHeaders {
		return nil, errors.New("xds: headers without credentials would go out in plaintext (set InsecureHeaders to allow it)")
	}
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, o.DialOptions...)
	conn, err := grpc.NewClient(o.Target, dial...)
	if err != nil {
		return nil, fmt.Errorf("xds: connect to %s: %w", o.Target, err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		o:    o,
		log:  log.With("target", o.Target),
		conn: conn,
		node: &corev3.Node{
			Id:            o.NodeID,
			Cluster:       o.NodeCluster,
			Metadata:      o.NodeMetadata,
			UserAgentName: "ratelimitd",
		},
		cancel: cancel,
		done:   make(chan struct{}),
		ready:  make(chan struct{}),
	}
	go c.run(ctx)
	return c, nil
}

// Close stops the Client and waits for its goroutine to return. The rules
// it accepted stay available from Rules. Close is idempotent.
func (c *Client) Close() error {
	var err error
	c.closer.Do(func() {
		c.cancel()
		<-c.done
		err = c.conn.Close()
	})
	return err
}

// Ready reports whether the Client has accepted a first set of rules (an
// empty one included). It stays true once it is, through reconnections:
// the rules in force stay until others replace them.
func (c *Client) Ready() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// ReadyC returns a channel that is closed when Ready becomes true.
func (c *Client) ReadyC() <-chan struct{} { return c.ready }

// accepted are the rules in force and the version_info they came with.
type accepted struct {
	rules   *config.Rules
	version string
}

// Rules returns the rules in force: the last set accepted, nil before the
// first.
func (c *Client) Rules() *config.Rules {
	if a := c.rules.Load(); a != nil {
		return a.rules
	}
	return nil
}

// Version returns the version_info of the rules in force, "" before the
// first. A management server may also send "" as a version: use Ready, not
// Version, to know whether rules have arrived.
func (c *Client) Version() string {
	if a := c.rules.Load(); a != nil {
		return a.version
	}
	return ""
}

// run opens the stream again and again, with backoff, until ctx ends.
func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	st := state{hold: newBackoff(c.o.MinBackoff, c.o.MaxBackoff)}
	wait := newBackoff(c.o.MinBackoff, c.o.MaxBackoff) // failures in a row
	for {
		progressed, err := c.stream(ctx, &st)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			wait.Reset()
		}
		d := wait.NextBackOff()
		c.log.Warn("xds: stream ended, reconnecting", "error", err, "in", d)
		if sleep(ctx, d) != nil {
			return
		}
	}
}

// newBackoff returns the delays between attempts, cenkalti/backoff's
// exponential backoff: lo doubled at each, at most hi, less up to a fifth
// at random so that many instances do not reconnect together. The library
// draws within ±RandomizationFactor of its interval, so an interval of
// 0.9 of the delay drawn within ±0.111 gives 0.8 to 1 of it (a little
// under 1/9, so that the library's rounding never passes the delay).
// Reset starts again from lo.
func newBackoff(lo, hi time.Duration) *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     lo - lo/10,
		RandomizationFactor: 0.111,
		Multiplier:          2,
		MaxInterval:         hi - hi/10,
	}
	b.Reset()
	return b
}

// state is what a Client remembers across responses and streams.
type state struct {
	version string // last ACKed version_info
	// nacks counts the responses refused in a row, whatever their
	// versions, across streams; an accepted one resets it. A management
	// server may send a refused set again at once (go-control-plane's
	// snapshot cache does, since the NACK carries an older version), or
	// another bad set under a new version: from the second refusal in a
	// row, the Client holds its NACK back for a backoff, so that the two
	// do not spin.
	nacks int
	// hold is the backoff of a NACK held back: each refusal in a row from
	// the second moves it on, held or not; an accepted set resets it.
	hold *backoff.ExponentialBackOff
	// foreign are the unsubscribed types already logged, at most
	// maxForeign of them.
	foreign map[string]bool
}

// maxForeign bounds how many unsubscribed types a Client remembers having
// logged; responses of further types are dropped without a word.
const maxForeign = 16

// stream runs one ADS stream until it fails or ctx ends, subscribing with
// st.version, the last ACKed version, and updating st. progressed reports
// whether the server sent any response on it.
//
// It ACKs or NACKs each response at once, except from the second refusal
// in a row: that NACK is held back for a backoff, during which the stream
// is still read, so that a later response replaces it (a good one is ACKed
// at once, a bad one is NACKed in its place when the backoff ends). A
// server that waits for each NACK before sending anything (as
// go-control-plane's does) can then send a corrected set only when the
// held NACK goes out.
func (c *Client) stream(ctx context.Context, st *state) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.o.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.o.Headers))
	}
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("open stream: %w", err)
	}
	if err := s.Send(c.request(st.version, "", nil)); err != nil {
		return false, fmt.Errorf("subscribe: %w", err)
	}
	resps, failed := make(chan *discoveryv3.DiscoveryResponse), make(chan error, 1)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // cancel ends the stream, and so receive
	wg.Go(func() { receive(ctx, s, resps, failed) })
	var (
		held  *discoveryv3.DiscoveryRequest // a NACK held back
		timer *time.Timer                   // fires when held is due
		due   <-chan time.Time              // timer's channel while held is set
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var req *discoveryv3.DiscoveryRequest
		select {
		case <-ctx.Done():
			return progressed, ctx.Err()
		case err := <-failed:
			return progressed, fmt.Errorf("receive: %w", err)
		case <-due:
			req, held, due = held, nil, nil
		case resp := <-resps:
			progressed = true
			req = c.handle(resp, st)
			var d time.Duration // how long a NACK held now waits
			if req.GetErrorDetail() != nil && st.nacks > 1 {
				d = st.hold.NextBackOff()
			}
			switch {
			case req == nil: // an unsubscribed type: nothing to answer
				continue
			case req.GetErrorDetail() == nil: // an ACK supersedes a held NACK
				held, due = nil, nil
			case held != nil: // a later NACK replaces the held one, when due
				held, req = req, nil
			case st.nacks > 1:
				held, req = req, nil
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d) // since Go 1.23, no stale tick remains
				}
				due = timer.C
				c.log.Warn("xds: rules refused again, NACK held back", "version", resp.GetVersionInfo(), "refused", st.nacks)
			}
		}
		if req == nil {
			continue
		}
		if err := s.Send(req); err != nil {
			return progressed, fmt.Errorf("send: %w", err)
		}
	}
}

// receive passes the responses of s to resps until s fails, then passes the
// error to failed, which must have room for it. It returns when ctx ends.
func receive(ctx context.Context, s grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse],
	resps chan<- *discoveryv3.DiscoveryResponse, failed chan<- error) {
	for {
		resp, err := s.Recv()
		if err != nil {
			failed <- err
			return
		}
		select {
		case resps <- resp:
		case <-ctx.Done():
			return
		}
	}
}

// sleep waits for d, or returns ctx's error if ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// handle applies one response and returns the request that answers it: an
// ACK that moves st.version to the response's, a NACK that keeps it, or nil
// for a response of a type the Client did not subscribe to. Answering such
// a response with a request of its type would, on ADS, subscribe to that
// type: the Client drops it.
func (c *Client) handle(resp *discoveryv3.DiscoveryResponse, st *state) *discoveryv3.DiscoveryRequest {
	if t := resp.GetTypeUrl(); t != TypeURL {
		c.ignore(t, st)
		return nil
	}
	rules, err := Compile(resp.GetResources(), c.o.ConfigOptions...)
	if err != nil {
		st.nacks++
		if c.o.OnReject != nil {
			c.o.OnReject(resp.GetVersionInfo(), err)
		}
		return c.nack(resp, st.version, err)
	}
	st.nacks = 0
	st.hold.Reset()
	c.rules.Store(&accepted{rules, resp.GetVersionInfo()})
	if c.o.OnRules != nil {
		c.o.OnRules(rules)
	}
	if !c.Ready() {
		close(c.ready) // only this goroutine closes it
	}
	st.version = resp.GetVersionInfo()
	c.log.Info("xds: rules accepted", "version", st.version, "resources", len(resp.GetResources()),
		"domains", len(rules.Domains()))
	return c.request(st.version, resp.GetNonce(), nil)
}

// ignore logs, once per type, a response of type t that the Client did not
// subscribe to.
func (c *Client) ignore(t string, st *state) {
	if st.foreign[t] || len(st.foreign) >= maxForeign {
		return
	}
	if st.foreign == nil {
		st.foreign = make(map[string]bool)
	}
	st.foreign[t] = true
	c.log.Warn("xds: ignored responses of an unsubscribed type", "type", t, "subscribed", TypeURL)
}

// maxDetail bounds the bytes of a NACK's error message: past it, the
// message is cut (the log has all of it).
const maxDetail = 16 << 10

// nack logs err and returns the NACK of resp, keeping version.
func (c *Client) nack(resp *discoveryv3.DiscoveryResponse, version string, err error) *discoveryv3.DiscoveryRequest {
	c.log.Error("xds: rules refused", "version", resp.GetVersionInfo(), "error", err)
	msg := err.Error()
	if len(msg) > maxDetail {
		msg = strings.ToValidUTF8(msg[:maxDetail], "") + "\n... (cut)"
	}
	return c.request(version, resp.GetNonce(), &statuspb.Status{
		Code:    int32(codes.InvalidArgument),
		Message: msg,
	})
}

// request builds a request for every RateLimitConfig (a wildcard
// subscription): the first of a stream, an ACK or a NACK.
func (c *Client) request(version, nonce string, detail *statuspb.Status) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{
		VersionInfo:   version,
		Node:          c.node,
		TypeUrl:       TypeURL,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	}
}
