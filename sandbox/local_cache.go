package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A project's cache is what its tools keep between builds (Go's build and
// module caches, npm's, pip's, ~/.cache in general), kept on this host on
// a disk of its own (MountCache) and seen at HOME/.cache.
//
// One session of the project holds it at a time, from its first checkout
// until it ends, and it is that session's uid's throughout: the files a
// build writes are its own, as the tools expect. Sessions of the project
// that run meanwhile, as other uids, have their own HOME/.cache instead,
// fresh, on their own disk and gone with them. An overlay per session over
// a shared cache would have let them all start warm, but what each wrote
// would have to be folded back into a tree the others read at that moment,
// and the lower layer's files would stay their writer's, which the next
// session could not change; taking turns needs neither.
//
// Sessions of one project share what their builds leave, as they share the
// project's code; a Change's check shares nothing of it (RunCheck).
//
// When a session takes the cache, the least recently used entries go
// until it is at most cacheKeep of its bound, so the session has room to
// write; past the whole bound its writes fail with ENOSPC in the cache, as
// on a full disk. All projects' caches on the host stay within
// LocalConfig.CacheTotal (roomForCache).

// cacheKeep is the share of its bound a cache is trimmed to when a
// session takes it: three quarters, leaving the session a quarter.
func cacheKeep(bound int64) int64 { return bound / 4 * 3 }

// caches are this host's project caches and who holds each.
type caches struct {
	mu sync.Mutex
	of map[int64]*projectCache
	// room is held while room is made among all caches (roomForCache).
	room sync.Mutex
}

// projectCache is one project's cache on this host.
type projectCache struct {
	mu      sync.Mutex
	holder  string // the session holding it, or ""
	mounted bool
}

func (c *caches) project(id int64) *projectCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.of == nil {
		c.of = map[int64]*projectCache{}
	}
	pc := c.of[id]
	if pc == nil {
		pc = &projectCache{}
		c.of[id] = pc
	}
	return pc
}

// makeHomeCache makes HOME/.cache, the session's, unless HOME has one: the
// project's cache is bound over it, or it is the session's own. What the
// session made of it is left as it is.
func makeHomeCache(home string, uid uint32) error {
	dir := filepath.Join(home, ".cache")
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err == nil {
		err = os.Lchown(dir, int(uid), int(uid))
	}
	if err != nil {
		return fmt.Errorf("sandbox: HOME/.cache: %w", err)
	}
	return nil
}

// cachePaths are the project's cache image and where it is mounted, the
// one place they are derived; sessions see the folder cache in it.
func (l *Local) cachePaths(projectID int64) (image, top string) {
	name := "p" + strconv.FormatInt(projectID, 10)
	return filepath.Join(l.cfg.CacheArea, name+".img"), filepath.Join(l.cfg.CacheArea, name)
}

// takeCache gives the session, as its uid, the project's cache when nobody
// else holds it, and answers the folder to see at HOME/.cache; "" when
// another session holds it or caches are off. Taken anew, it is trimmed
// and handed to the session's uid first. A cache that cannot be mounted is logged and
// left out: a build without it is only slower.
func (l *Local) takeCache(s Session) string {
	if l.cfg.CacheBytes <= 0 {
		return ""
	}
	pc := l.caches.project(s.ProjectID)
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.holder != "" && pc.holder != s.ID {
		return ""
	}
	taken := pc.holder == s.ID
	if !taken && !l.roomForCache(s.ProjectID) {
		l.log.Warn("no room for the project's cache among the others held; the session goes without it",
			"project", s.ProjectID, "session", s.ID, "total", l.cfg.CacheTotal)
		return ""
	}
	folder, err := l.mountCache(pc, s.ProjectID)
	if err == nil && !taken {
		err = l.handCache(folder, s.UID)
	}
	if err != nil {
		l.log.Warn("the project's cache is left out", "project", s.ProjectID, "session", s.ID, "err", err)
		return ""
	}
	pc.holder = s.ID
	l.touchCache(s.ProjectID)
	return folder
}

// touchCache marks the project's cache as used now, for roomForCache: by
// the kernel's clock, which also times the writes to its image.
func (l *Local) touchCache(projectID int64) {
	image, _ := l.cachePaths(projectID)
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, image, now, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.log.Warn("cache not marked used", "project", projectID, "err", err)
	}
}

