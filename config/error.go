package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxErrors is how many errors Parse, Compile and Load report at most.
const maxErrors = 20

// Error is one load error at a place in a file. Its Error method returns
// "file:line:col: msg", leaving out col when Column is 0 and line when Line
// is 0, as compilers do; an editor can jump to the place.
type Error struct {
	// File is the name of the file, as given to Parse or found by Load.
	File string
	// Line and Column are 1-based; 0 means unknown.
	Line, Column int
	// Msg says what is wrong, in lower case.
	Msg string
}

// Error returns the place and the message, "file:line:col: msg".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// pos is a place in a file: 1-based line and column, 0 when unknown.
type pos struct{ line, col int }

// maxKept is how many errors one load keeps: past it, it only counts
// them, so that a file full of errors takes no more memory for them.
const maxKept = 1000

// errorList collects the errors of one load.
type errorList struct {
	list    []*Error
	dropped int // errors past maxKept, counted only
}

func (l *errorList) add(file string, p pos, format string, args ...any) {
	if len(l.list) >= maxKept {
		l.dropped++
		return
	}
	l.list = append(l.list, &Error{File: file, Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)})
}

// sort orders the errors of each file by place, keeping files in the order
// in which their first error was reported.
func (l *errorList) sort() {
	rank := make(map[string]int)
	for _, e := range l.list {
		if _, ok := rank[e.File]; !ok {
			rank[e.File] = len(rank)
		}
	}
	slices.SortStableFunc(l.list, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(rank[a.File], rank[b.File]),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Column, b.Column),
		)
	})
}

// err returns the errors sorted and joined with errors.Join, or nil if there
// are none. Past maxErrors, it keeps the first ones (of the first maxKept
// reported) and ends with an Error that says how many more there were.
func (l *errorList) err() error {
	if len(l.list) == 0 {
		return nil
	}
	l.sort()
	errs := make([]error, 0, min(len(l.list), maxErrors)+1)
	for _, e := range l.list[:min(len(l.list), maxErrors)] {
		errs = append(errs, e)
	}
	if n := len(l.list) - maxErrors + l.dropped; n > 0 {
		errs = append(errs, &Error{Msg: fmt.Sprintf("too many errors: %d more not shown", n)})
	}
	return errors.Join(errs...)
}

// place names a position for a message about another one, such as
// "a.yaml:3"; it is "line 3" without a file name.
func place(file string, p pos) string {
	switch {
	case p.line == 0 && file == "":
		return "an earlier definition"
	case p.line == 0:
		return file
	case file == "":
		return "line " + strconv.Itoa(p.line)
	}
	return file + ":" + strconv.Itoa(p.line)
}
