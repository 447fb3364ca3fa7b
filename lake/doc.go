// Package lake is everything thaw knows about the lake: Iceberg catalogs
// (SQL on SQLite by default, REST, and others iceberg-go has), partitions with
// statistics, scans of a table or partition at a snapshot into Arrow record
// batches (deletes applied, newest row last), and the mapping of Iceberg
// schemas to tier schemas. iceberg-go is imported here and nowhere else.
//
// Status: implemented with issue 7.
package lake
