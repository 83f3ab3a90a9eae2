package kube

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"atelier/sandbox"
	"atelier/sandbox/kube/inpod"
)

// Provider runs each session in a pod of its own. The pod is the
// cluster's, found by the session's label from any instance; what this
// instance keeps is the manifest of what it wrote there (the base, as the
// pod's kernel reported each file), against which Changed finds what the
// session's code changed. A session whose pod this instance has no
// manifest of is built again (Prepared.Fresh), as after a restart.
type Provider struct {
	cfg     Config
	cluster *cluster
	exec    *Exec
	open    OpenSessions
	log     *slog.Logger
	grace   time.Duration // helperGrace; a test's shorter

	mu   sync.Mutex
	live map[string]*podWorkspace // by session id

	policies sync.Mutex // held while the NetworkPolicies are applied
	applied  bool

	stop context.CancelFunc
	loop sync.WaitGroup
}

// OpenSessions answers which of ids name sessions still open (the
// database's answer), for the reaper.
type OpenSessions func(ctx context.Context, ids []string) (map[string]bool, error)

// podWorkspace is a session's pod and the manifest of its base.
type podWorkspace struct {
	pod string
	// manifest is changes' manifest section: JSON lines of inpod.Entry,
	// as unpack reported them, and the empty line that ends it.
	manifest []byte
	// manifestDigest names it when it goes by digest (sectionHeldMin).
	manifestDigest string
	// known are the files an earlier Changed met, as the pod's kernel
	// reported them: while they stay as they were, the helper names each
	// by a number rather than sending its entry again. Only Changed,
	// which the session's checkout lock serializes, uses it.
	known map[string]inpod.Entry
}

var _ sandbox.Provider = (*Provider)(nil)

// Bounds of what a pod's helper may send back: it runs beside the
// session's code, which may have taken it over.
const (
	frameMax = 64 << 10 // any one frame: output chunks are 32 KiB, entries far less
	// sectionHeldMin is the size from which a section of changes' input
	// goes by its digest: below it, sending it costs less than the round
	// trip that asks whether to.
	sectionHeldMin = 64 << 10
	// manifestMax bounds the manifest of one workspace, held while the
	// session lives: some 200,000 files of the base's.
	manifestMax = 32 << 20
	// changesFileMax is the most of one file Changed brings back: one byte
	// past the largest edit, so that a larger file is seen to be larger.
	changesFileMax  = 262_144 + 1
	changesBytesMax = 64 << 20
	changesEntries  = 200_000
	// knownMax bounds the files a workspace keeps as known (some 100
	// bytes each); past it the rest are sent again each time.
	knownMax = 100_000
)

// How long the server waits on a pod's helper: a command's own timeout
// and helperGrace (the helper's kills and the last of the output), and
// helperWork for a copy in or a look at the workspace, which the capture
// bounds to at most ten minutes.
const (
	helperGrace = 30 * time.Second
	helperWork  = 11 * time.Minute
)

// errHelperLate: the pod's helper did not answer in time.
var errHelperLate = errors.New("kube: the pod's helper did not answer in time")

// helperExit is a pod's helper that ended without its status.
type helperExit struct {
	code   int
	stderr string
}

func (e *helperExit) Error() string {
	return fmt.Sprintf("kube: the pod's helper exited %d: %s", e.code, e.stderr)
}

// maintainEvery is how often the warm pool is topped up and pods of ended
// sessions are reaped, by every instance.
const maintainEvery = 30 * time.Second

// New connects to the cluster rc reaches; api, when not nil, answers for
// its API server (a test's fake) and rc then serves exec alone. The
// NetworkPolicies are applied before the first session's pod starts; the
// warm pool and the reaper keep running until Close.
func New(cfg Config, rc *rest.Config, api dynamic.Interface, open OpenSessions, log *slog.Logger) (*Provider, error) {
	cfg = cfg.Defaults()
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if api == nil {
		var err error
		if api, err = dynamic.NewForConfig(rc); err != nil {
			return nil, fmt.Errorf("kube: %w", err)
		}
	}
	return newProvider(cfg, api, NewExec(rc, cfg.Namespace, commandsContainer), open, log), nil
}

