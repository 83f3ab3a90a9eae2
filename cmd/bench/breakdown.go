package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"atelier/testrig/liveserver"
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

// Series of the server's metrics the bench reads to say where the time of
// a keystroke or a command goes: the time its handlers took and how many
// requests, and the time the sandbox took to run the commands.
const (
	inputSeconds    = `atelier_http_request_duration_seconds_sum{code="200",method="POST",route="/projects/:id/sessions/:sid/terminals/:tid/input"}`
	inputRequests   = `atelier_http_request_duration_seconds_count{code="200",method="POST",route="/projects/:id/sessions/:sid/terminals/:tid/input"}`
	commandSeconds  = `atelier_http_request_duration_seconds_sum{code="200",method="POST",route="/projects/:id/sessions/:sid/commands"}`
	commandRequests = `atelier_http_request_duration_seconds_count{code="200",method="POST",route="/projects/:id/sessions/:sid/commands"}`
	stageRuns       = `atelier_command_stage_seconds_count{stage="ran"}`
)

// commandStages are the stages the server times a command by
// (atelier_command_stage_seconds), in its order; the stages from
// afterTheAnswer on are written after the command is answered.
var commandStages = [...]string{"queued", "reserved", "checkout", "ran", "captured", "recorded"}

const afterTheAnswer = 5

// stageSeconds is the series of the time spent in a command's stage.
func stageSeconds(stage string) string {
	return `atelier_command_stage_seconds_sum{stage="` + stage + `"}`
}

// commandSeries are the series read around a run of commands: the
// handler's time and count, each stage's time, and the commands counted.
func commandSeries() []string {
	series := []string{commandSeconds, commandRequests}
	for _, stage := range commandStages {
		series = append(series, stageSeconds(stage))
	}
	return append(series, stageRuns)
}

// cpuUse is the processor time a server process, its client (this
// process) and the whole machine took during a measure, and the measure's
// wall time, in seconds: with the machine's cores, what tells where a
// stream's time went.
type cpuUse struct{ server, client, machine, wall float64 }

// measureCPU runs fn and answers the processor time pid, this process and
// the machine took meanwhile.
func measureCPU(pid int, fn func() error) (cpuUse, error) {
	read := func() (u cpuUse, err error) {
		if u.server, err = processCPU(pid); err == nil {
			u.machine, err = machineCPU()
		}
		u.client = selfCPU()
		return u, err
	}
	before, err := read()
	if err != nil {
		return cpuUse{}, err
	}
	start := time.Now()
	if err := fn(); err != nil {
		return cpuUse{}, err
	}
	wall := time.Since(start).Seconds()
	after, err := read()
	if err != nil {
		return cpuUse{}, err
	}
	return cpuUse{server: after.server - before.server, client: after.client - before.client,
		machine: after.machine - before.machine, wall: wall}, nil
}

// processCPU is the user and system time process pid has taken, from
// /proc (in the kernel's USER_HZ ticks, 100 a second on Linux).
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of %d: %w", pid, err)
	}
	// The command's name, in parentheses, may hold spaces: fields count
	// from after its closing one (utime and stime are the 14th and 15th).
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("bench: cpu of %d: short stat", pid)
	}
	return ticks(fields[11:13])
}

// machineCPU is the time every core of the machine has spent working
// (user, nice, system, irq and softirq: not idle, waiting for I/O, or
// stolen by the hypervisor for other machines), from /proc/stat.
func machineCPU() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: cpu: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := strings.Fields(string(line)) // cpu user nice system idle iowait irq softirq steal
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, errors.New("bench: cpu: /proc/stat has no cpu line")
	}
	return ticks(slices.Concat(fields[1:4], fields[6:8]))
}

// ticks adds the USER_HZ tick counts in fields, in seconds.
func ticks(fields []string) (float64, error) {
	total := 0.0
	for _, f := range fields {
		n, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: cpu: %w", err)
		}
		total += n
	}
	return total / 100, nil
}

// selfCPU is the user and system time this process has taken.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// stages is where commands' time went in the server, from its metrics
// (means per command, in seconds): the handler's whole time, and each
// stage within it (commandStages).
type stages struct {
	handler float64
	stage   [len(commandStages)]float64
}

