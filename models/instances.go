package models

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"atelier/fault"
)

// Instance is one server process sharing the database.
type Instance struct {
	ID          string
	Place       string
	Address     *string // where other instances hand it requests; nil: nowhere
	StartedAt   time.Time
	HeartbeatAt time.Time
	StoppedAt   *time.Time
}

// ErrInstanceGone: the instance was declared gone (its heartbeat came too
// late, or another instance took its place).
var ErrInstanceGone = errors.New("models: this instance was declared gone")

// ErrRuntimeElsewhere: another live instance holds the session's runtime.
var ErrRuntimeElsewhere = fault.New(fault.Conflict, "session_elsewhere",
	"models: another instance runs this session's commands and terminals",
	"This session's commands and terminals run on another server of this site right now; try again once that server lets them go, or reload to be sent there.")

// liveInstances is the subquery of the instances that live.
const liveInstances = "SELECT id FROM instances WHERE stopped_at IS NULL"

// StartInstance records id as the live instance of place, and declares
// every earlier instance of place gone: only one lives on a place, and
// the caller holds the place (its lock) now. It answers the ids it
// declared gone.
func (s *Store) StartInstance(ctx context.Context, id, place, address string, now time.Time) (gone []string, err error) {
	err = s.Tx(ctx, func(tx *Store) error {
		var err error
		if gone, err = tx.declareGone(now, "place = ?", place); err != nil {
			return err
		}
		in := &Instance{ID: id, Place: place, StartedAt: now, HeartbeatAt: now}
		if address != "" {
			in.Address = &address
		}
		return tx.db.Create(in).Error
	})
	if err != nil {
		return nil, fmt.Errorf("models: start instance %s: %w", id, translate(err))
	}
	return gone, nil
}

// InstanceBeats answers the last heartbeat of every live instance not of
// place, by id.
func (s *Store) InstanceBeats(ctx context.Context, place string) (map[string]time.Time, error) {
	var rows []Instance
	if err := s.db.WithContext(ctx).Where("stopped_at IS NULL AND place <> ?", place).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("models: live instances: %w", translate(err))
	}
	beats := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		beats[r.ID] = r.HeartbeatAt
	}
	return beats, nil
}

// BeatInstance renews id's heartbeat; ErrInstanceGone once it was
// declared gone.
func (s *Store) BeatInstance(ctx context.Context, id string, now time.Time) error {
	res := s.db.WithContext(ctx).Model(&Instance{}).Where("id = ? AND stopped_at IS NULL", id).Update("heartbeat_at", now)
	if res.Error != nil {
		return fmt.Errorf("models: heartbeat of %s: %w", id, translate(res.Error))
	}
	if res.RowsAffected == 0 {
		return ErrInstanceGone
	}
	return nil
}

// declareGone marks the live instances that match where gone at now, ends
// their claims on checks, and answers their ids. The caller holds a
// transaction.
func (s *Store) declareGone(now time.Time, where string, args ...any) ([]string, error) {
	var ids []string
	err := s.db.Raw("UPDATE instances SET stopped_at = ? WHERE stopped_at IS NULL AND "+where+" RETURNING id",
		append([]any{now}, args...)...).Scan(&ids).Error
	if err != nil {
		return nil, err
	}
	if err := s.expireCheckClaims(ids, now); err != nil {
		return nil, err
	}
	return ids, s.dropStreamsOf(ids...)
}

// dropStreamsOf forgets the open streams of instances that ended.
func (s *Store) dropStreamsOf(instances ...string) error {
	if len(instances) == 0 {
		return nil
	}
	return s.db.Exec(`DELETE FROM open_streams WHERE instance IN ?`, instances).Error
}

// expireCheckClaims ends the claims of gone instances on Changes' checks
// now, rather than when each would have expired: the next verifier to
// poll takes them.
func (s *Store) expireCheckClaims(gone []string, now time.Time) error {
	if len(gone) == 0 {
		return nil
	}
	return s.db.Model(&Change{}).Where("claimed_by IN ? AND claimed_until > ?", gone, now).UpdateColumn("claimed_until", now).Error
}

// ReviveInstance records id live again after it was declared gone for a
// late heartbeat: the process was alive after all, and holds its place.
func (s *Store) ReviveInstance(ctx context.Context, id string, now time.Time) error {
	err := s.db.WithContext(ctx).Model(&Instance{}).Where("id = ?", id).
		Updates(map[string]any{"stopped_at": nil, "heartbeat_at": now}).Error
	if err != nil {
		return fmt.Errorf("models: revive instance %s: %w", id, translate(err))
	}
	return nil
}

// StopInstance records that id stopped, and frees the runtimes it held.
func (s *Store) StopInstance(ctx context.Context, id string, now time.Time) error {
	err := s.Tx(ctx, func(tx *Store) error {
		if err := tx.db.Model(&Instance{}).Where("id = ? AND stopped_at IS NULL", id).Update("stopped_at", now).Error; err != nil {
			return err
		}
		if err := tx.dropStreamsOf(id); err != nil {
			return err
		}
		return tx.db.Model(&CodeSession{}).Where("runtime_instance = ?", id).Update("runtime_instance", nil).Error
	})
	if err != nil {
		return fmt.Errorf("models: stop instance %s: %w", id, translate(err))
	}
	return nil
}

