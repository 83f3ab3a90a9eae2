package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"atelier/internal/tied"
)

// clusterRow is the row of two instances behind a real balancer, one of
// them killed.
const clusterRow = "an instance killed behind a balancer"

// clusterSecret is what the suite's instances share.
const clusterSecret = "abuse-cluster-secret-0123456789abcdef"

// Bounds of the row: a stream of the dead instance's shell says lost, a
// new shell opens on the live one, and the dead one's reservations are
// settled.
const (
	lostWithin     = 20 * time.Second
	newShellWithin = 2 * time.Second
	settledWithin  = 30 * time.Second
)

// startPeer starts a second instance from the suite's binary on the same
// database, object store and data folder, with a sandbox area and uids
// of its own, and waits until it answers.
func (s *server) startPeer() (*server, error) {
	dir, err := os.MkdirTemp("", "atelier-abuse-peer-")
	if err != nil {
		return nil, err
	}
	p := &server{dir: dir, bin: s.bin, dataDir: s.dataDir, tmp: filepath.Join(dir, "tmp")}
	if err := os.Chmod(dir, 0o711); err != nil {
		p.stop()
		return nil, err
	}
	if err := os.Mkdir(p.tmp, 0o700); err != nil {
		p.stop()
		return nil, err
	}
	if p.addr, err = freeAddr(); err != nil {
		p.stop()
		return nil, err
	}
	p.base = "http://" + p.addr
	if p.logw, err = os.Create(filepath.Join(dir, "server.log")); err != nil {
		p.stop()
		return nil, err
	}
	// The last value of a variable wins.
	p.env = append(append([]string{}, s.env...), "ATELIER_ADDR="+p.addr, "ATELIER_INTERNAL_URL="+p.base,
		"ATELIER_SANDBOX_AREA="+filepath.Join(dir, "area"), "ATELIER_SANDBOX_UID_BASE=3001000000", "TMPDIR="+p.tmp)
	if err := p.launch(); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// addPeer starts a second instance beside s and HAProxy in front of both.
func (s *server) addPeer() (*server, *balancer, error) {
	peer, err := s.startPeer()
	if err != nil {
		return nil, nil, fmt.Errorf("abuse: a second instance: %w", err)
	}
	lb, err := startBalancer(peer.dir, s.addr, peer.addr)
	if err != nil {
		peer.stop()
		return nil, nil, err
	}
	return peer, lb, nil
}

// dropPeer stops the balancer and the second instance beside s, if any.
func (s *server) dropPeer() {
	if s.lb != nil {
		s.lb.stop()
	}
	if s.peer != nil {
		s.peer.stop()
	}
	s.peer, s.lb = nil, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// balancer runs HAProxy from Debian's packages on loopback in front of
// the instances with deploy/haproxy.cfg, the configuration operators
// deploy: round-robin per request, health-checked on /healthz, the
// client's address passed on in X-Forwarded-For (the instances trust the
// balancer's) and each client's connections bounded at the balancer.
type balancer struct {
	addr, base string
	stats      string // HAProxy's own page of its servers' states
	backends   int
	cmd        *exec.Cmd
	exited     chan struct{}
}

func startBalancer(dir string, backends ...string) (*balancer, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("abuse: haproxy is not installed (Debian: apt-get install haproxy; test.sh installs it): %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	statsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfg, err := balancerConfig(addr, statsAddr, backends)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		return nil, err
	}
	b := &balancer{addr: addr, base: "http://" + addr, stats: "http://" + statsAddr + "/stats;csv", backends: len(backends),
		cmd: exec.Command(bin, "-f", path, "-db"), exited: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr = logf, logf
	if err := tied.Start(b.cmd, syscall.SIGKILL, func(error) { close(b.exited) }); err != nil {
		return nil, err
	}
	if err := b.waitUp(30 * time.Second); err != nil {
		b.stop()
		return nil, fmt.Errorf("%w (see %s)", err, logf.Name())
	}
	return b, nil
}

// balancerConfig is deploy/haproxy.cfg bound to addr, in front of
// backends, with checks every half second (so the suite need not wait
// out an operator's pace) and its servers' states on a page at
// statsAddr.
func balancerConfig(addr, statsAddr string, backends []string) (string, error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("abuse: the module's folder: %w", err)
	}
	deployed, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), "deploy", "haproxy.cfg"))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	bound, served := false, false
	for line := range strings.Lines(string(deployed)) {
		switch field := strings.Fields(line); {
		case len(field) > 0 && field[0] == "server":
			// The suite's instances in place of the deployed ones.
			if !served {
				for i, backend := range backends {
					fmt.Fprintf(&b, "    server i%d %s check inter 500ms fall 2 rise 1\n", i, backend)
				}
				served = true
			}
			continue
		case len(field) == 2 && field[0] == "bind":
			line, bound = "    bind "+addr+"\n", true
		}
		b.WriteString(line)
	}
	if !bound || !served {
		return "", errors.New("abuse: deploy/haproxy.cfg has no bind or no server line to replace")
	}
	fmt.Fprintf(&b, "listen stats\n    bind %s\n    stats enable\n    stats uri /stats\n", statsAddr)
	return b.String(), nil
}

