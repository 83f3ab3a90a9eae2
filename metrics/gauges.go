package metrics

import (
	"context"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// gauges asks Sources at each scrape, so a gauge is never a second count
// beside the one the service keeps.
type gauges struct {
	src Sources
}

var (
	usedDesc = prometheus.NewDesc("atelier_sandbox_used_seconds",
		"Sandbox-seconds a project used this calendar month (UTC), settled; projects that reserved nothing this month are absent.",
		[]string{"project_id", "project"}, nil)
	reservedDesc = prometheus.NewDesc("atelier_sandbox_reserved_seconds",
		"Sandbox-seconds a project's running commands and shells hold this month.",
		[]string{"project_id", "project"}, nil)
	capDesc = prometheus.NewDesc("atelier_sandbox_cap_seconds",
		"A project's monthly sandbox-seconds cap (its own, else SANDBOX_MONTHLY_SECONDS).",
		[]string{"project_id", "project"}, nil)
	sessionsDesc = prometheus.NewDesc("atelier_edit_sessions_open",
		"Edit sessions open on the site.", nil, nil)
	terminalsDesc = prometheus.NewDesc("atelier_terminals_open",
		"Terminals whose shells run on this instance.", nil, nil)
	viewersDesc = prometheus.NewDesc("atelier_sse_viewers",
		"Event streams (terminals' and commands' output, project events, admin streams) open on this instance.", nil, nil)
	runningDesc = prometheus.NewDesc("atelier_commands_running",
		"Commands this instance runs or holds waiting for their session's earlier command.", nil, nil)
	changesDesc = prometheus.NewDesc("atelier_changes",
		"Changes by status.", []string{"status"}, nil)

	poolMaxDesc    = prometheus.NewDesc("atelier_db_pool_max_open", "The connection pool's bound (ATELIER_DB_MAX_CONNS).", nil, nil)
	poolOpenDesc   = prometheus.NewDesc("atelier_db_pool_open", "Connections open, in use or idle.", nil, nil)
	poolInUseDesc  = prometheus.NewDesc("atelier_db_pool_in_use", "Connections in use.", nil, nil)
	poolIdleDesc   = prometheus.NewDesc("atelier_db_pool_idle", "Connections idle.", nil, nil)
	poolWaitsDesc  = prometheus.NewDesc("atelier_db_pool_waits_total", "Times a query waited for a free connection.", nil, nil)
	poolWaitedDesc = prometheus.NewDesc("atelier_db_pool_wait_seconds_total", "Time queries spent waiting for a free connection.", nil, nil)
	poolClosedDesc = prometheus.NewDesc("atelier_db_pool_closed_total", "Connections the pool closed, by why (max_idle, max_idle_time, max_lifetime).", []string{"reason"}, nil)

	// collectedDescs is every Desc Collect may send.
	collectedDescs = []*prometheus.Desc{usedDesc, reservedDesc, capDesc, sessionsDesc, terminalsDesc, viewersDesc, runningDesc, changesDesc, poolMaxDesc, poolOpenDesc, poolInUseDesc, poolIdleDesc, poolWaitsDesc, poolWaitedDesc, poolClosedDesc}
)

func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range collectedDescs {
		ch <- d
	}
}

// Collect reads every source once. A source that fails is reported as an
// invalid metric (the scrape lists the error) and the others are still
// served.
func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	// The registry gives no context; the scrape's own bound stands in.
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()

	if counters, err := g.src.Meter.Counters(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(usedDesc, err)
	} else {
		for _, c := range counters {
			id := strconv.FormatInt(c.ProjectID, 10)
			ch <- prometheus.MustNewConstMetric(usedDesc, prometheus.GaugeValue, float64(c.UsedSeconds), id, c.Project)
			ch <- prometheus.MustNewConstMetric(reservedDesc, prometheus.GaugeValue, float64(c.ReservedSeconds), id, c.Project)
			ch <- prometheus.MustNewConstMetric(capDesc, prometheus.GaugeValue, float64(c.CapSeconds), id, c.Project)
		}
	}
	if n, err := g.src.Store.OpenSessionCount(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(sessionsDesc, err)
	} else {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(n))
	}
	ch <- prometheus.MustNewConstMetric(terminalsDesc, prometheus.GaugeValue, float64(g.src.Terminals.RunningCount()))
	ch <- prometheus.MustNewConstMetric(viewersDesc, prometheus.GaugeValue, float64(g.src.Streams.Total()))
	ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(g.src.Commands.CommandsHeld()))
	if g.src.Changes != nil {
		if byStatus, err := g.src.Changes.CountByStatus(ctx); err != nil {
			ch <- prometheus.NewInvalidMetric(changesDesc, err)
		} else {
			for status, n := range byStatus {
				ch <- prometheus.MustNewConstMetric(changesDesc, prometheus.GaugeValue, float64(n), status)
			}
		}
	}

	s := g.src.Store.PoolStats()
	ch <- prometheus.MustNewConstMetric(poolMaxDesc, prometheus.GaugeValue, float64(s.MaxOpenConnections))
	ch <- prometheus.MustNewConstMetric(poolOpenDesc, prometheus.GaugeValue, float64(s.OpenConnections))
	ch <- prometheus.MustNewConstMetric(poolInUseDesc, prometheus.GaugeValue, float64(s.InUse))
	ch <- prometheus.MustNewConstMetric(poolIdleDesc, prometheus.GaugeValue, float64(s.Idle))
	ch <- prometheus.MustNewConstMetric(poolWaitsDesc, prometheus.CounterValue, float64(s.WaitCount))
	ch <- prometheus.MustNewConstMetric(poolWaitedDesc, prometheus.CounterValue, s.WaitDuration.Seconds())
	ch <- prometheus.MustNewConstMetric(poolClosedDesc, prometheus.CounterValue, float64(s.MaxIdleClosed), "max_idle")
	ch <- prometheus.MustNewConstMetric(poolClosedDesc, prometheus.CounterValue, float64(s.MaxIdleTimeClosed), "max_idle_time")
	ch <- prometheus.MustNewConstMetric(poolClosedDesc, prometheus.CounterValue, float64(s.MaxLifetimeClosed), "max_lifetime")
}
