package tierpb

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// StrictJSON is the handler option that replaces connect's JSON codec
// (for "application/json" and "application/json; charset=utf-8" bodies)
// with one that refuses unknown fields: a misspelt member of a request
// ("ignoreIfExist") is INVALID_ARGUMENT naming it, where connect's own
// codec drops it and the call goes on without what it asked for. The
// binary protobuf codec is unchanged (it keeps unknown fields, as
// protobuf does).
func StrictJSON() connect.HandlerOption {
	return connect.WithHandlerOptions(connect.WithCodec(strictJSON{"json"}), connect.WithCodec(strictJSON{"json; charset=utf-8"}))
}

type strictJSON struct{ name string }

func (c strictJSON) Name() string { return c.name }

func (c strictJSON) Marshal(message any) ([]byte, error) {
	m, ok := message.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", message)
	}
	return protojson.Marshal(m)
}

func (c strictJSON) Unmarshal(data []byte, message any) error {
	m, ok := message.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", message)
	}
	if len(data) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		return fmt.Errorf("unmarshal into %T: %w", message, err)
	}
	return nil
}