// waitUp waits until the balancer counts every instance up, so that a
// client is not told 503 for an instance just started that its checks
// have not seen yet.
func (b *balancer) waitUp(within time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	up := 0
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := hc.Get(b.stats)
		if err != nil {
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			continue
		}
		// The CSV's columns: pxname, svname, ..., the 18th is status.
		up = 0
		for line := range strings.SplitSeq(string(body), "\n") {
			f := strings.Split(line, ",")
			if len(f) > 17 && f[0] == "instances" && strings.HasPrefix(f[1], "i") && f[17] == "UP" {
				up++
			}
		}
		if up == b.backends {
			return nil
		}
	}
	return fmt.Errorf("abuse: the balancer counted %d of %d instances up after %s", up, b.backends, within)
}

func (b *balancer) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}

// clusterKill: a second instance joins the suite's server behind HAProxy;
// a person works through the balancer (a saved edit, a shell); the
// instance holding the session is SIGKILLed. The shell's stream says lost
// within lostWithin, a new shell opens within newShellWithin after that,
// the saved edit is there, and the dead instance's reservations are
// settled within settledWithin. Both instances run again afterwards.
func clusterKill(s *server, logw func(string)) (string, bool) {
	peer, lb := s.peer, s.lb
	if peer == nil {
		var err error
		if peer, lb, err = s.addPeer(); err != nil {
			return err.Error(), false
		}
		defer peer.stop()
		defer lb.stop()
	}
	c, err := signIn(lb.base, "admin", adminPassword)
	if err != nil {
		return "sign in through the balancer: " + err.Error(), false
	}
	id, err := c.CreateProject("abuse-cluster")
	if err != nil {
		return err.Error(), false
	}
	base, err := c.openSession(id)
	if err != nil {
		return err.Error(), false
	}
	const kept = "saved through the balancer\n"
	if status, reason, err := c.save(base, "kept.txt", kept); err != nil || status >= 300 {
		return fmt.Sprintf("save: %d %s %v", status, reason, err), false
	}
	tid, err := c.openShell(base, "sleep 614\n")
	if err != nil {
		return err.Error(), false
	}
	ctx := context.Background()
	var holder, address string
	if err := s.scan(ctx, `SELECT i.id, i.address FROM code_sessions cs JOIN instances i ON i.id = cs.runtime_instance
		WHERE cs.id = $1`, []any{base[strings.LastIndex(base, "/")+1:]}, &holder, &address); err != nil {
		return "the session's holder: " + err.Error(), false
	}
	victim := s
	if address == peer.base {
		victim = peer
	}
	other := peer
	if victim == peer {
		other = s
	}
	hop, err := keystrokeHop(c, base, victim.base, other.base)
	if err != nil {
		return "keystrokes before the kill: " + err.Error(), false
	}
	logw(fmt.Sprintf("killing %s, which holds the session", victim.base))

	killed := time.Now()
	victim.kill()
	var lostAfter, shellAfter, settledAfter time.Duration
	for time.Since(killed) < 2*lostWithin {
		if body, err := c.shellStream(base, tid); err == nil && strings.Contains(body, `"lost":true`) {
			lostAfter = time.Since(killed)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lostAfter > 0 {
		lost := time.Now()
		for time.Since(lost) < 5*newShellWithin {
			if _, err := c.openShell(base, "echo again\n"); err == nil {
				shellAfter = time.Since(lost)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for time.Since(killed) < 2*settledWithin {
		var open int64
		if err := s.scan(ctx, `SELECT count(*) FROM sandbox_reservations WHERE instance = $1`, []any{holder}, &open); err == nil && open == 0 {
			settledAfter = time.Since(killed)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, status, err := c.get(base + "/file?path=kept.txt")

	var why []string
	switch {
	case lostAfter == 0 || lostAfter > lostWithin:
		why = append(why, fmt.Sprintf("the shell's stream said lost after %s, want within %s", dur(lostAfter), lostWithin))
	case shellAfter == 0 || shellAfter > newShellWithin:
		why = append(why, fmt.Sprintf("a new shell opened %s after, want within %s", dur(shellAfter), newShellWithin))
	}
	if settledAfter == 0 || settledAfter > settledWithin {
		why = append(why, fmt.Sprintf("the dead instance's reservations settled after %s, want within %s", dur(settledAfter), settledWithin))
	}
	if err != nil || status != http.StatusOK || got != kept {
		why = append(why, fmt.Sprintf("the saved edit: %d %q %v", status, got, err))
	}
	// The killed instance comes back: its start ends what it left.
	if err := victim.launch(); err != nil {
		why = append(why, "the killed instance did not start again: "+err.Error())
	}
	detail := fmt.Sprintf("%s; holder SIGKILLed: stream lost after %s, new shell %s later, reservations settled after %s, saved edit intact",
		hop, dur(lostAfter), dur(shellAfter), dur(settledAfter))
	if len(why) > 0 {
		return detail + "; " + strings.Join(why, "; "), false
	}
	return detail, true
}

// hopKeys is how many keystrokes keystrokeHop sends each way.
const hopKeys = 500

// keystrokeHop types into a new shell of the session, one key per request,
// alternately to the instance holding it (direct) and to the other (which
// hands each on over the cluster's internal address), and says how long a
// keystroke's request took each way: the extra hop's cost, measured side
// by side in one run.
func keystrokeHop(c *client, base, holder, other string) (string, error) {
	tid, seq, err := c.openShellAt(base, "cat >/dev/null\n")
	if err != nil {
		return "", err
	}
	var direct, hop []time.Duration
	for i := range 2 * hopKeys {
		origin, took := holder, &direct
		if i%2 == 1 {
			origin, took = other, &hop
		}
		start := time.Now()
		if err := c.typeInto(origin, base, tid, seq, "x"); err != nil {
			return "", err
		}
		*took = append(*took, time.Since(start))
		seq++
	}
	return fmt.Sprintf("keystroke p50/p99 direct %s, through the other instance %s", percentiles(direct), percentiles(hop)), nil
}

// percentiles says a sample's p50 and p99 in milliseconds.
func percentiles(d []time.Duration) string {
	slices.Sort(d)
	ms := func(q int) string {
		return strconv.FormatFloat(float64(d[len(d)*q/100])/float64(time.Millisecond), 'f', 2, 64)
	}
	return ms(50) + "/" + ms(99) + " ms"
}

func dur(d time.Duration) string {
	if d == 0 {
		return "never"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}
