package auth

// PeakHashes is the most password hashes s ever computed at once.
func (s *Service) PeakHashes() int64 { return s.hashing.peak.Load() }
