package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The Dockerfile cannot be built here (no Docker daemon), so these tests
// check what can go wrong in it without one: that its RATELIMITD_*
// variables are flags ratelimitd reads, that its default rules load, that
// .dockerignore keeps what the build needs, and, by running its go build
// command, that the binary is static.

const repoRoot = "../.."

// flagEnvNames returns the environment variable of every flag, from the
// usage that parseFlags prints, so that it follows the flags as they are
// added.
func flagEnvNames(t *testing.T) map[string]bool {
	t.Helper()
	var usage bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, noEnv, &usage); !errors.Is(err, exitError{0}) {
		t.Fatalf("parseFlags(-h) = %v, want exit status 0", err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(usage.String(), -1) {
		names[envName(m[1])] = true
	}
	if !names["RATELIMITD_CONFIG"] || !names["RATELIMITD_GRPC_ADDR"] {
		t.Fatalf("found the flags %v in the usage, want at least --config and --grpc-addr:\n%s", names, usage.String())
	}
	return names
}

// parseEnv runs parseFlags with no arguments and the environment vars,
// failing the test on error. Without RATELIMITD_CONFIG in vars, it sets
// one, since parseFlags requires rules.
func parseEnv(t *testing.T, vars map[string]string) *flags {
	t.Helper()
	all := map[string]string{"RATELIMITD_CONFIG": "/base/rules.yaml"}
	for k, v := range vars {
		all[k] = v
	}
	var stderr bytes.Buffer
	f, err := parseFlags(nil, env(all), &stderr)
	if err != nil {
		t.Fatalf("parseFlags with the environment %v: %v: %s", vars, err, stderr.String())
	}
	return f
}

// A dockerStage is one FROM of a Dockerfile and its instructions.
type dockerStage struct {
	name string // after AS, or ""
	ins  []dockerInstruction
}

// A dockerInstruction is one instruction, its lines joined.
type dockerInstruction struct {
	line int    // where it starts
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// parseDockerfile splits a Dockerfile into stages: comments and blank lines
// are dropped, continued lines joined.
func parseDockerfile(t *testing.T, file string) []dockerStage {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var (
		stages  []dockerStage
		pending strings.Builder
		start   int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if pending.Len() == 0 {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending.WriteString(cont + " ")
			continue
		}
		pending.WriteString(line)
		cmd, args, _ := strings.Cut(pending.String(), " ")
		pending.Reset()
		in := dockerInstruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			st := dockerStage{}
			words := shellWords(t, in.args)
			if i := slices.IndexFunc(words, func(w string) bool { return strings.EqualFold(w, "AS") }); i >= 0 && i+1 < len(words) {
				st.name = words[i+1]
			}
			stages = append(stages, st)
		}
		if len(stages) == 0 {
			if in.cmd != "ARG" {
				t.Fatalf("%s:%d: %s before the first FROM", file, in.line, in.cmd)
			}
			continue
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	if pending.Len() > 0 {
		t.Fatalf("%s ends in a continued line", file)
	}
	if len(stages) == 0 {
		t.Fatalf("%s has no FROM", file)
	}
	return stages
}

// shellWords splits s into words as a shell does, with single and double
// quotes and backslash escapes; it expands nothing.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var (
		words []string
		w     strings.Builder
		inW   bool
		quote rune
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote == '\'':
			w.WriteRune(c)
		case c == '\\' && i+1 < len(rs) && (quote == 0 || strings.ContainsRune(`"\$`, rs[i+1])):
			i++
			w.WriteRune(rs[i])
			inW = true
		case quote == '"':
			w.WriteRune(c)
		case c == '"' || c == '\'':
			quote, inW = c, true
		case c == ' ' || c == '\t':
			if inW {
				words = append(words, w.String())
				w.Reset()
				inW = false
			}
		default:
			w.WriteRune(c)
			inW = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced %c in %q", quote, s)
	}
	if inW {
		words = append(words, w.String())
	}
	return words
}

// env returns the variables that the stage's ENV instructions set.
func (st dockerStage) env(t *testing.T) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, in := range st.ins {
		if in.cmd != "ENV" {
			continue
		}
		words := shellWords(t, in.args)
		if len(words) > 0 && !strings.Contains(words[0], "=") { // ENV key value
			vars[words[0]] = strings.Join(words[1:], " ")
			continue
		}
		for _, w := range words {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				t.Fatalf("Dockerfile:%d: ENV %q is not key=value", in.line, w)
			}
			vars[k] = v
		}
	}
	return vars
}

// A dockerCopy is one COPY instruction.
type dockerCopy struct {
	from string // the --from stage, "" for the build context
	srcs []string
	dst  string
}

