// Package access holds what the tier's services share to authenticate and
// authorize their callers: table patterns ("*", "DATABASE.*",
// "DATABASE.TABLE"), callers' names and the SHA-256 of their bearer tokens
// (the tier keeps hashes, never tokens), and reading a bearer token from a
// request's Authorization header.
//
// The coordinator authorizes bulk loads and DDL with them
// (tier/coordinator), and the tablet servers reads and writes, following
// the data-access policy the leading coordinator publishes in etcd
// (meta.DataAccess).
package access
