package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"atelier/internal/txwatch"
)

// S3Config says where an S3-compatible object store is.
type S3Config struct {
	// Endpoint is host:port, e.g. "minio:9000". A URL such as
	// "https://s3.example.com" is accepted too; its scheme then decides
	// Secure.
	Endpoint  string
	Bucket    string
	AccessKey string
	SecretKey string
	Secure    bool // HTTPS
}

// How long the S3 client waits, so that a store that is down makes calls
// fail within seconds instead of the minutes minio-go's defaults (10 tries,
// a 30-second dial timeout) can take. A refused connection fails at once and
// is tried s3Tries times in all, with at most 0.6 s of waiting between them.
// An upload of one request is sent once: minio-go cannot rewind the reader.
const (
	s3Tries          = 3
	s3DialTimeout    = 3 * time.Second
	s3TLSTimeout     = 5 * time.Second
	s3ResponseHeader = 30 * time.Second // a server that takes a request and then hangs
)

// S3 keeps objects in a bucket of an S3-compatible server such as MinIO,
// under their keys as they are.
//
// Errors: a missing object is fs.ErrNotExist; a server that cannot be
// reached, breaks the connection, times out or answers 5xx is ErrUnavailable
// (wrapping the cause). A bucket removed after NewS3 makes Get, Put and
// Delete fail with the server's NoSuchBucket error; Stat cannot tell it from
// a missing object, as a HEAD answer has no body to say which.
type S3 struct {
	client *minio.Client
	bucket string
}

// NewS3 connects to the server cfg names and creates the bucket when it does
// not exist. It fails, with ErrUnavailable when the server cannot be
// reached, so a misconfigured store shows at start-up.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	endpoint, secure, err := s3Endpoint(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, errors.New("storage: s3: no bucket given")
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("storage: s3: %w", err)
	}
	tr.DialContext = (&net.Dialer{Timeout: s3DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = s3TLSTimeout
	tr.ResponseHeaderTimeout = s3ResponseHeader
	client, err := minio.New(endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     secure,
		Transport:  tr,
		MaxRetries: s3Tries,
	})
	if err != nil {
		return nil, fmt.Errorf("storage: s3: %w", err)
	}
	s := &S3{client: client, bucket: cfg.Bucket}
	if err := s.ensureBucket(ctx); err != nil {
		return nil, s.fail(ctx, "bucket "+cfg.Bucket, err)
	}
	return s, nil
}

// s3Endpoint returns the host:port minio-go wants and whether to use HTTPS.
func s3Endpoint(cfg S3Config) (string, bool, error) {
	if cfg.Endpoint == "" {
		return "", false, errors.New("storage: s3: no endpoint given")
	}
	if !strings.Contains(cfg.Endpoint, "://") {
		return cfg.Endpoint, cfg.Secure, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		return "", false, fmt.Errorf("storage: s3: endpoint: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
		return "", false, fmt.Errorf("storage: s3: endpoint %q: want host:port or http(s)://host:port", cfg.Endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

func (s *S3) ensureBucket(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil || ok {
		return err
	}
	err = s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{})
	if minio.ToErrorResponse(err).Code == minio.BucketAlreadyOwnedByYou {
		return nil // made meanwhile by another process of ours
	}
	return err
}

// Get opens the object. It asks the server at once, so a missing object or
// an unreachable server shows here rather than at the first Read.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	txwatch.Slow(ctx, "object store get")
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: s3 get %s: %w", key, err)
	}
	// Core.GetObject sends the request now and hands over the response
	// body, unlike Client.GetObject, which waits for the first Read. With
	// Checksum set, the body is checked against the checksum the object was
	// stored with, when it has one.
	body, _, _, err := minio.Core{Client: s.client}.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{Checksum: true})
	if err != nil {
		return nil, s.fail(ctx, "get "+key, err)
	}
	return &s3Body{ReadCloser: body, s: s, ctx: ctx, key: key}, nil
}