// staged runs fn, which runs commands through the server, and answers
// where their time went.
func (b *bench) staged(fn func() error) (stages, error) {
	var st stages
	before, err := b.observedMetrics()
	if err != nil {
		return st, err
	}
	if err := fn(); err != nil {
		return st, err
	}
	after, err := b.observedMetrics()
	if err != nil {
		return st, err
	}
	if st.handler, _, err = spent(before, after, 0, 1); err != nil {
		return st, err
	}
	for i := range commandStages {
		if st.stage[i], _, err = spent(before, after, 2+i, len(after)-1); err != nil {
			return st, err
		}
	}
	return st, nil
}

// observedMetrics reads commandSeries once the server has observed the
// stages of every command it answered: they are observed with a
// command's audit row, after its answer, and a command answered before a
// measure whose stages came inside it would count there.
func (b *bench) observedMetrics() ([]float64, error) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m, err := b.metrics(commandSeries()...)
		if err != nil || m[len(m)-1] >= m[1] || time.Now().After(deadline) {
			return m, err
		}
	}
}

// stagesNote says, from the median of the rounds' stages, where what
// (a command, the command) spent its time in the server. What the stages
// up to its capture leave of the handler's time is the session's lookup
// before them and the answer after; its audit row is written after the
// answer, off the handler's time.
func stagesNote[R any](rounds []R, pick func(R) stages, what string) string {
	median := func(f func(stages) float64) float64 {
		fig := make(figure, len(rounds))
		for i, r := range rounds {
			fig[i] = f(pick(r))
		}
		return fig.median()
	}
	handler := median(func(s stages) float64 { return s.handler })
	note := fmt.Sprintf("the server's handler takes %s ms of %s (its metrics):", msNum(handler), what)
	staged := 0.0
	for i, stage := range commandStages[:afterTheAnswer] {
		took := median(func(s stages) float64 { return s.stage[i] })
		staged += took
		note += fmt.Sprintf(" %s %.1f,", stage, 1000*took)
	}
	recorded := median(func(s stages) float64 { return s.stage[afterTheAnswer] })
	return note + fmt.Sprintf(" the session's lookup and the answer %.1f ms; after the answer, its audit row %.1f ms", 1000*max(handler-staged, 0), 1000*recorded)
}

// metrics reads the named series from the server's /metrics; a series the
// server has not started yet reads as 0.
func (b *bench) metrics(series ...string) ([]float64, error) {
	req, _ := http.NewRequest(http.MethodGet, b.srv.Base+"/metrics", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: metrics: status %d", resp.StatusCode)
	}
	values := make([]float64, len(series))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := bytes.Cut(sc.Bytes(), []byte(" "))
		if !ok {
			continue
		}
		for i, s := range series {
			if string(name) == s {
				if values[i], err = strconv.ParseFloat(string(value), 64); err != nil {
					return nil, fmt.Errorf("bench: metrics: %s: %w", s, err)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: metrics: %w", err)
	}
	return values, nil
}

// spent is what the server's metrics say happened between two readings of
// a sum and its count: the mean per event, and how many events.
func spent(before, after []float64, sum, count int) (mean float64, events int, err error) {
	n := after[count] - before[count]
	if n <= 0 {
		return 0, 0, errors.New("bench: the server's metrics counted none of the requests")
	}
	return (after[sum] - before[sum]) / n, int(n), nil
}

// importWatched imports archive into project id as the import form does,
// reading the progress stream, and answers how long each phase took.
func (b *bench) importWatched(id int64, filename string, archive []byte) (map[string]time.Duration, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("archive", filename)
	if err == nil {
		_, err = fw.Write(archive)
	}
	if err == nil {
		err = mw.Close()
	}
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/projects/%d/import", b.srv.Base, id), &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("X-CSRF-Token", b.c.CSRF)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := b.c.HC.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: import: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: import: status %d", resp.StatusCode)
	}
	phases := map[string]time.Duration{}
	phase, since := "", time.Now()
	dec := json.NewDecoder(resp.Body)
	for {
		var line struct {
			Progress *struct{ Phase string }
			Done     json.RawMessage
			Error    string
		}
		if err := dec.Decode(&line); err != nil {
			return nil, fmt.Errorf("bench: import: the progress stream ended early: %w", err)
		}
		now := time.Now()
		switch {
		case line.Error != "":
			return nil, fmt.Errorf("bench: import: %s", line.Error)
		case line.Progress != nil && line.Progress.Phase != phase:
			phases[phase] += now.Sub(since)
			phase, since = line.Progress.Phase, now
		case line.Done != nil:
			phases[phase] += now.Sub(since)
			return phases, nil
		}
	}
}
