package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/server/admin"
	"github.com/ratelimitd/ratelimitd/server/overrides"
)

// maxAnswerBytes bounds the answer the overrides command reads from the
// daemon: a listing of --max-overrides overrides of MaxBodyBytes each
// could be larger, and is refused whole rather than cut.
const maxAnswerBytes = 64 << 20

// defaultAdminTimeout bounds one call of the overrides command.
const defaultAdminTimeout = 10 * time.Second

// overridesUsage is the overrides command's synopsis.
const overridesUsage = `usage: ratelimitd overrides list   --admin URL [--token-file FILE] [--domain D]
       ratelimitd overrides set    --admin URL --token-file FILE --domain D --entry KEY=VALUE... --limit N/UNIT... --reason TEXT [--expires-at T | --ttl D]
       ratelimitd overrides delete --admin URL --token-file FILE --domain D --entry KEY=VALUE... [--reason TEXT]
       ratelimitd overrides reset  --admin URL --token-file FILE --domain D --entry KEY=VALUE... [--reason TEXT]
Speaks a daemon's runtime overrides API (/v1/overrides, /v1/reset) on its --admin-addr, and prints its JSON answer.`

// overridesCommand runs "ratelimitd overrides VERB [flags]": list, set,
// delete or reset runtime overrides through a daemon's admin HTTP API,
// printing the daemon's JSON answer, indented. It exits 0 on a 2xx
// answer, 1 when the daemon answers otherwise (its message on stderr) or
// cannot be reached, 2 on bad usage.
func overridesCommand(ctx context.Context, args []string, lookup lookupEnv, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, overridesUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			return exitError{0}
		}
		return exitError{2}
	}
	verb := args[0]
	switch verb {
	case "list", "set", "delete", "reset":
	default:
		fmt.Fprintf(stderr, "ratelimitd overrides: unknown command %q (want list, set, delete or reset)\n%s\n", verb, overridesUsage)
		return exitError{2}
	}
	fs := flag.NewFlagSet("ratelimitd overrides "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o overridesFlags
	o.define(fs, verb)
	fs.Usage = func() {
		fmt.Fprintln(stderr, overridesUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitError{0}
		}
		return exitError{2}
	}
	if _, err := setFromEnv(fs, lookup); err != nil {
		fmt.Fprintln(stderr, "ratelimitd overrides:", err)
		return exitError{2}
	}
	req, err := o.request(verb, fs.Args(), time.Now())
	if err == nil {
		req.token, err = o.token(verb)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd overrides %s: %v\n", verb, err)
		return exitError{2}
	}
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	answer, err := req.send(cctx, o.admin)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimitd overrides %s: %v\n", verb, err)
		return exitError{1}
	}
	var out bytes.Buffer
	if json.Indent(&out, answer, "", "  ") != nil {
		out.Reset()
		out.Write(answer) // not JSON: as it came
	}
	if !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		out.WriteByte('\n')
	}
	_, err = stdout.Write(out.Bytes())
	return err
}

// overridesFlags are the overrides command's flags; a verb defines those
// it takes.
type overridesFlags struct {
	admin, tokenFile, domain, reason string
	entries                          []overrides.Entry
	limits                           []overrides.Limit
	// One more limit, from --requests with --unit or --window.
	requests    uint64
	unit        string
	window      time.Duration
	algorithm   string
	burst       uint64
	name        string
	expiresAt   string
	ttl         time.Duration
	timeout     time.Duration
	requestsSet bool
}

