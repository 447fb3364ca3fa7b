package tierpb

import (
	"context"

	"connectrpc.com/connect"
)

// Bearer returns a connect client interceptor that sends token as
// "Authorization: Bearer token" with every unary call: how a caller of a
// tier that authenticates its callers (coordinator.callers) presents its
// token to the coordinators and tablet servers.
func Bearer(token string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
}
