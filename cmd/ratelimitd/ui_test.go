package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// hostile is a request value that markup would turn into an element
// running a script: the page must show it as text.
const hostile = `<img src=x onerror=alert(1)>`

// uiRules are the rules of the browser test; one rule's value is hostile.
const uiRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: fixed_window}
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 600}
    descriptors:
      - key: path
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 4}
  - key: user
    value: "` + hostile + `"
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: exports
    rate_limit: {algorithm: concurrency, window: 5m, requests_per_unit: 3}
`

// browserPath returns the Chromium to drive: Debian's chromium, or
// another on PATH. Without one the test skips, and fails under CI=true,
// where .ci/install-chromium should have installed it.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH: bash .ci/install-chromium installs it")
	}
	t.Skip("no chromium on PATH (bash .ci/install-chromium installs it)")
	return ""
}

// traffic sends /json decisions to addr until ctx is done, at most n:
// within and over the limits of uiRules, the hostile value among them.
func traffic(ctx context.Context, addr string, n int) {
	bodies := []string{
		`{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`,
		`{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.2"}]}]}`,
		`{"domain": "edge", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}, {"key": "path", "value": "/v1/search"}]}]}`,
		`{"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "` + strings.ReplaceAll(hostile, `"`, `\"`) + `"}]}]}`,
		`{"domain": "edg", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`,
		`{"domain": "` + strings.ReplaceAll(hostile, `"`, `\"`) + `", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`,
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := range n {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req, err := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/json", strings.NewReader(bodies[i%len(bodies)]))
		if err != nil {
			return
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// pageErrors collects what the page reports as wrong: uncaught
// exceptions, console errors (a failed request of the page among them),
// and dialogs, which only a script injected through a value would open.
type pageErrors struct {
	mu   sync.Mutex
	errs []string
}

func (p *pageErrors) add(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, s)
}

func (p *pageErrors) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errs...)
}

// watch collects the page errors of the chromedp context ctx until it is
// done; wait waits for the collecting goroutine to end.
func (p *pageErrors) watch(t *testing.T, ctx context.Context) (wait func()) {
	t.Helper()
	messages := chromedp.Console(ctx)
	if err := chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			p.add("dialog: " + d.Message)
		}
	}); err != nil {
		t.Fatalf("listening to the page: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			// The browser asks /favicon.ico on its own, not the page.
			favicon := m.Source == "network" && strings.HasSuffix(m.URL, "/favicon.ico")
			if (m.IsException() || m.Type == chromedp.ConsoleError) && !favicon {
				p.add(m.String() + " (" + m.URL + ")")
			}
		}
	}()
	return func() { <-done }
}