// s3Body marks a broken download as ErrUnavailable like other failures.
type s3Body struct {
	io.ReadCloser
	s   *S3
	ctx context.Context
	key string
}

func (b *s3Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = b.s.fail(b.ctx, "get "+b.key, err)
	}
	return n, err
}

// Stat asks the server for the object's size.
func (s *S3) Stat(ctx context.Context, key string) (int64, error) {
	txwatch.Slow(ctx, "object store stat")
	if err := CheckKey(key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("storage: s3 stat %s: %w", key, err)
	}
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return 0, s.fail(ctx, "stat "+key, err)
	}
	return info.Size, nil
}

// Put uploads the object with its exact size, in one request up to 16 MiB
// and as a multipart upload above, whose parts minio-go buffers (16 MiB at a
// time for objects up to about 160 GiB). Never giving -1 matters: minio-go
// would buffer much more then.
//
// The reader is counted: when it yields fewer or more bytes than size, the
// upload is cut off before its last byte, so the server stores nothing (a
// multipart upload is aborted), and Put fails with ErrSizeMismatch.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	txwatch.Slow(ctx, "object store put")
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := checkPut(ctx, size); err != nil {
		return fmt.Errorf("storage: s3 put %s: %w", key, err)
	}
	er := newExactReader(ctx, r, size)
	var body io.Reader = er
	if size == 0 {
		// minio-go sends no body for size 0 and so never reads it: check
		// here that the reader is empty.
		if _, err := io.Copy(io.Discard, er); err != nil {
			return fmt.Errorf("storage: s3 put %s: %w", key, err)
		}
		body = strings.NewReader("")
	}
	_, err := s.client.PutObject(ctx, s.bucket, key, body, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
	})
	if er.err != nil {
		// Ours (a size mismatch, a failed reader, a cancelled context)
		// and the reason the upload failed, whatever minio-go made of it.
		return fmt.Errorf("storage: s3 put %s: %w", key, er.err)
	}
	if err != nil {
		return s.fail(ctx, "put "+key, err)
	}
	if !er.done {
		// The upload succeeded without reading the reader to its end,
		// which the cut-off above relies on. Do not keep an object whose
		// size was not checked.
		derr := s.client.RemoveObject(context.WithoutCancel(ctx), s.bucket, key, minio.RemoveObjectOptions{})
		return fmt.Errorf("storage: s3 put %s: the upload ended before the reader did (%d of %d bytes read); object removed: %v", key, er.n, size, derr)
	}
	return nil
}

// Delete removes the object; S3 reports no error for a missing one.
func (s *S3) Delete(ctx context.Context, key string) error {
	txwatch.Slow(ctx, "object store delete")
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("storage: s3 delete %s: %w", key, err)
	}
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return s.fail(ctx, "delete "+key, err)
	}
	return nil
}

// fail wraps an error of the S3 client: fs.ErrNotExist for a missing
// object, the context's error when ctx is done, ErrUnavailable when the
// server could not be reached or failed on its side.
func (s *S3) fail(ctx context.Context, what string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == minio.NoSuchKey:
		return fmt.Errorf("storage: s3 %s: %w", what, fs.ErrNotExist)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("storage: s3 %s: %w: %w", what, ctx.Err(), err)
	case ctx.Err() != nil:
		return fmt.Errorf("storage: s3 %s: %w", what, err)
	case unreachable(err) || resp.StatusCode >= http.StatusInternalServerError:
		return fmt.Errorf("storage: s3 %s: %w: %w", what, ErrUnavailable, err)
	}
	return fmt.Errorf("storage: s3 %s: %w", what, err)
}

// unreachable tells whether err is a failure to talk to the server at all:
// minio-go hands back the HTTP client's errors as they are, so a refused,
// reset or timed-out connection is a net.Error (url.Error is one) and a
// connection that broke during a body an unexpected EOF.
func unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}
