package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// The harness talks to its processes with this small RESP2 client rather
// than go-redis: one connection per command, no retries, no pool and no
// background goroutines, which is what polling a process that is still
// starting (or already dead) wants.

const (
	dialTimeout    = 500 * time.Millisecond
	commandTimeout = 5 * time.Second
)

// replyError is an error reply from Redis, such as "NOGOODSLAVE ...".
type replyError string

func (e replyError) Error() string { return string(e) }

// command sends args as one command to addr on a new connection and returns
// the reply: a string (simple or bulk), an int64, nil, or a []any of those.
// An error reply is returned as a replyError.
func command(addr string, args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(commandTimeout)); err != nil {
		return nil, err
	}
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write(b); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(conn))
}

// commandString is command for replies that are strings (INFO, PING, OK).
func commandString(addr string, args ...string) (string, error) {
	v, err := command(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("redistest: %s: reply %v is not a string", args[0], v)
	}
	return s, nil
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return nil, fmt.Errorf("redistest: malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, replyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err // $-1 is the nil reply
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err // *-1 is the nil reply
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("redistest: unknown reply type %q", line)
}

// parseInfo parses the text of INFO (or CLUSTER INFO) into key -> value.
func parseInfo(s string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// pairs turns a flat [k1, v1, k2, v2, ...] reply (SENTINEL REPLICAS entries)
// into a map of its string fields.
func pairs(v any) map[string]string {
	arr, _ := v.([]any)
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		m[k] = val
	}
	return m
}
