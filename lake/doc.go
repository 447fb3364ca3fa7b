// Package lake is everything thaw knows about the lake: Apache Iceberg tables,
// read through iceberg-go (v0.7.0), which is imported here and nowhere else.
//
// # Surface
//
//   - Open(ctx, Config) connects to a catalog: the SQL catalog on SQLite (the
//     embedded default, pure Go) or Postgres, the REST catalog (OAuth2 client
//     credential or bearer token, custom headers), or Glue and Hive (wired but
//     untested here: no metastore or AWS is reachable from tests). Data files
//     are read through iceberg-go's FileIO: file, mem, s3 (endpoint, region,
//     path style), gs and abfs[s]. Config marks credentials as Secret, which
//     never prints, marshals or logs its value.
//   - Namespaces, Tables and Describe list and describe tables (schemas with
//     field ids and identifier fields, every partition spec, sort order,
//     properties, snapshots) as plain data (TableInfo).
//   - Partitions returns the partitions of a snapshot with statistics read
//     from the manifests (PartitionStats).
//   - Scan streams a table or some of its partitions at a snapshot as Arrow
//     record batches, deletes applied.
//   - MapSchema maps a TableInfo to a tier schema (kv.TableSchema) and a
//     PartitionMapping, whose PartitionName names the tier partition of a lake
//     partition and which Scan uses to add derived partition key columns.
//   - Sample writes a realistic sample table into a local SQL catalog.
//
// Nothing here writes to a catalog except Sample.
//
// # Partition statistics
//
// PartitionStats.RecordCount sums the data files' record counts and is an
// upper bound: position and equality deletes are counted beside it, not
// subtracted. The last update of a partition is the snapshot that added its
// newest live file (data or delete); the snapshot id and sequence number come
// from the manifest entries and survive snapshot expiry, the time does not:
// when the snapshot has expired, LastUpdatedAt falls back to the snapshot log,
// then to an upper bound (the commit time of the oldest retained snapshot with
// a higher sequence number), and LastUpdatedAtSource says which was used.
//
// # Scan order and memory
//
// A scan reads its data files in ascending data sequence number (a
// format-v1 table, whose files all have 0, in the order of the snapshots
// that added them; ties broken by file path) and keeps each file's row
// order, so for a key written by
// several snapshots without an equality delete the newest row comes last —
// the rule the snapshot builder relies on when it keeps the last row of a key.
// Position deletes, equality deletes and deletion vectors are applied by
// iceberg-go, which honours sequence numbers (an equality delete removes only
// rows of older data files); the position deletes of an unpartitioned spec,
// which apply to every partition's data files, the scan pairs with them
// itself (iceberg-go pairs position deletes by partition only). Files are
// decoded up to Concurrency at a time ahead of the consumer, but batches
// are returned in file order; the scan holds about Concurrency x the
// largest file's rows at most, and streams.
//
// Rows come with the scanned snapshot's schema (Iceberg's time-travel rule),
// so a given (table, snapshot) always yields the same columns; MapSchema maps
// the same schema by default. Files written before a schema change are read
// under the new names (field ids decide), new columns read as null, and
// files of older partition specs are read like the others.
//
// # Concurrency
//
// A Lake is safe for concurrent use. Each method loads the table afresh, so it
// sees the catalog's current state. A scan iterator is single-use and must be
// consumed by one goroutine; the caller releases every batch.
package lake
