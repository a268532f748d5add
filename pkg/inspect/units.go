package inspect

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Unit is how memory is shown.
type Unit string

// Units.
const (
	GiB Unit = "GiB"
	MiB Unit = "MiB"
)

// ParseUnit accepts GiB or MiB, in any case.
func ParseUnit(s string) (Unit, error) {
	for _, u := range []Unit{GiB, MiB} {
		if strings.EqualFold(s, string(u)) {
			return u, nil
		}
	}
	return "", fmt.Errorf("unknown unit %q: want GiB or MiB", s)
}

// Format writes mib in the unit: MiB as integers; GiB with one decimal
// when not whole, rounded down so that a share never reads as more than
// it is.
func (u Unit) Format(mib int64) string {
	if u == MiB {
		return strconv.FormatInt(mib, 10)
	}
	if mib%1024 == 0 {
		return strconv.FormatInt(mib/1024, 10)
	}
	tenths := mib * 10 / 1024
	return fmt.Sprintf("%d.%d", tenths/10, tenths%10)
}

// ratio is "booked/total" in the unit.
func (u Unit) ratio(booked, total int64) string { return u.Format(booked) + "/" + u.Format(total) }

// percent is part of whole in whole percent, rounded down; 0 of nothing.
func percent(part, whole int64) int64 {
	if whole <= 0 {
		return 0
	}
	return part * 100 / whole
}

// table aligns rows of cells in columns, as kubectl's tables do, and
// leaves no blanks at the ends of lines.
type table struct {
	out io.Writer
	buf bytes.Buffer
	w   *tabwriter.Writer
}

func newTable(out io.Writer) *table {
	t := &table{out: out}
	t.w = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

// row adds a row; every row of a table has the same number of cells.
func (t *table) row(cells ...string) { fmt.Fprintln(t.w, strings.Join(cells, "\t")) }

// flush writes the table.
func (t *table) flush() error {
	if err := t.w.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(t.buf.String()) {
		if _, err := fmt.Fprintln(t.out, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	return nil
}
