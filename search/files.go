package search

import (
	"context"
	"sync"
)

// Reading files in parallel: how many at once, and how far the readers may
// run ahead of the file being handed on (whose matches they then hold).
const (
	fileWorkers = 4
	fileWindow  = 64
)

// Files is the source of files read one by one (a Local folder's), a few
// at a time, handed on in the order of paths, which should be sorted. read
// returns a file's content, or nil to pass it over (unreadable, too large:
// it should read no more than MaxFileBytes+1 bytes).
func Files(paths []string, read func(path string) []byte) Source {
	return func(ctx context.Context, m *Matcher, emit func(File) error) error {
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer wg.Wait() // runs after cancel: nothing is left reading
		defer cancel()

		type slot struct {
			file  File
			found bool
			done  chan struct{}
		}
		type job struct {
			s    *slot
			path string
		}
		order := make(chan *slot, fileWindow)
		jobs := make(chan job)
		wg.Add(fileWorkers + 1)
		for range fileWorkers {
			go func() {
				defer wg.Done()
				for j := range jobs {
					if ctx.Err() == nil {
						if content := read(j.path); content != nil {
							j.s.file, j.s.found = m.Text(j.path, content)
						}
					}
					close(j.s.done)
				}
			}()
		}
		go func() {
			defer wg.Done()
			defer close(order)
			defer close(jobs)
			for _, p := range paths {
				s := &slot{done: make(chan struct{})}
				select {
				case order <- s:
				case <-ctx.Done():
					return
				}
				select {
				case jobs <- job{s, p}:
				case <-ctx.Done():
					close(s.done)
					return
				}
			}
		}()
		for s := range order {
			select {
			case <-s.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			if s.found {
				if err := emit(s.file); err != nil {
					return err
				}
			}
		}
		return ctx.Err()
	}
}
