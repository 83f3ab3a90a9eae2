package meter_test

import (
	"bytes"
	"encoding/csv"
	"testing"
	"time"

	"atelier/meter"
	"atelier/models"
)

func TestMarks(t *testing.T) {
	for _, tc := range []struct {
		used, cap int64
		want      int
	}{
		{0, 100, 0}, {79, 100, 0}, {80, 100, 80}, {94, 100, 80}, {95, 100, 95}, {120, 100, 95}, {0, 0, 95},
		{57_600, 72_000, 80}, {68_400, 72_000, 95},
	} {
		if got := (meter.Usage{Used: tc.used, Cap: tc.cap}).Mark(); got != tc.want {
			t.Errorf("%d of %d: Mark = %d, want %d", tc.used, tc.cap, got, tc.want)
		}
	}
}

func TestSelect(t *testing.T) {
	ms := []meter.ProjectMeter{
		{ProjectID: 1, Project: "Alpha", Usage: meter.Usage{Used: 10, Cap: 100}},
		{ProjectID: 2, Project: "beta", Usage: meter.Usage{Used: 90, Cap: 1000}},
		{ProjectID: 3, Project: "alphabet", Usage: meter.Usage{Used: 50, Cap: 100}},
		{ProjectID: 4, Project: "zero-cap", Usage: meter.Usage{Used: 0, Cap: 0}},
	}
	ids := func(ms []meter.ProjectMeter) (out []int64) {
		for _, m := range ms {
			out = append(out, m.ProjectID)
		}
		return out
	}
	if got := ids(meter.Select(ms, " ALPHA ", meter.ByName)); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("filter alpha: %v", got)
	}
	// By share of the cap: a zero cap is full, 50 %, 10 %, 9 %.
	if got := ids(meter.Select(ms, "", meter.ByUse)); len(got) != 4 || got[0] != 4 || got[1] != 3 || got[2] != 1 || got[3] != 2 {
		t.Errorf("by use: %v", got)
	}
}

// The report keeps a name a spreadsheet would run as a formula inert.
func TestWriteCSV(t *testing.T) {
	month := time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	err := meter.WriteCSV(&buf, []models.MonthUsage{
		{ProjectID: 7, Project: "=HYPERLINK(\"http://x\")", Month: month, UsedSeconds: 12, ReservedSeconds: 480},
		{ProjectID: 8, Project: "plain, with comma", Month: month, UsedSeconds: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"project_id", "project", "month", "used_seconds", "reserved_seconds"},
		{"7", "'=HYPERLINK(\"http://x\")", "2026-03", "12", "480"},
		{"8", "plain, with comma", "2026-03", "3", "0"},
	}
	for i := range want {
		for j := range want[i] {
			if rows[i][j] != want[i][j] {
				t.Errorf("row %d col %d: %q, want %q", i, j, rows[i][j], want[i][j])
			}
		}
	}
}