func newProvider(cfg Config, api dynamic.Interface, exec *Exec, open OpenSessions, log *slog.Logger) *Provider {
	ctx, stop := context.WithCancel(context.Background())
	p := &Provider{cfg: cfg, cluster: newCluster(api, cfg), exec: exec, open: open, log: log,
		live: map[string]*podWorkspace{}, stop: stop, grace: helperGrace}
	p.loop.Go(func() { p.maintain(ctx) })
	return p
}

// maintain tops up the warm pool and reaps until ctx ends.
func (p *Provider) maintain(ctx context.Context) {
	t := time.NewTicker(maintainEvery)
	defer t.Stop()
	for {
		if p.cfg.WarmPods > 0 {
			if err := p.cluster.topUpWarm(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("warm sandbox pods not topped up", "err", err)
			}
		}
		if p.open != nil {
			if err := p.cluster.reap(ctx, p.open); err != nil && ctx.Err() == nil {
				p.log.Warn("sandbox pods of ended sessions not reaped", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Available is nil: whether the cluster answers is known at the first
// call that needs it, and reported there.
func (p *Provider) Available() error { return nil }

// helper is argv for the pod's helper verb.
func (p *Provider) helper(verb string, args ...string) []string {
	return append([]string{p.cfg.Helper, inpod.Arg, verb}, args...)
}

// applyPolicies applies the NetworkPolicies once per provider, before the
// first pod: a pod must never run before the policy that confines it.
func (p *Provider) applyPolicies(ctx context.Context) error {
	p.policies.Lock()
	defer p.policies.Unlock()
	if p.applied {
		return nil
	}
	if err := p.cluster.applyPolicies(ctx); err != nil {
		return err
	}
	p.applied = true
	return nil
}

// podOf finds or makes session s's running pod: its own (existed), one
// from the warm pool, or a new one.
func (p *Provider) podOf(ctx context.Context, s sandbox.Session) (name string, existed bool, err error) {
	if err := p.applyPolicies(ctx); err != nil {
		return "", false, err
	}
	pod, err := p.cluster.sessionPod(ctx, s.ID)
	existed = err == nil
	if errors.Is(err, ErrNoSessionPod) {
		pod, err = p.cluster.claimWarm(ctx, s)
		if errors.Is(err, ErrNoWarmPod) {
			pod, err = p.cluster.createSessionPod(ctx, s)
		}
		if err == nil && (pod.DeletionTimestamp != nil || podEnded(pod)) {
			// The session's own pod of an earlier life, ended: its name
			// is taken until it is gone.
			if err = p.cluster.deletePod(ctx, pod.Name, pod.UID, ""); err == nil {
				err = fmt.Errorf("%w: pod %s is being replaced; try again in a moment", ErrPodEnded, pod.Name)
			}
		}
	}
	if err != nil {
		return "", false, err
	}
	if pod, err = p.cluster.waitRunning(ctx, pod.Name); err != nil {
		return "", false, err
	}
	return pod.Name, existed, nil
}

// workspace is the session's prepared pod, or an error saying Prepare
// must come first.
func (p *Provider) workspace(s sandbox.Session) (*podWorkspace, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ws := p.live[s.ID]; ws != nil {
		return ws, nil
	}
	return nil, fmt.Errorf("%w: session %s", errNoWorkspace, s.ID)
}

// Prepare finds or starts the session's pod and, when this instance has
// not written its workspace, ends what runs there, empties it and
// unpacks base there, keeping the manifest the pod's helper reports.
func (p *Provider) Prepare(ctx context.Context, s sandbox.Session, base sandbox.Base) (sandbox.Prepared, error) {
	if ws, err := p.workspace(s); err == nil {
		if pod, err := p.cluster.getPod(ctx, ws.pod); err == nil && pod.DeletionTimestamp == nil && !podEnded(pod) {
			return sandbox.Prepared{Layered: true}, nil
		}
		p.forget(s.ID)
	}
	pod, existed, err := p.podOf(ctx, s)
	if err != nil {
		return sandbox.Prepared{}, err
	}
	// What an instance that held the session before left running in its
	// pod (one declared gone lives on a while) ends before the workspace
	// is written afresh: a late write of its would land in this one's.
	if existed {
		if err := p.killAllIn(ctx, pod); err != nil {
			return sandbox.Prepared{}, err
		}
	}
	tarball, wrote := io.Pipe()
	go func() { wrote.CloseWithError(base.WriteTar(ctx, wrote)) }()
	defer tarball.Close()
	var manifest bytes.Buffer
	err = p.unpack(ctx, pod, tarball, true, func(e []byte) error {
		if manifest.Len()+len(e) > manifestMax {
			return fmt.Errorf("kube: the base's manifest passed %d bytes", manifestMax)
		}
		manifest.Write(e)
		manifest.WriteByte('\n')
		return nil
	})
	if err != nil {
		return sandbox.Prepared{}, err
	}
	manifest.WriteByte('\n') // the empty line that ends the section
	ws := &podWorkspace{pod: pod, manifest: manifest.Bytes()}
	if manifest.Len() >= sectionHeldMin {
		ws.manifestDigest = inpod.SectionDigest(ws.manifest)
	}
	p.mu.Lock()
	p.live[s.ID] = ws
	p.mu.Unlock()
	return sandbox.Prepared{Fresh: true, Layered: true}, nil
}

// unpack streams a tar into the pod's workspace; each entry the helper
// reports goes to written.
func (p *Provider) unpack(ctx context.Context, pod string, tarball io.Reader, reset bool, written func(entry []byte) error) error {
	args := []string{"-root", p.cfg.Workspace}
	if reset {
		args = append(args, "-reset")
	}
	var status inpod.UnpackStatus
	err := p.frames(ctx, pod, commandsContainer, p.helper("unpack", args...), helperWork, tarball, &status, func(kind byte, payload []byte, _ *inpod.FrameReader) error {
		if kind == inpod.FrameEntry && written != nil {
			return written(payload)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if status.Error != "" {
		return fmt.Errorf("kube: unpack in pod %s: %s", pod, status.Error)
	}
	return nil
}

// frames runs a helper verb and hands each frame but the last to each;
// the last, the status, is decoded into status. Whatever the helper
// sends is bounded by frameMax a frame.
func (p *Provider) frames(ctx context.Context, pod, container string, argv []string, limit time.Duration, stdin io.Reader, status any,
	each func(kind byte, payload []byte, fr *inpod.FrameReader) error) error {
	// The helper bounds its work itself, but it shares its user with the
	// session's code, which may have stopped it: the server does not wait
	// on it past limit.
	ctx, cancel := context.WithTimeoutCause(ctx, limit, errHelperLate)
	defer cancel()
	out, in := io.Pipe()
	var stderr limitedBuffer
	ran := make(chan error, 1)
	go func() {
		code, err := p.exec.Run(ctx, pod, argv, ExecOptions{Container: container, Stdin: stdin, Stdout: in, Stderr: &stderr})
		if requests, ok := stdin.(*io.PipeReader); ok {
			// Whoever writes to the helper's input as it goes (Changed's
			// requests) must not wait on an exec that ended.
			requests.CloseWithError(io.ErrClosedPipe)
		}
		if err == nil && code != 0 {
			err = &helperExit{code: code, stderr: stderr.String()}
		}
		in.CloseWithError(err)
		ran <- err
	}()
	fr := inpod.NewFrameReader(out, frameMax)
	var got bool
	var failed, stopped error // stopped: each's own error, which ends the exec
	for failed == nil && stopped == nil {
		kind, payload, err := fr.Next()
		if err != nil {
			failed = err
			break
		}
		if kind == inpod.FrameStatus {
			got, failed = true, json.Unmarshal(payload, status)
			break
		}
		stopped = each(kind, payload, fr)
	}
	if stopped != nil || (failed != nil && !errors.Is(failed, io.EOF)) {
		cancel()
	}
	out.CloseWithError(io.ErrClosedPipe) // unblocks the exec's writes
	runErr := <-ran
	switch {
	case stopped != nil:
		return fmt.Errorf("kube: pod %s: %w", pod, stopped) // the exec ended because of it
	case got && failed == nil:
		return nil
	case errors.Is(context.Cause(ctx), errHelperLate):
		return fmt.Errorf("kube: pod %s: %w", pod, errHelperLate)
	case runErr != nil:
		return runErr
	case errors.Is(failed, io.EOF):
		return fmt.Errorf("kube: the pod's helper ended without a status: %s", stderr.String())
	}
	return fmt.Errorf("kube: pod %s: %w", pod, failed)
}

// Write writes one file into the session's workspace, or removes it, as
// a tar of one entry.
func (p *Provider) Write(ctx context.Context, s sandbox.Session, f sandbox.File) error {
	ws, err := p.workspace(s)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	h := &tar.Header{Name: f.Path, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.Content)), Format: tar.FormatPAX,
		PAXRecords: map[string]string{inpod.KeepExecRecord: "1"}}
	if !f.Exists {
		h.Size = 0
		h.PAXRecords = map[string]string{inpod.RemoveRecord: "1"}
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("kube: write %s: %w", f.Path, err)
	}
	if f.Exists {
		tw.Write(f.Content)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("kube: write %s: %w", f.Path, err)
	}
	return p.unpack(ctx, ws.pod, &buf, false, nil)
}

// Run runs c under the pod's helper, which bounds its time, kills all it
// started and reports how it ended; its output is kept here within
// c.Limits as the local runner keeps it.
func (p *Provider) Run(ctx context.Context, s sandbox.Session, c sandbox.Command) (*sandbox.Result, error) {
	ws, err := p.workspace(s)
	if err != nil {
		return nil, err
	}
	lim := c.Limits.WithDefaults()
	args := []string{"-supervised", "-root", p.cfg.Workspace, "-dir", c.Folder, "-hold",
		"-timeout", lim.Timeout.String(),
		"-max-stream", strconv.FormatInt(lim.MaxStream, 10),
		"-max-combined", strconv.FormatInt(lim.MaxCombined, 10)}
	if lim.Tail {
		args = append(args, "-tail")
	}
	args = append(append(args, "--"), c.Argv...)
	out := sandbox.NewOutputCapture(lim, c.Output)
	// The helper reads nothing from its input but its end: a stream that
	// closes (this call's ctx ending) ends the command.
	hold, release := io.Pipe()
	defer release.Close()
	var status inpod.RunStatus
	err = p.frames(ctx, ws.pod, commandsContainer, p.helper("run", args...), lim.Timeout+p.grace, hold, &status, func(kind byte, payload []byte, _ *inpod.FrameReader) error {
		switch kind {
		case inpod.FrameStdout:
			out.Stdout(payload)
		case inpod.FrameStderr:
			out.Stderr(payload)
		}
		return nil
	})
	res := sandbox.Result{ExitCode: status.Exit, Signal: status.Signal, Duration: time.Duration(status.DurationNs)}
	out.Fill(&res)
	switch {
	case ctx.Err() != nil:
		return nil, &sandbox.RunError{Kind: sandbox.Canceled, Partial: res, Err: context.Cause(ctx)}
	case errors.Is(err, errHelperLate):
		return nil, &sandbox.RunError{Kind: sandbox.Timeout, Partial: res, Err: err}
	case err != nil:
		return nil, err
	case status.Error != "":
		return nil, &sandbox.RunError{Kind: sandbox.Start, Err: errors.New(status.Error)}
	case status.Left > 0:
		return nil, &sandbox.RunError{Kind: sandbox.Cleanup, Partial: res, Err: fmt.Errorf("%d processes left", status.Left)}
	case status.Overflow || out.Overflowed():
		return nil, &sandbox.RunError{Kind: sandbox.Overflow, Partial: res}
	case status.TimedOut && lim.TimeoutExit > 0:
		res.ExitCode, res.TimedOut = lim.TimeoutExit, true
		return &res, nil
	case status.TimedOut:
		return nil, &sandbox.RunError{Kind: sandbox.Timeout, Partial: res}
	}
	return &res, nil
}

// Anticipate does nothing: the warm pool is what a pod makes ready ahead.
func (p *Provider) Anticipate(sandbox.Session) {}

// Start starts a shell under the pod's helper, on the terminal of one
// exec stream.
func (p *Provider) Start(_ context.Context, s sandbox.Session, cols, rows int) (sandbox.Console, error) {
	ws, err := p.workspace(s)
	if err != nil {
		return nil, err
	}
	return startConsole(p.exec, ws.pod, shellsContainer, p.helper("shell", "-root", p.cfg.Workspace), cols, rows), nil
}

// Changed has the pod's helper compare the workspace with the manifest
// and visits what differs. The helper sends entries in batches and waits
// after each: the visits of a batch read the files they want through it
// (podLook.ReadFile), so no content crosses that the capture does not
// read.
func (p *Provider) Changed(ctx context.Context, s sandbox.Session, maxDepth int, visit func(sandbox.Entry) error) error {
	ws, err := p.workspace(s)
	if err != nil {
		return err
	}
	args := []string{"-root", p.cfg.Workspace, "-max-depth", strconv.Itoa(maxDepth),
		"-max-entries", strconv.Itoa(changesEntries), "-max-file", strconv.Itoa(changesFileMax),
		"-max-bytes", strconv.Itoa(changesBytesMax), "-known"}
	// The manifest and the known files, each section ended by an empty
	// line (a stream that cannot close the helper's input, WebSocket v4,
	// still ends it), then the requests. The known files go by number:
	// the helper names each one unchanged by its line alone, in the order
	// of their paths, so that an unchanged list is the same section.
	knownList := slices.SortedFunc(maps.Values(ws.known), func(a, b inpod.Entry) int { return strings.Compare(a.Path, b.Path) })
	known := make([]byte, 0, 64*len(knownList)+1)
	for _, e := range knownList {
		known = append(inpod.AppendKnown(known, e), '\n')
	}
	known = append(known, '\n')
	// A large section goes by its digest: the pod's main process may hold
	// it from the last capture, and the helper's first frame then says
	// which to send.
	var knownDigest string
	if len(known) >= sectionHeldMin {
		knownDigest = inpod.SectionDigest(known)
		args = append(args, "-known-digest", knownDigest)
	}
	if ws.manifestDigest != "" {
		args = append(args, "-manifest-digest", ws.manifestDigest)
	}
	digests := knownDigest != "" || ws.manifestDigest != ""
	input, requests := io.Pipe()
	defer input.CloseWithError(io.ErrClosedPipe) // ends the copy below if the exec did not read it all
	send := func(need []byte) {
		go func() {
			if ws.manifestDigest == "" || bytes.IndexByte(need, 'm') >= 0 {
				if _, err := requests.Write(ws.manifest); err != nil {
					return
				}
			}
			if knownDigest == "" || bytes.IndexByte(need, 'k') >= 0 {
				_, _ = requests.Write(known)
			}
		}()
	}
	if !digests {
		send(nil)
	}

	w := &podWalk{visit: visit, requests: requests, met: map[string]inpod.Entry{}}
	var status inpod.ChangesStatus
	entries := 0
	err = p.frames(ctx, ws.pod, commandsContainer, p.helper("changes", args...), helperWork, input, &status, func(kind byte, payload []byte, fr *inpod.FrameReader) error {
		var e inpod.Entry
		switch kind {
		case inpod.FrameEntry:
			if err := json.Unmarshal(payload, &e); err != nil {
				return fmt.Errorf("a bad entry: %w", err)
			}
		case inpod.FrameKnown:
			n, err := strconv.Atoi(string(payload))
			if err != nil || n < 0 || n >= len(knownList) {
				return fmt.Errorf("a known file of no line (%.20q)", payload)
			}
			e = knownList[n]
		case inpod.FrameSections:
			if !digests || entries > 0 || w.asks > 0 {
				return errors.New("the helper asked for its sections out of turn")
			}
			// Once; the reader reuses payload.
			digests = false
			send(bytes.Clone(payload))
			return nil
		case inpod.FrameAsk:
			return w.visitBatch(fr)
		default:
			return nil
		}
		// The helper is told the bounds; one taken over may ignore them.
		if entries++; entries > changesEntries {
			return fmt.Errorf("the helper sent more than %d entries", changesEntries)
		}
		if len(w.batch) == inpod.AskBatch || w.held >= inpod.AskBatchBytes {
			return fmt.Errorf("the helper sent more than %d entries or %d bytes of paths without asking", inpod.AskBatch, inpod.AskBatchBytes)
		}
		e.Content = false
		w.batch = append(w.batch, e)
		w.held += len(e.Path) + len(e.Target)
		return nil
	})
	cut := errors.Is(err, errWalkStopped)
	if err != nil && !cut {
		return err
	}
	if status.Error != "" {
		return fmt.Errorf("kube: changes in pod %s: %s", ws.pod, status.Error)
	}
	if !cut && len(w.batch) > 0 {
		return fmt.Errorf("kube: changes in pod %s: the helper ended without asking for its last %d entries", ws.pod, len(w.batch))
	}
	ws.known = knownAfter(ws.known, w.met, cut)
	return nil
}

// errWalkStopped is a visit's SkipAll, which ends the helper's walk.
var errWalkStopped = errors.New("visit stopped")

// podWalk is the server's side of a helper's changes: the batch since its
// last ask, and what the visits have met so far.
type podWalk struct {
	visit    func(sandbox.Entry) error
	requests io.Writer // the helper's input, past its sections
	batch    []inpod.Entry
	held     int                    // the batch's bytes of paths and link targets: what it holds, bounded as the helper is told
	asks     int                    // batches visited: a read names a place in the batch of its ask
	skipped  string                 // a folder a visit skipped: nothing below it is visited
	met      map[string]inpod.Entry // files met, which the next walk names by number
}

// visitBatch visits the batch the helper asked after, each visit reading
// through it what it wants, and lets the helper go on.
func (w *podWalk) visitBatch(fr *inpod.FrameReader) error {
	var passed []string // folders passed over
	for i, e := range w.batch {
		// Met whether visited or below a folder passed over: the next
		// walk meets it, unchanged, as a number.
		if e.Kind == inpod.KindFile && len(w.met) < knownMax {
			w.met[e.Path] = e
		}
		if w.skipped != "" && strings.HasPrefix(e.Path, w.skipped+"/") {
			continue
		}
		entry, ok := sandboxEntry(e)
		if !ok {
			continue
		}
		if e.Kind == inpod.KindFile {
			ask := w.asks
			entry.Look = podLook{e: e, read: func(buf []byte) (inpod.Entry, int, error) {
				if ask != w.asks {
					return inpod.Entry{}, 0, errLateRead
				}
				return w.read(fr, i, e.Path, buf)
			}}
		}
		switch err := w.visit(entry); {
		case errors.Is(err, fs.SkipDir):
			w.skipped = e.Path
			if e.Kind == inpod.KindDir {
				// The helper walks it no further: a new folder the
				// capture passes over (the session's paths full) costs
				// the rest of its batch, not its whole tree.
				passed = append(passed, e.Path)
			}
		case errors.Is(err, fs.SkipAll):
			return errWalkStopped
		case err != nil:
			return err
		}
	}
	w.batch, w.held = w.batch[:0], 0
	w.asks++
	var requests []byte
	for _, p := range passed {
		requests = append(strconv.AppendQuote(append(requests, inpod.AskSkip...), p), '\n')
	}
	_, err := w.requests.Write(append(requests, inpod.AskGoOn+"\n"...))
	return err
}

// errLateRead is a read of a file after its visit: the helper no longer
// waits on its batch.
var errLateRead = errors.New("kube: a file of a walk read after its visit")

// read asks the helper for the file at place i of the batch, and reads
// its answer: the file as it is now, with its content, when it came, in
// buf.
func (w *podWalk) read(fr *inpod.FrameReader, i int, path string, buf []byte) (inpod.Entry, int, error) {
	var a inpod.Entry
	if _, err := fmt.Fprintf(w.requests, "%s%d\n", inpod.AskRead, i); err != nil {
		return a, 0, err
	}
	kind, payload, err := fr.Next()
	if err != nil {
		return a, 0, err
	}
	if kind != inpod.FrameEntry {
		return a, 0, fmt.Errorf("kube: the helper answered a read with a frame %q", kind)
	}
	if err := json.Unmarshal(payload, &a); err != nil {
		return a, 0, fmt.Errorf("kube: a bad answer: %w", err)
	}
	if a.Path != path {
		return a, 0, fmt.Errorf("kube: asked for %q, the helper answered for %q", path, a.Path)
	}
	n, err := readContent(fr, a, buf)
	return a, n, err
}

// knownAfter is what a workspace knows after a walk: the files it met. A
// walk cut short keeps what it did not reach.
func knownAfter(before, met map[string]inpod.Entry, cut bool) map[string]inpod.Entry {
	if cut {
		for p, e := range before {
			if _, ok := met[p]; !ok && len(met) < knownMax {
				met[p] = e
			}
		}
	}
	return met
}

// readContent reads the content frames that follow an answer with
// Content (at most changesFileMax bytes), as much as fits into buf.
func readContent(fr *inpod.FrameReader, e inpod.Entry, buf []byte) (int, error) {
	if !e.Content {
		return 0, nil
	}
	if e.Size < 0 || e.Size > changesFileMax {
		return 0, fmt.Errorf("an answer of %d bytes of content", e.Size)
	}
	got, n := int64(0), 0
	for got < e.Size {
		kind, payload, err := fr.Next()
		if err != nil {
			return 0, err
		}
		if kind != inpod.FrameContent || got+int64(len(payload)) > e.Size {
			return 0, fmt.Errorf("content of %s does not match its size", e.Path)
		}
		got += int64(len(payload))
		n += copy(buf[n:], payload)
	}
	return n, nil
}

// sandboxEntry is e as Changed's visit meets it; ok is false for an
// entry whose path is not a clean relative one (a helper taken over).
func sandboxEntry(e inpod.Entry) (sandbox.Entry, bool) {
	if e.Path == "" || strings.HasPrefix(e.Path, "/") || strings.Contains("/"+e.Path+"/", "/../") ||
		strings.Contains("/"+e.Path+"/", "/./") || strings.Contains(e.Path, "//") {
		return sandbox.Entry{}, false
	}
	kinds := map[string]sandbox.EntryKind{inpod.KindFile: sandbox.KindFile, inpod.KindDir: sandbox.KindDir,
		inpod.KindLink: sandbox.KindLink, inpod.KindWhiteout: sandbox.KindWhiteout, inpod.KindOther: sandbox.KindOther}
	kind, ok := kinds[e.Kind]
	if !ok {
		return sandbox.Entry{}, false
	}
	return sandbox.Entry{Path: e.Path, Kind: kind, TooDeep: e.TooDeep, Look: podLook{e: e}}, true
}

// podLook is an entry as the pod's helper reported it; a file's is read
// through the helper while it waits on the entry's batch.
type podLook struct {
	e    inpod.Entry
	read func(buf []byte) (inpod.Entry, int, error)
}

func (l podLook) Stat() (sandbox.FileStat, error) { return statOf(l.e), nil }

func statOf(e inpod.Entry) sandbox.FileStat {
	return sandbox.FileStat{Regular: e.Kind == inpod.KindFile, Ino: e.Ino, Size: e.Size, Mode: e.Mode,
		MtimeNsec: e.MtimeNs, CtimeNsec: e.CtimeNs}
}

// ReadFile reads the file as it is now. One gone since the walk met it
// is fs.ErrNotExist; one within the bound whose content did not come
// (changed while the helper read it, or the walk's byte budget spent) is
// EAGAIN: the capture passes over either, and the next walk sees it.
func (l podLook) ReadFile(buf []byte) (int, sandbox.FileStat, error) {
	if l.read == nil {
		return 0, statOf(l.e), nil // not a regular file
	}
	a, n, err := l.read(buf)
	switch {
	case err != nil:
		return 0, sandbox.FileStat{}, err
	case a.Kind == inpod.KindWhiteout:
		return 0, sandbox.FileStat{}, fs.ErrNotExist
	case !a.Content && a.Kind == inpod.KindFile && a.Size < changesFileMax:
		return 0, statOf(a), syscall.EAGAIN
	}
	return n, statOf(a), nil
}

func (l podLook) Readlink() (string, error) {
	if l.e.Kind != inpod.KindLink {
		return "", syscall.EINVAL
	}
	return l.e.Target, nil
}

// KillAll ends every process in the session's pod but its main one.
func (p *Provider) KillAll(ctx context.Context, s sandbox.Session) error {
	pod, err := p.cluster.sessionPod(ctx, s.ID)
	if errors.Is(err, ErrNoSessionPod) {
		return nil
	}
	if err != nil {
		return err
	}
	return p.killAllIn(ctx, pod.Name)
}

// killAllIn ends every process in pod but its containers' main ones.
func (p *Provider) killAllIn(ctx context.Context, pod string) error {
	for _, container := range []string{commandsContainer, shellsContainer} {
		if err := p.killIn(ctx, pod, container); err != nil {
			return err
		}
	}
	return nil
}

// killIn ends every process in the pod's container but its main one.
func (p *Provider) killIn(ctx context.Context, pod, container string) error {
	var status inpod.KillStatus
	if err := p.frames(ctx, pod, container, p.helper("killall"), p.grace, nil, &status, ignoreFrames); err != nil {
		return err
	}
	if status.Left > 0 {
		return fmt.Errorf("%w: %d processes in pod %s, container %s", sandbox.ErrProcessesLeft, status.Left, pod, container)
	}
	return nil
}

func ignoreFrames(byte, []byte, *inpod.FrameReader) error { return nil }

// Release deletes the session's pod, idle for its tail: its HOME goes
// with it (emptyDirs live as long as their pod), and the next Prepare
// starts another.
func (p *Provider) Release(ctx context.Context, s sandbox.Session) error { return p.End(ctx, s) }

// End deletes the session's pod.
func (p *Provider) End(ctx context.Context, s sandbox.Session) error {
	p.forget(s.ID)
	pod, err := p.cluster.sessionPod(ctx, s.ID)
	if errors.Is(err, ErrNoSessionPod) {
		return nil
	}
	if err != nil {
		return err
	}
	return p.cluster.deletePod(ctx, pod.Name, pod.UID, "")
}

func (p *Provider) forget(id string) {
	p.mu.Lock()
	delete(p.live, id)
	p.mu.Unlock()
}

// Leave drops the manifest this instance keeps of the session; its pod
// is the session's holder's, whichever instance that is now.
func (p *Provider) Leave(_ context.Context, s sandbox.Session) error {
	p.forget(s.ID)
	return nil
}

// SharedByInstances: every instance reaches a session's pod.
func (p *Provider) SharedByInstances() {}

// EndProject does nothing: a project keeps nothing in the cluster but
// its sessions' pods.
func (p *Provider) EndProject(context.Context, int64) error { return nil }

// Recover deletes the pods of the sessions still open whose instance is
// gone (open: this instance's share of them). Nothing meters a pod past
// its holder: the meter settles a gone instance's reservations as
// abandoned, and a pod left running would run on unpaid. Nor could one
// be used again as it is: the manifest of its workspace went with its
// holder, so the next Prepare starts afresh in a new pod either way.
// Pods of sessions no longer open go with the reaper, which asks the
// database.
func (p *Provider) Recover(ctx context.Context, open []sandbox.Session) error {
	var errs []error
	for _, s := range open {
		errs = append(errs, p.End(ctx, s))
	}
	if p.open != nil {
		err := p.cluster.reap(ctx, p.open)
		if apierrors.IsForbidden(err) {
			err = fmt.Errorf("kube: the instances' Role lacks a verb (deploy/kubernetes): %w", err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Close stops the warm pool and the reaper of this instance; the pods
// stay, for whichever instance serves their sessions next.
func (p *Provider) Close(context.Context) error {
	p.stop()
	p.loop.Wait()
	return nil
}

// limitedBuffer keeps the first 4 KiB written to it: a helper's stderr,
// for an error message.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p[:min(len(p), max(0, 4<<10-len(b.buf)))]...)
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}
