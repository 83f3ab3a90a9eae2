package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"atelier/internal/liveserver"
)

// A keystroke in Atelier is an HTTP request, and an HTTP request has a
// price of its own before any server does anything with it. The floor is
// that price as this machine charges it: the same one-byte POST, answered
// by a Go HTTP server in another process that does nothing else. It tells
// apart what Atelier spends from what speaking HTTP costs.

// floorEnv, set to an address, makes this binary serve the floor there
// instead of running the bench (see serveFloorWhenAsked).
const floorEnv = "ATELIER_BENCH_HTTP_FLOOR"

// serveFloorWhenAsked turns the process into the floor's server when
// floorEnv says so; it returns only when it does not.
func serveFloorWhenAsked() {
	addr := os.Getenv(floorEnv)
	if addr == "" {
		return
	}
	answer := []byte(`{"queued":0,"next":1}` + "\n")
	err := http.ListenAndServe(addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	fmt.Fprintln(os.Stderr, "bench: floor server:", err)
	os.Exit(1)
}

// floorServer is the floor's server, a copy of this binary.
type floorServer struct {
	cmd  *exec.Cmd
	base string
	hc   *http.Client
}

func startFloor() (*floorServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: floor server: %w", err)
	}
	addr, err := liveserver.FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), floorEnv+"="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: floor server: %w", err)
	}
	f := &floorServer{cmd: cmd, base: "http://" + addr, hc: &http.Client{Timeout: 10 * time.Second}}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := f.post("x"); err == nil {
			return f, nil
		} else if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("bench: floor server did not answer: %w", err)
		}
	}
}

func (f *floorServer) post(body string) error {
	resp, err := f.hc.Post(f.base+"/input", "application/octet-stream", strings.NewReader(body))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

func (f *floorServer) stop() {
	_ = f.cmd.Process.Kill()
	_ = f.cmd.Wait()
}

// roundTrips times n one-byte POSTs, one after another.
func (f *floorServer) roundTrips(n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := f.post("a"); err != nil {
			return nil, fmt.Errorf("bench: floor: %w", err)
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

// inputMetric is the name under which the server's request metrics count
// a terminal's input requests.
const inputMetric = `atelier_http_request_duration_seconds_%s{code="200",method="POST",route="/projects/:id/sessions/:sid/terminals/:tid/input"}`

// handlerTime reads from the server's own metrics the total time its
// handlers spent on terminal input and how many requests that was; the
// difference over a run of keystrokes is Atelier's share of them.
func (b *bench) handlerTime() (sum float64, count int64, err error) {
	req, _ := http.NewRequest(http.MethodGet, b.srv.Base+"/metrics", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("bench: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("bench: metrics: status %d", resp.StatusCode)
	}
	sumName, countName := fmt.Sprintf(inputMetric, "sum")+" ", fmt.Sprintf(inputMetric, "count")+" "
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte(sumName)):
			sum, err = strconv.ParseFloat(string(line[len(sumName):]), 64)
			found++
		case bytes.HasPrefix(line, []byte(countName)):
			count, err = strconv.ParseInt(string(line[len(countName):]), 10, 64)
			found++
		}
		if err != nil {
			return 0, 0, fmt.Errorf("bench: metrics: %q: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("bench: metrics: %w", err)
	}
	if found == 0 {
		return 0, 0, nil // no input request yet
	}
	if found != 2 {
		return 0, 0, errors.New("bench: metrics: the input route's sum or count is missing")
	}
	return sum, count, nil
}
