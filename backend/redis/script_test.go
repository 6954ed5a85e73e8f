package redis

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/backend"
)

// TestScriptProtocol: take.lua's table P names the protocol's constants
// with the values script.go gives them, and its struct formats have the
// sizes script.go encodes and decodes.
func TestScriptProtocol(t *testing.T) {
	start := strings.Index(takeSource, "local P = {")
	if start < 0 {
		t.Fatal("take.lua: no table P")
	}
	end := strings.Index(takeSource[start:], "\n}\n")
	if end < 0 {
		t.Fatal("take.lua: table P has no end")
	}
	table := takeSource[start : start+end]
	lua := map[string]string{}
	for _, m := range regexp.MustCompile(`([A-Z_]+) = ('[^']*'|-?[0-9]+)`).FindAllStringSubmatch(table, -1) {
		lua[m[1]] = strings.Trim(m[2], "'")
	}
	numbers := map[string]int{
		"TAKE": opTake, "PART": opPart, "REFUND": opRefund, "FAST": opFast, "FAST_LEASED": opFastLeased, "COMPACT": compactBit,
		"MODE_SHIFT": modeShift, "CWO": flagConsumeWhenOver, "GIVE": flagGiveBack, "WAS_OVER": flagWasOver,
		"SLIDING": int(backend.SlidingWindow), "FIXED": int(backend.FixedWindow), "LOG": int(backend.SlidingLog),
		"BUCKET": int(backend.TokenBucket), "GCRA": int(backend.GCRA), "CONC": int(backend.Concurrency),
		"OP_TAKE": int(recordTake), "OP_GIVE_BACK": int(recordGiveBack), "OP_RENEW": int(recordRenew),
		"ENFORCE": int(backend.Enforce), "SHADOW": int(backend.Shadow), "QUOTA": int(backend.Quota),
		"MAX_LOG": maxLog, "PART_CALL": partCallBit, "DONE": crossDone, "ELSEWHERE": crossElsewhere, "NOT_TAKEN": notTaken,
	}
	for name, want := range numbers {
		if got := lua[name]; got != strconv.Itoa(want) {
			t.Errorf("take.lua P.%s = %q, script.go says %d", name, got, want)
		}
	}
	sizes := map[string]int{
		"HEADER": headerSize, "CALL": callSize, "RECORD": recordSize, "COMPACT_RECORD": compactSize, "COMPACT_LEASE": compactLease, "RESULT": resultSize, "STAMPED": stampedSize,
		"LEASED": leasedSize, "LEASED_STAMPED": leasedStamp, "LEASE_HEADER": leaseHeader,
		"STATUS": statusSize, "REASON": reasonSize,
		"STATE": stateSize, "LOG_HEADER": logHeader, "LOG_ENTRY": logEntry,
	}
	for name, want := range sizes {
		format, ok := lua[name]
		if !ok {
			t.Errorf("take.lua has no P.%s", name)
			continue
		}
		if got := formatSize(t, format); got != want {
			t.Errorf("take.lua P.%s = %q: %d bytes, script.go says %d", name, format, got, want)
		}
	}
	if len(lua) != len(numbers)+len(sizes) {
		t.Errorf("take.lua's P names %d constants, script.go %d: %v", len(lua), len(numbers)+len(sizes), lua)
	}
}

// formatSize returns the size of a little-endian struct format of B, d
// and I<n> items.
func formatSize(t *testing.T, format string) int {
	if !strings.HasPrefix(format, "<") {
		t.Errorf("struct format %q is not little-endian", format)
	}
	size := 0
	for _, m := range regexp.MustCompile(`B|d|I([0-9])`).FindAllStringSubmatch(format[1:], -1) {
		switch m[0][0] {
		case 'B':
			size++
		case 'd':
			size += 8
		default:
			n, _ := strconv.Atoi(m[1])
			size += n
		}
	}
	return size
}
