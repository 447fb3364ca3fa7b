package kv

import (
	"strings"
	"testing"
)

// TestNameErrorsStayShort: an error about a name quotes at most 100 bytes
// of it: a request's name may be megabytes long (a CreateTable may carry
// 16 MiB), and the whole name went back in the answer and into the logs,
// four times longer where its bytes needed escapes.
func TestNameErrorsStayShort(t *testing.T) {
	long := strings.Repeat("\x01é", 1<<20)
	for what, err := range map[string]error{
		"table name":     CheckName("table", long),
		"partition name": ValidatePartitionName(long),
	} {
		if err == nil || len(err.Error()) > 600 || !strings.Contains(err.Error(), "bytes)") {
			t.Errorf("%s error of %d bytes: %.200s", what, len(err.Error()), err)
		}
	}
	if err := CheckName("table", "bad name"); err == nil || !strings.Contains(err.Error(), `"bad name"`) {
		t.Errorf("a short name is quoted whole: %v", err)
	}
}
