// Package lso reads a partition up to its last stable offset with
// read_committed isolation, advancing by fetch position over aborted
// batches, transaction markers and compacted gaps: the restore of a
// changelog partition (package changelog) and the bootstrap of a config
// table (package configtopic) both read this way, and the admin command's
// state get (internal/admin) streams a partition through it.
package lso