// DeclareLateGone declares gone every live instance whose heartbeat is
// older than staleBefore, frees the runtimes any gone instance still
// holds, and answers the ids it declared.
func (s *Store) DeclareLateGone(ctx context.Context, staleBefore, now time.Time) (gone []string, err error) {
	err = s.Tx(ctx, func(tx *Store) error {
		var err error
		if gone, err = tx.declareGone(now, "heartbeat_at < ?", staleBefore); err != nil {
			return err
		}
		return tx.db.Model(&CodeSession{}).
			Where("runtime_instance IS NOT NULL AND runtime_instance NOT IN ("+liveInstances+")").
			Update("runtime_instance", nil).Error
	})
	if err != nil {
		return nil, fmt.Errorf("models: declare late instances gone: %w", translate(err))
	}
	return gone, nil
}

// ClaimSessionRuntime makes instance the holder of the open session's
// runtime unless another live instance holds it (ErrRuntimeElsewhere).
// ErrNotFound for a session that is not open.
func (s *Store) ClaimSessionRuntime(ctx context.Context, sessionID, instance string) error {
	res := s.db.WithContext(ctx).Model(&CodeSession{}).
		Where("id = ? AND state = ?", sessionID, SessionOpen).
		Where("runtime_instance IS NULL OR runtime_instance = ? OR runtime_instance NOT IN ("+liveInstances+")", instance).
		Update("runtime_instance", instance)
	if res.Error != nil {
		return fmt.Errorf("models: claim session %s: %w", sessionID, translate(res.Error))
	}
	if res.RowsAffected == 1 {
		return nil
	}
	var cs CodeSession
	err := s.db.WithContext(ctx).Select("id", "state").Where("id = ? AND state = ?", sessionID, SessionOpen).Take(&cs).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("models: claim session %s: %w", sessionID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("models: claim session %s: %w", sessionID, translate(err))
	}
	return ErrRuntimeElsewhere
}

// SessionHolder answers the live instance other than instance that holds
// the session's runtime, and its address; "" for both when none does, or
// when it is instance itself.
func (s *Store) SessionHolder(ctx context.Context, sessionID, instance string) (holder, address string, err error) {
	var rows []struct {
		ID      string
		Address *string
	}
	err = s.db.WithContext(ctx).Raw(`SELECT i.id, i.address FROM code_sessions cs JOIN instances i ON i.id = cs.runtime_instance
		WHERE cs.id = ? AND i.stopped_at IS NULL AND i.id <> ?`, sessionID, instance).Scan(&rows).Error
	if err != nil {
		return "", "", fmt.Errorf("models: holder of session %s: %w", sessionID, translate(err))
	}
	if len(rows) == 0 {
		return "", "", nil
	}
	if rows[0].Address != nil {
		address = *rows[0].Address
	}
	return rows[0].ID, address, nil
}

// ReleaseSessionRuntime ends instance's hold of the session's runtime.
func (s *Store) ReleaseSessionRuntime(ctx context.Context, sessionID, instance string) error {
	err := s.db.WithContext(ctx).Model(&CodeSession{}).Where("id = ? AND runtime_instance = ?", sessionID, instance).
		Update("runtime_instance", nil).Error
	if err != nil {
		return fmt.Errorf("models: release session %s: %w", sessionID, translate(err))
	}
	return nil
}

// SessionsLeftBy lists the unfinished sessions whose runtime one of the
// instances gone held, or that no recorded instance holds (nobody, or a
// server older than instances): what a process of this place may have
// left running.
func (s *Store) SessionsLeftBy(ctx context.Context, gone []string) ([]CodeSession, error) {
	held := "runtime_instance IS NULL OR runtime_instance NOT IN (SELECT id FROM instances)"
	args := []any{}
	if len(gone) > 0 {
		held += " OR runtime_instance IN ?"
		args = append(args, gone)
	}
	var css []CodeSession
	if err := s.db.WithContext(ctx).Where("state <> ?", SessionClosed).Where(held, args...).Find(&css).Error; err != nil {
		return nil, fmt.Errorf("models: sessions left: %w", err)
	}
	return css, nil
}

// SandboxReservationsOfGone lists the reservations whose instance does
// not live: gone, or never recorded (a server older than instances).
func (s *Store) SandboxReservationsOfGone(ctx context.Context) ([]SandboxReservation, error) {
	var rs []SandboxReservation
	err := s.db.WithContext(ctx).Where("instance NOT IN (" + liveInstances + ")").Order("id").Find(&rs).Error
	if err != nil {
		return nil, fmt.Errorf("models: reservations of gone instances: %w", err)
	}
	return rs, nil
}