// TestUIInBrowser drives headless Chromium over the page at /ui/ of a
// daemon under traffic: it loads without a JavaScript error or a failed
// poll, says the server is ready, shows the rules and their rates, shows
// a hostile value as text, shows the hot key the traffic made (as its
// digest) and finds it by its value, lists the domains requested that
// have no rules (a typo, and a hostile one, as text), answers the
// explain form, and leaves a screenshot in the test's artifacts.
func TestUIInBrowser(t *testing.T) {
	browser := browserPath(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, uiRules)
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, tokens, "ops:"+uiToken+"\n")
	d := startDaemon(t, "--config", path, "--admin-addr", "127.0.0.1:0", "--admin-token-file", tokens)
	putUIOverrides(t, d.adminAddr)

	tctx, stopTraffic := context.WithCancel(context.Background())
	trafficDone := make(chan struct{})
	go func() { defer close(trafficDone); traffic(tctx, d.httpAddr, 20_000) }()
	t.Cleanup(func() { stopTraffic(); <-trafficDone })

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.WindowSize(1400, 1000))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()
	var errs pageErrors
	wait := errs.watch(t, ctx)
	defer wait()
	defer cancel() // before wait: ends the watch

	ui := "http://" + d.adminAddr + "/ui/"
	run := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, a); err != nil {
			t.Fatalf("%s: %v; page errors: %q", what, err, errs.list())
		}
	}
	run("loading the page", chromedp.Navigate(ui))
	run("watching the polls", watchPollErrors())
	run("waiting for the status", pollTrue(`document.querySelector('#status > span') !== null`))
	if st := text(t, ctx, "#status > span"); st != "ready" {
		t.Errorf("the status says %q, want ready (all of it: %q)", st, text(t, ctx, "#status"))
	}
	// The rules, and rates for the rules the traffic hits: refusals too.
	run("waiting for the rules", chromedp.WaitVisible(`#rules .rule`))
	run("waiting for the rates", chromedp.Steps(
		chromedp.WaitVisible(`#rates .chart[data-rule="remote_address"] path.refused`),
		pollTrue(`document.querySelector('#rates .chart[data-rule="tenant=acme.path"]') !== null`),
	))
	rules := text(t, ctx, "#rules")
	for _, want := range []string{"remote_address", "5 / second fixed_window", "tenant=acme", "burst 4", "shadow", "user=" + hostile, "3 at once, lease 5m0s concurrency"} {
		if !strings.Contains(rules, want) {
			t.Errorf("the rules pane %q does not show %q", rules, want)
		}
	}
	rates := text(t, ctx, "#rates")
	if !strings.Contains(rates, "refused") || !strings.Contains(rates, "admitted") {
		t.Errorf("the rates pane %q shows no rates", rates)
	}
	checkHotkeys(t, ctx, d.adminAddr)
	checkFindValue(t, ctx, d.adminAddr, run)
	checkUnknownDomains(t, ctx)
	checkExplain(t, ctx, d.adminAddr, run)
	checkOverridesPane(t, ctx)
	checkPolls(t, ctx)
	// The hostile value, in the rules and in the explanation, is text: no
	// element came of it.
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('img').length`)); err != nil || n != 0 {
		t.Errorf("the page has %d img elements (%v), want none: a value became markup", n, err)
	}

	// A field the page expects and the server does not send shows as
	// undefined, a number it cannot read as NaN.
	if body := text(t, ctx, "body"); strings.Contains(body, "undefined") || strings.Contains(body, "NaN") {
		t.Errorf("the page shows undefined or NaN: %q", body)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	saveArtifact(t, "ui.png", shot)
	if e := errs.list(); len(e) > 0 {
		t.Errorf("the page reported errors: %q", e)
	}
}

// checkHotkeys checks that the daemon serves GET /hotkeys and that the
// pane's "Most refused" table shows the remote_address values that the
// traffic sends over their limit, as /hotkeys digests them by default
// (under a key of the daemon's: GET /hotkeys?value= says how a value
// shows), and not as their unkeyed SHA-256.
func checkHotkeys(t *testing.T, ctx context.Context, admin string) {
	t.Helper()
	if code, body := get(t, nil, "http://"+admin+"/hotkeys"); code != http.StatusOK {
		t.Fatalf("GET /hotkeys = %d %.200q, want 200", code, body)
	}
	for _, value := range []string{"10.0.0.1", "10.0.0.2"} { // over 5 a second each
		digest := digestOf(t, admin, value)
		sum := sha256.Sum256([]byte(value))
		if unkeyed := hex.EncodeToString(sum[:8]); !strings.HasPrefix(digest, "hmac:") || strings.Contains(digest, unkeyed) {
			t.Errorf("%s shows as %s, want hmac: and not its SHA-256 %s", value, digest, unkeyed)
		}
		mostRefused := `[...document.querySelectorAll('#hotkeys h3')].some((h) => h.textContent === 'Most refused' &&
			h.parentElement.textContent.includes(` + strconv.Quote("remote_address="+digest) + `))`
		if err := chromedp.Do(ctx, pollTrue(mostRefused)); err != nil {
			t.Errorf("the hot keys pane shows no remote_address=%s (%s) among the most refused: %v (pane: %q)", digest, value, err, text(t, ctx, "#hotkeys"))
		}
	}
}

// digestOf returns how the daemon's /hotkeys shows value.
func digestOf(t *testing.T, admin, value string) string {
	t.Helper()
	code, body := get(t, nil, "http://"+admin+"/hotkeys?value="+url.QueryEscape(value))
	var v struct{ Lookup struct{ Value string } }
	if err := json.Unmarshal([]byte(body), &v); code != http.StatusOK || err != nil || v.Lookup.Value == "" {
		t.Fatalf("GET /hotkeys?value=%s = %d %.200q (%v), want how it shows", value, code, body, err)
	}
	return v.Lookup.Value
}

// checkFindValue types an address the traffic refuses into the hot keys'
// find form and checks the answer: how it shows, and its counter among
// the most refused.
func checkFindValue(t *testing.T, ctx context.Context, admin string, run func(string, chromedp.Action[chromedp.Void])) {
	t.Helper()
	digest := digestOf(t, admin, "10.0.0.2")
	run("finding a value", chromedp.Steps(
		chromedp.SendKeys(`#hotkeys-value`, "10.0.0.2"),
		chromedp.Click(`#hotkeys-find-submit`),
		pollTrue(`document.querySelector('#hotkeys-found').textContent.includes('shows as')`),
	))
	got := text(t, ctx, "#hotkeys-found")
	for _, want := range []string{"10.0.0.2 shows as " + digest, "Most refused", "remote_address=" + digest} {
		if !strings.Contains(got, want) {
			t.Errorf("the find answer %q does not show %q", got, want)
		}
	}
	if strings.Contains(got, "10.0.0.1") {
		t.Errorf("the find answer for 10.0.0.2 shows another address's counter: %q", got)
	}
}

// checkUnknownDomains checks that the page lists the domains the traffic
// requests that have no rules, the hostile one as text.
func checkUnknownDomains(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := chromedp.Do(ctx, pollTrue(`document.querySelectorAll('#unknown-domains li').length === 2`)); err != nil {
		t.Fatalf("the page lists no two domains without rules: %v (%q)", err, text(t, ctx, "#unknown-domains"))
	}
	got := text(t, ctx, "#unknown-domains")
	for _, want := range []string{"no rules", "answered OK", "edg", hostile, "requests, last at"} {
		if !strings.Contains(got, want) {
			t.Errorf("the domains without rules %q do not show %q", got, want)
		}
	}
}

