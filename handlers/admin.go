package handlers

import (
	"context"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"atelier/auth"
	"atelier/editsession"
	"atelier/events"
	"atelier/meter"
	"atelier/models"
	"atelier/storage/codestore"
	"atelier/views"
	"atelier/workbench"
)

// Dashboard is the site admins' dashboard: meters, sessions, shells,
// commands and the live feed, and the actions on them.
type Dashboard struct {
	Render   *views.Renderer
	Meter    *meter.Meter
	Sessions *editsession.Sessions
	Runtime  *workbench.Runtime
	Shells   *workbench.Shells
	Events   *events.Recorder
	Store    *models.Store
	// MaxProjectBytes and CollectGrace are the storage bounds the page
	// states (ATELIER_PROJECT_MAX_BYTES, ATELIER_COLLECT_GRACE_MS).
	MaxProjectBytes int64
	CollectGrace    time.Duration
}

// How much of the audit and the event log the dashboard shows.
const (
	recentCommands = 30
	recentEvents   = 50
)

// meterRow is one project's meter on the dashboard.
type meterRow struct {
	meter.ProjectMeter
	Percent int64
	Mark    int
	Chart   template.HTML
}

// adminView is the dashboard. Each part renders alone as well (its
// partial), when a hint on the live stream asks the page to refresh it.
type adminView struct {
	Meters     []meterRow
	Query      string // the meters' name filter
	Sort       string // meter.ByName or meter.ByUse
	DefaultCap int64

	Sessions []editsession.OpenSession
	Shells   []workbench.OpenShell
	Slots    workbench.SlotUse
	Running  []workbench.RunningCommand
	Recent   []models.AuditedCommand
	Feed     []events.Line
	Names    map[int64]string // usernames by id, for what memory knows by id only
	Changes  []models.Change  // waiting for verification, approval or release
	Archived []models.ArchivedProject
	Storage  *storageView
}

// storageView is what the object store holds and each project's code.
type storageView struct {
	Total, Max, Grace string // sizes and a duration, as people read them
	Objects           int64
	Projects          []storageRow
}

// storageRow is one Container project's code against the bound.
type storageRow struct {
	models.ProjectBytes
	Size    string // "" while not measured
	Max     int64
	Percent int64
}

// dashboardParts are the parts a live hint may refresh, each a partial.
var dashboardParts = map[string]bool{
	events.TopicMeters: true, events.TopicSessions: true, events.TopicTerminals: true,
	events.TopicCommands: true, events.TopicFeed: true, events.TopicChanges: true,
	partStorage: true,
}

// partStorage is the storage part, which refreshes itself now and then
// rather than on a hint.
const partStorage = "storage"

// Page shows the dashboard; ?part= one of its parts alone.
func (h *Dashboard) Page(c *gin.Context) error {
	part := c.Query("part")
	if part != "" && !dashboardParts[part] {
		return errNoRoute
	}
	v, err := h.view(c, part)
	if err != nil {
		return err
	}
	if part != "" {
		return h.Render.Render(c, http.StatusOK, "partials/admin_"+part, v)
	}
	return h.Render.Render(c, http.StatusOK, "admin", v)
}

// view loads what part shows, or everything for "".
func (h *Dashboard) view(c *gin.Context, part string) (adminView, error) {
	ctx := c.Request.Context()
	// The filter comes in the query of a refresh and in the form of an
	// action posted from the filtered list.
	v := adminView{Query: c.Request.FormValue("q"), Sort: c.Request.FormValue("sort"), DefaultCap: h.Meter.DefaultCap()}
	if v.Sort != meter.ByUse {
		v.Sort = meter.ByName
	}
	want := func(p string) bool { return part == "" || part == p }
	var err error
	if want(events.TopicMeters) {
		ms, err := h.Meter.Meters(ctx)
		if err != nil {
			return v, err
		}
		for _, m := range meter.Select(ms, v.Query, v.Sort) {
			v.Meters = append(v.Meters, meterRowOf(m))
		}
	}
	if want(events.TopicSessions) {
		if v.Sessions, err = h.Sessions.OpenSessions(ctx); err != nil {
			return v, err
		}
	}
	if want(events.TopicTerminals) || want(events.TopicCommands) {
		if v.Names, err = h.usernames(c); err != nil {
			return v, err
		}
	}
	if want(events.TopicTerminals) {
		if v.Shells, v.Slots, err = h.Shells.OpenShells(ctx); err != nil {
			return v, err
		}
	}
	if want(events.TopicCommands) {
		v.Running = h.Runtime.RunningCommands()
		if v.Recent, err = h.Store.RecentCommands(ctx, recentCommands); err != nil {
			return v, err
		}
	}
	if want(events.TopicChanges) {
		if v.Changes, err = h.Store.WaitingChanges(ctx, 0); err != nil {
			return v, err
		}
	}
	if part == "" { // no live hint refreshes it: an archive is rare
		if v.Archived, err = h.Store.ArchivedProjects(ctx); err != nil {
			return v, err
		}
	}
	if want(partStorage) {
		if v.Storage, err = h.storage(ctx); err != nil {
			return v, err
		}
	}
	if want(events.TopicFeed) {
		es, err := h.Store.RecentEvents(ctx, recentEvents)
		if err != nil {
			return v, err
		}
		v.Feed = events.Lines(es)
	}
	return v, nil
}