// copies returns the stage's COPY instructions.
func (st dockerStage) copies(t *testing.T) []dockerCopy {
	t.Helper()
	var cs []dockerCopy
	for _, in := range st.ins {
		if in.cmd != "COPY" {
			continue
		}
		var c dockerCopy
		words := shellWords(t, in.args)
		for len(words) > 0 && strings.HasPrefix(words[0], "--") {
			if v, ok := strings.CutPrefix(words[0], "--from="); ok {
				c.from = v
			}
			words = words[1:]
		}
		if len(words) < 2 {
			t.Fatalf("Dockerfile:%d: COPY %s: want sources and a destination", in.line, in.args)
		}
		c.srcs, c.dst = words[:len(words)-1], words[len(words)-1]
		cs = append(cs, c)
	}
	return cs
}

// last returns the args of the stage's last cmd instruction, "" if none.
func (st dockerStage) last(cmd string) string {
	for _, in := range slices.Backward(st.ins) {
		if in.cmd == cmd {
			return in.args
		}
	}
	return ""
}

func TestDockerfileImage(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	final := stages[len(stages)-1]

	// No RATELIMITD_* variable: each would mask the reference's variable
	// in compat mode (RATELIMITD_GRPC_ADDR over GRPC_PORT, say).
	for k := range final.env(t) {
		if strings.HasPrefix(k, envPrefix) {
			t.Errorf("Dockerfile sets %s, which would mask the reference's variables under --compat envoyproxy", k)
		}
	}

	// No rules: a deployment brings its own, and without them the binary
	// exits with a message (see TestCompatEnvoyproxyBinary), rather than
	// decide by demo rules.
	for _, c := range final.copies(t) {
		if c.from == "" {
			t.Errorf("the image copies %v from the build context to %s: it must hold the binary only", c.srcs, c.dst)
		}
	}

	// The binary at ratelimitd's path and at the reference's, which charts
	// and Envoy Gateway run.
	var binary string
	for _, dst := range []string{"/usr/local/bin/ratelimitd", "/bin/ratelimit"} {
		i := slices.IndexFunc(final.copies(t), func(c dockerCopy) bool { return c.from != "" && c.dst == dst })
		if i < 0 {
			t.Errorf("no COPY --from a build stage puts the binary at %s", dst)
			continue
		}
		c := final.copies(t)[i]
		if binary != "" && (len(c.srcs) != 1 || c.srcs[0] != binary) {
			t.Errorf("%s is copied from %v, not from %s as the other path", dst, c.srcs, binary)
		}
		binary = c.srcs[0]
	}

	// In compat mode, the reference's listeners apply: every interface, on
	// the ports the image exposes.
	var exposed []string
	for _, p := range strings.Fields(final.last("EXPOSE")) {
		exposed = append(exposed, strings.TrimSuffix(p, "/tcp"))
	}
	var stderr bytes.Buffer
	f, err := parseFlags(nil, env(map[string]string{"RATELIMITD_COMPAT": "envoyproxy", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}), &stderr)
	if err != nil {
		t.Fatalf("parseFlags under the reference's environment: %v: %s", err, stderr.String())
	}
	for _, addr := range []struct{ flag, addr string }{{"--grpc-addr", f.grpcAddr}, {"--http-addr", f.httpAddr}} {
		host, port, err := net.SplitHostPort(addr.addr)
		if err != nil {
			t.Errorf("%s %q: %v", addr.flag, addr.addr, err)
			continue
		}
		if host != "" && host != "0.0.0.0" && host != "::" {
			t.Errorf("compat %s %q: a container must listen on every interface, not %s", addr.flag, addr.addr, host)
		}
		if !slices.Contains(exposed, port) {
			t.Errorf("compat %s %q: port %s is not exposed (EXPOSE %v)", addr.flag, addr.addr, port, exposed)
		}
	}

	// The entrypoint is the binary the build stage made.
	var entry []string
	if err := json.Unmarshal([]byte(final.last("ENTRYPOINT")), &entry); err != nil || len(entry) == 0 {
		t.Errorf("ENTRYPOINT %s: want the exec (JSON) form, so that signals reach ratelimitd", final.last("ENTRYPOINT"))
	} else if !slices.ContainsFunc(final.copies(t), func(c dockerCopy) bool { return c.from != "" && c.dst == entry[0] }) {
		t.Errorf("ENTRYPOINT %s is not a file copied from a build stage", entry[0])
	}

	// A numeric, non-root user, which Kubernetes can check.
	user, _, _ := strings.Cut(final.last("USER"), ":")
	if uid, err := strconv.Atoi(user); err != nil || uid == 0 {
		t.Errorf("USER %q: want a numeric user other than 0", final.last("USER"))
	}
}