// checkExplain checks that the daemon serves POST /explain, then fills
// the explain form by clicking the rule whose value is hostile, submits
// it and checks the answer: the request's entries, as text, the rule and
// a decision.
func checkExplain(t *testing.T, ctx context.Context, admin string, run func(string, chromedp.Action[chromedp.Void])) {
	t.Helper()
	resp, err := http.Post("http://"+admin+"/explain", "application/json",
		strings.NewReader(`{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`))
	if err != nil {
		t.Fatalf("POST /explain: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /explain = %d, want 200", resp.StatusCode)
	}
	run("explaining", chromedp.Steps(
		chromedp.Click(`#rules .rule[title="user=`+hostile+`"]`),
		pollTrue(`document.querySelector('#explain-body').value.includes('onerror')`),
		chromedp.Click(`#explain-submit`),
		pollTrue(`document.querySelector('#explain').textContent !== '' && !document.querySelector('#explain').textContent.includes('asking')`),
	))
	got := text(t, ctx, "#explain")
	for _, want := range []string{"user=" + hostile, "sliding_window", "limits from the runtime override v1 by ops: " + hostile} {
		if !strings.Contains(got, want) {
			t.Errorf("the explain pane %q does not show %q", got, want)
		}
	}
	if !strings.Contains(got, "OK") && !strings.Contains(got, "OVER_LIMIT") {
		t.Errorf("the explain pane %q shows no decision", got)
	}
}

// uiToken is the token of TestUIInBrowser's --admin-token-file.
const uiToken = "ops-0123456789abcdef"

// putUIOverrides sets two runtime overrides through the daemon's API:
// one of the hostile user, with the rule's limit (the traffic's refusals
// stay as they were) and a hostile reason, and one unmatched.
func putUIOverrides(t *testing.T, admin string) {
	t.Helper()
	quoted, err := json.Marshal(hostile)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`{"domain": "edge", "entries": [{"key": "user", "value": ` + string(quoted) + `}], "limits": [{"requests_per_unit": 3, "unit": "minute"}], "reason": ` + string(quoted) + `}`,
		`{"domain": "edge", "entries": [{"key": "nothing", "value": "x"}], "limits": [{"requests_per_unit": 7, "window": "90s"}], "reason": "for later", "expires_at": "2099-01-01T00:00:00Z"}`,
	} {
		req, err := http.NewRequest("PUT", "http://"+admin+"/v1/overrides", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+uiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT /v1/overrides = %d, want 200", resp.StatusCode)
		}
	}
}

// checkOverridesPane checks that the page lists the runtime overrides: the
// hostile reason as text, the unmatched one marked so.
func checkOverridesPane(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := chromedp.Do(ctx, pollTrue(`document.querySelectorAll('#overrides tbody tr').length === 2`)); err != nil {
		t.Fatalf("the page lists no two overrides: %v (%q)", err, text(t, ctx, "#overrides"))
	}
	got := text(t, ctx, "#overrides")
	for _, want := range []string{"user=" + hostile, "3 / minute", "ops", "nothing=xunmatched", "7 / 90s", "2099-01-01T00:00:00Z", "never"} {
		if !strings.Contains(got, want) {
			t.Errorf("the overrides pane %q does not show %q", got, want)
		}
	}
}

// watchPollErrors has the page keep, in window.pollErrors, every error
// its polls print in #updated from now on, so that one a later poll
// clears is still seen.
func watchPollErrors() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
			window.pollErrors = [];
			const updated = document.querySelector('#updated');
			const note = () => { const e = updated.querySelector('.error'); if (e) window.pollErrors.push(e.textContent); };
			note();
			new MutationObserver(note).observe(updated, { childList: true, subtree: true, characterData: true });
			return true;
		})()`))
		return err
	})
}

// checkPolls checks that the page has polled, and that no poll printed
// an error in #updated since watchPollErrors.
func checkPolls(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := chromedp.Do(ctx, pollTrue(`document.querySelector('#updated').textContent.includes('updated')`)); err != nil {
		t.Errorf("the page never says when it polled: %v", err)
	}
	errs, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.pollErrors.concat(
		[...document.querySelectorAll('#updated .error')].map((e) => e.textContent))`))
	if err != nil {
		t.Fatalf("reading the poll errors: %v", err)
	}
	if len(errs) > 0 {
		t.Errorf("the page's polls failed: %q", errs)
	}
}

// pollTrue waits until the JavaScript expression is true.
func pollTrue(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
		return err
	})
}

// text returns the text of the element sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(sel))
	if err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

// saveArtifact writes data as name in the test's artifact directory
// (kept with go test -artifacts), and in $TEST_ARTIFACTS when set.
func saveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("TEST_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("TEST_ARTIFACTS: %v", err)
		}
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatalf("writing %s: %v", p, err)
		}
		t.Logf("screenshot: %s", p)
	}
}
