package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"

	"atelier/testrig/liveserver"
)

// ttyd is the anchor a terminal over a network is held to: a C server that
// relays a PTY over one WebSocket. The bench uses the ttyd on PATH, or
// builds one from its source into the user's cache folder, where the next
// run finds it.

// ttydSrcEnv names the folder of ttyd's source when -ttyd-src is not given.
const ttydSrcEnv = "ATELIER_TTYD_SRC"

// ttydCacheDir is where a ttyd built from source is kept between runs;
// removing it makes the next run build again.
func ttydCacheDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("bench: cache folder: %w", err)
	}
	return filepath.Join(cache, "atelier-bench", "ttyd"), nil
}

// findTTYD answers the ttyd binary to measure, or why there is none: the
// sentence goes into the table's rows. Build output goes to logw.
func findTTYD(src string, logw io.Writer) (bin, whyNot string) {
	if p, err := exec.LookPath("ttyd"); err == nil {
		return p, ""
	}
	dir, err := ttydCacheDir()
	if err != nil {
		return "", err.Error()
	}
	bin = filepath.Join(dir, "ttyd")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return bin, ""
	}
	if src == "" {
		return "", "not on PATH, and no source to build it from: give -ttyd-src or " + ttydSrcEnv
	}
	if _, err := os.Stat(filepath.Join(src, "CMakeLists.txt")); err != nil {
		return "", "not on PATH, and " + src + " is not ttyd's source (no CMakeLists.txt)"
	}
	for _, tool := range []string{"cmake", "cc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", "not on PATH, and no " + tool + " to build it from " + src
		}
	}
	build := filepath.Join(dir, "build")
	var out bytes.Buffer
	w := io.MultiWriter(logw, &out)
	for _, args := range [][]string{
		{"-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release"},
		{"--build", build, "--parallel"},
	} {
		cmd := exec.Command("cmake", args...)
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Run(); err != nil {
			return "", "not on PATH, and building it from " + src + " failed: " + lastLine(out.String())
		}
	}
	// Renamed into place only once built, so an interrupted build is not
	// taken for a binary next time.
	if err := os.Rename(filepath.Join(build, "ttyd"), bin); err != nil {
		return "", "not on PATH, and its build left no binary: " + err.Error()
	}
	return bin, ""
}

// lastLine is the last non-empty line of a tool's output, the one that
// usually says what went wrong.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// ttydServer is a running ttyd serving bash in a folder, behind a
// credential, as a person's terminal is behind their sign-in.
type ttydServer struct {
	cmd        *exec.Cmd
	addr       string
	token      string // what the browser page sends: base64 of user:password
	credential string // user:password
}

// startTTYD starts ttyd serving bash in dir, each of clientOptions
// ("key=value") passed to its page with -t.
func startTTYD(bin, dir string, logw io.Writer, clientOptions ...string) (*ttydServer, error) {
	addr, err := liveserver.FreeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	credential := "bench:" + hex.EncodeToString(secret)
	// -d 3: errors and warnings only; -W: the page may type.
	args := []string{"-i", host, "-p", port, "-W", "-d", "3", "-c", credential, "-w", dir}
	for _, o := range clientOptions {
		args = append(args, "-t", o)
	}
	cmd := exec.Command(bin, append(args, "bash", "--noprofile", "--norc")...)
	cmd.Stdout, cmd.Stderr = logw, logw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start ttyd: %w", err)
	}
	s := &ttydServer{cmd: cmd, addr: addr, credential: credential, token: base64.StdEncoding.EncodeToString([]byte(credential))}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return s, nil
		}
	}
	s.stop()
	return nil, errors.New("bench: ttyd did not listen within 10 s")
}

func (s *ttydServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// ttyd's messages start with a byte that says what they carry
// (src/server.h): the client sends input or its window size as JSON, the
// server sends output.
const (
	ttydInput  = '0'
	ttydOutput = '0'
)

// ttydTerm is one browser tab of ttyd, speaking its protocol over a
// WebSocket and decoding every frame it receives.
type ttydTerm struct {
	stream
	conn   *websocket.Conn
	server *ttydServer
}

func (s *ttydServer) open(cols, rows int) (*ttydTerm, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// No permessage-deflate: Atelier's event stream is not compressed
	// either, so both carry the same bytes.
	conn, _, err := websocket.Dial(ctx, "ws://"+s.addr+"/ws", &websocket.DialOptions{
		Subprotocols: []string{"tty"},
		HTTPHeader:   http.Header{"Authorization": {"Basic " + s.token}},
	})
	if err != nil {
		return nil, fmt.Errorf("bench: ttyd websocket: %w", err)
	}
	conn.SetReadLimit(-1)
	hello, _ := json.Marshal(map[string]any{"AuthToken": s.token, "columns": cols, "rows": rows})
	if err := conn.Write(ctx, websocket.MessageBinary, hello); err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("bench: ttyd hello: %w", err)
	}
	t := &ttydTerm{stream: stream{out: make(chan []byte, 1024)}, conn: conn, server: s}
	go func() {
		defer close(t.out)
		for {
			_, msg, err := conn.Read(context.Background())
			if err != nil {
				t.ended = err
				return
			}
			if len(msg) > 0 && msg[0] == ttydOutput {
				t.out <- msg[1:]
			}
		}
	}()
	return t, nil
}

func (t *ttydTerm) send(keys string) error {
	msg := make([]byte, 1+len(keys))
	msg[0] = ttydInput
	copy(msg[1:], keys)
	if err := t.conn.Write(context.Background(), websocket.MessageBinary, msg); err != nil {
		return fmt.Errorf("bench: ttyd input: %w", err)
	}
	return nil
}

func (t *ttydTerm) stop() { t.conn.CloseNow() }
