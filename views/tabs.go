package views

// projectTabs is what partials/project_tabs.html draws: the same four tabs
// of a project (Overview, Code, Changes, Settings) on every page of it, so
// each page reaches the others in one click.
type projectTabs struct {
	Project int64
	// Current is the tab whose page this is: "overview", "code",
	// "changes" or "settings"; empty on a page below one (a Change, an
	// edit session), which Here names after the tabs.
	Current string
	Here    string
	// CodeNotReady says why the Code tab cannot open yet; empty when it
	// can.
	CodeNotReady string
}

// tabsOf starts the tabs of a project's page (the templates' projectTabs).
func tabsOf(project int64, current string) projectTabs {
	return projectTabs{Project: project, Current: current}
}

// Below names the page shown, one level below a tab ("#3", "Edit session").
func (t projectTabs) Below(here string) projectTabs {
	t.Here = here
	return t
}

// CodeWaits greys out the Code tab with the reason it cannot open yet.
func (t projectTabs) CodeWaits(reason string) projectTabs {
	t.CodeNotReady = reason
	return t
}
