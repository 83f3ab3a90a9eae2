package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	"atelier/storage"
)

// A project imported twice and deleted must leave the object store as it
// found it once the collector's grace has passed: every blob of both
// imports gone from MinIO itself (looked up by the hash git gives the
// content), and the bucket no larger than before the first import.

// storageReclaimed imports two different trees of n files of size bytes
// into one project, deletes it and waits, at most grace and a minute, for
// the collector to take the blobs away.
func storageReclaimed(s *server, c *client, n int, size int64, grace time.Duration) (string, bool) {
	ctx := context.Background()
	objects, err := storage.NewS3(ctx, s.minio.Config(bucket))
	if err != nil {
		return err.Error(), false
	}
	_, before, err := s.minio.Usage(ctx, bucket)
	if err != nil {
		return err.Error(), false
	}
	id, err := c.CreateProject("abuse-storage-reclaimed")
	if err != nil {
		return err.Error(), false
	}
	var keys []string
	for _, round := range []string{"first", "second"} {
		files := make([]archived, n)
		for i := range files {
			files[i] = archived{name: fmt.Sprintf("%s/blob-%d.bin", round, i), head: fmt.Sprintf("%s import, file %d\n", round, i), size: size}
			keys = append(keys, "blobs/"+blobSHA(files[i]))
		}
		if err := c.importArchive(id, files); err != nil {
			return err.Error(), false
		}
	}
	_, imported, err := s.minio.Usage(ctx, bucket)
	if err != nil {
		return err.Error(), false
	}
	for _, k := range keys {
		if _, err := objects.Stat(ctx, k); err != nil {
			return fmt.Sprintf("%s is not in the store after the imports: %v", k, err), false
		}
	}
	req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("%s/projects/%d", c.Base, id), nil)
	resp, err := c.Do(req)
	if err != nil {
		return err.Error(), false
	}
	resp.Body.Close()
	deleted := time.Now()
	left, after := len(keys), imported
	for deadline := deleted.Add(grace + time.Minute); (left > 0 || after > before) && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		left = 0
		for _, k := range keys {
			if _, err := objects.Stat(ctx, k); err == nil {
				left++
			}
		}
		if _, after, err = s.minio.Usage(ctx, bucket); err != nil {
			return err.Error(), false
		}
	}
	took := time.Since(deleted)
	detail := fmt.Sprintf("bucket %s before, %s after two imports, %s %s after the deletion; %d of %d blobs left",
		bytesOf(before), bytesOf(imported), bytesOf(after), took.Round(100*time.Millisecond), left, len(keys))
	return detail, left == 0 && after <= before
}

// blobSHA is the name git gives the file's content, which the object store
// keeps it under.
func blobSHA(f archived) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00%s", f.size, f.head)
	_, _ = io.CopyN(h, zeros{}, f.size-int64(len(f.head)))
	return hex.EncodeToString(h.Sum(nil))
}

// bytesOf writes a size in the unit that shows it: bytes, KiB or MiB.
func bytesOf(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
