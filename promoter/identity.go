package promoter

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
)

// PromotionID returns the ledger id of a promotion identity: "p-" and the
// first 16 hex digits of the SHA-256 of the catalog, the lake table, the tier
// table ("database.table"), the tier partition and the source snapshot id
// (each string length-prefixed, so no two identities share an encoding).
// The tier table is part of the identity so that the same lake partition
// promoted into another table is another promotion.
func PromotionID(catalog, lakeTable, tierTable, partition string, sourceSnapshotID int64) string {
	h := sha256.New()
	for _, s := range []string{catalog, lakeTable, tierTable, partition} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var id [8]byte
	binary.BigEndian.PutUint64(id[:], uint64(sourceSnapshotID))
	h.Write(id[:])
	return "p-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// CallerToken returns the bulk-load caller token of attempt n of promotion
// id: "thaw-promoter/{id}/{n}". It is deterministic, so a restarted promoter
// resumes the same transaction with Begin, and it is not a secret.
func CallerToken(id string, attempt int) string {
	return "thaw-promoter/" + id + "/" + strconv.Itoa(attempt)
}

// IsPromotionID reports whether id has the form PromotionID produces: "p-"
// and 16 lowercase hex digits.
func IsPromotionID(id string) bool {
	if len(id) != 18 || id[:2] != "p-" {
		return false
	}
	for _, c := range id[2:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validID checks the form PromotionID produces, so that an id can never
// address another etcd key.
func validID(id string) error {
	if !IsPromotionID(id) {
		return fmt.Errorf("%w: invalid promotion id %q", ErrNotFound, id)
	}
	return nil
}
