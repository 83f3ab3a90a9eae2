// Package metrics is what Atelier tells Prometheus: gauges read from the
// services at each scrape, and counters and histograms of what happened,
// recorded where it happened through small interfaces (an
// workbench.CommandObserver, the server's request middleware), so no
// domain package imports Prometheus.
//
// Everything lives in one Registry of its own, built with the server: no
// package-level registry, so two servers in one process (as in tests)
// never share a count.
package metrics

import (
	"context"
	"database/sql"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"atelier/models"
	"atelier/workbench"
)

// Sources are what the gauges ask at each scrape. Meter and Store read
// PostgreSQL, so their numbers are the site's, the same from every
// instance; the others count what this instance holds in memory.
type Sources struct {
	Meter interface {
		Counters(context.Context) ([]models.SandboxCounter, error)
	}
	Store     Store
	Terminals interface{ RunningCount() int } // open shells
	Streams   interface{ Total() int }        // open event streams (SSE viewers)
	Commands  interface{ CommandsHeld() int }
	// Changes counts Changes by status; nil leaves atelier_changes out.
	Changes interface {
		CountByStatus(context.Context) (map[string]int64, error)
	}
}

// Store is what the gauges read from the database itself.
type Store interface {
	OpenSessionCount(context.Context) (int64, error)
	PoolStats() sql.DBStats
}

// Metrics holds the registry and the instruments recorded as things happen.
type Metrics struct {
	registry *prometheus.Registry
	commands *prometheus.CounterVec // by exit code
	took     prometheus.Histogram   // command durations
	stages   *prometheus.HistogramVec
	requests *prometheus.HistogramVec
}

// scrapeTimeout bounds one scrape's reads of the database, and the scrape
// itself; an answer that late is of no use to Prometheus either.
const scrapeTimeout = 5 * time.Second

// New builds the registry with the instruments of what happens; Read adds
// the gauges, once the services they read exist.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atelier_commands_total",
			Help: "Commands that ran to their end on this instance, by exit code (124: timed out; \"other\" outside 0-255).",
		}, []string{"exit_code"}),
		took: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "atelier_command_duration_seconds",
			Help:    "How long commands ran on this instance (the timeout is 120 s).",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 90, 120},
		}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "atelier_command_stage_seconds",
			Help: "Where the time of commands that ran to their end went on this instance, by stage: queued (for a slot and the session: its earlier command, or its preparation), reserved (sandbox time), checkout, ran (the sandbox's run), captured (changes read into edits), recorded (the audit row, written after the answer).",
			// A one-shot command's stages take milliseconds; a build's run,
			// up to the timeout.
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120},
		}, []string{"stage"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "atelier_http_request_duration_seconds",
			Help: "HTTP requests by route template (never the raw path), method and status; event streams count for as long as they stay open.",
			// The default buckets, from 5 ms to 10 s.
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method", "code"}),
	}
	// Exported from the start, so a dashboard's rate() has a series to
	// begin with before the first command ends.
	m.commands.WithLabelValues("0")
	for _, stage := range commandStages {
		m.stages.WithLabelValues(stage)
	}
	m.registry.MustRegister(
		m.commands, m.took, m.stages, m.requests,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Read registers the gauges, read from sources at each scrape. Call it
// once, before serving.
func (m *Metrics) Read(sources Sources) {
	m.registry.MustRegister(&gauges{src: sources})
}

// Handler serves the registry in the Prometheus text format. Callers
// authorize the request first: the scrape reads the database. At most two
// scrapes run at once, and none longer than scrapeTimeout (503 past either).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError, // a failed gauge is reported, the rest still served
		MaxRequestsInFlight: 2,
		Timeout:             scrapeTimeout,
	})
}

// Registry is the registry itself, for tests that gather it directly.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// CommandRan records a command's end; it makes Metrics an
// workbench.CommandObserver.
func (m *Metrics) CommandRan(exitCode int, took time.Duration, stages workbench.CommandStages) {
	code := "other"
	if exitCode >= 0 && exitCode <= 255 {
		code = strconv.Itoa(exitCode)
	}
	m.commands.WithLabelValues(code).Inc()
	m.took.Observe(took.Seconds())
	for i, d := range [...]time.Duration{stages.Queued, stages.Reserved, stages.Checkout, stages.Ran, stages.Captured, stages.Recorded} {
		m.stages.WithLabelValues(commandStages[i]).Observe(d.Seconds())
	}
}

// commandStages label atelier_command_stage_seconds, in
// workbench.CommandStages's order.
var commandStages = [...]string{"queued", "reserved", "checkout", "ran", "captured", "recorded"}

// UnmatchedRoute labels requests no route served: every unknown path
// shares this one series.
const UnmatchedRoute = "unmatched"

// ObserveRequest records one HTTP request. route is the template the
// router matched ("/projects/:id/code"), empty when none did; the labels
// are bounded whatever the client sends: methods outside the standard set
// are "other", and status codes are the server's own.
func (m *Metrics) ObserveRequest(route, method string, status int, took time.Duration) {
	if route == "" {
		route = UnmatchedRoute
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		method = "other"
	}
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Observe(took.Seconds())
}
