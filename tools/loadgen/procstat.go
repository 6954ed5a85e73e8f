package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/<pid>/stat
// (sysconf(_SC_CLK_TCK), `getconf CLK_TCK`). Linux fixes it at 100 for
// user space on every architecture Go supports, so it is not read at run
// time.
const clockTicks = 100

// cpuTime returns the CPU time (user plus system, all threads) that the
// process pid has used so far; pid 0 means this process.
func cpuTime(pid int) (time.Duration, error) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself: fields are counted from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no ')' in %q", path, b)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: %d fields after the command name, want ≥ 13", path, len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] { // fields 14 (utime) and 15 (stime)
		n, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / clockTicks), nil
}
