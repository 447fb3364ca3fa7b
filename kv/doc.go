// Package kv is thaw's table model and the byte formats of its primary-key tier:
// column types, table schemas, the key and value encodings, bucketing and partition
// names. It imports only the standard library.
//
// # Byte compatibility
//
// Keys, values and buckets are bit-compatible with Apache Fluss (docs/formats.md
// describes every byte and cites the Fluss source it follows; the tests hold Fluss's
// own test vectors):
//
//   - key bytes: Fluss's compacted encoding, without a null header, of the physical
//     primary key, which is the primary key minus the partition keys;
//   - value bytes: the schema id as int16 little-endian, then the compacted row: a
//     null bit set of (n+7)/8 bytes and each non-null field;
//   - bucket: Fluss's, Paimon's or the Iceberg spec's bucketing function over the
//     bucket-key bytes, modulo the bucket count. For Fluss and Paimon bucketing the
//     bucket-key bytes are the compacted encoding of the bucket-key columns (the key
//     bytes themselves for the default bucket key); for Iceberg bucketing they are
//     Fluss's Iceberg encoding of the single bucket-key column;
//   - partition name: the partition values converted to strings as Fluss's
//     PartitionUtils.convertValueOfType does, joined by "$".
//
// One deliberate simplification: thaw's key bytes are always the compacted encoding.
// Fluss encodes the key bytes of a lake-Iceberg (or Paimon) table whose bucket key is
// the default one with the lake's key encoder instead; thaw uses the lake encoding
// only for the bucket-key bytes, so Iceberg buckets still match Fluss and the lake.
//
// A known difference: Fluss hashes a Paimon-lake table's bucket key in Paimon's
// BinaryRow encoding (PaimonKeyEncoder); thaw's Paimon bucketing hashes the
// compacted bytes, so its buckets agree with thaw's own online and bulk paths but
// not with Fluss's or Paimon's for the same key. Use it only where that does not
// matter; Paimon's BinaryRow bucket-key encoding is not implemented.
//
// # What is validated
//
// TableSchema.Validate enforces Fluss's schema rules (see its documentation);
// NewTable compiles only valid schemas. Encoder.Encode checks every value before
// writing it (nullability, UTF-8, CHAR/BINARY lengths, decimal precision, TIME range,
// timestamp nanoseconds) and reports a *RowError naming the column. Decoding is
// strict and total: DecodeValue and DecodeKey accept exactly the bytes the encoder
// produces, and return an error wrapping ErrCorrupt for anything else, trailing bytes
// included; they never panic. Partition names are parsed only in their canonical
// form, so name → values → name is the identity.
//
// # Concurrency
//
// A Table is immutable and safe for concurrent use. An Encoder reuses its buffers,
// allocating nothing per row in steady state, and must be used by one goroutine at a
// time; the slices it returns are valid until its next call. The package-level
// functions are safe for concurrent use.
package kv