// dockerBuild is the go build command of a Dockerfile's build stage.
type dockerBuild struct {
	env  []string // the assignments before go, expanded
	args []string // after "go build", expanded
}

// buildCommand returns the build stage's go build command, with the
// variables in it expanded from args.
func buildCommand(t *testing.T, stages []dockerStage, args map[string]string) dockerBuild {
	t.Helper()
	var found []dockerBuild
	for _, st := range stages[:len(stages)-1] {
		for _, in := range st.ins {
			if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
				continue
			}
			words := shellWords(t, in.args)
			for len(words) > 0 && strings.HasPrefix(words[0], "--") { // --mount=...
				words = words[1:]
			}
			if slices.ContainsFunc(words, func(w string) bool { return w == "&&" || w == ";" || w == "|" }) {
				t.Fatalf("Dockerfile:%d: keep the go build RUN one command, which this test can run", in.line)
			}
			var b dockerBuild
			expand := func(s string) string {
				return os.Expand(s, func(k string) string {
					v, ok := args[k]
					if !ok {
						t.Fatalf("Dockerfile:%d: the build command uses $%s, which this test does not know", in.line, k)
					}
					return v
				})
			}
			for len(words) > 0 && strings.Contains(words[0], "=") {
				b.env = append(b.env, expand(words[0]))
				words = words[1:]
			}
			if len(words) < 2 || words[0] != "go" || words[1] != "build" {
				t.Fatalf("Dockerfile:%d: %v: want [VAR=value...] go build ...", in.line, words)
			}
			for _, w := range words[2:] {
				b.args = append(b.args, expand(w))
			}
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("found %d go build commands in the Dockerfile's build stages, want 1", len(found))
	}
	return found[0]
}

func TestDockerfileBuildsStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ratelimitd: skipped in -short mode")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the image's binary is a Linux ELF; this checks it on Linux")
	}
	const version = "v0.0.0-packaging-test"
	b := buildCommand(t, parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile")), map[string]string{
		"VERSION": version, "TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH,
	})
	if !slices.Contains(b.env, "CGO_ENABLED=0") {
		t.Errorf("the build sets %v, want CGO_ENABLED=0: cgo would link libc, which distroless/static lacks", b.env)
	}
	if !slices.Contains(b.args, "-trimpath") {
		t.Errorf("go build %v: want -trimpath, so the binary does not carry the build machine's paths", b.args)
	}
	// Build as the Dockerfile does, but into a temporary directory.
	bin := filepath.Join(t.TempDir(), "ratelimitd")
	args := slices.Clone(b.args)
	i := slices.Index(args, "-o")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("go build %v: want -o PATH", args)
	}
	args[i+1] = bin
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"build"}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), b.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a PT_INTERP program header: it is dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("ImportedLibraries() = %v, %v: want none (no DT_NEEDED)", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -ldflags -s did not apply")
	}

	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}

	// -X main.mainVersion names a variable that exists: a wrong name
	// would be ignored silently.
	out, err := exec.CommandContext(t.Context(), bin, "--version").Output()
	if err != nil {
		t.Fatalf("ratelimitd --version: %v", err)
	}
	if got, want := strings.TrimSpace(string(out)), "ratelimitd "+version; got != want {
		t.Errorf("ratelimitd --version = %q, want %q", got, want)
	}
}

// dockerignore is the list of patterns of a .dockerignore file.
type dockerignore []struct {
	re     *regexp.Regexp
	negate bool
}

