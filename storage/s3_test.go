package storage_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"atelier/storage"
	"atelier/testrig/miniotest"
	"atelier/testrig/storagetest"
)

var bucketSeq atomic.Int64

// newBucket returns a bucket name not used before by this test binary.
func newBucket() string {
	return fmt.Sprintf("test-%d", bucketSeq.Add(1))
}

func newS3(t *testing.T, cfg storage.S3Config) *storage.S3 {
	t.Helper()
	s, err := storage.NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewS3(%s, bucket %s): %v", cfg.Endpoint, cfg.Bucket, err)
	}
	return s
}

// TestS3 runs the conformance tests against a real MinIO server, each on a
// bucket of its own.
func TestS3(t *testing.T) {
	srv := miniotest.Start(t)
	storagetest.Run(t, func(t *testing.T) storage.ObjectStore {
		return newS3(t, srv.Config(newBucket()))
	})
}

// rawClient reaches the server past the store, to look at what it really
// holds.
func rawClient(t *testing.T, srv *miniotest.Server) *minio.Client {
	t.Helper()
	c, err := minio.New(srv.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Objects above 16 MiB go up as multipart uploads; a wrong size must abort
// the upload too, leaving neither an object nor an unfinished upload.
func TestS3Multipart(t *testing.T) {
	srv := miniotest.Start(t)
	cfg := srv.Config(newBucket())
	s := newS3(t, cfg)
	ctx := context.Background()
	data := make([]byte, 17<<20)
	rand.Read(data)

	if err := s.Put(ctx, "blobs/big", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Get(ctx, "blobs/big")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get of the multipart object: %d bytes, %v", len(got), err)
	}

	for name, size := range map[string]int64{"long": int64(len(data)) - 1, "short": int64(len(data)) + 1} {
		key := "blobs/big-" + name
		err := s.Put(ctx, key, bytes.NewReader(data), size)
		if !errors.Is(err, storage.ErrSizeMismatch) {
			t.Errorf("%s multipart Put = %v, want storage.ErrSizeMismatch", name, err)
		}
		if _, err := s.Stat(ctx, key); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s multipart Put left an object: %v", name, err)
		}
	}
	raw := rawClient(t, srv)
	for u := range raw.ListIncompleteUploads(ctx, cfg.Bucket, "", true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		t.Errorf("unfinished upload left behind: %s (%s)", u.Key, u.UploadID)
	}
}

func TestNewS3(t *testing.T) {
	srv := miniotest.Start(t)
	ctx := context.Background()
	raw := rawClient(t, srv)

	cfg := srv.Config(newBucket())
	newS3(t, cfg)
	if ok, err := raw.BucketExists(ctx, cfg.Bucket); err != nil || !ok {
		t.Fatalf("NewS3 did not create bucket %s: %v %v", cfg.Bucket, ok, err)
	}
	// The bucket exists now: a second store uses it, and sees the objects.
	a := newS3(t, cfg)
	if err := a.Put(ctx, "x", strings.NewReader("1"), 1); err != nil {
		t.Fatal(err)
	}
	b := newS3(t, cfg)
	if size, err := b.Stat(ctx, "x"); err != nil || size != 1 {
		t.Fatalf("second store on the bucket: %d, %v", size, err)
	}

	// An endpoint given as a URL.
	url := cfg
	url.Endpoint = "http://" + cfg.Endpoint
	if size, err := newS3(t, url).Stat(ctx, "x"); err != nil || size != 1 {
		t.Fatalf("store on http://%s: %d, %v", cfg.Endpoint, size, err)
	}

	bad := map[string]func(c *storage.S3Config){
		"no endpoint":      func(c *storage.S3Config) { c.Endpoint = "" },
		"no bucket":        func(c *storage.S3Config) { c.Bucket = "" },
		"endpoint path":    func(c *storage.S3Config) { c.Endpoint = "http://" + cfg.Endpoint + "/bucket" },
		"endpoint scheme":  func(c *storage.S3Config) { c.Endpoint = "ftp://" + cfg.Endpoint },
		"bad bucket name":  func(c *storage.S3Config) { c.Bucket = "Not_A_Bucket" },
		"wrong secret key": func(c *storage.S3Config) { c.SecretKey += "x" },
		"unknown access":   func(c *storage.S3Config) { c.AccessKey = "nobody" },
	}
	for name, change := range bad {
		c := cfg
		c.Bucket = newBucket()
		change(&c)
		s, err := storage.NewS3(ctx, c)
		if err == nil {
			t.Errorf("%s: NewS3 succeeded: %+v", name, s)
			continue
		}
		// The server is up: none of these is its being unavailable.
		if errors.Is(err, storage.ErrUnavailable) {
			t.Errorf("%s: %v, which is not the server being unavailable", name, err)
		}
	}
}

// When the object store goes away, every call fails within seconds, and as
// ErrUnavailable, never as fs.ErrNotExist: a caller must be able to tell
// "missing" from "unreachable".
func TestS3Unavailable(t *testing.T) {
	srv := miniotest.Start(t)
	cfg := srv.Config(newBucket())
	s := newS3(t, cfg)
	ctx := context.Background()
	if err := s.Put(ctx, "blobs/there", strings.NewReader("here"), 4); err != nil {
		t.Fatal(err)
	}
	// A download under way when the server dies. It is larger than what the
	// loopback socket buffers hold, so that some of it is still to come.
	big := make([]byte, 40<<20)
	rand.Read(big)
	if err := s.Put(ctx, "blobs/big", bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	download, err := s.Get(ctx, "blobs/big")
	if err != nil {
		t.Fatal(err)
	}
	defer download.Close()
	if _, err := io.ReadFull(download, make([]byte, 1<<10)); err != nil {
		t.Fatal(err)
	}

	srv.Kill()

	const limit = 3 * time.Second
	check := func(op string, err error, start time.Time) {
		t.Helper()
		if elapsed := time.Since(start); elapsed > limit {
			t.Errorf("%s took %v with the server gone, want under %v", op, elapsed, limit)
		}
		switch {
		case err == nil:
			t.Errorf("%s succeeded with the server gone", op)
		case errors.Is(err, fs.ErrNotExist):
			t.Errorf("%s = %v: a dead store must not look like a missing object", op, err)
		case !errors.Is(err, storage.ErrUnavailable):
			t.Errorf("%s = %v, want storage.ErrUnavailable", op, err)
		}
	}
	for _, key := range []string{"blobs/there", "blobs/never"} {
		start := time.Now()
		rc, err := s.Get(ctx, key)
		if err == nil {
			rc.Close()
		}
		check("Get "+key, err, start)
		start = time.Now()
		_, err = s.Stat(ctx, key)
		check("Stat "+key, err, start)
	}
	start := time.Now()
	err = s.Put(ctx, "blobs/new", strings.NewReader("new"), 3)
	check("Put", err, start)
	start = time.Now()
	err = s.Delete(ctx, "blobs/there")
	check("Delete", err, start)
	start = time.Now()
	_, err = storage.NewS3(ctx, cfg)
	check("NewS3", err, start)
	start = time.Now()
	_, err = io.Copy(io.Discard, download)
	check("reading a download", err, start)
}