func (o *overridesFlags) define(fs *flag.FlagSet, verb string) {
	fs.StringVar(&o.admin, "admin", "", "base `URL` of the daemon's admin HTTP listener (--admin-addr), such as http://127.0.0.1:9091")
	fs.StringVar(&o.tokenFile, "token-file", "", "`file` of a bearer token of the daemon's --admin-token-file: its first token (a line may be name:token)")
	fs.DurationVar(&o.timeout, "timeout", defaultAdminTimeout, "longest the call may take")
	if verb == "list" {
		fs.StringVar(&o.domain, "domain", "", "list only the overrides of this `domain`")
		return
	}
	fs.StringVar(&o.domain, "domain", "", "the descriptor's `domain`")
	fs.Func("entry", "one `key=value` entry of the descriptor, in order (repeat it for each)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q: want key=value", s)
		}
		o.entries = append(o.entries, overrides.Entry{Key: k, Value: v})
		return nil
	})
	if verb == "set" {
		fs.StringVar(&o.reason, "reason", "", "why the override is set, for the audit log (required)")
	} else {
		fs.StringVar(&o.reason, "reason", "", "why, for the audit log")
	}
	if verb != "set" {
		return
	}
	fs.Func("limit", "one limit, `N/UNIT` (1000/minute) or N/WINDOW (100/30s), optionally followed by ,algorithm=A ,burst=B ,name=X;\n"+
		"repeat it for each limit", func(s string) error {
		l, err := parseLimit(s)
		if err == nil {
			o.limits = append(o.limits, l)
		}
		return err
	})
	fs.Func("requests", "one more limit of `N` requests per --unit or --window", func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		o.requests, o.requestsSet = n, true
		return err
	})
	fs.StringVar(&o.unit, "unit", "", "the `unit` of --requests: second, minute, hour, day...")
	fs.DurationVar(&o.window, "window", 0, "the window of --requests, a `duration`, instead of --unit")
	fs.StringVar(&o.algorithm, "algorithm", "", "the `algorithm` of every limit that names none (empty: the daemon's --default-algorithm)")
	fs.Uint64Var(&o.burst, "burst", 0, "the `burst` of every token_bucket or gcra limit that names none")
	fs.StringVar(&o.name, "name", "", "the `name` of the --requests limit")
	fs.StringVar(&o.expiresAt, "expires-at", "", "when the override lapses, RFC 3339 `time` (2026-12-01T00:00:00Z)")
	fs.DurationVar(&o.ttl, "ttl", 0, "lapse the override this `duration` from now, instead of --expires-at")
}

// parseLimit reads --limit: N/UNIT or N/WINDOW (a Go duration), then
// options ",algorithm=A", ",burst=B", ",name=X".
func parseLimit(s string) (overrides.Limit, error) {
	var l overrides.Limit
	head, opts, hasOpts := strings.Cut(s, ",")
	n, per, ok := strings.Cut(head, "/")
	if !ok || per == "" {
		return l, fmt.Errorf("%q: want N/UNIT or N/WINDOW, such as 1000/minute or 100/30s", s)
	}
	v, err := strconv.ParseUint(n, 10, 32)
	if err != nil {
		return l, fmt.Errorf("%q: requests %q: want a whole number up to %d", s, n, uint32(1<<32-1))
	}
	l.RequestsPerUnit = uint32(v)
	if _, err := time.ParseDuration(per); err == nil {
		l.Window = per
	} else {
		l.Unit = per
	}
	if !hasOpts {
		return l, nil
	}
	for opt := range strings.SplitSeq(opts, ",") {
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "algorithm":
			l.Algorithm = v
		case "burst":
			b, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return l, fmt.Errorf("%q: burst %q: want a whole number up to %d", s, v, uint32(1<<32-1))
			}
			l.Burst = uint32(b)
		case "name":
			l.Name = v
		default:
			return l, fmt.Errorf("%q: unknown option %q (want algorithm=, burst= or name=)", s, opt)
		}
	}
	return l, nil
}

// An adminRequest is one call of the admin API.
type adminRequest struct {
	method, path string
	query        url.Values
	body         any // JSON-encoded, or nil
	token        string
}

