//go:build linux

package sandbox_test

import (
	"context"
	"testing"

	"atelier/sandbox"
)

// BenchmarkJailedTrue is a one-shot command's whole cost (helper, cgroup,
// jail, namespace teardown); BenchmarkPlainTrue is `bash -c true` beside it.
func BenchmarkJailedTrue(b *testing.B) {
	sb := newSandbox(b, nil)
	s := newSession(b, sb)
	for b.Loop() {
		if _, err := sb.Run(context.Background(), s.spec("true"), sandbox.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlainTrue(b *testing.B) {
	for b.Loop() {
		if _, err := sandbox.RunPlain(context.Background(), bash("true"), "/", nil, sandbox.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
