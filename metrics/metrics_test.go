package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"atelier/limits"
	"atelier/meter"
	"atelier/metrics"
	"atelier/terminal"
	"atelier/testrig/dbtest"
	"atelier/testrig/pgtest"
	"atelier/workbench"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// sources are the real services over a fresh database, idle.
func sources(t *testing.T) metrics.Sources {
	store := dbtest.Store(t)
	terms := terminal.NewManager(terminal.Config{})
	t.Cleanup(func() { terms.Close() })
	runtime := workbench.NewRuntime(workbench.RuntimeOptions{DB: store, Terminals: terms, Now: time.Now,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return metrics.Sources{Meter: meter.New(store, meter.DefaultCap, nil), Store: store,
		Terminals: terms, Streams: limits.NewStreams(), Commands: runtime}
}

func gather(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fs {
		byName[f.GetName()] = f
	}
	return byName
}

// labelValues sums family name's counts by the values label takes.
func labelValues(fs map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	values := map[string]float64{}
	for _, m := range fs[name].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == label {
				values[l.GetValue()] += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return values
}

func TestLabelsStayBoundedWhateverHappens(t *testing.T) {
	m := metrics.New()
	m.Read(sources(t))
	for _, code := range []int{3, 3, 124, -1, 256, 1 << 20} {
		m.CommandRan(code, time.Second, workbench.CommandStages{Ran: time.Second, Recorded: time.Millisecond})
	}
	m.ObserveRequest("", "BREW", 404, time.Millisecond)
	m.ObserveRequest("", "GET", 404, time.Millisecond)
	m.ObserveRequest("/projects/:id", "get", 404, time.Millisecond) // methods are case-sensitive
	m.ObserveRequest("/projects/:id", "POST", 303, time.Millisecond)
	fs := gather(t, m)

	codes := labelValues(fs, "atelier_commands_total", "exit_code")
	want := map[string]float64{"0": 0, "3": 2, "124": 1, "other": 3}
	if len(codes) != len(want) {
		t.Fatalf("exit codes %v, want %v", codes, want)
	}
	for k, v := range want {
		if codes[k] != v {
			t.Fatalf("exit codes %v, want %v", codes, want)
		}
	}
	if n := fs["atelier_command_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); n != 6 {
		t.Fatalf("%d command durations, want 6", n)
	}
	stages := labelValues(fs, "atelier_command_stage_seconds", "stage")
	if len(stages) != 6 || stages["ran"] != 6 || stages["recorded"] != 6 {
		t.Fatalf("stages %v, want six, each observed once a command", stages)
	}
	for _, m := range fs["atelier_command_stage_seconds"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "ran" && m.GetHistogram().GetSampleSum() != 6 {
			t.Fatalf("the runs' stage sums to %v s, want 6", m.GetHistogram().GetSampleSum())
		}
	}
	methods := labelValues(fs, "atelier_http_request_duration_seconds", "method")
	if len(methods) != 3 || methods["other"] != 2 || methods["GET"] != 1 || methods["POST"] != 1 {
		t.Fatalf("methods %v, want GET, POST and other (BREW, get)", methods)
	}
	routes := labelValues(fs, "atelier_http_request_duration_seconds", "route")
	if len(routes) != 2 || routes[metrics.UnmatchedRoute] != 2 || routes["/projects/:id"] != 2 {
		t.Fatalf("routes %v", routes)
	}
}

// changeCounts stands for the changes service: what it counts is its own,
// the series it becomes is this package's.
type changeCounts map[string]int64

func (c changeCounts) CountByStatus(context.Context) (map[string]int64, error) { return c, nil }

func TestChangesAppearOnceTheirSourceIsWired(t *testing.T) {
	src := sources(t)
	without := metrics.New()
	without.Read(src)
	if f := gather(t, without)["atelier_changes"]; f != nil {
		t.Fatalf("atelier_changes without a source: %v", f)
	}

	src.Changes = changeCounts{"verifying": 2, "awaiting_approval": 1}
	with := metrics.New()
	with.Read(src)
	fs := gather(t, with)
	got := map[string]float64{}
	for _, m := range fs["atelier_changes"].GetMetric() {
		got[m.Label[0].GetValue()] = m.GetGauge().GetValue()
	}
	if len(got) != 2 || got["verifying"] != 2 || got["awaiting_approval"] != 1 {
		t.Fatalf("atelier_changes %v", got)
	}
	if v := fs["atelier_edit_sessions_open"].GetMetric()[0].GetGauge().GetValue(); v != 0 {
		t.Fatalf("open sessions in an empty database: %v", v)
	}
}
