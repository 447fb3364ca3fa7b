package promoterhttp

import (
	"errors"

	"github.com/thawdb/thaw/promoter"
)

func promoterRequest(policy, table, partition string) promoter.Request {
	return promoter.Request{Policy: policy, Table: table, Partition: partition}
}

func asError(err error, target **Error) bool { return errors.As(err, target) }
