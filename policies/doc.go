// Package policies decodes, validates and compiles promotion policy
// documents (apiVersion thaw.dev/v1, kind PromotionPolicy) into immutable
// values, and decides which lake partitions a policy selects.
//
// # Documents
//
// A file holds one or more YAML documents separated by "---". Parse decodes
// them into yaml.v3 nodes and walks the nodes against the schema (see
// docs/promoter.md, "Policy reference"), so that every problem carries the
// line and column of the node at fault: unknown and duplicate keys, wrong
// YAML types (a string where a list is expected, a quoted number), bad names,
// out-of-range numbers, malformed sizes, window lengths and cron expressions,
// unknown time zones, empty documents, tabs in indentation. Parse reports
// every problem of every document (type Errors, sorted by line; each *Error
// renders "file:line:col: field: msg" and matches ErrInvalid), and returns no
// policy at all when there is any. Load does the same for files and
// directories and also rejects a policy name defined twice.
//
// # Compiled policies
//
// A *Policy is immutable and safe for concurrent use; accessors return
// copies with every default filled in. Doc renders the canonical YAML of a
// policy (every field explicit, fixed order); parsing it yields an equal
// policy, which the fuzz test checks.
//
// Cron expressions are checked here by a small standard-library validator
// (ValidateCron) that accepts a subset of what the cron trigger's parser
// accepts, so this package needs only the standard library and yaml.v3. Time
// zones are loaded with the embedded time zone database (time/tzdata), so
// validation does not depend on the machine.
//
// # Selection
//
// Select is a pure function of the policy, the candidate partitions and an
// injected "now": no I/O, no clock. A candidate is selected when it is in
// the names list (if any), satisfies every where condition, overlaps the
// window and is within the row and byte bounds; otherwise the Decision says
// which condition failed. Window semantics: a partition's time range is the
// [start, end) in UTC of its transform's unit (day, month, year, hour, or an
// identity field holding a YYYY-MM-DD date); it is selected when that range
// overlaps [anchor-last, anchor), where anchor is now or, for "latest", the
// end of the newest candidate's range.
package policies

import _ "time/tzdata" // zones for timeZone validation, whatever the machine has
