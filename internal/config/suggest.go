package config

import (
	"reflect"
	"sort"
	"strings"
)

// suggest returns the known name closest to an unknown one, or "".
func suggest(name string, known map[string]reflect.Type) string {
	best, bestDist := "", 3 // at most two edits away
	for k := range known {
		if strings.EqualFold(k, name) {
			return k
		}
		if d := distance([]rune(strings.ToLower(name)), []rune(strings.ToLower(k))); d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	// Short names need a closer match, or "vm" would suggest "os". Runes,
	// not bytes: a look-alike letter (Cyrillic і in kind) is one edit.
	if bestDist > max(1, len([]rune(name))/3) {
		return ""
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b []rune) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys(m map[string]reflect.Type) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
