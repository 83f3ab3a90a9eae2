package meter

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"atelier/models"
)

// WriteCSV writes the usage report: one row per project per month with a
// counter, in the meter's own seconds, so the column sums are the
// counters' sums. Names are people's words: one that a spreadsheet would
// run as a formula is written with a leading apostrophe.
func WriteCSV(w io.Writer, rows []models.MonthUsage) error {
	out := csv.NewWriter(w)
	out.Write([]string{"project_id", "project", "month", "used_seconds", "reserved_seconds"})
	for _, r := range rows {
		out.Write([]string{
			strconv.FormatInt(r.ProjectID, 10),
			inertCell(r.Project),
			r.Month.UTC().Format("2006-01"),
			strconv.FormatInt(r.UsedSeconds, 10),
			strconv.FormatInt(r.ReservedSeconds, 10),
		})
	}
	out.Flush()
	if err := out.Error(); err != nil {
		return fmt.Errorf("meter: usage report: %w", err)
	}
	return nil
}

// share is the part of its cap a month used; a zero cap counts as full.
func share(u Usage) float64 {
	if u.Cap <= 0 {
		return 1
	}
	return float64(u.Used) / float64(u.Cap)
}

// inertCell keeps a spreadsheet from reading text as a formula.
func inertCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// Orders of the admin dashboard's meters.
const (
	ByName = "name"
	ByUse  = "use" // the largest share of its cap first
)

// Select keeps the meters whose project name contains q (any case) and
// orders them by order (ByName when unknown).
func Select(ms []ProjectMeter, q, order string) []ProjectMeter {
	q = strings.ToLower(strings.TrimSpace(q))
	out := make([]ProjectMeter, 0, len(ms))
	for _, m := range ms {
		if q == "" || strings.Contains(strings.ToLower(m.Project), q) {
			out = append(out, m)
		}
	}
	if order == ByUse {
		slices.SortStableFunc(out, func(a, b ProjectMeter) int {
			if c := cmp.Compare(share(b.Usage), share(a.Usage)); c != 0 {
				return c
			}
			return cmp.Compare(b.Usage.Used, a.Usage.Used)
		})
	}
	return out
}
