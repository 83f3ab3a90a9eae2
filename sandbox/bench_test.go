//go:build linux

package sandbox_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"atelier/sandbox"
)

// BenchmarkOneShot is what a person waits for when a session runs `true`:
// the spec and limits the session's runtime gives a command (checkout at
// /workspace, the session's HOME and /tmp, bash -c, network deny, 120 s
// and a 64 KiB tail), so the helper, the cgroups, the jail, the seccomp
// filter and the end of the PID namespace (jailed-ms). Beside it, in the
// same loop and through the same runner, `bash -c true` as a plain child
// (plain-ms); and, when slirp4netns is installed, the same command with
// the network allowed, which adds the user-mode network stack and its
// filter (allow-ms).
func BenchmarkOneShot(b *testing.B) {
	sb := newSandbox(b, nil)
	s := newSession(b, sb)
	lim := sandbox.Limits{Timeout: 120 * time.Second, MaxStream: 64 << 10, Tail: true, TimeoutExit: 124}
	_, err := exec.LookPath("slirp4netns")
	withAllow := err == nil
	run := func(n sandbox.Network) time.Duration {
		spec := s.spec("true")
		spec.Network = n
		start := time.Now()
		res, err := sb.Run(context.Background(), spec, lim)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%s: %+v, %v", n, res, err)
		}
		return time.Since(start)
	}
	var jailed, plain, allow time.Duration
	for b.Loop() {
		jailed += run(sandbox.Deny)
		start := time.Now()
		res, err := sandbox.RunPlain(context.Background(), bash("true"), "/", nil, lim)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("plain: %+v, %v", res, err)
		}
		plain += time.Since(start)
		if withAllow {
			allow += run(sandbox.Allow)
		}
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(b.N) }
	b.ReportMetric(ms(jailed), "jailed-ms")
	b.ReportMetric(ms(plain), "plain-ms")
	b.ReportMetric(ms(jailed-plain), "overhead-ms")
	if withAllow {
		b.ReportMetric(ms(allow), "allow-ms")
	}
}

// BenchmarkOneShotSpare is BenchmarkOneShot's jailed `true` in a helper
// started ahead (Sandbox.Spare) and given time to start up, as a session's
// next command finds it: what is left is the jail and the command.
func BenchmarkOneShotSpare(b *testing.B) {
	sb := newSandbox(b, nil)
	s := newSession(b, sb)
	lim := sandbox.Limits{Timeout: 120 * time.Second, MaxStream: 64 << 10, Tail: true, TimeoutExit: 124}
	var spared time.Duration
	for b.Loop() {
		spare, err := sb.Spare(s.uid)
		if err != nil {
			b.Fatal(err)
		}
		// Not a wait: the pause between two commands of a session, in
		// which the spare starts up as it would in use.
		time.Sleep(200 * time.Millisecond)
		spec := s.spec("true")
		spec.Spare = spare
		start := time.Now()
		res, err := sb.Run(context.Background(), spec, lim)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v, %v", res, err)
		}
		spared += time.Since(start)
	}
	b.ReportMetric(spared.Seconds()*1e3/float64(b.N), "spared-ms")
}
