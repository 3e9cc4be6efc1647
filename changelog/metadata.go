package changelog

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// Offset commit metadata that names stores. A runner's input offsets of a
// processor with named stores or timers carry StoresMetadata of its store
// names (the timer store as TimersName), in the transaction that commits
// them: a committed offset says which stores' changelogs hold the state it
// accounts for. A runner that finds one of those changelogs missing
// refuses to start (CHANGELOG_MISSING) instead of creating it empty; a
// store no committed offset names (one added to the application) starts
// empty.
const (
	storesPrefix = "flechtwerk:stores="
	hashedPrefix = "flechtwerk:stores#="
	// maxStoresMetadata bounds the names form; beyond it each name is
	// an 8-digit FNV-1a hash (brokers refuse metadata over
	// offset.metadata.max.bytes, 4096 by default).
	maxStoresMetadata = 1024
)

// StoresMetadata returns the offset commit metadata that names stores: ""
// for none (the metadata of a processor without named stores or timers).
// It is the names, or beyond 1024 bytes a hash of each (9 bytes a store):
// a broker whose offset.metadata.max.bytes (4096 by default) is smaller
// refuses the commits (OFFSET_METADATA_TOO_LARGE).
func StoresMetadata(names []string) string {
	if len(names) == 0 {
		return ""
	}
	s := slices.Sorted(slices.Values(names))
	if m := storesPrefix + strings.Join(s, ","); len(m) <= maxStoresMetadata {
		return m
	}
	h := make([]string, len(s))
	for i, n := range s {
		h[i] = hashName(n)
	}
	return hashedPrefix + strings.Join(h, ",")
}

// NamesStore reports whether metadata, that of a committed offset, names
// store name (see StoresMetadata).
func NamesStore(metadata, name string) bool {
	if list, ok := strings.CutPrefix(metadata, storesPrefix); ok {
		return slices.Contains(strings.Split(list, ","), name)
	}
	if list, ok := strings.CutPrefix(metadata, hashedPrefix); ok {
		return slices.Contains(strings.Split(list, ","), hashName(name))
	}
	return false
}

// HasStores reports whether metadata names stores (see StoresMetadata):
// a reset that keeps the state keeps such metadata.
func HasStores(metadata string) bool {
	return strings.HasPrefix(metadata, storesPrefix) || strings.HasPrefix(metadata, hashedPrefix)
}

func hashName(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%08x", h.Sum32())
}
