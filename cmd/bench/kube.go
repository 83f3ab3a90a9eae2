package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"atelier/sandbox/kube"
	"atelier/testrig/kubeexec"
)

// kubeRound is one round of the kube provider's exec path and its
// anchors on this host.
type kubeRound struct {
	keyP50, keyP99    float64 // a keystroke's echo through an exec's terminal
	rawP50, rawP99    float64 // the same on a PTY of this host
	trueP50, localP50 float64 // `true` through exec, and started here
}

// kubeExec measures what the kube provider adds to every keystroke and
// command: the Kubernetes exec protocol, as client-go's executor speaks
// it to the kubelet's own streaming server code (WebSocket), whose pod is
// a folder of this host (testrig/kubeexec). A cluster adds the API
// server's hop and the container runtime's exec, which no machine of ours
// runs; the local jail's own rows are above.
func (b *bench) kubeExec() ([]row, error) {
	dir, err := os.MkdirTemp(b.tmp, "pod-")
	if err != nil {
		return nil, err
	}
	cfg, stop, err := kubeexec.Start(&kubeexec.Processes{Dir: func(string) (string, error) { return dir, nil }})
	if err != nil {
		return nil, err
	}
	defer stop()
	e := kube.NewExec(cfg, "bench", "sandbox")
	keys := keyList(b.sz.keys)
	var rounds []kubeRound
	for i := range b.sz.rounds {
		var r kubeRound
		b.logf("round %d of %d: %d keystrokes and %d commands through pods/exec, and on this host", i+1, b.sz.rounds, len(keys), b.sz.runs)
		lat, err := execKeystrokes(e, keys)
		if err != nil {
			return nil, fmt.Errorf("bench: kube exec: %w", err)
		}
		r.keyP50, r.keyP99 = percentiles(lat)
		if lat, err = rawKeystrokes(keys); err != nil {
			return nil, err
		}
		r.rawP50, r.rawP99 = percentiles(lat)
		if r.trueP50, err = p50Of(b.sz.runs, func() error {
			code, err := e.Run(context.Background(), benchPod, []string{"true"}, kube.ExecOptions{Stdout: io.Discard})
			if err == nil && code != 0 {
				err = fmt.Errorf("`true` exited %d", code)
			}
			return err
		}); err != nil {
			return nil, fmt.Errorf("bench: kube exec: %w", err)
		}
		if r.localP50, err = p50Of(b.sz.runs, func() error { return exec.Command("true").Run() }); err != nil {
			return nil, err
		}
		rounds = append(rounds, r)
	}
	col := func(f func(kubeRound) float64) figure {
		var out figure
		for _, r := range rounds {
			out = append(out, f(r))
		}
		return out
	}
	keyP50, keyP99 := col(func(r kubeRound) float64 { return r.keyP50 }), col(func(r kubeRound) float64 { return r.keyP99 })
	rawP50, rawP99 := col(func(r kubeRound) float64 { return r.rawP50 }), col(func(r kubeRound) float64 { return r.rawP99 })
	trueP50, localP50 := col(func(r kubeRound) float64 { return r.trueP50 }), col(func(r kubeRound) float64 { return r.localP50 })
	return []row{
		{measure: fmt.Sprintf("%s: keystroke round trip through an exec's terminal, p50 / p99 of %d", kubeMeasure, len(keys)),
			atelier: msFig(keyP50) + " / " + msFig(keyP99), anchor: "raw PTY " + msFig(rawP50) + " / " + msFig(rawP99),
			target: "none: the exec protocol's cost, shown",
			result: fmt.Sprintf("exec adds %.2f ms a keystroke at the p50", 1000*(keyP50.median()-rawP50.median()))},
		{measure: fmt.Sprintf("%s: `true` through pods/exec, p50 of %d", kubeMeasure, b.sz.runs),
			atelier: msFig(trueP50), anchor: "`true` started here " + msFig(localP50),
			target: "none: the exec protocol's cost, shown",
			result: fmt.Sprintf("exec adds %.1f ms a command", 1000*(trueP50.median()-localP50.median()))},
	}, nil
}

// kubeMeasure starts the kube rows' measures.
const kubeMeasure = "kube provider's exec path (WebSocket, the kubelet's streaming code)"

// benchPod is the pod the bench's exec reaches; any name does.
const benchPod = "bench-pod"

// p50Of runs f n times and answers the median time, in seconds.
func p50Of(n int, f func() error) (float64, error) {
	var lat []time.Duration
	for range n {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(start))
	}
	p50, _ := percentiles(lat)
	return p50, nil
}

// execKeystrokes types keys into cat on an exec's terminal, one at a
// time, each once the previous one's echo has come back.
func execKeystrokes(e *kube.Exec, keys []byte) ([]time.Duration, error) {
	in, typed := io.Pipe()
	screen, out := io.Pipe()
	sizes := make(chan kube.TerminalSize, 1)
	sizes <- kube.TerminalSize{Cols: 80, Rows: 24}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() {
		_, err := e.Run(ctx, benchPod, []string{"cat"}, kube.ExecOptions{Stdin: in, Stdout: out, TTY: true, Sizes: sizes})
		out.CloseWithError(err)
		ended <- err
	}()
	defer func() {
		cancel()
		typed.Close()
		screen.Close()
		<-ended
	}()
	return echoTimes(typed, screen, keys)
}
