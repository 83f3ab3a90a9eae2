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
	// knownMargin (the constant; a test's none, as no test moves a
	// file's ctime back).
	knownMargin time.Duration

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
	pod      string
	manifest []byte // JSON lines of inpod.Entry, as unpack reported them
	// known are the files whose content an earlier Changed delivered, as
	// the pod's kernel reported them: the helper does not send it again
	// while they stay as they were, as a local capture does not read
	// again a file whose stat it knows. Only Changed, which the session's
	// checkout lock serializes, uses it.
	known map[string]inpod.Entry
}

var _ sandbox.Provider = (*Provider)(nil)

// Bounds of what a pod's helper may send back: it runs beside the
// session's code, which may have taken it over.
const (
	frameMax = 64 << 10 // any one frame: output chunks are 32 KiB, entries far less
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
	// knownMargin is how long before the walk began a file must have
	// last changed to be known: a write just after the helper read it
	// could otherwise land in the same tick of the file system's clock,
	// with the same ctime.
	knownMargin = time.Second
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
	return newProvider(cfg, api, NewExec(rc, cfg.Namespace, containerName), open, log), nil
}

func newProvider(cfg Config, api dynamic.Interface, exec *Exec, open OpenSessions, log *slog.Logger) *Provider {
	ctx, stop := context.WithCancel(context.Background())
	p := &Provider{cfg: cfg, cluster: newCluster(api, cfg), exec: exec, open: open, log: log,
		live: map[string]*podWorkspace{}, stop: stop, grace: helperGrace, knownMargin: knownMargin}
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
	p.mu.Lock()
	p.live[s.ID] = &podWorkspace{pod: pod, manifest: manifest.Bytes()}
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
	err := p.frames(ctx, pod, p.helper("unpack", args...), helperWork, tarball, &status, func(kind byte, payload []byte, _ *inpod.FrameReader) error {
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
func (p *Provider) frames(ctx context.Context, pod string, argv []string, limit time.Duration, stdin io.Reader, status any,
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
		code, err := p.exec.Run(ctx, pod, argv, ExecOptions{Stdin: stdin, Stdout: in, Stderr: &stderr})
		if err == nil && code != 0 {
			err = fmt.Errorf("kube: the pod's helper exited %d: %s", code, stderr.String())
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
	h := &tar.Header{Name: f.Path, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.Content)), Format: tar.FormatPAX}
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
	args := []string{"-root", p.cfg.Workspace, "-dir", c.Folder, "-hold",
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
	err = p.frames(ctx, ws.pod, p.helper("run", args...), lim.Timeout+p.grace, hold, &status, func(kind byte, payload []byte, _ *inpod.FrameReader) error {
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
	return startConsole(p.exec, ws.pod, p.helper("shell", "-root", p.cfg.Workspace), cols, rows), nil
}

// Changed has the pod's helper compare the workspace with the manifest
// and visits what differs, files with their content.
func (p *Provider) Changed(ctx context.Context, s sandbox.Session, maxDepth int, visit func(sandbox.Entry) error) error {
	ws, err := p.workspace(s)
	if err != nil {
		return err
	}
	args := []string{"-root", p.cfg.Workspace, "-max-depth", strconv.Itoa(maxDepth),
		"-max-entries", strconv.Itoa(changesEntries), "-max-file", strconv.Itoa(changesFileMax),
		"-max-bytes", strconv.Itoa(changesBytesMax), "-known"}
	// The manifest and the known files, each section ended by an empty
	// line: a stream that cannot close the helper's input (WebSocket v4)
	// still ends it.
	// The known files go by number: the helper names each one unchanged
	// by its line alone.
	knownList := slices.Collect(maps.Values(ws.known))
	var known bytes.Buffer
	for _, e := range knownList {
		line, _ := json.Marshal(e)
		known.Write(line)
		known.WriteByte('\n')
	}
	input := io.MultiReader(bytes.NewReader(ws.manifest), strings.NewReader("\n"), &known, strings.NewReader("\n"))
	var status inpod.ChangesStatus
	var skipped string // a folder visit skipped: nothing below it is visited
	stopped := errors.New("visit stopped")
	met := map[string]inpod.Entry{} // files whose content the server has: delivered now, or known before
	var asked []string              // known files whose content a visit asked for
	entries := 0
	err = p.frames(ctx, ws.pod, p.helper("changes", args...), helperWork, input, &status, func(kind byte, payload []byte, fr *inpod.FrameReader) error {
		if kind == inpod.FrameEntry || kind == inpod.FrameKnown {
			// The helper is told the bound; one taken over may ignore it.
			if entries++; entries > changesEntries {
				return fmt.Errorf("the helper sent more than %d entries", changesEntries)
			}
		}
		var e inpod.Entry
		var content []byte
		switch kind {
		case inpod.FrameEntry:
			if err := json.Unmarshal(payload, &e); err != nil {
				return fmt.Errorf("a bad entry: %w", err)
			}
			var err error
			if content, err = readContent(fr, e); err != nil {
				return err
			}
		case inpod.FrameKnown:
			n, err := strconv.Atoi(string(payload))
			if err != nil || n < 0 || n >= len(knownList) {
				return fmt.Errorf("a known file of no line (%.20q)", payload)
			}
			e = knownList[n]
			e.Content = false
		default:
			return nil
		}
		if skipped != "" && strings.HasPrefix(e.Path, skipped+"/") {
			return nil
		}
		entry, ok := sandboxEntry(e, content)
		if !ok {
			return nil
		}
		if k, was := ws.known[e.Path]; (e.Content || was && sameFile(k, e)) && len(met) < knownMax {
			met[e.Path] = e
		}
		if !e.Content {
			look := entry.Look.(podLook)
			look.asked = func() { asked = append(asked, e.Path) }
			entry.Look = look
		}
		switch err := visit(entry); {
		case errors.Is(err, fs.SkipDir):
			skipped = e.Path
		case errors.Is(err, fs.SkipAll):
			return stopped
		case err != nil:
			return err
		}
		return nil
	})
	cut := errors.Is(err, stopped)
	if err != nil && !cut {
		return err
	}
	if status.Error != "" {
		return fmt.Errorf("kube: changes in pod %s: %s", ws.pod, status.Error)
	}
	ws.known = knownAfter(ws.known, met, asked, cut, status.StartNs-p.knownMargin.Nanoseconds())
	return nil
}

// knownAfter is what a workspace knows after a walk: the files met whose
// content the server has, changed long enough before the walk began
// (before trustBefore, on the pod's clock), less those whose content a
// visit asked for (the next walk sends it). A walk cut short keeps what
// it did not reach.
func knownAfter(before, met map[string]inpod.Entry, asked []string, cut bool, trustBefore int64) map[string]inpod.Entry {
	after := make(map[string]inpod.Entry, len(met))
	if cut {
		for p, e := range before {
			after[p] = e
		}
	}
	for p, e := range met {
		if k, was := before[p]; was && sameFile(k, e) || e.CtimeNs < trustBefore {
			after[p] = e
		} else {
			delete(after, p)
		}
	}
	for _, p := range asked {
		delete(after, p)
	}
	for p := range after {
		if len(after) <= knownMax {
			break
		}
		delete(after, p)
	}
	return after
}

// sameFile says whether two entries of regular files have one content,
// as the helper judges it.
func sameFile(a, b inpod.Entry) bool {
	return a.Ino == b.Ino && a.CtimeNs == b.CtimeNs && a.Size == b.Size && a.Mode == b.Mode
}

// readContent reads the content frames that follow an entry with
// Content, at most changesFileMax bytes.
func readContent(fr *inpod.FrameReader, e inpod.Entry) ([]byte, error) {
	if !e.Content {
		return nil, nil
	}
	if e.Size < 0 || e.Size > changesFileMax {
		return nil, fmt.Errorf("an entry of %d bytes of content", e.Size)
	}
	content := make([]byte, 0, e.Size)
	for int64(len(content)) < e.Size {
		kind, payload, err := fr.Next()
		if err != nil {
			return nil, err
		}
		if kind != inpod.FrameContent || int64(len(content)+len(payload)) > e.Size {
			return nil, fmt.Errorf("content of %s does not match its size", e.Path)
		}
		content = append(content, payload...)
	}
	return content, nil
}

// sandboxEntry is e as Changed's visit meets it; ok is false for an
// entry whose path is not a clean relative one (a helper taken over).
func sandboxEntry(e inpod.Entry, content []byte) (sandbox.Entry, bool) {
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
	return sandbox.Entry{Path: e.Path, Kind: kind, TooDeep: e.TooDeep, Look: podLook{e: e, content: content}}, true
}

// podLook is an entry as the pod's helper reported it.
type podLook struct {
	e       inpod.Entry
	content []byte
	asked   func() // a read of content that did not come
}

func (l podLook) Stat() (sandbox.FileStat, error) {
	return sandbox.FileStat{Regular: l.e.Kind == inpod.KindFile, Ino: l.e.Ino, Size: l.e.Size, Mode: l.e.Mode,
		MtimeNsec: l.e.MtimeNs, CtimeNsec: l.e.CtimeNs}, nil
}

// ReadFile gives the content the helper sent. A file within the bound
// whose content did not come (the walk's byte budget spent, or known from
// an earlier walk) is EAGAIN: the capture passes over it, and the next
// walk sends it.
func (l podLook) ReadFile(buf []byte) (int, sandbox.FileStat, error) {
	st, _ := l.Stat()
	if !l.e.Content && l.e.Size < changesFileMax {
		if l.asked != nil {
			l.asked()
		}
		return 0, st, syscall.EAGAIN
	}
	return copy(buf, l.content), st, nil
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

// killAllIn ends every process in pod but its main one.
func (p *Provider) killAllIn(ctx context.Context, pod string) error {
	var status inpod.KillStatus
	if err := p.frames(ctx, pod, p.helper("killall"), p.grace, nil, &status, ignoreFrames); err != nil {
		return err
	}
	if status.Left > 0 {
		return fmt.Errorf("%w: %d processes in pod %s", sandbox.ErrProcessesLeft, status.Left, pod)
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
