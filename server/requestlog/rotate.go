package requestlog

import (
	"fmt"
	"sync/atomic"

	"github.com/DeRuina/timberjack"
)

// mib is the unit of Options.MaxSize.
const mib = 1 << 20

// A rotator is the log's file when it has a size bound: timberjack's
// Logger, which renames the file aside and opens a new one at its path,
// and removes all but the newest backups.
//
// timberjack is lumberjack's maintained fork. lumberjack v2 (the last
// release, v2.2.1) leaves its pruning goroutine running after Close, which
// a log reopened at each SIGHUP would pile up, and renames a backup over
// an older one made in the same millisecond; timberjack ends the goroutine
// at Close and names such backups apart.
//
// The rotator decides the rotations itself, so that it counts them: it
// rotates before a write that would take the file to the bound. The
// Logger would rotate before a write that takes it past the bound, so
// that it never does on its own. Writes are whole lines, so that every
// file holds whole lines.
type rotator struct {
	lj        *timberjack.Logger
	max       int64 // bytes
	size      int64 // the file's bytes, as the Logger counts them
	rotations *atomic.Uint64
}

// newRotator returns the rotator of the file at path, holding size bytes
// (0 if it does not exist), to be kept under maxSize MiB with backups
// rotated files.
func newRotator(path string, size int64, maxSize, backups int, rotations *atomic.Uint64) *rotator {
	return &rotator{
		lj: &timberjack.Logger{
			Filename:    path,
			MaxSize:     maxSize,
			MaxBackups:  backups,
			FileMode:    0o600, // values may be personal data
			Compression: "none",
		},
		max:       int64(maxSize) * mib,
		size:      size,
		rotations: rotations,
	}
}

// Write writes p, rotating the file first if p would take it to the
// bound. p must be shorter than the bound.
func (r *rotator) Write(p []byte) (int, error) {
	if r.size+int64(len(p)) >= r.max {
		if err := r.lj.RotateWithReason("size"); err != nil {
			return 0, fmt.Errorf("rotating: %w", err)
		}
		r.rotations.Add(1)
		r.size = 0
	}
	n, err := r.lj.Write(p)
	r.size += int64(n)
	return n, err
}

// Close closes the file, after the pruning of old backups under way.
func (r *rotator) Close() error { return r.lj.Close() }
