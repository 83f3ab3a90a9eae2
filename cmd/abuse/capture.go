package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A session's command writes into its checkout what an attacker would;
// the capture after it reads that as root in the server. The command must
// be answered, the server must stay within its memory (the row's RSS
// bound) and hold under 100 descriptors more than before, and the next
// `true` must cost about what it costs on an untouched checkout. That last
// is a speed target: judged in the full run, which runs alone, and only
// reported in -short, which the test command runs beside every other
// package's tests on the same cores.

// captureScripts are the attacks, as Python run in the session.
func captureLargeFiles(n int) string {
	return fmt.Sprintf(`python3 -c '
import os
os.makedirs("big", exist_ok=True)
for i in range(%d):
    with open("big/f%%06d.txt" %% i, "w") as f:
        f.write(("%%06d" %% i) * 43690 + "abcd")
'`, n)
}

func captureDeepTree(depth int) string {
	return fmt.Sprintf(`python3 -c '
import os
os.makedirs("deep", exist_ok=True)
os.chdir("deep")
for i in range(%d):
    os.mkdir("d")
    os.chdir("d")
open("bottom.txt", "w").write("deep\n")
'`, depth)
}

func captureManyFiles(n int) string {
	return fmt.Sprintf(`python3 -c '
import os
for i in range(%d):
    if i %% 1000 == 0:
        os.makedirs("many/%%03d" %% (i // 1000))
    with open("many/%%03d/%%04d.txt" %% (i // 1000, i %% 1000), "w") as f:
        f.write("x")
'`, n)
}

// captureAttack runs script in a fresh session of a project of its own and
// judges what the capture after it cost.
func captureAttack(s *server, c *client, project, script string, judgeSpeed bool) (string, bool) {
	id, err := c.CreateProject(project)
	if err != nil {
		return err.Error(), false
	}
	const readme = "# capture\n"
	if err := c.importArchive(id, []archived{{name: "README.md", head: readme, size: int64(len(readme))}}); err != nil {
		return err.Error(), false
	}
	base, err := c.openSession(id)
	if err != nil {
		return err.Error(), false
	}
	untouched, err := fastestTrue(c, base, 5)
	if err != nil {
		return err.Error(), false
	}

	// The capture runs on whichever instance holds the session: each
	// instance's descriptors are watched, and the most any one held
	// more counts.
	pids := s.pids()
	before := make([]int64, len(pids))
	for i, pid := range pids {
		before[i] = fdCount(pid)
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for i, pid := range pids {
				if n := fdCount(pid) - before[i]; n > peak.Load() {
					peak.Store(n)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	res, err := c.runCommand(base, script)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		return "the command: " + err.Error(), false
	}
	// Past the capture's racy margin, what it read is trusted by its stat.
	time.Sleep(1100 * time.Millisecond)
	after, err := fastestTrue(c, base, 5)
	if err != nil {
		return err.Error(), false
	}
	detail := fmt.Sprintf("command and capture %.1fs, %d descriptors more at the peak, %d notes; next `true` %s (untouched %s)",
		took.Seconds(), peak.Load(), len(res.Notes), ms(after), ms(untouched))
	var why []string
	if res.ExitCode != 0 {
		why = append(why, fmt.Sprintf("the command exited %d: %s", res.ExitCode, res.Stderr))
	}
	if held := peak.Load(); held >= 100 {
		why = append(why, fmt.Sprintf("the server held %d descriptors more", held))
	}
	if judgeSpeed && after > untouched*3/2 && after-untouched > 20*time.Millisecond {
		why = append(why, "the next `true` is slower than 1.5 × an untouched checkout's")
	}
	if len(why) > 0 {
		return detail + "; " + strings.Join(why, "; "), false
	}
	return detail, true
}

// fastestTrue is the quickest of n `true` commands in the session.
func fastestTrue(c *client, base string, n int) (time.Duration, error) {
	var took []time.Duration
	for range n {
		start := time.Now()
		res, err := c.runCommand(base, "true")
		if err != nil {
			return 0, err
		}
		if res.ExitCode != 0 {
			return 0, fmt.Errorf("`true` exited %d", res.ExitCode)
		}
		took = append(took, time.Since(start))
	}
	return slices.Min(took), nil
}
