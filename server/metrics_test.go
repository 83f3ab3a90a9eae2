package server

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"atelier/testrig/wait"
)

const scrapeToken = "scrape-token-0123456789abcdef"

func withMetricsToken(c *Config) { c.MetricsToken = scrapeToken }

// scrape reads /metrics with the token, as Prometheus does, and parses it.
func (h *harness) scrape() map[string]*dto.MetricFamily {
	h.t.Helper()
	c := &client{h: h, http: http.DefaultClient}
	res := c.get("/metrics", header{"Authorization": "Bearer " + scrapeToken})
	if res.StatusCode != http.StatusOK {
		h.t.Fatalf("scrape: %d %s", res.StatusCode, readBody(res))
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		h.t.Fatalf("scrape: Content-Type %q, want the Prometheus text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		h.t.Fatalf("scrape: %v", err)
	}
	return families
}

// sample is the value of the series of name whose labels include want,
// and whether there is one.
func sample(families map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		if !hasLabels(m, want) {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.Label {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}

func TestMetricsAreForSiteAdminsAndTheTokenOnly(t *testing.T) {
	h := newHarness(t, withMetricsToken)
	anonymous := h.anonymous()
	person := h.user("person", false)
	admin := h.user("admin", true)
	for _, tc := range []struct {
		name          string
		as            *client
		authorization string
		want          int
	}{
		{"anonymous", anonymous, "", http.StatusNotFound},
		{"a wrong token", anonymous, "Bearer wrong-token-0123456789abcdef", http.StatusNotFound},
		{"the token less its last character", anonymous, "Bearer " + scrapeToken[:len(scrapeToken)-1], http.StatusNotFound},
		{"the token and more", anonymous, "Bearer " + scrapeToken + "x", http.StatusNotFound},
		{"an empty bearer", anonymous, "Bearer ", http.StatusNotFound},
		{"the token as Basic", anonymous, "Basic " + scrapeToken, http.StatusNotFound},
		{"a signed-in person", person, "", http.StatusNotFound},
		{"a signed-in person with the token's prefix", person, "Bearer " + scrapeToken[:8], http.StatusNotFound},
		// The token decides alone once one is sent.
		{"a site admin sending a wrong token", admin, "Bearer wrong", http.StatusNotFound},
		{"a site admin", admin, "", http.StatusOK},
		{"the token", anonymous, "Bearer " + scrapeToken, http.StatusOK},
		{"the token, the scheme in lower case", anonymous, "bearer " + scrapeToken, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := header{"Accept": "application/json"}
			if tc.authorization != "" {
				hdr["Authorization"] = tc.authorization
			}
			before := h.statements.RequestSQL()
			res := tc.as.get("/metrics", hdr)
			if tc.want == http.StatusOK {
				body := readBody(res)
				if res.StatusCode != http.StatusOK || !strings.Contains(body, "atelier_edit_sessions_open") {
					t.Fatalf("%d %.300s", res.StatusCode, body)
				}
				return
			}
			expectProblem(t, res, tc.want, "not_found")
			// Refused before anything is gathered: no query for a token,
			// only the sign-in lookup for a cookie.
			sent := h.statements.RequestSQL() - before
			if tc.as == anonymous && sent != 0 || tc.as != anonymous && tc.authorization != "" && sent != 0 {
				t.Fatalf("a refused scrape sent %d statements to PostgreSQL", sent)
			}
		})
	}
}

func TestMetricsWithoutATokenAreForSiteAdminsOnly(t *testing.T) {
	h := newHarness(t) // ATELIER_METRICS_TOKEN unset
	anonymous := h.anonymous()
	for _, authorization := range []string{"", "Bearer ", "Bearer x", "Bearer " + scrapeToken} {
		hdr := header{"Accept": "application/json"}
		if authorization != "" {
			hdr["Authorization"] = authorization
		}
		expectProblem(t, anonymous.get("/metrics", hdr), http.StatusNotFound, "not_found")
	}
	expectProblem(t, h.user("person", false).get("/metrics", jsonAccept), http.StatusNotFound, "not_found")
	if res := h.user("admin", true).get("/metrics", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("a site admin: %d %s", res.StatusCode, readBody(res))
	}
}

func TestMetricsTokenMustBeLongAndPlain(t *testing.T) {
	for _, token := range []string{"short", "has spaces in it 0123456789", "ünïcode-0123456789abcdef"} {
		_, err := LoadConfig(func(k string) string {
			if k == "ATELIER_METRICS_TOKEN" {
				return token
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), "ATELIER_METRICS_TOKEN") {
			t.Errorf("token %q: %v", token, err)
		}
	}
}

// everyMetric is what the operator's dashboard reads; each must be in
// every scrape, whatever has happened so far.
var everyMetric = []string{
	"atelier_sandbox_used_seconds",
	"atelier_sandbox_reserved_seconds",
	"atelier_sandbox_cap_seconds",
	"atelier_edit_sessions_open",
	"atelier_terminals_open",
	"atelier_sse_viewers",
	"atelier_commands_running",
	"atelier_commands_total",
	"atelier_command_duration_seconds",
	"atelier_command_stage_seconds",
	"atelier_http_request_duration_seconds",
	"atelier_db_pool_max_open",
	"atelier_db_pool_open",
	"atelier_db_pool_in_use",
	"atelier_db_pool_idle",
	"atelier_db_pool_waits_total",
	"atelier_db_pool_wait_seconds_total",
	"atelier_db_pool_closed_total",
	"atelier_changes",
}

func TestMetricsNameEveryMeasure(t *testing.T) {
	h := newHarness(t, withMetricsToken)
	owner := h.user("owner", false)
	id := owner.createProject("metered")
	// A command's reservation, held as while it runs.
	ctx := context.Background()
	r, err := h.app.Meter.Reserve(ctx, id, h.app.Instance)
	if err != nil {
		t.Fatal(err)
	}
	families := h.scrape()
	for _, name := range everyMetric {
		if families[name] == nil {
			t.Errorf("%s is missing", name)
		}
	}
	project := map[string]string{"project_id": itoa(id), "project": "metered"}
	if v, _ := sample(families, "atelier_sandbox_reserved_seconds", project); v != 480 {
		t.Errorf("reserved %v, want the 480 s the command holds", v)
	}
	if v, _ := sample(families, "atelier_sandbox_cap_seconds", project); v != float64(h.cfg.SandboxCap) {
		t.Errorf("cap %v, want %d", v, h.cfg.SandboxCap)
	}
	if v, _ := sample(families, "atelier_db_pool_max_open", nil); v != float64(h.cfg.Pool.MaxOpen) {
		t.Errorf("pool bound %v, want %d", v, h.cfg.Pool.MaxOpen)
	}

	// The sample dashboard reads only what the server exports.
	dashboard, err := os.ReadFile("../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`atelier_[a-z_]+`).FindAllString(string(dashboard), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
		if families[base] == nil {
			t.Errorf("the Grafana dashboard queries %s, which /metrics does not export", name)
		}
	}

	start := h.clock.Now()
	if _, err := h.app.Meter.Settle(ctx, r, start, start.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	families = h.scrape()
	used, _ := sample(families, "atelier_sandbox_used_seconds", project)
	reserved, _ := sample(families, "atelier_sandbox_reserved_seconds", project)
	if used != 150 || reserved != 0 {
		t.Errorf("after settling: used %v reserved %v, want 150 (30 s and the tail) and 0", used, reserved)
	}
}

func TestMetricsFollowCommandsSessionsAndStreams(t *testing.T) {
	needRoot(t)
	metricsFollowCommandsSessionsAndStreams(t, newHarness(t, withMetricsToken))
}

func TestMetricsFollowCommandsSessionsAndStreamsInAPod(t *testing.T) {
	needRoot(t)
	metricsFollowCommandsSessionsAndStreams(t, newHarness(t, withMetricsToken, onKube(t)))
}

func metricsFollowCommandsSessionsAndStreams(t *testing.T, h *harness) {
	owner, id := editable(t, h)
	project := map[string]string{"project_id": itoa(id)}
	before := h.scrape()
	if v, _ := sample(before, "atelier_edit_sessions_open", nil); v != 0 {
		t.Fatalf("open sessions before any: %v", v)
	}
	if _, ok := sample(before, "atelier_sandbox_used_seconds", project); ok {
		t.Fatal("a project that never ran anything has a meter series")
	}
	_, base := owner.session(id)

	// While a command runs, it is counted.
	done := make(chan struct{})
	go func() {
		defer close(done)
		owner.run(base, "sleep 2", "")
	}()
	wait.For(t, wait.Long, "the running command in the metrics", func() bool {
		v, _ := sample(h.scrape(), "atelier_commands_running", nil)
		return v == 1
	})
	<-done

	out, res := owner.run(base, "exit 3", "")
	if res.StatusCode != http.StatusOK || out.ExitCode != 3 {
		t.Fatalf("run: %d %+v", res.StatusCode, out)
	}
	// A command's stages are observed with its audit row, after its
	// answer; the history waits for that.
	owner.get(base+"/commands", jsonAccept).Body.Close()
	after := h.scrape()
	if v, _ := sample(after, "atelier_edit_sessions_open", nil); v != 1 {
		t.Errorf("open sessions %v, want 1", v)
	}
	if v, _ := sample(after, "atelier_commands_running", nil); v != 0 {
		t.Errorf("running commands %v after they ended", v)
	}
	if v, _ := sample(after, "atelier_commands_total", map[string]string{"exit_code": "3"}); v != 1 {
		t.Errorf("commands that exited 3: %v, want 1", v)
	}
	if v, _ := sample(after, "atelier_commands_total", map[string]string{"exit_code": "0"}); v != 1 {
		t.Errorf("commands that exited 0: %v, want 1 (the sleep)", v)
	}
	took := after["atelier_command_duration_seconds"].Metric[0].Histogram
	if took.GetSampleCount() != 2 || took.GetSampleSum() < 2 {
		t.Errorf("command durations: %d samples summing %v s, want 2 summing at least the sleep's 2 s", took.GetSampleCount(), took.GetSampleSum())
	}
	// Each stage once a command; the sleep's time is its run's.
	for _, m := range after["atelier_command_stage_seconds"].Metric {
		stage, h := m.GetLabel()[0].GetValue(), m.GetHistogram()
		if h.GetSampleCount() != 2 {
			t.Errorf("stage %s observed %d times, want 2", stage, h.GetSampleCount())
		}
		if stage == "ran" && h.GetSampleSum() < 2 {
			t.Errorf("the runs' stage sums %v s, want at least the sleep's 2 s", h.GetSampleSum())
		} else if stage != "ran" && h.GetSampleSum() >= 1 {
			t.Errorf("stage %s took %v s of two quick commands", stage, h.GetSampleSum())
		}
	}
	// Two commands on the harness's clock, which stands still: each is
	// charged its idle tail, the second's overlapping the first's.
	if v, _ := sample(after, "atelier_sandbox_used_seconds", project); v < 120 {
		t.Errorf("used %v sandbox-seconds, want at least the 120 s tail", v)
	}

	// A shell and a viewer of its output.
	term, res := owner.openTerminal(base)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("terminal: %d %s", res.StatusCode, readBody(res))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+base+"/terminals/"+term.ID+"/stream", nil)
	stream, err := owner.http.Do(req)
	if err != nil || stream.StatusCode != http.StatusOK {
		t.Fatalf("stream: %v %v", err, stream)
	}
	defer stream.Body.Close()
	families := h.scrape()
	if v, _ := sample(families, "atelier_terminals_open", nil); v != 1 {
		t.Errorf("open terminals %v, want 1", v)
	}
	if v, _ := sample(families, "atelier_sse_viewers", nil); v != 1 {
		t.Errorf("SSE viewers %v, want 1", v)
	}
	if v, _ := sample(families, "atelier_sandbox_reserved_seconds", project); v <= 0 {
		t.Errorf("reserved %v while a shell is open", v)
	}
	cancel()
	wait.For(t, wait.Short, "the viewer to leave", func() bool {
		v, _ := sample(h.scrape(), "atelier_sse_viewers", nil)
		return v == 0
	})
}

func TestMetricsLabelRequestsByRouteTemplate(t *testing.T) {
	h := newHarness(t, withMetricsToken)
	person := h.user("person", false)
	if res := person.get("/projects/123/code", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("someone else's project: %d", res.StatusCode)
	}
	families := h.scrape()
	if _, ok := sample(families, "atelier_http_request_duration_seconds",
		map[string]string{"route": "/projects/:id/code", "method": "GET", "code": "404"}); !ok {
		t.Fatalf("no series for the route template: %v", families["atelier_http_request_duration_seconds"])
	}
	series := len(families["atelier_http_request_duration_seconds"].Metric)

	for i := range 1000 {
		path := "/nowhere-" + strconv.Itoa(i) + "/x"
		method := http.MethodGet
		if i%2 == 1 {
			method = "BREW" + strconv.Itoa(i) // methods are the client's too
		}
		if res := person.do(method, path, nil, nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("%s %s: %d", method, path, res.StatusCode)
		}
	}
	requests := h.scrape()["atelier_http_request_duration_seconds"]
	// The 1,000 share "unmatched" under GET and "other", and the two
	// scrapes added the /metrics route.
	if grown := len(requests.Metric) - series; grown > 3 {
		t.Errorf("1,000 unknown paths made %d new series", grown)
	}
	if n, _ := sample(map[string]*dto.MetricFamily{"r": requests}, "r", map[string]string{"route": "unmatched", "method": "other"}); n != 500 {
		t.Errorf("unmatched requests of other methods: %v, want 500", n)
	}
	for _, m := range requests.Metric {
		for _, l := range m.Label {
			if strings.Contains(l.GetValue(), "nowhere") || strings.Contains(l.GetValue(), "BREW") || strings.Contains(l.GetValue(), "123") {
				t.Fatalf("a label carries the client's words: %v", m.Label)
			}
		}
	}
}
