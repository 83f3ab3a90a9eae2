package models

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm/clause"
)

// SignInRecord is what is known of one key's recent failed sign-ins: an
// account and client address (scope "pair"), an address or an account.
type SignInRecord struct {
	Scope        string `gorm:"primaryKey"`
	Key          string `gorm:"primaryKey"`
	Failures     int
	LastFailure  time.Time
	NextTry      time.Time
	Pending      int
	PendingUntil time.Time
}

// SignInKey names a SignInRecord.
type SignInKey struct{ Scope, Key string }

// SignInRecordsLocked returns the records of keys, locked until the
// transaction ends; with create it first makes a record of each key that
// has none, so every key has one. Keys are made and locked in one order,
// bytewise as Go sorts them, so two attempts naming the same keys never
// wait for each other in a circle.
func (s *Store) SignInRecordsLocked(ctx context.Context, keys []SignInKey, create bool) ([]SignInRecord, error) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b SignInKey) int {
		return cmpOr(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Key, b.Key))
	})
	keys = slices.Compact(keys)
	if len(keys) == 0 {
		return nil, nil
	}
	db := s.db.WithContext(ctx)
	if create {
		fresh := make([]SignInRecord, len(keys))
		for i, k := range keys {
			fresh[i] = SignInRecord{Scope: k.Scope, Key: k.Key}
		}
		if err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&fresh).Error; err != nil {
			return nil, fmt.Errorf("models: sign-in records: %w", translate(err))
		}
	}
	pairs := make([][]any, len(keys))
	for i, k := range keys {
		pairs[i] = []any{k.Scope, k.Key}
	}
	var recs []SignInRecord
	err := db.Raw(`SELECT * FROM sign_in_records WHERE (scope, key) IN ? ORDER BY scope COLLATE "C", key COLLATE "C" FOR UPDATE`, pairs).
		Scan(&recs).Error
	if err != nil {
		return nil, fmt.Errorf("models: lock sign-in records: %w", translate(err))
	}
	return recs, nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// SaveSignInRecord writes r over its record.
func (s *Store) SaveSignInRecord(ctx context.Context, r *SignInRecord) error {
	if err := s.db.WithContext(ctx).Save(r).Error; err != nil {
		return fmt.Errorf("models: save sign-in record: %w", translate(err))
	}
	return nil
}

// DeleteSignInRecord forgets the record of k.
func (s *Store) DeleteSignInRecord(ctx context.Context, k SignInKey) error {
	err := s.db.WithContext(ctx).Where("scope = ? AND key = ?", k.Scope, k.Key).Delete(&SignInRecord{}).Error
	if err != nil {
		return fmt.Errorf("models: delete sign-in record: %w", translate(err))
	}
	return nil
}

// PruneSignInRecords deletes the records that hold nothing back at now and
// whose last failure is before forgetBefore, and says how many are left.
func (s *Store) PruneSignInRecords(ctx context.Context, now, forgetBefore time.Time) (left int64, err error) {
	db := s.db.WithContext(ctx)
	err = db.Exec(`DELETE FROM sign_in_records
		WHERE (pending = 0 OR pending_until < ?) AND last_failure < ? AND next_try <= ?`, now, forgetBefore, now).Error
	if err == nil {
		err = db.Raw(`SELECT count(*) FROM sign_in_records`).Scan(&left).Error
	}
	if err != nil {
		return 0, fmt.Errorf("models: prune sign-in records: %w", translate(err))
	}
	return left, nil
}
