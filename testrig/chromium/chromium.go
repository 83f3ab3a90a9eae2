// Package chromium finds and starts the headless Chromium that the browser
// tests and cmd/bench's drop measure drive through chromedp, started the
// same way for both.
package chromium

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/chromedp/chromedp"
)

// PathEnv names a Chromium binary to use instead of the one found.
const PathEnv = "ATELIER_CHROMIUM"

// ErrNotFound says that no Chromium was found: the README's test command
// installs Debian's.
var ErrNotFound = errors.New("chromium: not found: run the README's test command (it installs Debian's chromium) or set " + PathEnv)

// Find answers the Chromium binary: PathEnv's, Debian's, or chromium on
// PATH.
func Find() (string, error) {
	for _, p := range []string{os.Getenv(PathEnv), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p, nil
	}
	return "", ErrNotFound
}

// Start starts a headless Chromium keeping its profile in dir, and answers
// the context of its first tab; cancel ends the browser.
func Start(dir string) (ctx context.Context, cancel context.CancelFunc, err error) {
	bin, err := Find()
	if err != nil {
		return nil, nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(dir),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	cancel = func() { cancelCtx(); cancelAlloc() }
	// The first action starts the browser and ties it to its context, so it
	// must run on this long-lived one, not on a step's deadline.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("chromium: start %s: %w", bin, err)
	}
	return ctx, cancel, nil
}
