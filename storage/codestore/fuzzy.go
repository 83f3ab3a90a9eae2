package codestore

import (
	"container/heap"
	"slices"
	"strings"
)

// Index is the flat list of every file path of one tree, in path order, with
// the lowered copy the matcher scans; quick open answers from it without
// walking a single tree object.
type Index struct {
	paths []string
	lower []string
}

// NewIndex indexes paths, which it keeps; they should be sorted.
func NewIndex(paths []string) *Index {
	lower := make([]string, len(paths))
	for i, p := range paths {
		lower[i] = lowerASCII(p)
	}
	return &Index{paths: paths, lower: lower}
}

// Len is how many paths the index holds.
func (ix *Index) Len() int { return len(ix.paths) }

// Match is one path found by a query, with the byte offsets of the matched
// characters so a list can mark them.
type Match struct {
	Path      string `json:"path"`
	Positions []int  `json:"positions"`
	Score     int    `json:"-"`
}

// Scores of the matcher. A matched character is worth matchScore; one that
// starts a name (after "/" or at the start), a word (after "-", "_", ".",
// " ") or a camelCase hump is worth more, as is one right after the
// previous match; every skipped character inside the match costs a little,
// and a match lying wholly in the file's own name wins over one spread
// across folders.
const (
	matchScore      = 16
	bonusName       = 10
	bonusWord       = 8
	bonusCamel      = 7
	bonusContiguous = 6
	gapPenalty      = 1
	maxGapPenalty   = 24
	bonusInBasename = 20
)

// Find returns up to limit paths matching query (case-insensitively, its
// characters in order but not necessarily adjacent), best first; ties go to
// the shorter path, then path order. Spaces split the query into terms
// that must each match, in any order and independently ("eng wrd" finds
// english/words.txt, and so does "wrd eng"): a score is the sum of the
// terms' scores and the marks are all of theirs. An empty query lists the
// first limit paths.
func (ix *Index) Find(query string, limit int) []Match {
	if limit <= 0 {
		return nil
	}
	terms := strings.Fields(lowerASCII(query))
	if len(terms) == 0 {
		n := min(limit, len(ix.paths))
		out := make([]Match, n)
		for i := range n {
			out[i] = Match{Path: ix.paths[i], Positions: []int{}}
		}
		return out
	}
	best := &matchHeap{}
next:
	for i, l := range ix.lower {
		for _, q := range terms {
			if !subsequence(l, q) {
				continue next
			}
		}
		score := 0
		for _, q := range terms {
			score += scoreOf(ix.paths[i], l, q, nil)
		}
		if best.Len() == limit && !better(score, i, ix, (*best)[0]) {
			continue
		}
		if best.Len() == limit {
			heap.Pop(best)
		}
		heap.Push(best, ranked{score: score, index: i, length: len(ix.paths[i])})
	}
	out := make([]Match, best.Len())
	for k := len(out) - 1; k >= 0; k-- {
		r := heap.Pop(best).(ranked)
		out[k] = Match{Path: ix.paths[r.index], Positions: positionsOf(ix.paths[r.index], ix.lower[r.index], terms), Score: r.score}
	}
	return out
}

// positionsOf is every offset the terms matched in path, in order and
// once each: two terms may mark the same character.
func positionsOf(path, lower string, terms []string) []int {
	pos := []int{}
	for _, q := range terms {
		scoreOf(path, lower, q, &pos)
	}
	if len(terms) > 1 {
		slices.Sort(pos)
		pos = slices.Compact(pos)
	}
	return pos
}

// subsequence reports whether q's bytes appear in s in order.
func subsequence(s, q string) bool {
	j := 0
	for i := 0; i < len(s) && j < len(q); i++ {
		if s[i] == q[j] {
			j++
		}
	}
	return j == len(q)
}

// scoreOf scores the rightmost tight alignment of q in lower (the lowered
// path): a backward scan from the end finds the latest start from which q
// still matches, which favours the file's name over its folders, and a
// forward scan from there takes each character at its first chance. With
// positions, it records the matched offsets.
func scoreOf(path, lower, q string, positions *[]int) int {
	start, j := len(lower)-1, len(q)-1
	for ; start >= 0; start-- {
		if lower[start] == q[j] {
			if j == 0 {
				break
			}
			j--
		}
	}
	base := strings.LastIndexByte(path, '/') + 1
	score, prev := 0, -2
	j = 0
	for i := start; i < len(lower) && j < len(q); i++ {
		if lower[i] != q[j] {
			continue
		}
		score += matchScore + boundaryBonus(path, i)
		if i == prev+1 {
			score += bonusContiguous
		} else if prev >= 0 {
			score -= min(gapPenalty*(i-prev-1), maxGapPenalty)
		}
		if positions != nil {
			*positions = append(*positions, i)
		}
		prev = i
		j++
	}
	if start >= base {
		score += bonusInBasename
	}
	return score
}

func boundaryBonus(path string, i int) int {
	if i == 0 {
		return bonusName
	}
	switch p, c := path[i-1], path[i]; {
	case p == '/':
		return bonusName
	case p == '-' || p == '_' || p == '.' || p == ' ':
		return bonusWord
	case p >= 'a' && p <= 'z' && c >= 'A' && c <= 'Z':
		return bonusCamel
	}
	return 0
}

// lowerASCII lowers ASCII letters only: paths are bytes, and a query's
// non-ASCII characters match themselves.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for k := i; k < len(b); k++ {
				if c := b[k]; c >= 'A' && c <= 'Z' {
					b[k] = c + ('a' - 'A')
				}
			}
			return string(b)
		}
	}
	return s
}

type ranked struct {
	score, index, length int
}

// better orders results: a higher score, then a shorter path, then path
// order.
func better(score, index int, ix *Index, than ranked) bool {
	if score != than.score {
		return score > than.score
	}
	if l := len(ix.paths[index]); l != than.length {
		return l < than.length
	}
	return index < than.index
}

// matchHeap keeps the best limit results with the worst on top.
type matchHeap []ranked

func (h matchHeap) Len() int { return len(h) }
func (h matchHeap) Less(a, b int) bool {
	x, y := h[a], h[b]
	if x.score != y.score {
		return x.score < y.score
	}
	if x.length != y.length {
		return x.length > y.length
	}
	return x.index > y.index
}
func (h matchHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *matchHeap) Push(x any)   { *h = append(*h, x.(ranked)) }
func (h *matchHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