// roomForCache makes room for projectID's cache, about to be taken, among
// all projects' caches on this host, within CacheTotal: a cache a session
// holds counts whole, since the session may fill it, and so does this one;
// the others count what their images hold. While they pass the total, the
// one of those used least recently goes, image and all. It answers false
// when they pass it even then. The caller holds projectID's lock; the
// others' are only tried, so two sessions making room at once never wait
// for each other's, and a cache being taken or released meanwhile counts
// whole.
func (l *Local) roomForCache(projectID int64) bool {
	if l.cfg.CacheTotal <= 0 {
		return true
	}
	l.caches.room.Lock()
	defer l.caches.room.Unlock()
	type idle struct {
		id   int64
		pc   *projectCache
		size int64
		used time.Time
	}
	var idles []idle
	defer func() {
		for _, c := range idles {
			c.pc.mu.Unlock()
		}
	}()
	total := l.cfg.CacheBytes
	images, _ := filepath.Glob(filepath.Join(l.cfg.CacheArea, "p*.img"))
	for _, image := range images {
		id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(image), "p"), ".img"), 10, 64)
		if err != nil || id == projectID {
			continue
		}
		pc := l.caches.project(id)
		if !pc.mu.TryLock() {
			total += l.cfg.CacheBytes
			continue
		}
		var st unix.Stat_t
		if pc.holder != "" || unix.Lstat(image, &st) != nil {
			total += l.cfg.CacheBytes
			pc.mu.Unlock()
			continue
		}
		idles = append(idles, idle{id: id, pc: pc, size: st.Blocks * 512, used: time.Unix(st.Mtim.Unix())})
		total += st.Blocks * 512
	}
	slices.SortFunc(idles, func(a, b idle) int { return a.used.Compare(b.used) })
	for _, c := range idles {
		if total <= l.cfg.CacheTotal {
			break
		}
		image, top := l.cachePaths(c.id)
		if err := UnmountDisk(image, top); err != nil {
			l.log.Warn("a cache not removed to make room", "project", c.id, "err", err)
			continue
		}
		c.pc.mounted = false
		total -= c.size
		l.log.Info("cache removed to make room for another project's", "project", c.id, "bytes", c.size)
	}
	return total <= l.cfg.CacheTotal
}

// mountCache mounts the project's cache disk, made when missing, and
// answers its folder.
func (l *Local) mountCache(pc *projectCache, projectID int64) (string, error) {
	image, top := l.cachePaths(projectID)
	if !pc.mounted {
		if err := os.MkdirAll(l.cfg.CacheArea, 0o700); err != nil {
			return "", fmt.Errorf("sandbox: caches: %w", err)
		}
		if err := MountCache(image, top, l.cfg.CacheBytes); err != nil {
			return "", err
		}
		pc.mounted = true
	}
	return filepath.Join(top, "cache"), nil
}

// handCache makes room in the cache and gives it to uid.
func (l *Local) handCache(folder string, uid uint32) error {
	if _, err := os.Lstat(folder); err == nil {
		freed, err := TrimCache(folder, cacheKeep(l.cfg.CacheBytes))
		if err != nil {
			return err
		}
		if freed > 0 {
			l.log.Info("least recently used cache entries removed", "cache", folder, "bytes", freed)
		}
	}
	return GiveCache(folder, uid, uid)
}

// releaseCache ends the session's hold of its project's cache, once
// nothing of the session runs.
func (l *Local) releaseCache(s Session) {
	pc := l.caches.project(s.ProjectID)
	pc.mu.Lock()
	if pc.holder == s.ID {
		pc.holder = ""
		l.touchCache(s.ProjectID)
	}
	pc.mu.Unlock()
}

// unmountCaches unmounts every project's cache disk, keeping the images,
// for a server that stops.
func (l *Local) unmountCaches() error {
	l.caches.mu.Lock()
	all := maps.Clone(l.caches.of)
	l.caches.mu.Unlock()
	var errs []error
	for id, pc := range all {
		pc.mu.Lock()
		if pc.mounted {
			_, top := l.cachePaths(id)
			if err := UnmountCache(top); err != nil {
				errs = append(errs, err)
			} else {
				pc.mounted = false
			}
		}
		pc.holder = ""
		pc.mu.Unlock()
	}
	return errors.Join(errs...)
}

// removeCache removes a deleted project's cache, its disk and its image.
func (l *Local) removeCache(projectID int64) error {
	if l.cfg.CacheArea == "" {
		return nil
	}
	pc := l.caches.project(projectID)
	pc.mu.Lock()
	defer pc.mu.Unlock()
	image, top := l.cachePaths(projectID)
	if err := UnmountDisk(image, top); err != nil {
		return err
	}
	pc.mounted, pc.holder = false, ""
	l.caches.mu.Lock()
	delete(l.caches.of, projectID)
	l.caches.mu.Unlock()
	return nil
}