// storage reads the object store's index and each project's code size.
func (h *Dashboard) storage(ctx context.Context) (*storageView, error) {
	totals, err := h.Store.StoredTotals(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := h.Store.CodeBytes(ctx)
	if err != nil {
		return nil, err
	}
	v := &storageView{Total: codestore.HumanBytes(totals.Bytes), Objects: totals.Objects,
		Max: codestore.HumanBytes(h.MaxProjectBytes), Grace: spokenDuration(h.CollectGrace)}
	for _, r := range rows {
		row := storageRow{ProjectBytes: r, Max: h.MaxProjectBytes}
		if r.Bytes != nil {
			row.Size = codestore.HumanBytes(*r.Bytes)
			row.Percent = *r.Bytes * 100 / max(h.MaxProjectBytes, 1)
		}
		v.Projects = append(v.Projects, row)
	}
	return v, nil
}

// spokenDuration says a duration in its largest whole unit: "an hour",
// "90 minutes", "5 seconds".
func spokenDuration(d time.Duration) string {
	for _, u := range []struct {
		unit       time.Duration
		one, other string
	}{{time.Hour, "an hour", "hours"}, {time.Minute, "a minute", "minutes"}, {time.Second, "a second", "seconds"}} {
		if d >= u.unit && d%u.unit == 0 {
			if d == u.unit {
				return u.one
			}
			return strconv.FormatInt(int64(d/u.unit), 10) + " " + u.other
		}
	}
	return d.String()
}

func (h *Dashboard) usernames(c *gin.Context) (map[int64]string, error) {
	users, err := h.Store.Users(c.Request.Context())
	if err != nil {
		return nil, err
	}
	names := make(map[int64]string, len(users))
	for _, u := range users {
		names[u.ID] = u.Username
	}
	return names, nil
}

func meterRowOf(m meter.ProjectMeter) meterRow {
	bars := make([]views.Bar, len(m.History))
	for i, h := range m.History {
		bars[i] = views.Bar{Label: h.Month.Format("Jan 2006") + ": " + strconv.FormatInt(h.Used/60, 10) + " min", Value: h.Used}
	}
	return meterRow{ProjectMeter: m, Percent: m.Usage.Percent(), Mark: m.Usage.Mark(),
		Chart: views.BarChart(bars, m.Usage.Cap, m.Project+": sandbox time of the last 6 months")}
}

// meterJSON is GET /admin/meters' shape.
type meterJSON struct {
	ProjectID       int64  `json:"projectId"`
	Project         string `json:"project"`
	Month           string `json:"month"` // YYYY-MM
	UsedSeconds     int64  `json:"usedSeconds"`
	ReservedSeconds int64  `json:"reservedSeconds"`
	CapSeconds      int64  `json:"capSeconds"`
}

// Meters answers every active project's meter this month as JSON.
func (h *Dashboard) Meters(c *gin.Context) error {
	ms, err := h.Meter.Meters(c.Request.Context())
	if err != nil {
		return err
	}
	out := make([]meterJSON, len(ms))
	for i, m := range ms {
		out[i] = meterJSON{ProjectID: m.ProjectID, Project: m.Project, Month: m.Usage.Month.Format("2006-01"),
			UsedSeconds: m.Usage.Used, ReservedSeconds: m.Usage.Reserved, CapSeconds: m.Usage.Cap}
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// MetersCSV answers the usage report: every project's every month.
func (h *Dashboard) MetersCSV(c *gin.Context) error {
	rows, err := h.Meter.MonthlyUsage(c.Request.Context())
	if err != nil {
		return err
	}
	var sb strings.Builder
	if err := meter.WriteCSV(&sb, rows); err != nil {
		return err
	}
	c.Header("Content-Disposition", `attachment; filename="atelier-usage.csv"`)
	c.Data(http.StatusOK, "text/csv; charset=utf-8", []byte(sb.String()))
	return nil
}

// sessionJSON is one open session in GET /admin/sessions.
type sessionJSON struct {
	editsession.OpenSession
	IdleLeftMS   int64 `json:"idleLeftMs"`
	MaxAgeLeftMS int64 `json:"maxAgeLeftMs"`
}

// SessionsJSON answers the open sessions as JSON.
func (h *Dashboard) SessionsJSON(c *gin.Context) error {
	ss, err := h.Sessions.OpenSessions(c.Request.Context())
	if err != nil {
		return err
	}
	out := make([]sessionJSON, len(ss))
	for i, s := range ss {
		out[i] = sessionJSON{OpenSession: s, IdleLeftMS: s.IdleLeft.Milliseconds(), MaxAgeLeftMS: s.MaxAgeLeft.Milliseconds()}
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// EndSession ends someone's session with reason admin.
func (h *Dashboard) EndSession(c *gin.Context) error {
	sid := c.Param("sid")
	if err := h.Sessions.EndByAdmin(c.Request.Context(), auth.User(c), sid); err != nil {
		return err
	}
	return h.done(c, events.TopicSessions, gin.H{"ended": sid})
}

// shellJSON is one live shell in GET /admin/terminals.
type shellJSON struct {
	workbench.OpenShell
	LeaseAgeMS int64 `json:"leaseAgeMs"`
}

// Terminals answers the live shells and the slot use as JSON.
func (h *Dashboard) Terminals(c *gin.Context) error {
	shs, slots, err := h.Shells.OpenShells(c.Request.Context())
	if err != nil {
		return err
	}
	out := make([]shellJSON, len(shs))
	for i, s := range shs {
		out[i] = shellJSON{OpenShell: s, LeaseAgeMS: s.LeaseAge.Milliseconds()}
	}
	c.JSON(http.StatusOK, gin.H{"terminals": out, "slots": slots, "runningCommands": h.Runtime.RunningCommands()})
	return nil
}

// CloseTerminal closes someone's shell.
func (h *Dashboard) CloseTerminal(c *gin.Context) error {
	tid := c.Param("tid")
	if err := h.Shells.CloseByAdmin(c.Request.Context(), auth.User(c), tid); err != nil {
		return err
	}
	return h.done(c, events.TopicTerminals, gin.H{"closed": tid})
}

// SetCap sets a project's monthly cap from the form field capSeconds;
// empty gives it the default again.
func (h *Dashboard) SetCap(c *gin.Context) error {
	id, err := projectID(c)
	if err != nil {
		return err
	}
	var seconds *int64
	if s := strings.TrimSpace(c.PostForm("capSeconds")); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return meter.ErrBadCap // the meter refuses a negative one
		}
		seconds = &n
	}
	if err := h.Meter.SetCap(c.Request.Context(), id, seconds); err != nil {
		return err
	}
	return h.done(c, events.TopicMeters, gin.H{"projectId": id, "capSeconds": seconds})
}

// done answers an action: the part it changed for htmx, the JSON result
// for scripts, else back to the dashboard.
func (h *Dashboard) done(c *gin.Context, part string, result any) error {
	switch {
	case views.IsHTMX(c.Request):
		v, err := h.view(c, part)
		if err != nil {
			return err
		}
		return h.Render.Render(c, http.StatusOK, "partials/admin_"+part, v)
	case views.WantsJSON(c.Request):
		c.JSON(http.StatusOK, result)
	default:
		views.Redirect(c, "/admin")
	}
	return nil
}

// FeedForBrowsers sends a browser that opens the raw event stream, which
// it would show as a blank page that never finishes loading, to the
// dashboard's readable feed; scripts that ask for the stream (or for
// anything but a page) go on to it.
func FeedForBrowsers(c *gin.Context) error {
	accept := c.GetHeader("Accept")
	if strings.Contains(accept, "text/html") && !strings.Contains(accept, "text/event-stream") {
		c.Redirect(http.StatusSeeOther, "/admin#feed-title")
		c.Abort()
	}
	return nil
}

// Stream follows the dashboard's live hints; the route counts it against
// the account's open streams.
func (h *Dashboard) Stream(c *gin.Context) error {
	return h.Events.ServeStream(c.Writer, c.Request, events.DashboardStream)
}
