package views

import (
	"fmt"
	"html/template"
	"time"
)

// when writes t as a <time> element whose text says how long ago it was
// ("2 minutes ago") and whose title gives the exact time.
func when(t time.Time) template.HTML {
	return whenAt(t, time.Now())
}

func whenAt(t, now time.Time) template.HTML {
	exact := t.UTC().Format("2 January 2006, 15:04:05 UTC")
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`,
		t.UTC().Format(time.RFC3339), exact, template.HTMLEscapeString(ago(t, now))))
}

// ago says how long before now t was, in the largest whole unit.
func ago(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 45*time.Second: // and a moment ahead, from another clock
		return "just now"
	case d < time.Hour:
		return plural(max(int(d/time.Minute), 1), "minute") + " ago"
	case d < 24*time.Hour:
		return plural(int(d/time.Hour), "hour") + " ago"
	case d < 48*time.Hour:
		return "yesterday"
	case d < 30*24*time.Hour:
		return plural(int(d/(24*time.Hour)), "day") + " ago"
	}
	return "on " + t.UTC().Format("2 January 2006")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// took writes a duration given in milliseconds: "340 ms", "2.3 s",
// "4 min 05 s".
func took(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%d ms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", float64(ms)/1000)
	}
	s := ms / 1000
	return fmt.Sprintf("%d min %02d s", s/60, s%60)
}