func parseDockerignore(t *testing.T, file string) dockerignore {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ig dockerignore
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		line = strings.TrimPrefix(path.Clean(strings.TrimPrefix(line, "!")), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case line[i] == '*':
				re.WriteString("[^/]*")
			case line[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		re.WriteString("$")
		ig = append(ig, struct {
			re     *regexp.Regexp
			negate bool
		}{regexp.MustCompile(re.String()), neg})
	}
	return ig
}

// ignores reports whether the build context leaves out name, a
// slash-separated path relative to the context: a pattern that matches
// name or one of its parent directories excludes it, and the last pattern
// that matches decides.
func (ig dockerignore) ignores(name string) bool {
	ignored := false
	for _, p := range ig {
		for dir := name; dir != "." && dir != "/"; dir = path.Dir(dir) {
			if p.re.MatchString(dir) {
				ignored = !p.negate
				break
			}
		}
	}
	return ignored
}

func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	ig := parseDockerignore(t, filepath.Join(repoRoot, ".dockerignore"))
	for _, name := range []string{".git/HEAD", "bin/ratelimitd", "server/server.test", "examples/node/node_modules/x.js"} {
		if !ig.ignores(name) {
			t.Errorf(".dockerignore keeps %s, want it left out", name)
		}
	}

	// Every file the Dockerfile copies from the context...
	need := []string{}
	for _, st := range parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile")) {
		for _, c := range st.copies(t) {
			if c.from == "" && !slices.Contains(c.srcs, ".") {
				need = append(need, c.srcs...)
			}
		}
	}
	// ...and every Go file of the repository that ratelimitd is built
	// from: its module's, and those of the modules go.mod replaces by a
	// directory of the repository (gen/, client/).
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{if .Module}}{{.Dir}}{{end}}", "./cmd/ratelimitd")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	genDirs := 0 // gen/'s packages found, to show replaced modules are read
	for _, dir := range strings.Fields(string(out)) {
		if rel, err := filepath.Rel(root, dir); err != nil || !filepath.IsLocal(rel) {
			continue // the module cache's
		}
		if strings.HasPrefix(dir, filepath.Join(root, "gen")+string(filepath.Separator)) {
			genDirs++
		}
		files, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if rel, err := filepath.Rel(root, f); err == nil {
				need = append(need, filepath.ToSlash(rel))
			}
		}
	}
	if len(need) < 10 {
		t.Fatalf("found only %d files the build needs: %v", len(need), need)
	}
	if genDirs == 0 {
		t.Fatalf("none of the files the build needs is in gen/: %v", need)
	}
	for _, name := range need {
		if ig.ignores(name) {
			t.Errorf(".dockerignore leaves out %s, which the image's build needs", name)
		}
	}
}

func TestDockerignoreMatching(t *testing.T) {
	ig := dockerignore{}
	for _, p := range []string{"docs", "**/*.tmp", "!keep.tmp", "/a/*/c"} {
		ig = append(ig, parseDockerignoreLine(t, p)...)
	}
	for name, want := range map[string]bool{
		"docs":          true,
		"docs/x.md":     true,
		"x/docs":        false,
		"x.tmp":         true,
		"deep/er/y.tmp": true,
		"keep.tmp":      false,
		"a/b/c":         true,
		"a/b/c/d":       true,
		"a/c":           false,
		"main.go":       false,
	} {
		if got := ig.ignores(name); got != want {
			t.Errorf("ignores(%q) = %v, want %v", name, got, want)
		}
	}
}

// parseDockerignoreLine parses one pattern as a .dockerignore line.
func parseDockerignoreLine(t *testing.T, line string) dockerignore {
	t.Helper()
	f := filepath.Join(t.TempDir(), ".dockerignore")
	if err := os.WriteFile(f, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return parseDockerignore(t, f)
}

func TestShellWords(t *testing.T) {
	for in, want := range map[string][]string{
		`a b  c`:                       {"a", "b", "c"},
		`-ldflags "-s -w -X m.v=$V" x`: {"-ldflags", "-s -w -X m.v=$V", "x"},
		`'a b' c\ d "e\"f"`:            {"a b", "c d", `e"f`},
		`k=v k2="two words"`:           {"k=v", "k2=two words"},
	} {
		if got := shellWords(t, in); !slices.Equal(got, want) {
			t.Errorf("shellWords(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDockerfileDownloadsReplacedModules checks the build stage's module
// layer: before `go mod download`, it copies go.mod and go.sum, and those
// of every module go.mod replaces by a directory of the repository, which
// the download reads (without them it fails, and only in docker build).
func TestDockerfileDownloadsReplacedModules(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), "go", "mod", "edit", "-json")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Replace []struct {
			New struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	want := []string{"go.mod", "go.sum"}
	for _, r := range mod.Replace {
		if r.New.Version == "" && filepath.IsLocal(r.New.Path) { // a directory of the repository
			dir := path.Clean(r.New.Path)
			want = append(want, dir+"/go.mod", dir+"/go.sum")
		}
	}
	if len(want) == 2 {
		t.Fatal("go.mod replaces no module by a directory of the repository: update this test")
	}

	build := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))[0]
	copied := map[string]bool{}
	for _, in := range build.ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go mod download") {
			for _, f := range want {
				if !copied[f] {
					t.Errorf("Dockerfile:%d: go mod download runs before %s is copied", in.line, f)
				}
			}
			return
		}
		if in.cmd != "COPY" {
			continue
		}
		c := (dockerStage{ins: []dockerInstruction{in}}).copies(t)[0]
		for _, src := range c.srcs {
			// COPY a/x b/y ./dir/ puts each file at dir/<its base name>.
			if c.from == "" && path.Join(c.dst, path.Base(src)) == path.Clean(src) {
				copied[path.Clean(src)] = true
			}
		}
	}
	t.Fatal("the Dockerfile's first stage has no RUN go mod download")
}