// setBody is the body of PUT /v1/overrides: what an operator sends of an
// overrides.Override (the daemon sets its version, set_by and set_at).
type setBody struct {
	Domain    string            `json:"domain"`
	Entries   []overrides.Entry `json:"entries"`
	Limits    []overrides.Limit `json:"limits"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	Reason    string            `json:"reason"`
}

// descriptorBody is the body of DELETE /v1/overrides and POST /v1/reset.
type descriptorBody struct {
	Domain  string            `json:"domain"`
	Entries []overrides.Entry `json:"entries"`
	Reason  string            `json:"reason,omitempty"`
}

// request checks the flags of verb and builds its call; now is the
// clock --ttl counts from.
func (o *overridesFlags) request(verb string, rest []string, now time.Time) (*adminRequest, error) {
	switch {
	case len(rest) > 0:
		return nil, fmt.Errorf("unexpected argument %q (flags only)", rest[0])
	case o.admin == "":
		return nil, errors.New("--admin (or RATELIMITD_ADMIN) is required: the daemon's admin URL")
	case o.timeout <= 0:
		return nil, errors.New("--timeout must be positive")
	}
	if verb == "list" {
		q := url.Values{}
		if o.domain != "" {
			q.Set("domain", o.domain)
		}
		return &adminRequest{method: http.MethodGet, path: "/v1/overrides", query: q}, nil
	}
	switch {
	case o.domain == "":
		return nil, errors.New("--domain is required")
	case len(o.entries) == 0:
		return nil, errors.New("--entry key=value is required (repeat it for each entry of the descriptor)")
	}
	d := descriptorBody{Domain: o.domain, Entries: o.entries, Reason: o.reason}
	switch verb {
	case "delete":
		return &adminRequest{method: http.MethodDelete, path: "/v1/overrides", body: d}, nil
	case "reset":
		return &adminRequest{method: http.MethodPost, path: "/v1/reset", body: d}, nil
	}
	limits, err := o.allLimits()
	if err != nil {
		return nil, err
	}
	body := setBody{Domain: o.domain, Entries: o.entries, Limits: limits, Reason: o.reason}
	switch {
	case o.reason == "":
		return nil, errors.New("--reason is required: say why, for the audit log")
	case o.expiresAt != "" && o.ttl != 0:
		return nil, errors.New("--expires-at and --ttl exclude each other")
	case o.ttl < 0:
		return nil, errors.New("--ttl must be positive")
	case o.ttl > 0:
		t := now.Add(o.ttl).UTC()
		body.ExpiresAt = &t
	case o.expiresAt != "":
		t, err := time.Parse(time.RFC3339, o.expiresAt)
		if err != nil {
			return nil, fmt.Errorf("--expires-at %q: want an RFC 3339 time, such as 2026-12-01T00:00:00Z", o.expiresAt)
		}
		body.ExpiresAt = &t
	}
	return &adminRequest{method: http.MethodPut, path: "/v1/overrides", body: body}, nil
}

// allLimits returns the limits of --limit, then of --requests, with
// --algorithm and --burst filled in where a limit names none.
func (o *overridesFlags) allLimits() ([]overrides.Limit, error) {
	limits := o.limits
	switch {
	case o.requestsSet && (o.unit == "") == (o.window == 0):
		return nil, errors.New("--requests needs --unit or --window (one of them)")
	case !o.requestsSet && (o.unit != "" || o.window != 0 || o.name != ""):
		return nil, errors.New("--unit, --window and --name go with --requests")
	case o.requestsSet:
		l := overrides.Limit{RequestsPerUnit: uint32(o.requests), Unit: o.unit, Name: o.name}
		if o.window != 0 {
			l.Window = o.window.String()
		}
		limits = append(limits, l)
	}
	if len(limits) == 0 {
		return nil, errors.New("a limit is required: --limit N/UNIT (such as 1000/minute), or --requests N with --unit or --window")
	}
	if o.burst > 1<<32-1 {
		return nil, fmt.Errorf("--burst %d over the maximum %d", o.burst, uint32(1<<32-1))
	}
	for i := range limits {
		if limits[i].Algorithm == "" {
			limits[i].Algorithm = o.algorithm
		}
		if limits[i].Burst == 0 {
			limits[i].Burst = uint32(o.burst)
		}
	}
	return limits, nil
}

// token returns the first token of --token-file, read as the daemon
// reads its --admin-token-file. Only list may go without one.
func (o *overridesFlags) token(verb string) (string, error) {
	if o.tokenFile == "" {
		if verb == "list" {
			return "", nil
		}
		return "", fmt.Errorf("--token-file (or RATELIMITD_TOKEN_FILE) is required to %s", verb)
	}
	tok, err := admin.FirstToken(o.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return tok, nil
}

// send makes the call on the admin API at base and returns the answer's
// body, or an error with the daemon's message when it is not a 2xx.
func (r *adminRequest) send(ctx context.Context, base string) ([]byte, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--admin %q: want http://host:port or https://host:port", base)
	}
	u = u.JoinPath(r.path)
	u.RawQuery = r.query.Encode()
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s: reading the answer: %w", r.method, u.Redacted(), err)
	case len(answer) > maxAnswerBytes:
		return nil, fmt.Errorf("%s %s: the answer is over %d bytes", r.method, u.Redacted(), maxAnswerBytes)
	case resp.StatusCode/100 == 2:
		return answer, nil
	}
	msg := strings.TrimSpace(string(answer))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(answer, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return nil, fmt.Errorf("%s %s: %s: %s", r.method, u.Redacted(), resp.Status, msg)
}
